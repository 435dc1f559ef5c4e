//! Exactly-once reruns: the source files a destination already holds, by its load ledger
//! ([`outflow_core::loads`]), are not loaded into it again.
//!
//! A job with one table skips such files before reading them. A job whose table comes from
//! a template reads every file, since its rows may go to several tables, and drops the rows
//! of a file bound for a table that already holds that file. `reload` (the job key, or
//! `--reload`) loads everything again; a sink that keeps no ledger loads everything always.

use std::collections::{BTreeSet, HashMap};

use arrow::array::{BooleanArray, RecordBatch};
use arrow::compute::filter_record_batch;
use outflow_core::{Destination, Error, LoadedFile, PrepareDestination, Result};
use serde::Serialize;

use crate::source::{RowOrigins, Source, SourceFile};

/// A source file not loaded into a destination, because the destination holds it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Skipped {
    /// The file.
    pub file: String,
    /// The destination.
    pub destination: String,
}

/// What the destinations' ledgers hold of a run's source files, asked as each destination
/// comes up.
pub(crate) struct Ledgers {
    reload: bool,
    /// The source files as ledgers know them, in the source's order.
    files: Vec<LoadedFile>,
    paths: Vec<String>,
    /// Per destination with a ledger: which source files (by index) it holds.
    held: HashMap<String, Vec<bool>>,
    /// Destinations whose sink keeps no ledger.
    unrecorded: BTreeSet<String>,
    skipped: BTreeSet<(usize, String)>,
    skipped_rows: u64,
}

impl Ledgers {
    /// For the source `files`; under `reload` nothing is ever skipped.
    pub(crate) fn new(files: &[SourceFile], reload: bool) -> Ledgers {
        Ledgers {
            reload,
            files: files.iter().map(SourceFile::loaded_file).collect(),
            paths: files.iter().map(|f| f.display().to_string()).collect(),
            held: HashMap::new(),
            unrecorded: BTreeSet::new(),
            skipped: BTreeSet::new(),
            skipped_rows: 0,
        }
    }

    /// Asks `destination`'s ledger which of the files it holds.
    pub(crate) async fn ask(&mut self, preparer: &dyn PrepareDestination, destination: &str) -> Result<()> {
        if self.reload || self.held.contains_key(destination) {
            return Ok(());
        }
        match preparer.loaded_files(destination).await? {
            Some(loaded) => {
                let held = self.files.iter().map(|f| loaded.contains(f)).collect();
                self.held.insert(destination.to_string(), held);
            }
            None => {
                self.unrecorded.insert(destination.to_string());
            }
        }
        Ok(())
    }

    /// Whether `destination` holds source file `file`.
    pub(crate) fn holds(&self, destination: &str, file: usize) -> bool {
        self.held.get(destination).is_some_and(|held| held[file])
    }

    /// The paths of the source files `destination` holds, as asked ([`Ledgers::ask`]).
    pub(crate) fn held_paths(&self, destination: &str) -> Vec<&str> {
        (0..self.files.len())
            .filter(|&f| self.holds(destination, f))
            .map(|f| self.paths[f].as_str())
            .collect()
    }

    /// For a run into the one table `table`: leaves the files it holds out of `source`,
    /// which then reads the rest whole.
    pub(crate) async fn leave_out_held(
        &mut self,
        preparer: &dyn PrepareDestination,
        table: &str,
        source: &mut Source,
    ) -> Result<()> {
        self.ask(preparer, table).await?;
        let Some(held) = self.held.remove(table) else {
            return Ok(());
        };
        source.leave_out(|f| held[f]);
        for (file, _) in held.iter().enumerate().filter(|(_, h)| **h) {
            self.skipped.insert((file, table.to_string()));
        }
        // The source's file indexes change with it; what is left is read whole.
        Ok(())
    }

    /// Drops the rows of `batch` (read from file `file`, rows at `origins`) bound for a
    /// destination that holds that file.
    pub(crate) fn drop_held(
        &mut self,
        destination: &Destination,
        batch: RecordBatch,
        origins: RowOrigins,
        file: usize,
    ) -> Result<(RecordBatch, RowOrigins)> {
        if !self.held.values().any(|held| held[file]) {
            return Ok((batch, origins));
        }
        let mut keep = vec![true; batch.num_rows()];
        for (name, rows) in destination.assign(&batch)?.tables {
            if self.holds(&name, file) {
                for row in rows {
                    keep[row as usize] = false;
                }
                self.skipped.insert((file, name));
            }
        }
        let dropped = keep.iter().filter(|k| !**k).count();
        if dropped == 0 {
            return Ok((batch, origins));
        }
        self.skipped_rows += dropped as u64;
        let keep = BooleanArray::from(keep);
        let batch = filter_record_batch(&batch, &keep)
            .map_err(|e| Error::internal(format!("leaving out rows already loaded: {e}")))?;
        Ok((batch, origins.filter(&keep)))
    }

    /// The files skipped, per destination; the rows dropped from files read for other
    /// destinations; the destinations whose sink keeps no record of what it loaded.
    pub(crate) fn finish(self) -> (Vec<Skipped>, u64, Vec<String>) {
        let skipped = self
            .skipped
            .into_iter()
            .map(|(file, destination)| Skipped {
                file: self.paths[file].clone(),
                destination,
            })
            .collect();
        (skipped, self.skipped_rows, self.unrecorded.into_iter().collect())
    }

    /// The files to record as loaded with the run's commits.
    pub(crate) fn loaded(&self) -> Vec<LoadedFile> {
        self.files.clone()
    }
}
