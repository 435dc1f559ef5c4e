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
use outflow_core::{Committer, Error, ErrorKind, LoadedFile, Result, RetryPolicy, WriteResult};
use serde::{Deserialize, Serialize};

use crate::admin::Admin;
use crate::client::{Clients, ResolvedConnection, StreamCommits, process_env};
use crate::loads::{Ledger, Load, Visibility};
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
        self.stream
            .split_once("/streams/")
            .map_or(self.stream.as_str(), |(parent, _)| parent)
    }
}

/// Commits the pending streams of every writer of one write, one BatchCommitWriteStreams
/// per table: BigQuery's [`Committer`].
#[derive(Clone, Debug)]
pub struct BigQueryCommitter {
    commits: StreamCommits,
    retry: RetryPolicy,
    /// For the load ledger.
    admin: Admin,
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
        })
    }

    /// Commits one table's streams; `false` when an earlier run committed them already.
    async fn commit_table(&self, table: &str, parent: &str, streams: &[String]) -> Result<bool> {
        let what = format!("committing {} streams of {table}", streams.len());
        let refused = self
            .retry
            .retry_within(&what, self.commits.timeout(), |limit| {
                self.commits.batch_commit(parent, streams, limit)
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
            let committed = self
                .retry
                .retry_within(
                    &format!("reading stream {stream}"),
                    self.commits.timeout(),
                    |limit| self.commits.is_committed(stream, limit),
                )
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
        for ((table, parent), mut streams) in by_table {
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
            let committed = self.commit_table(table, parent, &streams).await?;
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
