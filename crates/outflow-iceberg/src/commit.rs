//! Snapshots and schema changes, committed through the catalog's atomic commit path.
//!
//! Every data commit carries a commit id in its snapshot summary (`outflow.commit-id`),
//! derived from what is being committed. Before each attempt the table is reloaded and its
//! history searched for that id, so a commit retried after a lost acknowledgement (or a
//! rerun of the same input) never appends twice. A commit that loses a race to another
//! writer is rebuilt on the new table state and retried with backoff.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use iceberg::spec::{
    DataFile, FormatVersion, MAIN_BRANCH, ManifestContentType, ManifestFile, ManifestListWriter,
    ManifestWriter, ManifestWriterBuilder, Operation, PartitionSpecRef, SchemaRef, Snapshot, SnapshotRef,
    SnapshotReference, SnapshotRetention, SnapshotSummaryCollector, Summary,
};
use iceberg::table::Table;
use iceberg::{TableIdent, TableRequirement, TableUpdate};
use outflow_core::checkpoint::offsets_key;
use outflow_core::schema::{NameMapping, Schema};
use outflow_core::{Checkpoint, Error, ErrorKind, Result, RetryPolicy};

use crate::client::IcebergCatalog;
use crate::client::IcebergResultExt;
use crate::manifest::AppendManifest;
use crate::manifest::merge::{GroupPlan, MergeContext, MergeSettings, merge};
use crate::offsets::stored_offsets;
use crate::schema::{table_name, to_iceberg_schema};

/// The snapshot summary key that carries Outflow's commit id.
pub const COMMIT_ID_KEY: &str = "outflow.commit-id";

/// What a data commit does to the table's rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotKind {
    /// Add the files to the rows already there.
    Append,
    /// Replace every row with the files' rows.
    Overwrite,
}

/// A data commit: files to register, and how.
#[derive(Clone, Debug)]
pub struct DataCommit {
    /// Append or overwrite.
    pub kind: SnapshotKind,
    /// The data files.
    pub files: Vec<DataFile>,
    /// Equality delete files (upsert mode): they delete the rows of earlier commits whose
    /// key they hold, and not those of `files`, which share their sequence number.
    pub deletes: Vec<DataFile>,
    /// The commit id recorded in the snapshot summary.
    pub commit_id: String,
    /// At most this many files per manifest (0: one manifest).
    pub files_per_manifest: usize,
    /// The partition spec the files were written for.
    pub partition_spec_id: i32,
    /// More snapshot summary properties, such as the record of the source files the rows
    /// came from ([`crate::loads`]).
    pub summary: BTreeMap<String, String>,
    /// The streaming checkpoint this commit carries ([`crate::offsets`]): its offsets go
    /// into the summary, and each attempt first checks that the table is where the
    /// checkpoint began.
    pub checkpoint: Option<Checkpoint>,
}

impl DataCommit {
    /// A commit of `files` to `table` whose commit id is derived from the table, the kind
    /// and every file (path and row count), in any order: the same files make the same id.
    pub fn of_files(
        table: &str,
        kind: SnapshotKind,
        files: Vec<DataFile>,
        partition_spec_id: i32,
    ) -> DataCommit {
        let mut commit = DataCommit {
            kind,
            commit_id: String::new(),
            files,
            deletes: Vec::new(),
            files_per_manifest: 0,
            partition_spec_id,
            summary: BTreeMap::new(),
            checkpoint: None,
        };
        commit.derive_id(table);
        commit
    }

    /// This commit with equality delete files as well; its id covers them.
    pub fn with_deletes(mut self, table: &str, deletes: Vec<DataFile>) -> DataCommit {
        self.deletes = deletes;
        self.derive_id(table);
        self
    }

    /// This commit carrying `checkpoint`: its id covers the checkpoint's offsets too, so
    /// a checkpoint that staged no files still makes a commit of its own.
    pub fn with_checkpoint(mut self, table: &str, checkpoint: Checkpoint) -> DataCommit {
        self.summary
            .insert(offsets_key(&checkpoint.job), checkpoint.ends().encode());
        self.checkpoint = Some(checkpoint);
        self.derive_id(table);
        self
    }

