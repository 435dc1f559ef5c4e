//! Schema evolution: the options a user sets, and the planner every sink shares.
//!
//! A sink hands the planner its table's schema (or none) and a window of input schemas with
//! their null statistics; the planner answers with the new table schema, a verdict per input
//! and the changes, classified as addition, relaxation, promotion or conflict. The rules are
//! documented in `docs/schema-evolution.md`.

mod options;
mod plan;
mod planner;
mod render;

pub use options::{
    IncompatibleSchemaHandling, SchemaEvolutionConfig, SchemaEvolutionConfigBuilder, SchemaEvolutionOption,
    UnverifiableFileHandling, validate_column_path,
};
pub use plan::{ChangeKind, EvolutionPlan, InputVerdict, Reason, SchemaChange, Verdict};
pub use planner::EvolutionPlanner;
pub use render::{ChangeTree, Painter, Tone, plain, verdict_text};
