//! The two-phase write contract, after Flink's committing sinks: writers prepare what they
//! would commit, and one committer commits it.
//!
//! A [`TwoPhaseSink`] writes as any [`Sink`], but instead of making its rows visible it
//! closes what it has open (data files, write streams) and describes it:
//! [`TwoPhaseSink::prepare_commit`] returns the committables, plain serde data that can
//! travel to another process. A [`Committer`] then commits the committables of every writer
//! at once, idempotently: committing the same committables again changes nothing, so a
//! commit task that is run twice (a retried task, a restarted job) never duplicates rows.
//!
//! What each sink commits:
//! - Iceberg: the data files every writer closed, in one snapshot per table, under a commit
//!   id derived from the files.
//! - BigQuery: the finalized pending streams of every writer, in one BatchCommitWriteStreams
//!   per table; a stream already committed is not committed again.
//! - Bigtable: nothing. Its writes are visible once acknowledged and idempotent (explicit
//!   timestamps), so a rerun rewrites the same cells, except in aggregate families, whose
//!   AddToCell input a rerun counts again.
//!
//! Engines that move committables between processes use the JSON forms,
//! [`DynTwoPhaseSink`] and [`DynCommitter`], which every typed implementation has.

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::checkpoint::Checkpoint;
use crate::loads::LoadedFile;
use crate::sink::{Sink, WriteResult};
use crate::{Error, ErrorKind, Result};

/// What one writer prepared and did not commit: the committables, and what it wrote and
/// rejected (rows counted as written become visible when the committables are committed).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Prepared<C> {
    /// What a committer makes visible.
    pub committables: Vec<C>,
    /// Rows, bytes and files per destination, and the records the writer rejected.
    pub result: WriteResult,
}

impl<C> Default for Prepared<C> {
    fn default() -> Self {
        Prepared {
            committables: Vec::new(),
            result: WriteResult::default(),
        }
    }
}

/// A sink whose writes a [`Committer`] makes visible: the writer's half of a two-phase write.
#[async_trait]
pub trait TwoPhaseSink: Sink {
    /// What this sink's committer commits.
    type Committable: Serialize + DeserializeOwned + Send + Sync + 'static;

    /// Closes what is open and describes it, making nothing visible. The sink is closed
    /// afterwards; an error means nothing of it may be committed.
    async fn prepare_commit(&mut self) -> Result<Prepared<Self::Committable>>;
}

/// Commits the committables of every writer of one write, once.
#[async_trait]
pub trait Committer: Send + Sync {
    /// What the writers prepared.
    type Committable: Serialize + DeserializeOwned + Send + Sync + 'static;

    /// Commits all of `committables` together and says, per destination, how many commits
    /// it made. Committables already committed are skipped, so running it again is safe.
    async fn commit(&self, committables: Vec<Self::Committable>) -> Result<WriteResult>;

    /// Commits as [`Committer::commit`] and records `files` as loaded into each destination
    /// it commits to (see [`crate::loads`]), in the same commit, or as the sink's own ledger
    /// does when a commit cannot carry the record. A committer that keeps no ledger refuses,
    /// so that no caller takes files for recorded that are not.
    async fn commit_loaded(
        &self,
        _committables: Vec<Self::Committable>,
        _files: &[LoadedFile],
    ) -> Result<WriteResult> {
        Err(Error::new(
            ErrorKind::Unsupported,
            "this sink keeps no record of the files a statement loads",
        ))
    }

    /// Commits as [`Committer::commit`], into the one destination `destination`, together
    /// with `checkpoint`'s offsets (see [`crate::checkpoint`]): the rows and the offsets
    /// become visible at once, and a destination that holds other offsets than the
    /// checkpoint began at refuses it. A checkpoint that read records but staged no rows
    /// (every record filtered out or rejected) still commits its offsets. A committer that
    /// cannot store offsets refuses.
    async fn commit_checkpoint(
        &self,
        _committables: Vec<Self::Committable>,
        _destination: &str,
        _checkpoint: &Checkpoint,
    ) -> Result<WriteResult> {
        Err(Error::new(
            ErrorKind::Unsupported,
            "this sink cannot commit the source offsets of a streaming job",
        ))
    }
}

/// A [`TwoPhaseSink`] whose committables are JSON, for engines that send them elsewhere.
#[async_trait]
pub trait DynTwoPhaseSink: Sink {
    /// [`TwoPhaseSink::prepare_commit`], with each committable as JSON.
    async fn prepare_commit_json(&mut self) -> Result<Prepared<serde_json::Value>>;
}

#[async_trait]
impl<S: TwoPhaseSink> DynTwoPhaseSink for S {
    async fn prepare_commit_json(&mut self) -> Result<Prepared<serde_json::Value>> {
        let prepared = self.prepare_commit().await?;
        let committables = prepared
            .committables
            .iter()
            .map(|c| {
                serde_json::to_value(c).map_err(|e| Error::internal(format!("describing a committable: {e}")))
            })
            .collect::<Result<_>>()?;
        Ok(Prepared {
            committables,
            result: prepared.result,
        })
    }
}

