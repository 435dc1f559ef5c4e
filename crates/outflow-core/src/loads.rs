//! The load ledger: which source files a destination already holds, so that running a job
//! again on the same files loads each of them once.
//!
//! A file is known by its path, size and modification time ([`LoadedFile`]): the same path
//! with another size or time is a new file (it was replaced or appended to) and is loaded
//! again in full. A sink that keeps a ledger records the files a run read in the same commit
//! as their rows ([`Sink::record_loads`](crate::Sink::record_loads)), so the data and the
//! record of it appear together or not at all, and a run killed at any moment leaves a
//! ledger that says exactly what the table holds. The runner asks the ledger before reading
//! ([`PrepareDestination::loaded_files`](crate::PrepareDestination::loaded_files)) and skips
//! what is there, per destination.
//!
//! A sink whose commit cannot carry the record (BigQuery, Bigtable) keeps a ledger of
//! [`LoadRecord`]s next to the data instead: an intent before the rows can become visible,
//! saying how to tell later whether they did, then the outcome. [`settle`] turns the records
//! into the files held and the loads whose outcome is still open, which the sink then looks
//! into (a pending stream's commit time, a copy job's state) or refuses to guess about.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// A source file as a ledger records it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LoadedFile {
    /// Its absolute path (or URL).
    pub path: String,
    /// Its size in bytes when it was read.
    pub size: u64,
    /// Its modification time when it was read, in milliseconds since the Unix epoch.
    pub modified_ms: i64,
}

/// The files a destination holds, as its commits recorded them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadedFiles {
    files: HashSet<LoadedFile>,
}

impl LoadedFiles {
    /// No files.
    pub fn new() -> LoadedFiles {
        LoadedFiles::default()
    }

    /// Whether `file` (same path, size and time) is held.
    pub fn contains(&self, file: &LoadedFile) -> bool {
        self.files.contains(file)
    }

    /// Adds the files one commit recorded.
    pub fn extend(&mut self, files: impl IntoIterator<Item = LoadedFile>) {
        self.files.extend(files);
    }

    /// How many files are held.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether no file is held.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

/// The text a commit records its files in (a JSON array, sorted by path so the same files
/// give the same text).
pub fn encode(files: &[LoadedFile]) -> String {
    let mut sorted: Vec<&LoadedFile> = files.iter().collect();
    sorted.sort();
    sorted.dedup();
    // Serializing plain strings and numbers cannot fail.
    serde_json::to_string(&sorted).unwrap_or_default()
}

/// The files in a commit's record; `what` names the record for the error (for example
/// the snapshot it came from).
pub fn decode(text: &str, what: &str) -> Result<Vec<LoadedFile>> {
    serde_json::from_str(text)
        .map_err(|e| Error::invalid_input(format!("{what}: the record of loaded files is not readable: {e}")))
}

/// How many file names a message lists before "and N more".
pub const NAMED_FILES: usize = 5;

/// `a.csv, b.csv and 3 more`: the first [`NAMED_FILES`] of `names`, then how many others.
pub fn some_names<S: AsRef<str>>(names: &[S]) -> String {
    let named: Vec<&str> = names.iter().take(NAMED_FILES).map(AsRef::as_ref).collect();
    let mut out = named.join(", ");
    if names.len() > named.len() {
        out.push_str(&format!(" and {} more", names.len() - named.len()));
    }
    out
}

/// How a load a ledger recorded ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadOutcome {
    /// Its rows are in the destination.
    Loaded,
    /// None of its rows are (it stopped before they became visible).
    Abandoned,
    /// Not known from the ledger alone: the run stopped between its intent and its outcome.
    Open,
}

/// One load as a ledger records it, in the order the loads began.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadRecord {
    /// The run's load id.
    pub id: String,
    /// The files it read.
    pub files: Vec<LoadedFile>,
    /// Whether its rows replaced the destination's (a truncate): files recorded before it
    /// are no longer held once it is loaded.
    pub replaces: bool,
    /// How it ended.
    pub outcome: LoadOutcome,
}

impl LoadRecord {
    /// The error a rerun gives for this open load when it cannot tell whether its rows are
    /// in `table`: names the load, its files and `why`.
    pub fn stopped_error(&self, table: &str, why: &str) -> Error {
        let paths: Vec<&str> = self.files.iter().map(|f| f.path.as_str()).collect();
        Error::new(
            crate::ErrorKind::Conflict,
            format!(
                "an earlier run (load {}) stopped while loading {} file{} into {table} ({}): {why}",
                self.id,
                paths.len(),
                if paths.len() == 1 { "" } else { "s" },
                some_names(&paths),
            ),
        )
        .with_context("table", table.to_string())
        .with_retryable(false)
    }
}

/// What a destination's ledger says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settled {
    /// The files the destination holds.
    pub held: LoadedFiles,
    /// The loads whose outcome is open and that read a file not held: a rerun must find
    /// out whether their rows are there before loading those files again.
    pub open: Vec<LoadRecord>,
}

