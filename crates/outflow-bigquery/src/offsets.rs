//! The source offsets of streaming jobs on a BigQuery table (see
//! [`outflow_core::checkpoint`]): in table `_outflow_offsets` of the table's dataset.
//!
//! BigQuery cannot make a table's rows and a row of another table visible in one commit,
//! so a checkpoint is recorded in two steps around BatchCommitWriteStreams: an *intent*
//! naming the checkpoint's finalized pending streams and the offsets they end at, written
//! before the commit, then *loaded* once it is done. A job stopped between the two
//! leaves an open intent, and whoever reads the offsets next (the restarted job, or the
//! process the partitions went to) completes it: it commits the intent's streams itself (a
//! no-op when they were committed already) and counts its offsets. Only when BigQuery no
//! longer has the streams uncommitted (it drops pending streams nobody commits) is the
//! intent abandoned: its rows never became visible, so its records are read again.
//!
//! Completing rather than abandoning is what makes a slow process harmless: the streams of
//! an intent are committed once, by whichever process gets there first, and never
//! dropped while someone may still commit them.
//!
//! A reader completes only the intents of the partitions it asks about, the ones its
//! process owns: an intent of other partitions may be one their owner is committing right
//! now. (Real BigQuery commits a stream once however many commit it; the emulator inserts
//! its rows once per concurrent commit.)
//!
//! The fence (the offsets a checkpoint began at) is a read followed by the intent, not one
//! atomic step, since BigQuery DML has no compare-and-set. Two processes can only both
//! pass it for one partition when one of them kept writing after the group had taken the
//! partition away (for longer than its session timeout), and the window is the time
//! between the read and the intent.

use std::collections::BTreeMap;

use outflow_core::{Checkpoint, Error, ErrorKind, Offsets, Result, RetryPolicy, TopicPartition};

use crate::admin::Admin;
use crate::client::{StreamCommits, is_unknown_stream};
use crate::commit::commit_streams;
use crate::loads::{State, insert_recorded, param};
use crate::table_ref::TableRef;

/// The offsets table's name, in each destination's dataset.
pub const OFFSETS_TABLE: &str = "_outflow_offsets";

/// One checkpoint of a job as the offsets table has it.
#[derive(Clone, Debug, PartialEq)]
struct Entry {
    id: String,
    /// The furthest any of its rows got: loaded beats abandoned beats intent.
    state: State,
    /// The next offset of each partition it read.
    offsets: Offsets,
    /// The pending streams whose commit makes its rows visible.
    streams: Vec<String>,
}

impl Entry {
    /// Whether it read any of `partitions` (any at all when `None`).
    fn touches(&self, partitions: Option<&[TopicPartition]>) -> bool {
        partitions.is_none_or(|wanted| self.offsets.iter().any(|(p, _)| wanted.contains(p)))
    }
}

/// The offsets of one dataset's tables.
pub(crate) struct OffsetsLedger<'a> {
    admin: &'a Admin,
    commits: &'a StreamCommits,
    retry: &'a RetryPolicy,
    table: TableRef,
}