    /// The commit id from the table, the checkpoint (else the kind) and every file (path
    /// and row count), in any order: the same files make the same id.
    fn derive_id(&mut self, table: &str) {
        let prefix = match (&self.checkpoint, self.kind) {
            (Some(checkpoint), _) => format!("{}:{table}", checkpoint.id_text()),
            (None, SnapshotKind::Append) => format!("append:{table}"),
            (None, SnapshotKind::Overwrite) => format!("overwrite:{table}"),
        };
        self.commit_id = commit_id_for(
            &prefix,
            self.files
                .iter()
                .chain(&self.deletes)
                .map(|f| format!("{}:{}", f.file_path(), f.record_count())),
        );
    }
}

/// How a data commit ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitOutcome {
    /// A new snapshot was committed.
    Committed {
        /// The new snapshot.
        snapshot_id: i64,
    },
    /// A snapshot with the same commit id was already in the table; nothing was done.
    AlreadyCommitted {
        /// The earlier snapshot.
        snapshot_id: i64,
    },
}

impl CommitOutcome {
    /// The snapshot that holds the commit.
    pub fn snapshot_id(self) -> i64 {
        match self {
            CommitOutcome::Committed { snapshot_id } | CommitOutcome::AlreadyCommitted { snapshot_id } => {
                snapshot_id
            }
        }
    }
}

/// The main branch's history, newest first: the current snapshot and its ancestors.
pub fn main_history(table: &Table) -> impl Iterator<Item = &SnapshotRef> {
    let metadata = table.metadata();
    std::iter::successors(metadata.current_snapshot(), |s| {
        s.parent_snapshot_id().and_then(|id| metadata.snapshot_by_id(id))
    })
}

/// The manifests of `table`'s current snapshot (none without one).
pub(crate) async fn current_manifests(table: &Table) -> Result<Vec<ManifestFile>> {
    let Some(current) = table.metadata().current_snapshot() else {
        return Ok(Vec::new());
    };
    Ok(table
        .manifest_list_reader(current)
        .load()
        .await
        .doing(format_args!(
            "reading the manifest list of {}",
            table_name(table.identifier())
        ))?
        .consume_entries()
        .into_iter()
        .collect())
}

/// The live data files of `table`'s current snapshot, each with the id of the partition
/// spec its manifest was written for.
pub(crate) async fn live_data_files(table: &Table) -> Result<Vec<(i32, DataFile)>> {
    let mut out = Vec::new();
    for manifest in current_manifests(table).await? {
        if manifest.content != ManifestContentType::Data {
            continue;
        }
        let loaded = manifest
            .load_manifest(table.file_io())
            .await
            .doing(format_args!("reading manifest {}", manifest.manifest_path))?;
        out.extend(
            loaded
                .entries()
                .iter()
                .filter(|e| e.is_alive())
                .map(|e| (manifest.partition_spec_id, e.data_file().clone())),
        );
    }
    Ok(out)
}

/// The snapshot of the main branch's history that carries `commit_id`, if any.
pub fn find_commit(table: &Table, commit_id: &str) -> Option<i64> {
    main_history(table)
        .find(|s| {
            s.summary()
                .additional_properties
                .get(COMMIT_ID_KEY)
                .map(String::as_str)
                == Some(commit_id)
        })
        .map(|s| s.snapshot_id())
}

/// A deterministic commit id for what a commit registers: the same files (paths and row
/// counts) under the same operation give the same id.
pub fn commit_id_for(prefix: &str, parts: impl IntoIterator<Item = String>) -> String {
    let mut parts: Vec<String> = parts.into_iter().collect();
    parts.sort();
    let name = format!("{prefix}\n{}", parts.join("\n"));
    uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_URL, name.as_bytes()).to_string()
}

