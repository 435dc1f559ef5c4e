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

    #[test]
    fn an_unreadable_record_names_where_it_came_from() {
        let err = decode("{not json", "snapshot 42 of db.t").unwrap_err();
        assert!(err.message().contains("snapshot 42 of db.t"), "{err}");
    }
}
