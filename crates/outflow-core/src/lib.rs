//! Outflow's shared core: what every sink connector builds on.
//!
//! - [`CreateDisposition`] and [`WriteDisposition`]: what a sink may do to its table.
//! - [`evolution`]: the schema evolution options and the pure planner every sink shares.
//! - [`schema`]: a table-neutral schema model, converted to and from Arrow.
//! - [`select`]: field selection and flattening on Arrow schemas and batches.
//! - [`sink`]: the async traits sinks implement, their results and failed records.
//! - [`commit`]: the two-phase write contract: writers prepare, one committer commits.
//! - [`destination`]: dynamic destinations, a table chosen per row.
//! - [`loads`]: the load ledger that makes reruns on the same files exactly-once.
//! - [`changes`]: change data (inserts, upserts, deletes by key), reduced per batch.
//! - [`checkpoint`]: the source offsets streaming jobs commit with their rows.
//! - [`retry`]: the retry and backoff policy the sinks share.
//! - [`Error`]: the one error type.
#![deny(missing_docs)]

mod disposition;
mod error;
pub(crate) mod named;

pub mod changes;
pub mod checkpoint;
pub mod commit;
pub mod destination;
pub mod duration;
pub mod evolution;
pub mod loads;
pub mod retry;
pub mod schema;
pub mod select;
pub mod sink;

pub use checkpoint::{Checkpoint, OffsetRange, Offsets, TopicPartition};
pub use commit::{Committer, DynCommitter, DynTwoPhaseSink, Prepared, TwoPhaseSink};
pub use destination::{Assignment, Destination, RoutedRows, Routing, TableTemplate, UnroutedRow};
pub use disposition::{CreateDisposition, WriteDisposition};
pub use error::{Error, ErrorKind, Result};
pub use evolution::{
    EvolutionPlan, EvolutionPlanner, IncompatibleSchemaHandling, SchemaEvolutionConfig,
    SchemaEvolutionOption, UnverifiableFileHandling,
};
pub use loads::{LoadOutcome, LoadRecord, LoadedFile, LoadedFiles, Settled};
pub use retry::{RetryClass, RetryPolicy};
pub use select::{FieldAccessDescriptor, FlattenPolicy};
pub use sink::{
    Aborted, DestinationPlan, FailedRecord, PlannedAction, PrepareDestination, RecordSource, Sink,
    SourcePosition, WriteResult,
};