/// Commits `commit` to the table, retrying lost races; see the module docs.
pub async fn commit_data(
    catalog: &IcebergCatalog,
    ident: &TableIdent,
    commit: &DataCommit,
    retry: &RetryPolicy,
) -> Result<CommitOutcome> {
    let name = &table_name(ident);
    let what = &format!("commit to {name}");
    let mut attempts = 0;
    // Each attempt ends by the deadline, so the whole commit does.
    retry
        .retry_within(what, retry.deadline(), |limit| {
            attempts += 1;
            let attempt = attempts;
            catalog.attempt_within(what, limit, async move {
                let table = catalog.require_table(ident).await?;
                if let Some(snapshot_id) = find_commit(&table, &commit.commit_id) {
                    tracing::info!(table = %name, commit_id = %commit.commit_id, snapshot_id, "already committed");
                    return Ok(CommitOutcome::AlreadyCommitted { snapshot_id });
                }
                // Checked on the metadata this attempt commits on top of: the catalog's
                // commit requires the same current snapshot, so no other commit can come
                // between the check and this one.
                if let Some(checkpoint) = &commit.checkpoint {
                    checkpoint.check_against(&stored_offsets(&table, &checkpoint.job)?, name)?;
                }
                commit_attempt(catalog, &table, commit, attempt).await
            })
        })
        .await
}

/// One attempt at committing `commit` on top of `table` as loaded: a new snapshot, or the
/// catalog's error (a conflict when another writer committed first; the manifests written
/// for the attempt are deleted then, since nothing can reference them).
pub(crate) async fn commit_attempt(
    catalog: &IcebergCatalog,
    table: &Table,
    commit: &DataCommit,
    attempt: u32,
) -> Result<CommitOutcome> {
    let name = table_name(table.identifier());
    let built = build_snapshot(table, commit).await?;
    let snapshot_id = built.snapshot_id;
    match catalog.commit(table, built.requirements, built.updates).await {
        Ok(()) => {
            tracing::info!(table = %name, snapshot_id, attempt, files = commit.files.len(), "committed");
            Ok(CommitOutcome::Committed { snapshot_id })
        }
        Err(err) => {
            if err.kind() == ErrorKind::Conflict {
                for path in &built.written {
                    let _ = table.file_io().delete(path).await;
                }
            }
            Err(err)
        }
    }
}

/// A snapshot ready to commit.
pub(crate) struct BuiltSnapshot {
    pub(crate) snapshot_id: i64,
    pub(crate) requirements: Vec<TableRequirement>,
    pub(crate) updates: Vec<TableUpdate>,
    /// Manifest and manifest list files written for it.
    pub(crate) written: Vec<String>,
}

