//! What the planner decides: the new table schema, the changes, and a verdict per input.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::named::named_enum;
use crate::schema::Schema;
use crate::{Error, ErrorKind};

named_enum! {
    /// The class of a schema change.
    pub enum ChangeKind {
        /// A column new to the table.
        Addition = "addition",
        /// A required column made optional.
        Relaxation = "relaxation",
        /// A column's type widened.
        Promotion = "promotion",
        /// A difference no option allows (another type, another kind, another scale).
        Conflict = "conflict",
    }
}

/// One change to one column, with the inputs that need it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SchemaChange {
    /// The table column's dotted path.
    pub path: String,
    /// The class of change.
    pub kind: ChangeKind,
    /// The table's side: the old type, `required`, or nothing for an addition.
    pub from: Option<String>,
    /// The new side: the new type, `optional`, or the input's conflicting type.
    pub to: Option<String>,
    /// Whether the plan makes this change. Conflicts, and changes the options do not
    /// allow, are reported with `applied: false`.
    pub applied: bool,
    /// The inputs (indexes into the planned window) that need or cause the change.
    pub inputs: Vec<usize>,
}

named_enum! {
    /// How an input relates to the planned table schema.
    pub enum Verdict {
        /// It fits the table as it is.
        Fits = "fits",
        /// It fits once the plan's changes are made.
        FitsAfterEvolution = "fits_after_evolution",
        /// It cannot fit under the options; see the reasons.
        Incompatible = "incompatible",
        /// Its statistics cannot prove what a rule needs, and unverifiable inputs are rejected.
        Unverifiable = "unverifiable",
    }
}

impl Verdict {
    /// Whether inputs with this verdict can be written.
    pub fn is_compatible(self) -> bool {
        matches!(self, Verdict::Fits | Verdict::FitsAfterEvolution)
    }
}

/// Why an input is incompatible or unverifiable, or what it needs, naming the column.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Reason {
    /// The table column's dotted path.
    pub path: String,
    /// The explanation.
    pub message: String,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// The planner's decision about one input.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputVerdict {
    /// How the input relates to the planned schema.
    pub verdict: Verdict,
    /// Why it is incompatible or unverifiable (empty when it fits).
    pub reasons: Vec<Reason>,
    /// The changes it needs (empty when it fits as is).
    pub needs: Vec<Reason>,
}

/// The plan for one window of inputs against a table (or its creation).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvolutionPlan {
    /// The table's schema before the plan (`None` when the table is to be created).
    pub current: Option<Schema>,
    /// The table's schema after the plan; `None` only when no input can create the table.
    pub schema: Option<Schema>,
    /// Whether the plan creates the table.
    pub creates_table: bool,
    /// Every change, applied or not, sorted by path.
    pub changes: Vec<SchemaChange>,
    /// One verdict per input, in the order the inputs were given.
    pub verdicts: Vec<InputVerdict>,
}

impl EvolutionPlan {
    /// Whether the table's schema changes (or the table is created).
    pub fn changes_schema(&self) -> bool {
        self.creates_table || self.changes.iter().any(|c| c.applied)
    }

    /// The changes the plan makes.
    pub fn applied_changes(&self) -> impl Iterator<Item = &SchemaChange> {
        self.changes.iter().filter(|c| c.applied)
    }

    /// The indexes of the inputs that can be written.
    pub fn compatible_inputs(&self) -> Vec<usize> {
        self.indexes_where(|v| v.verdict.is_compatible())
    }

    /// The indexes of the inputs that cannot be written.
    pub fn rejected_inputs(&self) -> Vec<usize> {
        self.indexes_where(|v| !v.verdict.is_compatible())
    }

    /// Whether every input can be written.
    pub fn all_compatible(&self) -> bool {
        self.verdicts.iter().all(|v| v.verdict.is_compatible())
    }

    fn indexes_where(&self, keep: impl Fn(&InputVerdict) -> bool) -> Vec<usize> {
        self.verdicts
            .iter()
            .enumerate()
            .filter(|(_, v)| keep(v))
            .map(|(i, _)| i)
            .collect()
    }

    /// The distinct incompatibility reasons of rejected inputs, each with its input index.
    pub fn rejection_reasons(&self) -> Vec<(usize, &Reason)> {
        let mut out = Vec::new();
        for (i, v) in self.verdicts.iter().enumerate() {
            if !v.verdict.is_compatible() {
                let mut seen = BTreeSet::new();
                for r in &v.reasons {
                    if seen.insert(r) {
                        out.push((i, r));
                    }
                }
            }
        }
        out
    }

    /// Why the rejected inputs do not fit, for people: each distinct reason with its column
    /// (`a.b: ...; c: ...`), or the whole plan when the planner gave no reason.
    pub fn rejection_message(&self) -> String {
        let reasons: Vec<String> = self
            .rejection_reasons()
            .iter()
            .map(|(_, r)| r.to_string())
            .collect();
        if reasons.is_empty() {
            format!("the input does not fit the table: {}", self.render(None).trim())
        } else {
            reasons.join("; ")
        }
    }

    /// The error of a plan with rejected inputs, in every sink's words: a schema
    /// incompatibility whose message names each column and why (after `what`, when given),
    /// with the first column as the `column` context.
    pub fn rejection_error(&self, what: &str) -> Error {
        let reasons = self.rejection_message();
        let message = if what.is_empty() {
            reasons
        } else {
            format!("{what}: {reasons}")
        };
        let err = Error::new(ErrorKind::SchemaIncompatible, message);
        match self.rejection_reasons().first() {
            Some((_, reason)) => err.with_context("column", reason.path.clone()),
            None => err,
        }
    }
}

impl fmt::Display for EvolutionPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evolution::{EvolutionPlanner, SchemaEvolutionConfig};
    use crate::schema::{DataType, Field, InputSchema, PrimitiveType};

    fn rejected_plan() -> EvolutionPlan {
        let mut table = Schema::new(vec![Field::required(
            "id",
            DataType::Primitive(PrimitiveType::Long),
        )]);
        table.assign_missing_ids(0);
        let input = InputSchema::new(Schema::new(vec![
            Field::required("id", DataType::Primitive(PrimitiveType::String)),
            Field::optional("extra", DataType::Primitive(PrimitiveType::Int)),
        ]));
        let config = SchemaEvolutionConfig::disabled();
        EvolutionPlanner::new(&config)
            .table(&table)
            .plan(&[input])
            .unwrap()
    }

    #[test]
    fn a_rejected_plan_becomes_one_error_naming_each_column() {
        let plan = rejected_plan();
        let err = plan.rejection_error("rows for db.t do not fit the table");
        assert_eq!(err.kind(), ErrorKind::SchemaIncompatible);
        let message = err.message();
        assert!(
            message.starts_with("rows for db.t do not fit the table: "),
            "{message}"
        );
        assert!(
            message.contains("extra: ") && message.contains("id: "),
            "{message}"
        );
        assert!(err.context_value("column").is_some());
        let bare = plan.rejection_error("");
        assert_eq!(bare.message(), plan.rejection_message());
    }
}
