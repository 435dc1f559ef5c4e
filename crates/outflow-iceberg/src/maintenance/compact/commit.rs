//! The compaction's snapshot: the rewritten groups on top of the table as it is at commit.

use std::collections::{BTreeMap, HashMap, HashSet};

use iceberg::TableIdent;
use iceberg::spec::{
    DataFile, FormatVersion, Manifest, ManifestContentType, ManifestFile, ManifestWriterBuilder, Operation,
    PartitionSpecRef, SnapshotSummaryCollector,
};
use iceberg::table::Table;
use outflow_core::{Error, ErrorKind, Result};

use super::delete_files;
use crate::client::{IcebergCatalog, IcebergResultExt};
use crate::commit::{
    COMMIT_ID_KEY, NewSnapshot, current_manifests, finish_snapshot, main_history, new_snapshot_id,
};
use crate::manifest::AppendManifest;
use crate::schema::table_name;

/// A group read and written again, waiting for the commit.
pub(super) struct WrittenGroup {
    /// Its place in the plan.
    pub(super) index: usize,
    pub(super) spec_id: i32,
    pub(super) inputs: Vec<String>,
    pub(super) files: Vec<DataFile>,
}

/// How the commit went.
pub(super) struct Committed {
    pub(super) snapshot_id: Option<i64>,
    /// Groups given up, by plan index, with the reason.
    pub(super) given_up: HashMap<usize, String>,
    /// Live data files when the commit was made, before it.
    pub(super) live_at_commit: usize,
}