async fn build_snapshot(table: &Table, commit: &DataCommit) -> Result<BuiltSnapshot> {
    let name = table_name(table.identifier());
    let metadata = table.metadata();
    let io = table.file_io();
    let version = metadata.format_version();
    if version == FormatVersion::V3 {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!("table {name} is format v3; Outflow writes v1 and v2 tables"),
        ));
    }
    let schema: SchemaRef = metadata.current_schema().clone();
    let spec: PartitionSpecRef = metadata.default_partition_spec().clone();
    if spec.spec_id() != commit.partition_spec_id {
        // The files' partition values follow the old spec: they cannot be registered.
        return Err(Error::new(
            ErrorKind::Conflict,
            format!(
                "the partition spec of {name} changed from {} to {} while the files were written",
                commit.partition_spec_id,
                spec.spec_id()
            ),
        )
        .with_retryable(false));
    }
    let snapshot_id = new_snapshot_id(metadata);
    let attempt = uuid::Uuid::new_v4();
    let dir = format!("{}/metadata", metadata.location().trim_end_matches('/'));
    let parent = metadata.current_snapshot().cloned();
    let mut summary = SnapshotSummaryCollector::default();
    let mut manifests: Vec<ManifestFile> = Vec::new();
    let mut written = Vec::new();
    let new_manifest = |n: usize,
                        spec: &PartitionSpecRef,
                        content: ManifestContentType|
     -> Result<(String, ManifestWriter)> {
        let path = format!("{dir}/{attempt}-m{n}.avro");
        let output = io
            .new_output(&path)
            .doing(format_args!("writing manifest {path}"))?;
        let builder =
            ManifestWriterBuilder::new(output, Some(snapshot_id), schema.clone(), spec.as_ref().clone());
        let writer = match (version, content) {
            (FormatVersion::V1, _) => builder.build_v1(),
            (_, ManifestContentType::Data) => builder.build_v2_data(),
            (_, ManifestContentType::Deletes) => builder.build_v2_deletes(),
        };
        Ok((path, writer))
    };

    // New files, in manifests of at most `files_per_manifest` files.
    let chunk = if commit.files_per_manifest == 0 {
        commit.files.len().max(1)
    } else {
        commit.files_per_manifest
    };
    let mut count = 0;
    for files in commit.files.chunks(chunk) {
        for file in files {
            summary.add_file(file, schema.clone(), spec.clone());
        }
        // Outflow's own writer where it covers the spec (see crate::manifest), else
        // iceberg-rust's.
        if let Some(mut manifest) = AppendManifest::new(version, snapshot_id, &schema, &spec)? {
            let path = format!("{dir}/{attempt}-m{count}.avro");
            count += 1;
            for file in files {
                manifest.add_file(file)?;
            }
            let (bytes, entry) = manifest.finish(path.clone());
            let output = io
                .new_output(&path)
                .doing(format_args!("writing manifest {path}"))?;
            let wrote = output.write(bytes.into()).await;
            wrote.doing(format_args!("writing manifest {path}"))?;
            manifests.push(entry);
            written.push(path);
            continue;
        }
        let (path, writer) = new_manifest(count, &spec, ManifestContentType::Data)?;
        count += 1;
        manifests.push(write_new_manifest(writer, &path, files).await?);
        written.push(path);
    }

    // Equality deletes, in a delete manifest of their own (format v2 and later).
    if !commit.deletes.is_empty() {
        if version == FormatVersion::V1 {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!("table {name} is format v1, which has no delete files; upsert mode needs v2"),
            ));
        }
        for file in &commit.deletes {
            summary.add_file(file, schema.clone(), spec.clone());
        }
        let (path, writer) = new_manifest(count, &spec, ManifestContentType::Deletes)?;
        count += 1;
        manifests.push(write_new_manifest(writer, &path, &commit.deletes).await?);
        written.push(path);
    }

    // Existing manifests: carried over by an append, emptied by an overwrite.
    let mut removed_records = 0u64;
    if let Some(parent) = &parent {
        let list = table
            .manifest_list_reader(parent)
            .load()
            .await
            .doing(format_args!("reading the manifest list of {name}"))?;
        for manifest in list.entries() {
            match commit.kind {
                SnapshotKind::Append => manifests.push(manifest.clone()),
                SnapshotKind::Overwrite => {
                    let old_spec = metadata
                        .partition_spec_by_id(manifest.partition_spec_id)
                        .cloned()
                        .ok_or_else(|| {
                            Error::internal(format!(
                                "{name}: unknown partition spec {}",
                                manifest.partition_spec_id
                            ))
                        })?;
                    let loaded = manifest
                        .load_manifest(io)
                        .await
                        .doing(format_args!("reading manifest {}", manifest.manifest_path))?;
                    let alive: Vec<_> = loaded
                        .entries()
                        .iter()
                        .filter(|e| e.is_alive())
                        .cloned()
                        .collect();
                    if alive.is_empty() {
                        continue;
                    }
                    // Keep the removed files as DELETED entries, as Java does, so that
                    // incremental readers and snapshot expiry see what went away.
                    let (path, mut writer) = new_manifest(count, &old_spec, manifest.content)?;
                    count += 1;
                    for entry in alive {
                        if manifest.content == ManifestContentType::Data {
                            summary.remove_file(entry.data_file(), schema.clone(), old_spec.clone());
                            removed_records += entry.data_file().record_count();
                        }
                        let sequence = entry.sequence_number().unwrap_or(0);
                        writer
                            .add_delete_file(entry.data_file().clone(), sequence, entry.file_sequence_number)
                            .doing("marking a replaced file deleted")?;
                    }
                    manifests.push(
                        writer
                            .write_manifest_file()
                            .await
                            .doing(format_args!("writing manifest {path}"))?,
                    );
                    written.push(path);
                }
            }
        }
    }

    // Appends merge small manifests by the table's merge properties (crate::manifest::merge).
    if commit.kind == SnapshotKind::Append {
        let settings =
            MergeSettings::of(metadata.properties()).map_err(|e| e.with_context("table", name.clone()))?;
        let mut path = || {
            count += 1;
            format!("{dir}/{attempt}-m{}.avro", count - 1)
        };
        let context = MergeContext {
            io,
            version,
            schema: &schema,
            spec: &spec,
            snapshot_id,
            path: &mut path,
        };
        let plan = GroupPlan::of(&manifests, spec.spec_id(), &settings);
        let merged = merge(context, manifests, &plan).await?;
        manifests = merged.manifests;
        written.extend(merged.written);
        for replaced in merged.replaced {
            // Written for this snapshot a moment ago, and merged into another: unused.
            let _ = io.delete(&replaced).await;
            written.retain(|w| *w != replaced);
        }
    }

    let mut properties = summary.build();
    totals(&mut properties, parent.as_deref(), commit, removed_records);
    properties.extend(commit.summary.clone());
    properties.insert(COMMIT_ID_KEY.to_string(), commit.commit_id.clone());
    // A commit that deletes rows is an overwrite, as Java's row deltas are.
    let operation = match commit.kind {
        SnapshotKind::Append if commit.deletes.is_empty() => Operation::Append,
        SnapshotKind::Append | SnapshotKind::Overwrite => Operation::Overwrite,
    };
    finish_snapshot(
        table,
        NewSnapshot {
            snapshot_id,
            attempt,
            manifests,
            operation,
            properties,
        },
        written,
    )
    .await
}

