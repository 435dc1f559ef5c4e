//! The load ledger on an Iceberg table (see [`outflow_core::loads`]): each data commit of a
//! run records the source files the run read in its snapshot summary, under
//! [`LOADED_FILES_KEY`], so the rows and the record of their files are committed together.
//!
//! The files a table holds are those recorded along its main branch, newest first, back to
//! and including the last snapshot in which Outflow replaced every row (a truncate's
//! overwrite): files recorded before that no longer have rows in the table.

use iceberg::spec::Operation;
use iceberg::table::Table;
use outflow_core::Result;
use outflow_core::loads::{self, LoadedFiles};

use crate::commit::{COMMIT_ID_KEY, main_history};
use crate::schema::table_name;

/// The snapshot summary key holding the files a commit's rows came from.
pub const LOADED_FILES_KEY: &str = "outflow.loaded-files";

/// The source files `table` holds, by its snapshots' records.
pub fn loaded_files(table: &Table) -> Result<LoadedFiles> {
    let mut held = LoadedFiles::new();
    for snapshot in main_history(table) {
        let summary = snapshot.summary();
        if let Some(text) = summary.additional_properties.get(LOADED_FILES_KEY) {
            let what = format!(
                "snapshot {} of {}",
                snapshot.snapshot_id(),
                table_name(table.identifier())
            );
            held.extend(loads::decode(text, &what)?);
        }
        let replaced_all = summary.operation == Operation::Overwrite
            && summary.additional_properties.contains_key(COMMIT_ID_KEY);
        if replaced_all {
            break;
        }
    }
    Ok(held)
}