/// The files held and the open loads that matter, from a ledger's records in the order the
/// loads began. A loaded truncate drops everything recorded before it; an open load whose
/// every file a later (or earlier) load holds is settled by that load.
pub fn settle(records: impl IntoIterator<Item = LoadRecord>) -> Settled {
    let mut held = LoadedFiles::new();
    let mut open = Vec::new();
    for record in records {
        match record.outcome {
            LoadOutcome::Loaded => {
                if record.replaces {
                    held = LoadedFiles::new();
                    open.clear();
                }
                held.extend(record.files);
            }
            LoadOutcome::Abandoned => {}
            LoadOutcome::Open => open.push(record),
        }
    }
    open.retain(|r: &LoadRecord| !r.files.iter().all(|f| held.contains(f)));
    Settled { held, open }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, size: u64, modified_ms: i64) -> LoadedFile {
        LoadedFile {
            path: path.into(),
            size,
            modified_ms,
        }
    }

    #[test]
    fn the_record_reads_back_in_path_order_without_repeats() {
        let files = vec![
            file("/b.csv", 2, 20),
            file("/a.csv", 1, 10),
            file("/b.csv", 2, 20),
        ];
        let text = encode(&files);
        assert_eq!(
            text,
            r#"[{"path":"/a.csv","size":1,"modified_ms":10},{"path":"/b.csv","size":2,"modified_ms":20}]"#
        );
        assert_eq!(
            decode(&text, "s").unwrap(),
            vec![file("/a.csv", 1, 10), file("/b.csv", 2, 20)]
        );
    }

    #[test]
    fn a_changed_size_or_time_is_a_new_file() {
        let mut held = LoadedFiles::new();
        held.extend([file("/a.csv", 1, 10)]);
        assert!(held.contains(&file("/a.csv", 1, 10)));
        assert!(!held.contains(&file("/a.csv", 2, 10)));
        assert!(!held.contains(&file("/a.csv", 1, 11)));
    }

    fn record(id: &str, files: &[LoadedFile], replaces: bool, outcome: LoadOutcome) -> LoadRecord {
        LoadRecord {
            id: id.into(),
            files: files.to_vec(),
            replaces,
            outcome,
        }
    }

    #[test]
    fn loaded_records_hold_their_files_and_abandoned_ones_none() {
        let a = file("/a.csv", 1, 10);
        let b = file("/b.csv", 2, 20);
        let settled = settle([
            record("1", std::slice::from_ref(&a), false, LoadOutcome::Loaded),
            record("2", std::slice::from_ref(&b), false, LoadOutcome::Abandoned),
        ]);
        assert!(settled.held.contains(&a));
        assert!(!settled.held.contains(&b));
        assert!(settled.open.is_empty());
    }

    #[test]
    fn a_loaded_truncate_drops_what_came_before_it() {
        let a = file("/a.csv", 1, 10);
        let b = file("/b.csv", 2, 20);
        let c = file("/c.csv", 3, 30);
        let settled = settle([
            record("1", std::slice::from_ref(&a), false, LoadOutcome::Loaded),
            record("2", std::slice::from_ref(&c), false, LoadOutcome::Open),
            record("3", std::slice::from_ref(&b), true, LoadOutcome::Loaded),
        ]);
        assert!(!settled.held.contains(&a));
        assert!(settled.held.contains(&b));
        assert!(
            settled.open.is_empty(),
            "the truncate replaced whatever the open load left"
        );
        // An open truncate replaces nothing until it is known to be loaded.
        let settled = settle([
            record("1", std::slice::from_ref(&a), false, LoadOutcome::Loaded),
            record("2", std::slice::from_ref(&b), true, LoadOutcome::Open),
        ]);
        assert!(settled.held.contains(&a));
        assert_eq!(settled.open.len(), 1);
    }

    #[test]
    fn an_open_load_matters_only_for_files_no_load_holds() {
        let a = file("/a.csv", 1, 10);
        let b = file("/b.csv", 2, 20);
        // Stopped, then loaded again in full (a reload): settled.
        let settled = settle([
            record("1", &[a.clone(), b.clone()], false, LoadOutcome::Open),
            record("2", &[a.clone(), b.clone()], false, LoadOutcome::Loaded),
        ]);
        assert!(settled.open.is_empty());
        // Stopped, and only one of its files was loaded since.
        let settled = settle([
            record("1", &[a.clone(), b.clone()], false, LoadOutcome::Open),
            record("2", std::slice::from_ref(&a), false, LoadOutcome::Loaded),
        ]);
        assert_eq!(
            settled.open.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
            ["1"]
        );
    }

    #[test]
    fn an_unreadable_record_names_where_it_came_from() {
        let err = decode("{not json", "snapshot 42 of db.t").unwrap_err();
        assert!(err.message().contains("snapshot 42 of db.t"), "{err}");
    }
}