impl<'a> OffsetsLedger<'a> {
    /// The offsets table of `destination`'s dataset.
    pub(crate) fn of(
        admin: &'a Admin,
        commits: &'a StreamCommits,
        retry: &'a RetryPolicy,
        destination: &TableRef,
    ) -> OffsetsLedger<'a> {
        OffsetsLedger {
            admin,
            commits,
            retry,
            table: destination.with_table(OFFSETS_TABLE),
        }
    }

    /// The offsets of job `job` that `destination` holds for `partitions` (every partition
    /// when `None`), with their interrupted checkpoints completed (none when the table or
    /// the offsets table does not exist).
    pub(crate) async fn stored(
        &self,
        destination: &TableRef,
        job: &str,
        partitions: Option<&[TopicPartition]>,
    ) -> Result<Offsets> {
        if self.admin.get(destination).await?.is_none() || self.admin.get(&self.table).await?.is_none() {
            return Ok(Offsets::new());
        }
        self.read_stored(destination, job, partitions).await
    }

    /// [`OffsetsLedger::stored`], both tables known to exist.
    async fn read_stored(
        &self,
        destination: &TableRef,
        job: &str,
        partitions: Option<&[TopicPartition]>,
    ) -> Result<Offsets> {
        let what = format!(
            "reading the offsets of job {job} for {destination} from {}",
            self.table
        );
        let sql = format!(
            "SELECT checkpoint, state, offsets, streams FROM {} \
             WHERE destination = @destination AND job = @job",
            self.table.sql()
        );
        let name = destination.to_string();
        let params = [param("destination", "STRING", &name), param("job", "STRING", job)];
        let rows = self
            .admin
            .query(&self.table.project, &what, &sql, &params)
            .await?;
        let mut entries = entries(rows, &what)?;
        for entry in entries
            .iter_mut()
            .filter(|e| e.state == State::Intent && e.touches(partitions))
        {
            entry.state = self.complete(destination, job, entry).await?;
        }
        Ok(held(&entries).restricted_to(partitions))
    }

    /// Commits the streams of an interrupted checkpoint, or abandons it when BigQuery no
    /// longer has them uncommitted; records which (best effort: the next reader would
    /// decide the same).
    async fn complete(&self, destination: &TableRef, job: &str, entry: &Entry) -> Result<State> {
        let name = destination.to_string();
        let state = match commit_streams(self.commits, self.retry, &name, &entry.streams).await {
            Ok(_) => State::Loaded,
            Err(e) if e.kind() == ErrorKind::Conflict || is_unknown_stream(&e) => {
                if self.any_committed(&entry.streams).await? {
                    let message = format!(
                        "checkpoint {} of job {job} on {destination}: only some of its streams are \
                         committed, so its offsets cannot be known: {}",
                        entry.id,
                        e.message()
                    );
                    return Err(e.with_message(message));
                }
                State::Abandoned
            }
            Err(e) => return Err(e),
        };
        tracing::info!(table = %destination, checkpoint = %entry.id, ?state, "settled an interrupted checkpoint");
        if let Err(e) = self.write(destination, job, &entry.id, state, None, None).await {
            tracing::debug!(error = %e, "could not record how the interrupted checkpoint ended");
        }
        Ok(state)
    }

    async fn any_committed(&self, streams: &[String]) -> Result<bool> {
        for stream in streams {
            let committed = self
                .retry
                .retry_within(
                    &format!("reading stream {stream}"),
                    self.commits.timeout(),
                    |limit| self.commits.is_committed(stream, limit),
                )
                .await;
            match committed {
                Ok(true) => return Ok(true),
                Ok(false) => {}
                Err(e) if is_unknown_stream(&e) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(false)
    }

    /// Commits `streams` (finalized pending streams of `destination`) with `checkpoint`'s
    /// offsets: refused (a conflict) when the table holds other offsets than the
    /// checkpoint began at. `false` when another process had committed the streams.
    pub(crate) async fn commit(
        &self,
        destination: &TableRef,
        checkpoint: &Checkpoint,
        streams: &[String],
    ) -> Result<bool> {
        let job = checkpoint.job.as_str();
        self.create().await?;
        // The writers wrote to the destination and the offsets table was just made sure
        // of: no need to look them up at every checkpoint.
        let ranges: Vec<TopicPartition> = checkpoint.ranges.keys().cloned().collect();
        let stored = self.read_stored(destination, job, Some(&ranges)).await?;
        checkpoint.check_against(&stored, &destination.to_string())?;
        let id = uuid::Uuid::new_v4().simple().to_string();
        let offsets = checkpoint.ends().encode();
        if streams.is_empty() {
            // Nothing to make visible: the offsets alone are the commit.
            self.write(destination, job, &id, State::Loaded, Some(&offsets), Some("[]"))
                .await?;
            return Ok(false);
        }
        let listed = serde_json::to_string(streams).unwrap_or_default();
        self.write(
            destination,
            job,
            &id,
            State::Intent,
            Some(&offsets),
            Some(&listed),
        )
        .await?;
        let committed = commit_streams(self.commits, self.retry, &destination.to_string(), streams).await?;
        self.write(destination, job, &id, State::Loaded, None, None)
            .await?;
        Ok(committed)
    }

    async fn create(&self) -> Result<()> {
        let sql = format!(
            "CREATE TABLE IF NOT EXISTS {} (destination STRING NOT NULL, job STRING NOT NULL, \
             checkpoint STRING NOT NULL, state STRING NOT NULL, offsets STRING, streams STRING, \
             recorded_at TIMESTAMP NOT NULL)",
            self.table.sql()
        );
        self.admin.create_once(&self.table, &sql).await
    }

    async fn write(
        &self,
        destination: &TableRef,
        job: &str,
        checkpoint: &str,
        state: State,
        offsets: Option<&str>,
        streams: Option<&str>,
    ) -> Result<()> {
        let what = format!(
            "recording checkpoint {checkpoint} of job {job} for {destination} in {}",
            self.table
        );
        let name = destination.to_string();
        let columns = [
            ("destination", "STRING", Some(name.as_str())),
            ("job", "STRING", Some(job)),
            ("checkpoint", "STRING", Some(checkpoint)),
            ("state", "STRING", Some(state.as_str())),
            ("offsets", "STRING", offsets),
            ("streams", "STRING", streams),
        ];
        insert_recorded(self.admin, &self.table, &what, &columns).await
    }
}

/// Forgets every job's offsets for `destination`: the table was just created, so it holds
/// none of the records they stand for.
pub(crate) async fn forget(admin: &Admin, destination: &TableRef) -> Result<()> {
    let table = destination.with_table(OFFSETS_TABLE);
    if admin.get(&table).await?.is_none() {
        return Ok(());
    }
    let what = format!("forgetting the offsets of {destination} in {table}");
    let sql = format!("DELETE FROM {} WHERE destination = @destination", table.sql());
    let name = destination.to_string();
    let params = [param("destination", "STRING", &name)];
    admin.query(&table.project, &what, &sql, &params).await?;
    Ok(())
}

/// The checkpoints in rows of the offsets table (`checkpoint, state, offsets, streams`).
fn entries(rows: Vec<Vec<Option<String>>>, what: &str) -> Result<Vec<Entry>> {
    let mut by_id: BTreeMap<String, Entry> = BTreeMap::new();
    for row in rows {
        let column = |i: usize| row.get(i).cloned().flatten();
        let (Some(id), Some(state)) = (column(0), column(1)) else {
            continue;
        };
        let Some(state) = State::parse(&state) else {
            return Err(Error::invalid_input(format!(
                "{what}: checkpoint {id} has an unknown state {state:?}"
            )));
        };
        let entry = by_id.entry(id.clone()).or_insert_with(|| Entry {
            id: id.clone(),
            state,
            offsets: Offsets::new(),
            streams: Vec::new(),
        });
        entry.state = entry.state.max(state);
        if let Some(offsets) = column(2) {
            entry.offsets = Offsets::decode(&offsets, &format!("{what}: checkpoint {id}"))?;
        }
        if let Some(streams) = column(3) {
            entry.streams = serde_json::from_str(&streams).map_err(|e| {
                Error::invalid_input(format!(
                    "{what}: checkpoint {id}: its streams are not readable: {e}"
                ))
            })?;
        }
    }
    Ok(by_id.into_values().collect())
}

/// The offsets the committed checkpoints add up to: each partition's furthest. Under the
/// fence a partition's offsets only grow, so the furthest is the newest.
fn held(entries: &[Entry]) -> Offsets {
    let mut held = Offsets::new();
    for entry in entries.iter().filter(|e| e.state == State::Loaded) {
        for (partition, next) in entry.offsets.iter() {
            if held.get(partition).is_none_or(|h| next > h) {
                held.set(partition.clone(), next);
            }
        }
    }
    held
}

#[cfg(test)]
mod tests {
    use outflow_core::TopicPartition;

    use super::*;

    fn row(id: &str, state: &str, offsets: Option<&str>, streams: Option<&str>) -> Vec<Option<String>> {
        vec![
            Some(id.into()),
            Some(state.into()),
            offsets.map(Into::into),
            streams.map(Into::into),
        ]
    }

    fn at(partition: i32) -> TopicPartition {
        TopicPartition::new("orders", partition)
    }

    #[test]
    fn committed_checkpoints_add_up_to_each_partitions_furthest_offset() {
        let rows = vec![
            row("c2", "intent", Some(r#"{"orders":{"0":20}}"#), Some(r#"["s2"]"#)),
            row(
                "c1",
                "intent",
                Some(r#"{"orders":{"0":10,"1":5}}"#),
                Some(r#"["s1"]"#),
            ),
            row("c1", "loaded", None, None),
            row("c2", "loaded", None, None),
            // Another process's partition, committed without streams.
            row("c3", "loaded", Some(r#"{"orders":{"2":7}}"#), Some("[]")),
            // Never committed: its offsets do not count.
            row("c4", "intent", Some(r#"{"orders":{"0":99}}"#), Some(r#"["s4"]"#)),
            row("c4", "abandoned", None, None),
        ];
        let entries = entries(rows, "reading").unwrap();
        assert_eq!(entries.len(), 4);
        let held = held(&entries);
        assert_eq!(held.get(&at(0)), Some(20));
        assert_eq!(held.get(&at(1)), Some(5));
        assert_eq!(held.get(&at(2)), Some(7));
        assert_eq!(held.len(), 3);
    }

    #[test]
    fn an_intent_is_settled_only_by_a_reader_of_one_of_its_partitions() {
        let rows = vec![row(
            "c1",
            "intent",
            Some(r#"{"orders":{"0":10,"1":5}}"#),
            Some(r#"["s1"]"#),
        )];
        let entry = &entries(rows, "reading").unwrap()[0];
        assert!(entry.touches(None));
        assert!(entry.touches(Some(&[at(1), at(3)])));
        assert!(!entry.touches(Some(&[at(2), at(3)])));
        assert!(!entry.touches(Some(&[])));
    }

    #[test]
    fn an_intent_alone_is_open_with_its_streams() {
        let rows = vec![row(
            "c1",
            "intent",
            Some(r#"{"orders":{"0":10}}"#),
            Some(r#"["s1","s2"]"#),
        )];
        let entries = entries(rows, "reading").unwrap();
        assert_eq!(entries[0].state, State::Intent);
        assert_eq!(entries[0].streams, ["s1", "s2"]);
        assert!(held(&entries).is_empty());
    }

    #[test]
    fn unreadable_rows_name_the_checkpoint() {
        let err = entries(vec![row("c9", "maybe", None, None)], "reading d.t").unwrap_err();
        assert!(
            err.message().contains("c9") && err.message().contains("maybe"),
            "{err}"
        );
        let err = entries(vec![row("c8", "intent", Some("{"), None)], "reading d.t").unwrap_err();
        assert!(err.message().contains("c8"), "{err}");
        let err = entries(vec![row("c7", "intent", None, Some("s1"))], "reading d.t").unwrap_err();
        assert!(
            err.message().contains("c7") && err.message().contains("streams"),
            "{err}"
        );
    }
}
