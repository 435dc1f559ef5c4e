//! The source offsets of streaming jobs on an Iceberg table (see
//! [`outflow_core::checkpoint`]): each checkpoint's snapshot keeps, in its summary under
//! `outflow.offsets.<job>`, the next offset of every partition that checkpoint read.
//!
//! What the table holds for a job is found along its main branch, newest snapshot first:
//! each partition's offset is the one its newest snapshot names. Two processes of one job
//! that read different partitions each name only their own, so their commits add up.

use iceberg::table::Table;
use outflow_core::checkpoint::offsets_key;
use outflow_core::{Offsets, Result};

use crate::commit::main_history;
use crate::schema::table_name;

/// The offsets of streaming job `job` that `table` holds; empty when none of its snapshots
/// names the job.
pub fn stored_offsets(table: &Table, job: &str) -> Result<Offsets> {
    let key = offsets_key(job);
    let mut held = Offsets::new();
    for snapshot in main_history(table) {
        if let Some(text) = snapshot.summary().additional_properties.get(&key) {
            let what = format!(
                "snapshot {} of {}",
                snapshot.snapshot_id(),
                table_name(table.identifier())
            );
            held.fill_from(Offsets::decode(text, &what)?);
        }
    }
    Ok(held)
}