/// Adds `files` to `writer`, a new manifest at `path`, as added in its snapshot, and
/// writes it.
async fn write_new_manifest(
    mut writer: ManifestWriter,
    path: &str,
    files: &[DataFile],
) -> Result<ManifestFile> {
    for file in files {
        writer
            .add_file(file.clone(), -1)
            .doing(format_args!("adding {} to manifest {path}", file.file_path()))?;
    }
    writer
        .write_manifest_file()
        .await
        .doing(format_args!("writing manifest {path}"))
}

/// An unused snapshot id for `metadata`'s table.
pub(crate) fn new_snapshot_id(metadata: &iceberg::spec::TableMetadata) -> i64 {
    loop {
        let (a, b) = uuid::Uuid::new_v4().as_u64_pair();
        let id = ((a ^ b) & (i64::MAX as u64)) as i64;
        if id != 0 && metadata.snapshot_by_id(id).is_none() {
            return id;
        }
    }
}

/// A snapshot on top of the table's current one, its manifests written.
pub(crate) struct NewSnapshot {
    pub(crate) snapshot_id: i64,
    /// Names this attempt's files.
    pub(crate) attempt: uuid::Uuid,
    pub(crate) manifests: Vec<ManifestFile>,
    pub(crate) operation: Operation,
    pub(crate) properties: HashMap<String, String>,
}

