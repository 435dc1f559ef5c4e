//! What an AddFiles run did: snapshots, schema changes, per-file errors and skipped files,
//! as a value (serde JSON for `--json`) and as a short report for people.

use std::fmt::{self, Write as _};

use outflow_core::evolution::{
    ChangeKind, ChangeTree, Painter, SchemaChange, Tone, Verdict, plain, verdict_text,
};
use serde::{Deserialize, Serialize};

/// Why a file was not registered.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileErrorKind {
    /// The file could not be opened or read: missing, a directory, no permission, I/O.
    Unreadable,
    /// The file holds no bytes.
    Empty,
    /// The file is not Parquet (no `PAR1` magic).
    NotParquet,
    /// A Parquet file whose footer is truncated, corrupt or malformed.
    Corrupt,
    /// A Parquet feature AddFiles does not read (an encrypted footer, an oversized footer).
    Unsupported,
    /// A column whose type Iceberg cannot hold (unsigned 64-bit, INT96, intervals...).
    UnsupportedSchema,
    /// Field ids that Iceberg readers would resolve to the wrong columns.
    FieldIds,
    /// The file's schema cannot fit the table under the evolution options.
    Incompatible,
    /// The file's statistics cannot prove what a rule needs, and such files are rejected.
    Unverifiable,
    /// The file's partition values cannot be determined without guessing.
    Partition,
}

impl FileErrorKind {
    /// The kind's name, as in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            FileErrorKind::Unreadable => "unreadable",
            FileErrorKind::Empty => "empty",
            FileErrorKind::NotParquet => "not_parquet",
            FileErrorKind::Corrupt => "corrupt",
            FileErrorKind::Unsupported => "unsupported",
            FileErrorKind::UnsupportedSchema => "unsupported_schema",
            FileErrorKind::FieldIds => "field_ids",
            FileErrorKind::Incompatible => "incompatible",
            FileErrorKind::Unverifiable => "unverifiable",
            FileErrorKind::Partition => "partition",
        }
    }

    /// Whether this is a schema verdict (what `on_incompatible` governs), rather than a
    /// problem with the file itself.
    pub fn is_schema_verdict(self) -> bool {
        matches!(self, FileErrorKind::Incompatible | FileErrorKind::Unverifiable)
    }
}

impl fmt::Display for FileErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A file that was not registered, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileError {
    /// The file, as given.
    pub path: String,
    /// The class of problem.
    pub kind: FileErrorKind,
    /// What is wrong, for people.
    pub reason: String,
}

/// Why a file was left alone.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// The table already holds the file.
    AlreadyRegistered,
    /// The file was given more than once; it is handled once.
    DuplicateInput,
    /// Its window was rejected under `on_incompatible: fail` (other files in it are
    /// incompatible), or an earlier one was and the run stopped.
    NotProcessed,
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SkipReason::AlreadyRegistered => "already registered",
            SkipReason::DuplicateInput => "given more than once",
            SkipReason::NotProcessed => "not registered: its window was rejected",
        })
    }
}

/// A file that was skipped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedFile {
    /// The file, as given.
    pub path: String,
    /// Why.
    pub reason: SkipReason,
}

/// A data snapshot holding registered files.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommittedSnapshot {
    /// The window (0-based) whose files it holds.
    pub window: usize,
    /// The snapshot.
    pub snapshot_id: i64,
    /// The commit id in its summary (`outflow.commit-id`).
    pub commit_id: String,
    /// Files it registered.
    pub files: usize,
    /// Rows in those files.
    pub records: u64,
    /// Bytes of those files.
    pub bytes: u64,
    /// True when an earlier run had already committed it (nothing was done this time).
    pub already_committed: bool,
}

/// One schema change, planned or made, with the files that need or cause it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeReport {
    /// The window (0-based) it was planned in.
    pub window: usize,
    /// The table column's dotted path.
    pub path: String,
    /// Addition, relaxation, promotion or conflict.
    pub kind: ChangeKind,
    /// The table's side: the old type, `required`, or nothing for an addition.
    pub from: Option<String>,
    /// The new side: the new type, `optional`, or a conflicting file type.
    pub to: Option<String>,
    /// Whether the plan makes it (conflicts and changes the options refuse are not made).
    pub applied: bool,
    /// The files that need or cause it.
    pub files: Vec<String>,
}