/// One attempt at committing `written` on top of the table as it is now; see the module
/// docs.
pub(super) async fn commit_once(
    catalog: &IcebergCatalog,
    ident: &TableIdent,
    planned_on: i64,
    written: &[WrittenGroup],
    commit_id: &str,
) -> Result<Committed> {
    let table = catalog.require_table(ident).await?;
    let name = table_name(ident);
    let metadata = table.metadata();
    let io = table.file_io();
    let current_id = metadata.current_snapshot().map(|s| s.snapshot_id());
    // Each data manifest of the current snapshot, read once: for what is live now, and for
    // the manifests to rewrite.
    let mut manifests: Vec<(ManifestFile, Option<Manifest>)> = Vec::new();
    for manifest in current_manifests(&table).await? {
        let loaded = match manifest.content {
            ManifestContentType::Data => Some(
                manifest
                    .load_manifest(io)
                    .await
                    .doing(format_args!("reading manifest {}", manifest.manifest_path))?,
            ),
            ManifestContentType::Deletes => None,
        };
        manifests.push((manifest, loaded));
    }

    // What changed since the plan.
    let mut given_up = HashMap::new();
    let live: HashSet<String> = manifests
        .iter()
        .filter_map(|(_, loaded)| loaded.as_ref())
        .flat_map(|loaded| loaded.entries().iter().filter(|e| e.is_alive()))
        .map(|e| e.file_path().to_string())
        .collect();
    let live_at_commit = live.len();
    if current_id != Some(planned_on) {
        let since: Vec<_> = main_history(&table)
            .take_while(|s| s.snapshot_id() != planned_on)
            .collect();
        if let Some(found) = since.iter().find(|s| {
            s.summary()
                .additional_properties
                .get(COMMIT_ID_KEY)
                .map(String::as_str)
                == Some(commit_id)
        }) {
            return Ok(Committed {
                snapshot_id: Some(found.snapshot_id()),
                given_up,
                live_at_commit,
            });
        }
        let deletes_added = since.iter().any(|s| {
            let added = |key: &str| {
                s.summary()
                    .additional_properties
                    .get(key)
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            added("added-delete-files") > 0
                || added("added-position-deletes") > 0
                || added("added-equality-deletes") > 0
        });
        for w in written {
            let reason = if deletes_added {
                Some("delete files were committed while the group was rewritten".to_string())
            } else {
                w.inputs
                    .iter()
                    .find(|p| !live.contains(p.as_str()))
                    .map(|p| format!("{p} was removed while the group was rewritten"))
            };
            if let Some(reason) = reason {
                given_up.insert(w.index, reason);
            }
        }
    }
    let kept: Vec<&WrittenGroup> = written
        .iter()
        .filter(|w| !given_up.contains_key(&w.index))
        .collect();
    if kept.is_empty() {
        return Ok(Committed {
            snapshot_id: None,
            given_up,
            live_at_commit,
        });
    }
    let replaced: HashSet<&str> = kept
        .iter()
        .flat_map(|w| w.inputs.iter().map(String::as_str))
        .collect();
    let schema = metadata.current_schema();
    let version = metadata.format_version();
    let snapshot_id = new_snapshot_id(metadata);
    let attempt = uuid::Uuid::new_v4();
    let dir = format!("{}/metadata", metadata.location().trim_end_matches('/'));
    let mut paths = Vec::new();
    let mut path = || {
        let p = format!("{dir}/{attempt}-c{}.avro", paths.len());
        paths.push(p.clone());
        p
    };
    let mut summary = SnapshotSummaryCollector::default();
    let mut out: Vec<ManifestFile> = Vec::new();
    let mut removed = (0u64, 0u64, 0u64);
    let mut failure = None;

    // The new files, one manifest per spec.
    let mut by_spec: BTreeMap<i32, Vec<&DataFile>> = BTreeMap::new();
    for w in &kept {
        by_spec.entry(w.spec_id).or_default().extend(w.files.iter());
    }
    for (spec_id, files) in by_spec {
        let spec = spec_of(&table, spec_id)?;
        for file in &files {
            summary.add_file(file, schema.clone(), spec.clone());
        }
        let manifest_path = path();
        let written = write_added(&table, snapshot_id, &spec, &files, &manifest_path).await;
        match written {
            Ok(manifest) => out.push(manifest),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    // The manifests that held rewritten files: those entries deleted, the others existing.
    if failure.is_none() {
        for (manifest, loaded) in manifests {
            let Some(loaded) = loaded else {
                out.push(manifest);
                continue;
            };
            if !loaded
                .entries()
                .iter()
                .any(|e| e.is_alive() && replaced.contains(e.file_path()))
            {
                out.push(manifest);
                continue;
            }
            let spec = spec_of(&table, manifest.partition_spec_id)?;
            let manifest_path = path();
            let rewritten = async {
                let output = io
                    .new_output(&manifest_path)
                    .doing(format_args!("writing manifest {manifest_path}"))?;
                let builder = ManifestWriterBuilder::new(
                    output,
                    Some(snapshot_id),
                    schema.clone(),
                    spec.as_ref().clone(),
                );
                let mut writer = match version {
                    FormatVersion::V1 => builder.build_v1(),
                    _ => builder.build_v2_data(),
                };
                for entry in loaded.entries().iter().filter(|e| e.is_alive()) {
                    let file = entry.data_file();
                    // Inherited from the manifest when it was read: present for every
                    // committed entry.
                    let (Some(sequence), Some(added_by)) = (entry.sequence_number(), entry.snapshot_id())
                    else {
                        return Err(Error::new(
                            ErrorKind::InvalidInput,
                            format!(
                                "{}: the entry for {} has no sequence number or snapshot",
                                manifest.manifest_path,
                                file.file_path()
                            ),
                        ));
                    };
                    if replaced.contains(file.file_path()) {
                        summary.remove_file(file, schema.clone(), spec.clone());
                        removed.0 += 1;
                        removed.1 += file.record_count();
                        removed.2 += file.file_size_in_bytes();
                        writer
                            .add_delete_file(file.clone(), sequence, entry.file_sequence_number)
                            .doing("marking a rewritten file deleted")?;
                    } else {
                        writer
                            .add_existing_file(file.clone(), added_by, sequence, entry.file_sequence_number)
                            .doing("carrying a file into a rewritten manifest")?;
                    }
                }
                writer
                    .write_manifest_file()
                    .await
                    .doing(format_args!("writing manifest {manifest_path}"))
            }
            .await;
            match rewritten {
                Ok(manifest) => out.push(manifest),
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
    }
    if let Some(e) = failure {
        delete_files(io, paths.iter().map(String::as_str)).await;
        return Err(e);
    }

    let added: Vec<&DataFile> = kept.iter().flat_map(|w| w.files.iter()).collect();
    let mut properties = summary.build();
    totals(
        &mut properties,
        metadata.current_snapshot().map(|s| s.summary()),
        (
            added.len() as u64,
            added.iter().map(|f| f.record_count()).sum(),
            added.iter().map(|f| f.file_size_in_bytes()).sum(),
        ),
        removed,
    );
    properties.insert(COMMIT_ID_KEY.to_string(), commit_id.to_string());
    let built = finish_snapshot(
        &table,
        NewSnapshot {
            snapshot_id,
            attempt,
            manifests: out,
            operation: Operation::Replace,
            properties,
        },
        paths,
    )
    .await?;
    if let Err(err) = catalog.commit(&table, built.requirements, built.updates).await {
        if err.kind() == ErrorKind::Conflict {
            delete_files(io, built.written.iter().map(String::as_str)).await;
        }
        return Err(err.with_context("table", name));
    }
    Ok(Committed {
        snapshot_id: Some(snapshot_id),
        given_up,
        live_at_commit,
    })
}

fn spec_of(table: &Table, spec_id: i32) -> Result<PartitionSpecRef> {
    table
        .metadata()
        .partition_spec_by_id(spec_id)
        .cloned()
        .ok_or_else(|| {
            Error::internal(format!(
                "{}: unknown partition spec {spec_id}",
                table_name(table.identifier())
            ))
        })
}

/// Writes a manifest of `files` added by snapshot `snapshot_id`: Outflow's writer where it
/// covers the spec, else iceberg-rust's.
async fn write_added(
    table: &Table,
    snapshot_id: i64,
    spec: &PartitionSpecRef,
    files: &[&DataFile],
    path: &str,
) -> Result<ManifestFile> {
    let metadata = table.metadata();
    let io = table.file_io();
    let schema = metadata.current_schema();
    let output = io
        .new_output(path)
        .doing(format_args!("writing manifest {path}"))?;
    if let Some(mut manifest) = AppendManifest::new(metadata.format_version(), snapshot_id, schema, spec)? {
        for file in files {
            manifest.add_file(file)?;
        }
        let (bytes, entry) = manifest.finish(path.to_string());
        let wrote = output.write(bytes.into()).await;
        wrote.doing(format_args!("writing manifest {path}"))?;
        return Ok(entry);
    }
    let builder =
        ManifestWriterBuilder::new(output, Some(snapshot_id), schema.clone(), spec.as_ref().clone());
    let mut writer = match metadata.format_version() {
        FormatVersion::V1 => builder.build_v1(),
        _ => builder.build_v2_data(),
    };
    for file in files {
        writer
            .add_file((*file).clone(), -1)
            .doing(format_args!("adding {} to a manifest", file.file_path()))?;
    }
    writer
        .write_manifest_file()
        .await
        .doing(format_args!("writing manifest {path}"))
}

/// Sets the `total-*` summary keys from the parent's and the (files, records, bytes) added
/// and removed; delete file totals carry over.
fn totals(
    properties: &mut HashMap<String, String>,
    parent: Option<&iceberg::spec::Summary>,
    added: (u64, u64, u64),
    removed: (u64, u64, u64),
) {
    let parent_total = |key: &str| -> Option<u64> {
        parent?
            .additional_properties
            .get(key)
            .and_then(|v| v.parse().ok())
    };
    for (key, add, remove) in [
        ("total-data-files", added.0, removed.0),
        ("total-records", added.1, removed.1),
        ("total-files-size", added.2, removed.2),
    ] {
        if let Some(total) = parent_total(key) {
            properties.insert(key.to_string(), (total + add).saturating_sub(remove).to_string());
        }
    }
    for key in [
        "total-delete-files",
        "total-position-deletes",
        "total-equality-deletes",
    ] {
        if let Some(total) = parent_total(key) {
            properties.insert(key.to_string(), total.to_string());
        }
    }
}