/// Writes `new`'s manifest list and returns the commit that makes it the main branch's
/// snapshot, on condition that the branch, the table and its default spec are unchanged.
/// `written` (the files written for it so far) gains the manifest list.
pub(crate) async fn finish_snapshot(
    table: &Table,
    new: NewSnapshot,
    mut written: Vec<String>,
) -> Result<BuiltSnapshot> {
    let metadata = table.metadata();
    let io = table.file_io();
    let version = metadata.format_version();
    let spec = metadata.default_partition_spec();
    let sequence_number = metadata.next_sequence_number();
    let parent = metadata.current_snapshot();
    let dir = format!("{}/metadata", metadata.location().trim_end_matches('/'));
    let NewSnapshot {
        snapshot_id,
        attempt,
        manifests,
        operation,
        properties,
    } = new;
    let list_path = format!("{dir}/snap-{snapshot_id}-1-{attempt}.avro");
    let list_output = io
        .new_output(&list_path)
        .doing(format_args!("writing {list_path}"))?;
    let list_file = list_output
        .writer()
        .await
        .doing(format_args!("writing {list_path}"))?;
    let parent_id = parent.as_ref().map(|p| p.snapshot_id());
    let mut list = match version {
        FormatVersion::V1 => ManifestListWriter::v1(list_file, snapshot_id, parent_id),
        _ => ManifestListWriter::v2(list_file, snapshot_id, parent_id, sequence_number),
    };
    list.add_manifests(manifests.into_iter())
        .doing("writing the manifest list")?;
    list.close().await.doing(format_args!("writing {list_path}"))?;
    written.push(list_path.clone());

    let snapshot = Snapshot::builder()
        .with_snapshot_id(snapshot_id)
        .with_parent_snapshot_id(parent_id)
        .with_sequence_number(sequence_number)
        .with_timestamp_ms(chrono::Utc::now().timestamp_millis())
        .with_manifest_list(list_path)
        .with_summary(Summary {
            operation,
            additional_properties: properties,
        })
        .with_schema_id(metadata.current_schema_id());
    let requirements = vec![
        TableRequirement::UuidMatch {
            uuid: metadata.uuid(),
        },
        TableRequirement::RefSnapshotIdMatch {
            r#ref: MAIN_BRANCH.to_string(),
            snapshot_id: parent_id,
        },
        TableRequirement::DefaultSpecIdMatch {
            default_spec_id: spec.spec_id(),
        },
    ];
    let updates = vec![
        TableUpdate::AddSnapshot {
            snapshot: snapshot.build(),
        },
        TableUpdate::SetSnapshotRef {
            ref_name: MAIN_BRANCH.to_string(),
            reference: SnapshotReference::new(snapshot_id, SnapshotRetention::branch(None, None, None)),
        },
    ];
    Ok(BuiltSnapshot {
        snapshot_id,
        requirements,
        updates,
        written,
    })
}

/// Fills the `total-*` summary keys from the parent's totals and this commit.
fn totals(
    properties: &mut HashMap<String, String>,
    parent: Option<&Snapshot>,
    commit: &DataCommit,
    removed_records: u64,
) {
    let added_records: u64 = commit.files.iter().map(|f| f.record_count()).sum();
    let added_size: u64 = commit
        .files
        .iter()
        .chain(&commit.deletes)
        .map(|f| f.file_size_in_bytes())
        .sum();
    let added_files = commit.files.len() as u64;
    let added_deletes = [
        ("total-delete-files", commit.deletes.len() as u64),
        ("total-position-deletes", 0),
        (
            "total-equality-deletes",
            commit.deletes.iter().map(|f| f.record_count()).sum(),
        ),
    ];
    let parent_total = |key: &str| -> Option<u64> {
        match parent {
            None => Some(0),
            Some(p) => p
                .summary()
                .additional_properties
                .get(key)
                .and_then(|v| v.parse().ok()),
        }
    };
    let mut set = |key: &str, value: Option<u64>| {
        if let Some(v) = value {
            properties.insert(key.to_string(), v.to_string());
        }
    };
    match commit.kind {
        SnapshotKind::Append => {
            set(
                "total-records",
                parent_total("total-records").map(|t| t + added_records),
            );
            set(
                "total-files-size",
                parent_total("total-files-size").map(|t| t + added_size),
            );
            set(
                "total-data-files",
                parent_total("total-data-files").map(|t| t + added_files),
            );
            for (key, added) in added_deletes {
                set(key, parent_total(key).map(|t| t + added));
            }
        }
        SnapshotKind::Overwrite => {
            let _ = removed_records;
            set("total-records", Some(added_records));
            set("total-files-size", Some(added_size));
            set("total-data-files", Some(added_files));
            for (key, added) in added_deletes {
                set(key, Some(added));
            }
        }
    }
}

