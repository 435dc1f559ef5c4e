//! [`BigQueryPreparer`]: what preparing a destination would do (`outflow plan`), or doing it
//! ahead of the first row, sharing what it prepared with the sink it came from.

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use async_trait::async_trait;
use outflow_core::evolution::{EvolutionPlan, Verdict};
use outflow_core::schema::{InputSchema, Schema};
use outflow_core::{
    CreateDisposition, DestinationPlan, Error, ErrorKind, IncompatibleSchemaHandling, LoadedFiles, Offsets,
    PlannedAction, PrepareDestination, Result, TopicPartition, WriteDisposition,
};
use std::sync::Arc;

use crate::admin::plan_evolution;
use crate::changes;
use crate::loads::Ledger;
use crate::offsets::OffsetsLedger;
use crate::request::{align_names, shape_input};
use crate::schema::TableSchema;
use crate::schema::types::to_core;
use crate::sink::Shared;
use crate::table_ref::TableRef;

/// Prepares BigQuery tables for data: creates them, checks dispositions and makes the
/// schema updates the options allow, or says what it would do.
#[derive(Clone)]
pub struct BigQueryPreparer {
    shared: Arc<Shared>,
}

impl BigQueryPreparer {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        BigQueryPreparer { shared }
    }
}

impl std::fmt::Debug for BigQueryPreparer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BigQueryPreparer").finish_non_exhaustive()
    }
}

/// An input schema from an Arrow schema alone: null counts are unknown, so a column the
/// input declares nullable may hold nulls.
fn declared_input(
    schema: &SchemaRef,
    table: Option<&TableSchema>,
    drop_unknown: bool,
) -> Result<InputSchema> {
    let empty = RecordBatch::new_empty(schema.clone());
    let mut batch = shape_input(&empty)?;
    if let Some(t) = table {
        batch = align_names(&batch, t, drop_unknown)?;
    }
    let schema = Schema::from_arrow(batch.schema().as_ref())?;
    Ok(InputSchema::new(schema))
}

/// The columns an unverifiable input leaves in doubt: required in the table, nullable in
/// the input. Which rows hold nulls only the data says, and the sink checks each batch.
fn unverifiable_columns(evolution: &EvolutionPlan) -> Vec<&str> {
    let mut columns: Vec<&str> = evolution
        .verdicts
        .iter()
        .filter(|v| v.verdict == Verdict::Unverifiable)
        .flat_map(|v| v.reasons.iter().map(|r| r.path.as_str()))
        .collect();
    columns.sort_unstable();
    columns.dedup();
    columns
}

impl BigQueryPreparer {
    fn details(&self, t: &TableRef) -> Vec<String> {
        let o = &self.shared.options;
        let mut out = Vec::new();
        match o.write_disposition {
            WriteDisposition::Truncate => out.push(format!(
                "write_disposition truncate: rows are staged in a copy of {t} and swapped in at each flush \
                 by one copy job (WRITE_TRUNCATE)"
            )),
            WriteDisposition::Empty => out.push(format!("write_disposition empty: {t} must hold no rows")),
            WriteDisposition::Append => {}
        }
        out
    }

    fn creation_details(&self) -> Vec<String> {
        let o = &self.shared.options;
        let mut out = Vec::new();
        if let Some(schema) = &o.schema {
            out.push(format!(
                "create with {} columns from the configured schema",
                schema.fields.len()
            ));
        }
        if let Some(p) = &o.time_partitioning {
            out.push(format!("time partitioning {p}"));
        }
        if !o.clustering.is_empty() {
            out.push(format!("clustering by {}", o.clustering.join(", ")));
        }
        out
    }

