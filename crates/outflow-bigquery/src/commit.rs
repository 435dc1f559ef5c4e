//! BigQuery's side of the two-phase contract of [`outflow_core::commit`]: the pending
//! streams every writer finalized, committed by one [`BigQueryCommitter`].
//!
//! A writer opened with [`BigQuerySink::connect_two_phase`](crate::BigQuerySink::connect_two_phase)
//! writes exactly-once rows to a pending stream per table and ends with
//! [`TwoPhaseSink::prepare_commit`](outflow_core::TwoPhaseSink::prepare_commit), which
//! finalizes the streams and describes them as [`PendingStream`]s. The committer commits all
//! streams of a table with one BatchCommitWriteStreams: BigQuery makes their rows visible
//! together, or none of them. A commit run again (a rerun commit task) finds the streams
//! committed and commits nothing; streams of writers that failed are never handed over, so
//! their rows never become visible (BigQuery discards uncommitted pending streams).

use std::collections::BTreeMap;

use async_trait::async_trait;
use outflow_core::sink::DestinationStats;
use outflow_core::{Checkpoint, Committer, Error, ErrorKind, LoadedFile, Result, RetryPolicy, WriteResult};
use serde::{Deserialize, Serialize};

use crate::admin::Admin;
use crate::client::{Clients, ResolvedConnection, StreamCommits, process_env};
use crate::loads::{Ledger, Load, Visibility};
use crate::offsets::OffsetsLedger;
use crate::options::BigQuerySinkOptions;
use crate::table_ref::TableRef;

/// One writer's finalized pending stream of one table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingStream {
    /// The destination table, `project.dataset.table`.
    pub table: String,
    /// The finalized stream, `projects/P/datasets/D/tables/T/streams/S`.
    pub stream: String,
}

impl PendingStream {
    /// The table the stream belongs to, as BatchCommitWriteStreams names it.
    fn parent(&self) -> &str {
        stream_parent(&self.stream)
    }
}

/// Commits the pending streams of every writer of one write, one BatchCommitWriteStreams
/// per table: BigQuery's [`Committer`].
#[derive(Clone, Debug)]
pub struct BigQueryCommitter {
    commits: StreamCommits,
    retry: RetryPolicy,
    /// For the load ledger and the offsets of streaming jobs.
    admin: Admin,
    /// The project and dataset of table names that name none.
    defaults: (Option<String>, Option<String>),
}

impl BigQueryCommitter {
    /// Connects to the Storage Write API the writers of `options` wrote through.
    pub async fn connect(options: &BigQuerySinkOptions) -> Result<BigQueryCommitter> {
        let connection = ResolvedConnection::resolve(options.connection(), process_env)?;
        Ok(BigQueryCommitter {
            commits: StreamCommits::connect(&connection, options.request_timeout()).await?,
            retry: options.retry().clone(),
            admin: Admin::new(
                Clients::connect(&connection).await?,
                options.retry().clone(),
                options.request_timeout(),
            ),
            defaults: (
                options.project().map(String::from),
                options.dataset().map(String::from),
            ),
        })
    }
}

#[async_trait]
impl Committer for BigQueryCommitter {
    type Committable = PendingStream;

    async fn commit(&self, committables: Vec<PendingStream>) -> Result<WriteResult> {
        self.commit_recording(committables, None).await
    }

    /// Records the files in the tables' load ledger: an intent with the streams before each
    /// table's commit, the outcome after, as the sink does.
    async fn commit_loaded(
        &self,
        committables: Vec<PendingStream>,
        files: &[LoadedFile],
    ) -> Result<WriteResult> {
        self.commit_recording(committables, Some(Load::new(files.to_vec())))
            .await
    }

    /// Commits the streams of `destination` with the checkpoint's offsets, recorded in the
    /// dataset's offsets table around the commit (see [`crate::offsets`]).
    async fn commit_checkpoint(
        &self,
        committables: Vec<PendingStream>,
        destination: &str,
        checkpoint: &Checkpoint,
    ) -> Result<WriteResult> {
        let t = TableRef::parse(
            destination,
            self.defaults.0.as_deref(),
            self.defaults.1.as_deref(),
        )?;
        let name = t.to_string();
        if let Some(other) = committables.iter().find(|c| c.table != name) {
            return Err(Error::internal(format!(
                "a checkpoint of {name} was handed a stream of {}",
                other.table
            )));
        }
        let mut streams: Vec<String> = committables.into_iter().map(|c| c.stream).collect();
        streams.sort();
        streams.dedup();
        let ledger = OffsetsLedger::of(&self.admin, &self.commits, &self.retry, &t);
        let committed = ledger.commit(&t, checkpoint, &streams).await?;
        let mut result = WriteResult::default();
        result.record(
            &name,
            DestinationStats {
                commits: u64::from(committed || streams.is_empty()),
                ..Default::default()
            },
        );
        Ok(result)
    }
}

