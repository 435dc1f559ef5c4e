//! Data files written by many writers and committed once, by one committer: the two halves
//! of a distributed write (one statement on several DataFusion partitions or Ballista
//! executors).
//!
//! This is Iceberg's side of the two-phase contract of [`outflow_core::commit`]. A writer
//! ends with [`TwoPhaseSink::prepare_commit`](outflow_core::TwoPhaseSink::prepare_commit)
//! instead of `close`: its data files are closed and described as [`StagedFiles`] (serde,
//! each data file in Iceberg's own JSON form, so they can cross processes), and nothing is
//! committed. The [`IcebergCommitter`] gathers every writer's staged files: one snapshot
//! per table holding all of them, with a commit id derived from all of them. A committer
//! that is retried with the same files (a rerun task) finds that id in the table and
//! commits nothing twice; files of writers that failed and were rerun are never staged, so
//! they are never committed.

use std::collections::BTreeMap;

use async_trait::async_trait;
use iceberg::spec::{DataFile, deserialize_data_file_from_json, serialize_data_file_to_json};
use iceberg::table::Table;
use outflow_core::{Checkpoint, Committer, Error, ErrorKind, LoadedFile, Result, RetryPolicy, WriteResult};
use serde::{Deserialize, Serialize};

use crate::client::{IcebergCatalog, IcebergResultExt};
use crate::commit::{CommitOutcome, DataCommit, SnapshotKind, commit_data};
use crate::options::IcebergSinkOptions;
use crate::schema::parse_table_ident;
use crate::sink::PendingCommit;

/// One writer's uncommitted data files for one table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StagedFiles {
    /// The table, as routed (`ns.table`).
    pub table: String,
    /// Whether the table's rows are to be replaced (`write_disposition: truncate`).
    pub overwrite: bool,
    /// The partition spec the files were written for.
    pub partition_spec_id: i32,
    /// The data files, each as Iceberg's JSON form of a `DataFile`.
    pub data_files: Vec<String>,
    /// Equality delete files of upsert mode, in the same form.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub delete_files: Vec<String>,
}

impl StagedFiles {
    /// Describes a prepared commit of `table` for a committer elsewhere.
    pub(crate) fn of(table: &Table, pending: &PendingCommit) -> Result<StagedFiles> {
        let metadata = table.metadata();
        let spec_id = pending.commit.partition_spec_id;
        let partition_type = metadata
            .partition_spec_by_id(spec_id)
            .ok_or_else(|| Error::internal(format!("{} has no partition spec {spec_id}", pending.table)))?
            .partition_type(metadata.current_schema())
            .doing("typing the partition")?;
        let describe = |files: &[DataFile]| {
            files
                .iter()
                .map(|file| {
                    serialize_data_file_to_json(file.clone(), &partition_type, metadata.format_version())
                        .doing(format_args!("describing data file {}", file.file_path()))
                })
                .collect::<Result<Vec<_>>>()
        };
        Ok(StagedFiles {
            table: pending.table.clone(),
            overwrite: pending.commit.kind == SnapshotKind::Overwrite,
            partition_spec_id: spec_id,
            data_files: describe(&pending.commit.files)?,
            delete_files: describe(&pending.commit.deletes)?,
        })
    }
}

/// How one table's commit of staged files ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StagedCommit {
    /// The table.
    pub table: String,
    /// Data files in the snapshot.
    pub files: usize,
    /// A new snapshot, or the one an earlier attempt made.
    pub outcome: CommitOutcome,
}

/// What a commit of staged files records besides the files.
#[derive(Clone, Copy, Debug, Default)]
pub enum Recording<'a> {
    /// Nothing.
    #[default]
    Nothing,
    /// The source files the rows came from ([`crate::loads`]), in every table's snapshot.
    Loads(&'a [LoadedFile]),
    /// A streaming checkpoint of the one table named ([`crate::offsets`]): committed even
    /// when no writer staged a file for it.
    Checkpoint(&'a str, &'a Checkpoint),
}