/// Commits a new current schema (and the name mapping that goes with it) to `table`. A lost
/// race is a `Conflict`: the caller reloads, re-plans and tries again.
pub async fn commit_schema(
    catalog: &IcebergCatalog,
    table: &Table,
    schema: &Schema,
    name_mapping: Option<&NameMapping>,
) -> Result<()> {
    let metadata = table.metadata();
    let next_id = metadata.schemas_iter().map(|s| s.schema_id()).max().unwrap_or(0) + 1;
    let mut iceberg_schema = to_iceberg_schema(schema, next_id)?;
    // Outflow's schema model has no identifier fields: the table's carry over (field ids
    // do not change), so an evolved table keeps the key upsert mode reads.
    let identifier: Vec<i32> = metadata.current_schema().identifier_field_ids().collect();
    if !identifier.is_empty() {
        iceberg_schema = iceberg_schema
            .into_builder()
            .with_identifier_field_ids(identifier)
            .build()
            .map_err(|e| {
                Error::new(
                    ErrorKind::SchemaIncompatible,
                    format!(
                        "{}: the new schema cannot keep the table's identifier fields: {}",
                        table_name(table.identifier()),
                        e.message()
                    ),
                )
            })?;
    }
    let requirements = vec![
        TableRequirement::UuidMatch {
            uuid: metadata.uuid(),
        },
        TableRequirement::CurrentSchemaIdMatch {
            current_schema_id: metadata.current_schema_id(),
        },
        TableRequirement::LastAssignedFieldIdMatch {
            last_assigned_field_id: metadata.last_column_id(),
        },
    ];
    let mut updates = vec![
        TableUpdate::AddSchema {
            schema: iceberg_schema,
        },
        TableUpdate::SetCurrentSchema { schema_id: -1 },
    ];
    if let Some(mapping) = name_mapping {
        updates.push(TableUpdate::SetProperties {
            updates: HashMap::from([(NameMapping::PROPERTY.to_string(), mapping.to_json())]),
        });
    }
    catalog.commit(table, requirements, updates).await
}

/// The table's name mapping, if it has one.
pub fn name_mapping(table: &Table) -> Result<Option<NameMapping>> {
    table
        .metadata()
        .properties()
        .get(NameMapping::PROPERTY)
        .map(|json| NameMapping::from_json(json))
        .transpose()
}

/// The name mapping to store after the schema becomes `schema`: the table's current one
/// brought up to date, or a new one when `create` is set and the table has none.
pub fn updated_name_mapping(table: &Table, schema: &Schema, create: bool) -> Result<Option<NameMapping>> {
    Ok(match name_mapping(table)? {
        Some(existing) => Some(existing.updated_with(schema)),
        None if create => Some(NameMapping::from_schema(schema)),
        None => None,
    })
}

/// Shared handle to a table's schema in Outflow's model.
pub fn current_schema(table: &Table) -> Arc<Schema> {
    Arc::new(crate::schema::from_iceberg_schema(
        table.metadata().current_schema(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_ids_ignore_order_and_differ_by_content() {
        let a = commit_id_for("append", ["f1:10".to_string(), "f2:3".to_string()]);
        let b = commit_id_for("append", ["f2:3".to_string(), "f1:10".to_string()]);
        assert_eq!(a, b);
        assert_ne!(a, commit_id_for("append", ["f1:10".to_string()]));
        assert_ne!(
            a,
            commit_id_for("overwrite", ["f1:10".to_string(), "f2:3".to_string()])
        );
    }
}