impl BigQueryCommitter {
    async fn commit_recording(
        &self,
        committables: Vec<PendingStream>,
        load: Option<Load>,
    ) -> Result<WriteResult> {
        let mut by_table: BTreeMap<(&str, &str), Vec<String>> = BTreeMap::new();
        for pending in &committables {
            by_table
                .entry((pending.table.as_str(), pending.parent()))
                .or_default()
                .push(pending.stream.clone());
        }
        let mut result = WriteResult::default();
        for ((table, _), mut streams) in by_table {
            streams.sort();
            streams.dedup();
            let recorded = match &load {
                Some(load) => {
                    let t = TableRef::parse(table, None, None)?;
                    let ledger = Ledger::of(&self.admin, &t);
                    ledger
                        .intend(&t, load, &Visibility::Streams(streams.clone()), false)
                        .await?;
                    Some((t, ledger, load))
                }
                None => None,
            };
            let committed = commit_streams(&self.commits, &self.retry, table, &streams).await?;
            if let Some((t, ledger, load)) = recorded {
                ledger.loaded(&t, load, false).await?;
            }
            let stats = result.destinations.entry(table.to_string()).or_default();
            if committed {
                stats.commits += 1;
            }
        }
        Ok(result)
    }
}

/// The table a stream belongs to (`projects/P/datasets/D/tables/T`), as
/// BatchCommitWriteStreams names it.
fn stream_parent(stream: &str) -> &str {
    stream
        .split_once("/streams/")
        .map_or(stream, |(parent, _)| parent)
}

/// Commits `streams` of `table` (`project.dataset.table`) together; `false` when an
/// earlier call committed them already (a rerun, or another process completing an
/// interrupted checkpoint). A refusal with any stream left uncommitted is a conflict: then
/// none of the streams' rows were committed.
pub(crate) async fn commit_streams(
    commits: &StreamCommits,
    retry: &RetryPolicy,
    table: &str,
    streams: &[String],
) -> Result<bool> {
    let Some(first) = streams.first() else {
        return Ok(false);
    };
    let parent = stream_parent(first);
    let what = format!("committing {} streams of {table}", streams.len());
    let refused = retry
        .retry_within(&what, commits.timeout(), |limit| {
            commits.batch_commit(parent, streams, limit)
        })
        .await?;
    if refused.is_empty() {
        tracing::info!(table, streams = streams.len(), "committed the writers' streams");
        return Ok(true);
    }
    // Nothing was committed by this call. When every refused stream is committed, an
    // earlier call committed them all (a commit is all or nothing): the rerun is a no-op.
    let mut uncommitted = Vec::new();
    for (stream, why) in &refused {
        let committed = retry
            .retry_within(&format!("reading stream {stream}"), commits.timeout(), |limit| {
                commits.is_committed(stream, limit)
            })
            .await?;
        if !committed {
            uncommitted.push(format!("{stream}: {why}"));
        }
    }
    if uncommitted.is_empty() {
        tracing::info!(table, "the writers' streams were committed before");
        return Ok(false);
    }
    Err(Error::new(
        ErrorKind::Conflict,
        format!(
            "{what}: BigQuery refused {}; none of the streams' rows were committed",
            uncommitted.join("; ")
        ),
    )
    .with_context("table", table.to_string())
    .with_retryable(false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_name_their_table() {
        let pending = PendingStream {
            table: "p.d.t".into(),
            stream: "projects/p/datasets/d/tables/t/streams/s1".into(),
        };
        assert_eq!(pending.parent(), "projects/p/datasets/d/tables/t");
        let json = serde_json::to_string(&pending).unwrap();
        assert_eq!(serde_json::from_str::<PendingStream>(&json).unwrap(), pending);
    }
}