impl ChangeReport {
    /// The change in core's terms, to print it as every plan is printed.
    fn as_change(&self) -> SchemaChange {
        SchemaChange {
            path: self.path.clone(),
            kind: self.kind,
            from: self.from.clone(),
            to: self.to.clone(),
            applied: self.applied,
            inputs: Vec::new(),
        }
    }
}

/// One distinct file schema and the planner's verdict on it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchemaReport {
    /// The window (0-based).
    pub window: usize,
    /// The schema, as Iceberg prints types.
    pub schema: String,
    /// Fits, fits after evolution, incompatible or unverifiable.
    pub verdict: Verdict,
    /// Why it does not fit, per column.
    pub reasons: Vec<String>,
    /// The changes it needs, per column.
    pub needs: Vec<String>,
    /// The files with this schema.
    pub files: Vec<String>,
}

/// What an AddFiles run did (or, in a dry run, would do).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddFilesResult {
    /// The table, `namespace.table`.
    pub table: String,
    /// Whether this was a dry run (nothing committed).
    pub dry_run: bool,
    /// Whether the run created the table (in a dry run: would create it).
    pub table_created: bool,
    /// Whether a window was rejected under `on_incompatible: fail` (nothing of it committed).
    pub rejected: bool,
    /// Input paths given, duplicates included; an object prefix or glob counts as the
    /// objects it names (or as one when it names none or cannot be listed).
    pub files_given: usize,
    /// Files registered (in a dry run: that would be registered).
    pub files_added: usize,
    /// Rows in the registered files.
    pub records_added: u64,
    /// Schema commits made.
    pub schema_commits: usize,
    /// The data snapshots, one per window that registered files.
    pub snapshots: Vec<CommittedSnapshot>,
    /// Every schema change planned, applied or refused, with the files it concerns.
    pub changes: Vec<ChangeReport>,
    /// One entry per distinct file schema and window.
    pub schemas: Vec<SchemaReport>,
    /// Files not registered because of a problem, with the reason.
    pub errors: Vec<FileError>,
    /// Files left alone: already in the table, or given twice.
    pub skipped: Vec<SkippedFile>,
}

/// Errors listed in the human report before it refers to `--json` for the rest.
const SHOWN: usize = 20;

impl AddFilesResult {
    /// Whether every file was registered or skipped (errors routed under
    /// `route_to_errors` aside): no rejection and no file problem.
    pub fn is_clean(&self) -> bool {
        !self.rejected && self.errors.iter().all(|e| e.kind.is_schema_verdict())
    }

    /// The short report `outflow iceberg add-files` prints, its schema changes as every
    /// Outflow command prints them (see [`ChangeTree`]).
    pub fn render(&self) -> String {
        self.render_with(&plain)
    }

    /// [`AddFilesResult::render`] with each piece of the schema changes painted by `paint`.
    pub fn render_with(&self, paint: Painter<'_>) -> String {
        let mut out = String::new();
        let mode = if self.dry_run {
            " (dry run: nothing committed)"
        } else {
            ""
        };
        let _ = writeln!(out, "Table {}{mode}", self.table);
        let action = match (self.table_created, self.dry_run) {
            (true, true) => "would be created".to_string(),
            (true, false) => "created".to_string(),
            (false, _) => {
                let applied = self.changes.iter().filter(|c| c.applied).count();
                match (applied, self.dry_run) {
                    (0, _) => "schema unchanged".to_string(),
                    (n, true) => format!("schema would change ({n} changes)"),
                    (n, false) => format!("schema evolved ({n} changes)"),
                }
            }
        };
        let verb = if self.dry_run { "to add" } else { "added" };
        let _ = writeln!(out, "  table      {action}");
        let _ = writeln!(
            out,
            "  files      {} given, {} {verb}, {} skipped, {} failed",
            self.files_given,
            self.files_added,
            self.skipped.len(),
            self.errors.len()
        );
        if !self.dry_run {
            let ids: Vec<String> = self
                .snapshots
                .iter()
                .map(|s| {
                    if s.already_committed {
                        format!("{} (already committed)", s.snapshot_id)
                    } else {
                        s.snapshot_id.to_string()
                    }
                })
                .collect();
            let _ = writeln!(
                out,
                "  rows       {} in {} snapshot{}{}",
                self.records_added,
                self.snapshots.len(),
                if self.snapshots.len() == 1 { "" } else { "s" },
                if ids.is_empty() {
                    String::new()
                } else {
                    format!(": {}", ids.join(", "))
                }
            );
        }
        if self.rejected {
            let _ = writeln!(
                out,
                "  REJECTED   incompatible files under on_incompatible: fail; nothing of their window was committed"
            );
        }
        let windows: std::collections::BTreeSet<usize> = self.changes.iter().map(|c| c.window).collect();
        for window in &windows {
            let heading = if windows.len() > 1 {
                format!("Schema changes, window {window}:")
            } else {
                "Schema changes:".to_string()
            };
            let _ = writeln!(out, "{heading}");
            let mut tree = ChangeTree::new();
            for c in self.changes.iter().filter(|c| c.window == *window) {
                tree.add(&c.as_change(), vec![format!("files: {}", files_list(&c.files))]);
            }
            out.push_str(&tree.render("  ", paint));
        }
        if self.dry_run || self.rejected {
            let _ = writeln!(out, "File schemas:");
            for s in &self.schemas {
                let _ = writeln!(
                    out,
                    "  {}: {}",
                    files_list(&s.files),
                    verdict_text(s.verdict, paint)
                );
                for r in &s.reasons {
                    let _ = writeln!(out, "    {}", paint(Tone::Refused, r));
                }
            }
        }
        if !self.errors.is_empty() {
            let _ = writeln!(out, "Errors:");
            for e in self.errors.iter().take(SHOWN) {
                let _ = writeln!(out, "  {}  {}: {}", e.path, e.kind, e.reason);
            }
            if self.errors.len() > SHOWN {
                let _ = writeln!(out, "  ... and {} more (see --json)", self.errors.len() - SHOWN);
            }
        }
        if !self.skipped.is_empty() {
            let _ = writeln!(out, "Skipped:");
            for s in self.skipped.iter().take(SHOWN) {
                let _ = writeln!(out, "  {}  {}", s.path, s.reason);
            }
            if self.skipped.len() > SHOWN {
                let _ = writeln!(out, "  ... and {} more (see --json)", self.skipped.len() - SHOWN);
            }
        }
        out
    }
}