/// A [`Committer`] that takes committables as JSON.
#[async_trait]
pub trait DynCommitter: Send + Sync {
    /// [`Committer::commit`], with each committable as JSON.
    async fn commit_json(&self, committables: Vec<serde_json::Value>) -> Result<WriteResult>;

    /// [`Committer::commit_loaded`], with each committable as JSON.
    async fn commit_json_loaded(
        &self,
        committables: Vec<serde_json::Value>,
        files: &[LoadedFile],
    ) -> Result<WriteResult>;

    /// [`Committer::commit_checkpoint`], with each committable as JSON.
    async fn commit_json_checkpoint(
        &self,
        committables: Vec<serde_json::Value>,
        destination: &str,
        checkpoint: &Checkpoint,
    ) -> Result<WriteResult>;
}

fn typed<C: DeserializeOwned>(committables: Vec<serde_json::Value>) -> Result<Vec<C>> {
    committables
        .into_iter()
        .map(|c| {
            serde_json::from_value(c).map_err(|e| Error::internal(format!("reading a committable: {e}")))
        })
        .collect()
}

#[async_trait]
impl<C: Committer> DynCommitter for C {
    async fn commit_json(&self, committables: Vec<serde_json::Value>) -> Result<WriteResult> {
        self.commit(typed(committables)?).await
    }

    async fn commit_json_loaded(
        &self,
        committables: Vec<serde_json::Value>,
        files: &[LoadedFile],
    ) -> Result<WriteResult> {
        self.commit_loaded(typed(committables)?, files).await
    }

    async fn commit_json_checkpoint(
        &self,
        committables: Vec<serde_json::Value>,
        destination: &str,
        checkpoint: &Checkpoint,
    ) -> Result<WriteResult> {
        self.commit_checkpoint(typed(committables)?, destination, checkpoint)
            .await
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::Mutex;

    use arrow_array::RecordBatch;

    use super::*;
    use crate::sink::DestinationStats;

    /// Writes nothing anywhere: each batch's row count is a committable, and the committer
    /// keeps the set of committables it has committed.
    #[derive(Default)]
    struct Counting {
        rows: Vec<usize>,
    }

    #[async_trait]
    impl Sink for Counting {
        async fn write(&mut self, batch: RecordBatch) -> Result<()> {
            self.rows.push(batch.num_rows());
            Ok(())
        }
        async fn flush(&mut self) -> Result<()> {
            Ok(())
        }
        async fn close(&mut self) -> Result<WriteResult> {
            Ok(WriteResult::default())
        }
    }

    #[async_trait]
    impl TwoPhaseSink for Counting {
        type Committable = usize;
        async fn prepare_commit(&mut self) -> Result<Prepared<usize>> {
            Ok(Prepared {
                committables: std::mem::take(&mut self.rows),
                result: WriteResult::default(),
            })
        }
    }

    #[derive(Default)]
    struct Committed(Mutex<BTreeSet<usize>>);

    #[async_trait]
    impl Committer for Committed {
        type Committable = usize;
        async fn commit(&self, committables: Vec<usize>) -> Result<WriteResult> {
            let mut done = self.0.lock().unwrap();
            let mut result = WriteResult::default();
            for c in committables {
                if done.insert(c) {
                    result.record(
                        "t",
                        DestinationStats {
                            commits: 1,
                            ..Default::default()
                        },
                    );
                }
            }
            Ok(result)
        }
    }

    fn batch(rows: usize) -> RecordBatch {
        let ids = arrow_array::Int64Array::from_iter_values(0..rows as i64);
        RecordBatch::try_from_iter([("id", std::sync::Arc::new(ids) as arrow_array::ArrayRef)]).unwrap()
    }

    #[tokio::test]
    async fn committables_travel_as_json_and_a_second_commit_changes_nothing() {
        let mut sink: Box<dyn DynTwoPhaseSink> = Box::new(Counting::default());
        sink.write(batch(3)).await.unwrap();
        sink.write(batch(5)).await.unwrap();
        let prepared = sink.prepare_commit_json().await.unwrap();
        assert_eq!(
            prepared.committables,
            [serde_json::json!(3), serde_json::json!(5)]
        );

        let committer: Box<dyn DynCommitter> = Box::new(Committed::default());
        let first = committer
            .commit_json(prepared.committables.clone())
            .await
            .unwrap();
        assert_eq!(first.destinations["t"].commits, 2);
        let again = committer.commit_json(prepared.committables).await.unwrap();
        assert!(again.destinations.is_empty());
        let err = committer
            .commit_json(vec![serde_json::json!("not a count")])
            .await
            .unwrap_err();
        assert!(err.message().contains("reading a committable"), "{err}");
    }
}
