//! [`rewrite_manifests`] merges the small data manifests of the table's current partition
//! spec into manifests of about the target size, in one `replace` snapshot: the same files,
//! the same rows, fewer manifests for readers to open. It packs them as appends merge
//! ([`crate::manifest::merge`]), without the minimum count, so every bin of two or more
//! manifests becomes one. A commit that loses a race to another writer is planned again on
//! the new table state.

use std::collections::HashMap;

use iceberg::TableIdent;
use iceberg::spec::Operation;
use outflow_core::{Error, Result, RetryPolicy};
use serde::Serialize;

use crate::client::IcebergCatalog;
use crate::commit::{NewSnapshot, current_manifests, finish_snapshot, new_snapshot_id};
use crate::manifest::merge::{GroupPlan, MergeContext, MergeSettings, TARGET_SIZE_BYTES, merge};
use crate::schema::{parse_table_ident, table_name};

/// What [`rewrite_manifests`] does.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RewriteManifestsOptions {
    /// A merged manifest's size limit in bytes; default: the table's
    /// `commit.manifest.target-size-bytes` (8 MiB when unset).
    pub target_bytes: Option<i64>,
    /// Plan and report, commit nothing.
    pub dry_run: bool,
}

/// What [`rewrite_manifests`] did (or, in a dry run, would do).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RewriteManifestsReport {
    /// The table.
    pub table: String,
    /// Data manifests of the current spec before.
    pub manifests_before: usize,
    /// Data manifests of the current spec after.
    pub manifests_after: usize,
    /// Manifests merged into others.
    pub manifests_replaced: usize,
    /// The new snapshot; none in a dry run or when there was nothing to merge.
    pub snapshot_id: Option<i64>,
    /// Whether this was a dry run.
    pub dry_run: bool,
}

/// Rewrites `table`'s small data manifests into fewer; see the module docs.
pub async fn rewrite_manifests(
    catalog: &IcebergCatalog,
    table: &str,
    options: &RewriteManifestsOptions,
    retry: &RetryPolicy,
) -> Result<RewriteManifestsReport> {
    let ident = parse_table_ident(table)?;
    let what = &format!("rewriting the manifests of {}", table_name(&ident));
    let ident = &ident;
    // Each attempt ends by the deadline, so the whole rewrite does; a lost race is retried.
    retry
        .retry_within(what, retry.deadline(), |limit| {
            catalog.attempt_within(what, limit, rewrite_once(catalog, ident, options))
        })
        .await
}

async fn rewrite_once(
    catalog: &IcebergCatalog,
    ident: &TableIdent,
    options: &RewriteManifestsOptions,
) -> Result<RewriteManifestsReport> {
    let name = table_name(ident);
    let table = catalog.require_table(ident).await?;
    let metadata = table.metadata();
    let mut report = RewriteManifestsReport {
        table: name.clone(),
        dry_run: options.dry_run,
        ..Default::default()
    };
    let Some(current) = metadata.current_snapshot() else {
        return Ok(report);
    };
    let io = table.file_io();
    let manifests = current_manifests(&table).await?;
    let spec = metadata.default_partition_spec();
    let settings = MergeSettings {
        enabled: true,
        min_count: 2,
        target_bytes: match options.target_bytes {
            Some(bytes) => bytes,
            None => MergeSettings::of(metadata.properties())?.target_bytes,
        },
    };
    if settings.target_bytes <= 0 {
        return Err(Error::invalid_config(TARGET_SIZE_BYTES, "must be more than 0"));
    }
    let plan = GroupPlan::of(&manifests, spec.spec_id(), &settings);
    let replaced = plan.merged_away();
    report.manifests_before = plan.group.len();
    report.manifests_replaced = replaced;
    report.manifests_after = report.manifests_before - replaced;
    if options.dry_run || replaced == 0 {
        return Ok(report);
    }
    let snapshot_id = new_snapshot_id(metadata);
    let attempt = uuid::Uuid::new_v4();
    let dir = format!("{}/metadata", metadata.location().trim_end_matches('/'));
    let mut count = 0;
    let mut path = || {
        count += 1;
        format!("{dir}/{attempt}-r{}.avro", count - 1)
    };
    let context = MergeContext {
        io,
        version: metadata.format_version(),
        schema: metadata.current_schema(),
        spec,
        snapshot_id,
        path: &mut path,
    };
    let merged = merge(context, manifests, &plan).await?;
    // The rows do not change: the totals carry over.
    let mut properties: HashMap<String, String> = current
        .summary()
        .additional_properties
        .iter()
        .filter(|(k, _)| k.starts_with("total-"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    properties.insert("manifests-created".into(), merged.written.len().to_string());
    properties.insert(
        "manifests-replaced".into(),
        (replaced + merged.written.len()).to_string(),
    );
    let built = finish_snapshot(
        &table,
        NewSnapshot {
            snapshot_id,
            attempt,
            manifests: merged.manifests,
            operation: Operation::Replace,
            properties,
        },
        merged.written,
    )
    .await?;
    if let Err(err) = catalog.commit(&table, built.requirements, built.updates).await {
        // Nothing references what this attempt wrote.
        for path in &built.written {
            let _ = io.delete(path).await;
        }
        return Err(err);
    }
    tracing::info!(table = %name, snapshot_id, replaced, "rewrote manifests");
    report.snapshot_id = Some(snapshot_id);
    Ok(report)
}