impl fmt::Display for AddFilesResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render())
    }
}

/// A few file names, then how many in all.
fn files_list(files: &[String]) -> String {
    const NAMED: usize = 3;
    let names: Vec<&str> = files.iter().take(NAMED).map(String::as_str).collect();
    if files.len() > NAMED {
        format!("{}, ... ({} files)", names.join(", "), files.len())
    } else {
        names.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result() -> AddFilesResult {
        AddFilesResult {
            table: "db.events".into(),
            files_given: 4,
            files_added: 2,
            records_added: 30,
            snapshots: vec![CommittedSnapshot {
                window: 0,
                snapshot_id: 42,
                commit_id: "c".into(),
                files: 2,
                records: 30,
                bytes: 100,
                already_committed: false,
            }],
            changes: vec![ChangeReport {
                window: 0,
                path: "extra".into(),
                kind: ChangeKind::Addition,
                from: None,
                to: Some("string".into()),
                applied: true,
                files: vec![
                    "a.parquet".into(),
                    "b.parquet".into(),
                    "c.parquet".into(),
                    "d.parquet".into(),
                ],
            }],
            errors: vec![FileError {
                path: "bad.parquet".into(),
                kind: FileErrorKind::NotParquet,
                reason: "no PAR1 magic at its end".into(),
            }],
            skipped: vec![SkippedFile {
                path: "a.parquet".into(),
                reason: SkipReason::DuplicateInput,
            }],
            ..AddFilesResult::default()
        }
    }

    #[test]
    fn renders_a_short_table() {
        let text = result().render();
        assert!(text.contains("4 given, 2 added, 1 skipped, 1 failed"), "{text}");
        assert!(text.contains("rows       30 in 1 snapshot: 42"), "{text}");
        assert!(
            text.contains(
                "Schema changes:\n  └── + extra: string\n      files: a.parquet, b.parquet, c.parquet, ... (4 files)\n"
            ),
            "{text}"
        );
        assert!(text.contains("bad.parquet  not_parquet: no PAR1 magic"), "{text}");
        assert!(text.contains("a.parquet  given more than once"), "{text}");
        assert!(!result().is_clean());
    }

    #[test]
    fn json_round_trips_with_snake_case_names() {
        let r = result();
        let json = serde_json::to_string(&r).unwrap();
        assert!(json.contains("\"kind\":\"not_parquet\""), "{json}");
        assert!(json.contains("\"reason\":\"duplicate_input\""), "{json}");
        assert!(json.contains("\"kind\":\"addition\""), "{json}");
        assert_eq!(serde_json::from_str::<AddFilesResult>(&json).unwrap(), r);
    }
}