/// Commits every writer's staged files: one snapshot per table, an overwrite when any
/// writer staged one, idempotent by a commit id derived from all the files.
pub async fn commit_staged(
    catalog: &IcebergCatalog,
    staged: &[StagedFiles],
    retry: &RetryPolicy,
    recording: Recording<'_>,
) -> Result<Vec<StagedCommit>> {
    let loads = match recording {
        Recording::Loads(files) => Some(outflow_core::loads::encode(files)),
        _ => None,
    };
    let mut by_table: BTreeMap<&str, Vec<&StagedFiles>> = BTreeMap::new();
    for part in staged {
        by_table.entry(part.table.as_str()).or_default().push(part);
    }
    if let Recording::Checkpoint(table, _) = recording {
        if let Some(other) = by_table.keys().find(|t| **t != table) {
            return Err(Error::internal(format!(
                "a checkpoint of {table} was given files of {other}"
            )));
        }
        by_table.entry(table).or_default();
    }
    let mut out = Vec::new();
    for (name, parts) in by_table {
        let ident = parse_table_ident(name)?;
        let table = catalog.require_table(&ident).await?;
        let spec_id = parts
            .first()
            .map_or(table.metadata().default_partition_spec_id(), |p| {
                p.partition_spec_id
            });
        if let Some(other) = parts.iter().find(|p| p.partition_spec_id != spec_id) {
            return Err(Error::new(
                ErrorKind::Conflict,
                format!(
                    "writers of {name} wrote for partition specs {spec_id} and {}; one commit \
                     holds files of one spec",
                    other.partition_spec_id
                ),
            )
            .with_context("table", name.to_string()));
        }
        let files = read_files(&table, spec_id, &parts, |p| &p.data_files)?;
        let deletes = read_files(&table, spec_id, &parts, |p| &p.delete_files)?;
        // Each writer reduced its own changes: two writers' rows of one key in one commit
        // would both stay, since equality deletes spare the rows committed beside them.
        if !deletes.is_empty() && parts.len() > 1 {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "{} writers staged changes for {name}; upsert mode commits one writer's changes per commit",
                    parts.len()
                ),
            )
            .with_context("table", name.to_string()));
        }
        let kind = if parts.iter().any(|p| p.overwrite) {
            SnapshotKind::Overwrite
        } else {
            SnapshotKind::Append
        };
        let checkpoint = match recording {
            Recording::Checkpoint(_, checkpoint) => Some(checkpoint),
            _ => None,
        };
        if files.is_empty() && deletes.is_empty() && kind == SnapshotKind::Append && checkpoint.is_none() {
            continue;
        }
        let count = files.len();
        let mut commit = DataCommit::of_files(name, kind, files, spec_id).with_deletes(name, deletes);
        if let Some(checkpoint) = checkpoint {
            commit = commit.with_checkpoint(name, checkpoint.clone());
        }
        if let Some(loads) = &loads {
            commit
                .summary
                .insert(crate::loads::LOADED_FILES_KEY.to_string(), loads.clone());
        }
        let outcome = commit_data(catalog, &ident, &commit, retry).await?;
        out.push(StagedCommit {
            table: name.to_string(),
            files: count,
            outcome,
        });
    }
    Ok(out)
}

/// Commits the staged files of every writer of one write: Iceberg's [`Committer`].
#[derive(Clone, Debug)]
pub struct IcebergCommitter {
    catalog: IcebergCatalog,
    retry: RetryPolicy,
}

impl IcebergCommitter {
    /// Connects to the catalog the writers of `options` wrote through.
    pub async fn connect(options: &IcebergSinkOptions) -> Result<IcebergCommitter> {
        Ok(IcebergCommitter {
            catalog: IcebergCatalog::connect_with_retry(options.catalog(), options.retry()).await?,
            retry: options.retry().clone(),
        })
    }
}

#[async_trait]
impl Committer for IcebergCommitter {
    type Committable = StagedFiles;

    async fn commit(&self, committables: Vec<StagedFiles>) -> Result<WriteResult> {
        self.commit_recording(&committables, Recording::Nothing).await
    }

    /// Records the files in each snapshot's summary, as the sink does.
    async fn commit_loaded(
        &self,
        committables: Vec<StagedFiles>,
        files: &[LoadedFile],
    ) -> Result<WriteResult> {
        self.commit_recording(&committables, Recording::Loads(files))
            .await
    }

    /// Commits the files and the checkpoint's offsets in one snapshot of `destination`.
    async fn commit_checkpoint(
        &self,
        committables: Vec<StagedFiles>,
        destination: &str,
        checkpoint: &Checkpoint,
    ) -> Result<WriteResult> {
        self.commit_recording(&committables, Recording::Checkpoint(destination, checkpoint))
            .await
    }
}

impl IcebergCommitter {
    async fn commit_recording(
        &self,
        committables: &[StagedFiles],
        recording: Recording<'_>,
    ) -> Result<WriteResult> {
        let mut result = WriteResult::default();
        for commit in commit_staged(&self.catalog, committables, &self.retry, recording).await? {
            let stats = result.destinations.entry(commit.table).or_default();
            if let CommitOutcome::Committed { .. } = commit.outcome {
                stats.commits += 1;
            }
        }
        Ok(result)
    }
}

/// The files `list` gives of each part, read back.
fn read_files(
    table: &Table,
    spec_id: i32,
    parts: &[&StagedFiles],
    list: impl Fn(&StagedFiles) -> &Vec<String>,
) -> Result<Vec<DataFile>> {
    let metadata = table.metadata();
    let schema = metadata.current_schema();
    let partition_type = metadata
        .partition_spec_by_id(spec_id)
        .ok_or_else(|| Error::not_found("partition spec", spec_id.to_string()))?
        .partition_type(schema)
        .doing("typing the partition")?;
    let mut files = Vec::new();
    for part in parts {
        for json in list(part) {
            files.push(
                deserialize_data_file_from_json(json, spec_id, &partition_type, schema)
                    .doing(format_args!("reading a staged data file of {}", part.table))?,
            );
        }
    }
    Ok(files)
}
