//! The source offsets of streaming jobs on a Bigtable table (see
//! [`outflow_core::checkpoint`]): in the instance's ledger table `_outflow_loads`, row
//! `{table}#outflow.offsets.{job}`, one column per partition (`topic/partition`, family
//! `loads`) holding the next offset to read.
//!
//! Bigtable applies rows as they arrive, so a checkpoint's rows are visible before its
//! offsets are written. A job that stops between the two reads those records again and
//! writes the same cells, which is why a streaming job into Bigtable needs cells timed by
//! the records and no aggregate families ([`BigtableSinkOptions::for_checkpoints`]). For the
//! same reason the fence (the offsets a checkpoint began at) is a read followed by a
//! write, not one atomic step: two processes that raced on a partition wrote the same
//! cells, so the race changes no cell, only where a restart begins.
//!
//! [`BigtableSinkOptions::for_checkpoints`]: crate::BigtableSinkOptions::for_checkpoints

use outflow_core::checkpoint::offsets_key;
use outflow_core::{Checkpoint, Error, Offsets, Result, TopicPartition};

use crate::client::BigtableClient;
use crate::loads::{FAMILY, LEDGER_TABLE};
use crate::read::Row;

fn row_key(table: &str, job: &str) -> Vec<u8> {
    format!("{table}#{}", offsets_key(job)).into_bytes()
}

/// The offsets of job `job` that `table` holds (none before its first checkpoint).
pub(crate) async fn stored_offsets(client: &BigtableClient, table: &str, job: &str) -> Result<Offsets> {
    let key = row_key(table, job);
    let rows = client.read_prefix(LEDGER_TABLE, &key).await?;
    match rows.iter().find(|r| r.key == key) {
        Some(row) => offsets_of(row, table),
        None => Ok(Offsets::new()),
    }
}

/// The offsets in a ledger row: the latest value of each partition's column.
fn offsets_of(row: &Row, table: &str) -> Result<Offsets> {
    let mut offsets = Offsets::new();
    for cell in row.cells.iter().filter(|c| c.family == FAMILY) {
        let qualifier = String::from_utf8_lossy(&cell.qualifier).to_string();
        let unreadable = || {
            Error::invalid_input(format!(
                "{LEDGER_TABLE} row {}: column {qualifier:?} is not a readable offset of {table}",
                String::from_utf8_lossy(&row.key)
            ))
        };
        let (topic, partition) = qualifier.rsplit_once('/').ok_or_else(unreadable)?;
        let partition: i32 = partition.parse().map_err(|_| unreadable())?;
        let partition = TopicPartition::new(topic, partition);
        if offsets.get(&partition).is_some() {
            continue;
        }
        let latest = row.latest(FAMILY, &cell.qualifier).ok_or_else(unreadable)?;
        let next = String::from_utf8_lossy(latest)
            .parse::<i64>()
            .map_err(|_| unreadable())?;
        offsets.set(partition, next);
    }
    Ok(offsets)
}

/// Records `checkpoint`'s offsets for `table`, once every one of its rows was applied: fails
/// (a conflict) when the table holds other offsets than it began at.
pub(crate) async fn commit_offsets(
    client: &BigtableClient,
    table: &str,
    checkpoint: &Checkpoint,
) -> Result<()> {
    if checkpoint.ranges.is_empty() {
        return Ok(());
    }
    client.make_ledger().await?;
    let stored = stored_offsets(client, table, &checkpoint.job).await?;
    checkpoint.check_against(&stored, table)?;
    let cells: Vec<(String, String)> = checkpoint
        .ends()
        .iter()
        .map(|(p, next)| (p.to_string(), next.to_string()))
        .collect();
    let doing = format!(
        "recording the offsets of job {} for {table} in {}",
        checkpoint.job,
        client.table_path(LEDGER_TABLE)
    );
    client
        .put_ledger_cells(row_key(table, &checkpoint.job), &cells, &doing)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loads::tests::cell;

    #[test]
    fn each_partition_column_holds_its_latest_offset() {
        let row = Row {
            key: row_key("t", "j"),
            cells: vec![
                cell("orders/0", "50", 2000),
                cell("orders/0", "40", 1000),
                cell("a.b/3", "7", 1000),
            ],
        };
        let offsets = offsets_of(&row, "t").unwrap();
        assert_eq!(offsets.get(&TopicPartition::new("orders", 0)), Some(50));
        assert_eq!(offsets.get(&TopicPartition::new("a.b", 3)), Some(7));
        let bad = Row {
            key: row_key("t", "j"),
            cells: vec![cell("orders", "1", 1)],
        };
        let err = offsets_of(&bad, "t").unwrap_err();
        assert!(err.message().contains("\"orders\""), "{err}");
    }
}