    /// What preparing `destination` does (`apply`) or would do, and the error it would
    /// hit, if any, with its kind.
    async fn plan_or_prepare(
        &self,
        destination: &str,
        schema: &SchemaRef,
        apply: bool,
    ) -> Result<(DestinationPlan, Option<Error>)> {
        let shared = &self.shared;
        let o = &shared.options;
        let t = match shared.resolve(destination) {
            Ok(t) => t,
            Err(e) => return Ok((DestinationPlan::failed(destination, &e), Some(e))),
        };
        let name = t.to_string();
        // The operation column says what a change does; it is not written.
        let schema = &changes::written_schema(schema, o.changes.as_ref());
        let drop_unknown = o.ignore_unknown_values && !shared.adds_fields();
        let (table, created) = if apply {
            let p = shared.prepare(&t).await?;
            (Some(p.table), p.created)
        } else {
            (shared.admin.get(&t).await?, false)
        };
        let (current, info) = match &table {
            None if o.create_disposition == CreateDisposition::CreateNever => {
                let e = Error::not_found("table", &t);
                let plan =
                    DestinationPlan::failed(&name, &e).with_detail("create_disposition is create_never");
                return Ok((plan, Some(e)));
            }
            // Tables are created in an existing dataset, never with one.
            None if !shared.admin.dataset_exists(&t).await? => {
                let e = Error::not_found("dataset", format!("{}.{}", t.project, t.dataset))
                    .with_context("table", name.clone());
                return Ok((DestinationPlan::failed(&name, &e), Some(e)));
            }
            // Planned against the schema the table would be created with, as a run creates
            // it and then writes the rows to it.
            None => {
                let configured = o.schema.as_ref().expect("checked by build()");
                (to_core(configured), configured.clone())
            }
            Some(info) => {
                if !apply
                    && o.write_disposition == WriteDisposition::Empty
                    && !shared.admin.is_empty(&t).await?
                {
                    let e = Error::new(
                        ErrorKind::Conflict,
                        format!("table {t} holds rows, and write_disposition is empty"),
                    );
                    return Ok((DestinationPlan::failed(&name, &e), Some(e)));
                }
                (info.core.clone(), info.schema.clone())
            }
        };
        let creates = created || table.is_none();
        let key = match &o.changes {
            Some(c) => match changes::table_key(&name, c, table.as_ref().map(|i| i.primary_key.as_slice())) {
                Ok(key) => Some((key, c)),
                Err(e) => return Ok((DestinationPlan::failed(&name, &e), Some(e))),
            },
            None => None,
        };
        let input = declared_input(schema, Some(&info), drop_unknown)?;
        let evolution = plan_evolution(Some(&current), &input, &shared.evolution)?;
        let compatible = evolution
            .verdicts
            .iter()
            .all(|v| v.verdict != Verdict::Incompatible);
        let routed = shared
            .evolution
            .on_incompatible_or(IncompatibleSchemaHandling::RouteToErrors)
            == IncompatibleSchemaHandling::RouteToErrors;
        if !compatible && !routed {
            let e = evolution
                .rejection_error(&format!("rows for {name} do not fit the table"))
                .with_context("table", name.clone());
            if apply {
                return Err(e);
            }
            return Ok((
                DestinationPlan::failed(&name, &e).with_evolution(evolution),
                Some(e),
            ));
        }
        let action = if creates {
            PlannedAction::Create
        } else if compatible && evolution.changes_schema() {
            PlannedAction::Update
        } else {
            PlannedAction::Unchanged
        };
        if apply && compatible && evolution.all_compatible() && evolution.changes_schema() {
            let mut prepared = shared.prepared.lock().await;
            if let Some(p) = prepared.get_mut(&t) {
                p.table = shared.admin.evolve(&p.table, &evolution).await?;
                if let Some(staging) = &p.staging {
                    p.staging = Some(shared.admin.evolve(staging, &evolution).await?);
                }
            }
        }
        let mut plan = DestinationPlan::new(&name, action);
        if creates {
            for d in self.creation_details() {
                plan = plan.with_detail(d);
            }
        }
        if let Some((key, c)) = &key {
            if creates {
                plan = plan.with_detail(format!("primary key ({}) NOT ENFORCED", key.join(", ")));
            }
            plan = plan.with_detail(format!(
                "upsert by key [{}], operations from column {:?}: rows go to the default stream as \
                 BigQuery change data (UPSERT or DELETE, ordered by sequence number)",
                key.join(", "),
                c.operation.column
            ));
        }
        if !compatible {
            plan = plan.with_detail("rows that do not fit the table come back as failed records");
        }
        let doubtful = unverifiable_columns(&evolution);
        if !doubtful.is_empty() {
            let outcome = if routed {
                "come back as failed records"
            } else {
                "fail the run (on_incompatible is fail)"
            };
            plan = plan.with_detail(format!(
                "rows holding a null in {} (required in the table; relaxation is not allowed) {outcome}",
                doubtful.join(", ")
            ));
        }
        let mut plan = plan.with_evolution(evolution);
        for d in self.details(&t) {
            plan = plan.with_detail(d);
        }
        Ok((plan, None))
    }
}

#[async_trait]
impl PrepareDestination for BigQueryPreparer {
    async fn plan(&self, destination: &str, schema: &SchemaRef) -> Result<DestinationPlan> {
        Ok(self.plan_or_prepare(destination, schema, false).await?.0)
    }

    async fn prepare(&self, destination: &str, schema: &SchemaRef) -> Result<DestinationPlan> {
        // What would fail fails before anything is created or changed, as `plan` says: a
        // table is never created for rows that cannot go into it.
        if let (_, Some(error)) = self.plan_or_prepare(destination, schema, false).await? {
            return Err(error);
        }
        Ok(self.plan_or_prepare(destination, schema, true).await?.0)
    }

    async fn loaded_files(&self, destination: &str) -> Result<Option<LoadedFiles>> {
        let shared = &self.shared;
        // A truncate replaces every row, so a run loads all its files whatever was before
        // (and records them in place of the earlier ones).
        if shared.is_truncate() {
            return Ok(Some(LoadedFiles::new()));
        }
        // A name that is no table fails where rows are routed, with the rows named.
        let Ok(t) = shared.resolve(destination) else {
            return Ok(Some(LoadedFiles::new()));
        };
        if shared.admin.get(&t).await?.is_none() {
            return Ok(Some(LoadedFiles::new()));
        }
        let settled = Ledger::of(&shared.admin, &t).held(&t, shared).await?;
        Ok(Some(settled.held))
    }

    async fn stored_offsets(
        &self,
        destination: &str,
        job: &str,
        partitions: Option<&[TopicPartition]>,
    ) -> Result<Option<Offsets>> {
        let shared = &self.shared;
        let t = shared.resolve(destination)?;
        let commits = shared.commits().await?;
        let ledger = OffsetsLedger::of(&shared.admin, commits, &shared.options.retry, &t);
        Ok(Some(ledger.stored(&t, job, partitions).await?))
    }
}
