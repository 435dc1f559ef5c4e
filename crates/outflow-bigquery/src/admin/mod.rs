//! Creating and reconciling tables: tables.insert/get/patch/delete, the emptiness check and
//! the atomic replacement behind `Truncate`, each call retried under the sink's policy.
//!
//! Schema changes are decided by the shared planner ([`plan_evolution`]) and made with one
//! tables.patch holding the whole new schema ([`Admin::patch_schema`]). The answer is read
//! back and compared with what was asked: a change BigQuery did not make is an error, never
//! assumed done (the emulator answers a nested addition with 200 and the old schema).
//!
//! `Truncate` writes the new rows into a staging table created like the destination (same
//! schema, partitioning and clustering, expiring after a day in case the writer dies) through
//! a pending stream, then swaps them in with one copy job with `WRITE_TRUNCATE`: a copy
//! replaces the destination's rows in one step, so readers see the old rows or the new ones
//! and never a mix, and copy jobs cost nothing. Emptying the table first (TRUNCATE TABLE,
//! DELETE) and appending afterwards would show an empty or half-filled table in between. A
//! multi-statement transaction (DELETE then INSERT ... SELECT) is atomic too but is billed
//! as a query over the staged rows.

pub mod ensure;
mod preparer;

pub use preparer::BigQueryPreparer;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use google_cloud_bigquery_v2::model as bq;
use outflow_core::evolution::{EvolutionPlan, EvolutionPlanner, SchemaEvolutionConfig};
use outflow_core::schema::{InputSchema, Schema};
use outflow_core::{Error, ErrorKind, Result, RetryPolicy};

use crate::client::{Clients, is_not_found, no_answer, service_error};
use crate::options::TimePartitioning;
use crate::schema::TableSchema;
use crate::schema::types::{evolve_api_fields, planning_input, to_core, unapplied_changes};
use crate::table_ref::TableRef;

/// How long a staging table lives if the writer never deletes it.
const STAGING_LIFETIME: Duration = Duration::from_secs(24 * 3600);
/// How long a copy job may run before Outflow stops waiting for it.
const JOB_DEADLINE: Duration = Duration::from_secs(30 * 60);

/// A table as the sink knows it.
#[derive(Clone, Debug, PartialEq)]
pub struct TableInfo {
    /// The table.
    pub table: TableRef,
    /// Its schema as the service returned it, every attribute kept (for tables.patch).
    pub api_fields: Vec<bq::TableFieldSchema>,
    /// Its schema in Outflow's BigQuery terms.
    pub schema: TableSchema,
    /// Its schema in the planner's model.
    pub core: Schema,
    /// Its primary key's columns (none when it has none): the key change data applies by.
    pub primary_key: Vec<String>,
    /// Partitioning and clustering, to create staging tables alike.
    pub time_partitioning: Option<bq::TimePartitioning>,
    range_partitioning: Option<bq::RangePartitioning>,
    clustering: Option<bq::Clustering>,
    require_partition_filter: Option<bool>,
}

impl TableInfo {
    /// Reads tables.get's answer.
    pub fn from_api(table: TableRef, t: &bq::Table) -> TableInfo {
        let api_fields = t.schema.as_ref().map(|s| s.fields.clone()).unwrap_or_default();
        let schema = TableSchema::from_api(&api_fields);
        TableInfo {
            table,
            core: to_core(&schema),
            schema,
            api_fields,
            primary_key: t
                .table_constraints
                .as_ref()
                .and_then(|c| c.primary_key.as_ref())
                .map(|k| k.columns.clone())
                .unwrap_or_default(),
            time_partitioning: t.time_partitioning.clone(),
            range_partitioning: t.range_partitioning.clone(),
            clustering: t.clustering.clone(),
            require_partition_filter: t.require_partition_filter,
        }
    }

    /// The clustering columns.
    pub fn clustering(&self) -> Vec<String> {
        self.clustering
            .as_ref()
            .map(|c| c.fields.clone())
            .unwrap_or_default()
    }
}

fn table_reference(t: &TableRef) -> bq::TableReference {
    bq::TableReference::new()
        .set_project_id(&t.project)
        .set_dataset_id(&t.dataset)
        .set_table_id(&t.table)
}

/// The API's time partitioning for Outflow's option.
pub fn api_partitioning(p: &TimePartitioning) -> bq::TimePartitioning {
    let mut out = bq::TimePartitioning::new().set_type(p.partition_type.as_str());
    if let Some(field) = &p.field {
        out = out.set_field(field.clone());
    }
    if let Some(expiration) = p.expiration {
        out = out.set_expiration_ms(expiration.as_millis() as i64);
    }
    out
}

/// Plans `input` against `table` (or against nothing, to create one) with the shared
/// planner, after giving the input BigQuery's types where they convert without loss.
pub fn plan_evolution(
    table: Option<&Schema>,
    input: &InputSchema,
    config: &SchemaEvolutionConfig,
) -> Result<EvolutionPlan> {
    let input = planning_input(input, table)?;
    let planner = EvolutionPlanner::new(config);
    match table {
        Some(t) => planner.table(t).plan(std::slice::from_ref(&input)),
        None => planner.plan(std::slice::from_ref(&input)),
    }
}

/// Where a BigQuery job stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobState {
    /// BigQuery knows no such job.
    Unknown,
    /// Pending or running.
    Running,
    /// Done without an error.
    Succeeded,
    /// Done with this error.
    Failed(String),
}

/// A named query parameter: its name, BigQuery type (`STRING`, `BOOL`, `INT64`) and value.
#[derive(Clone, Copy, Debug)]
pub struct QueryParam<'a> {
    /// The name the statement refers to as `@name`.
    pub name: &'a str,
    /// Its type.
    pub kind: &'a str,
    /// Its value, as text.
    pub value: &'a str,
}

impl QueryParam<'_> {
    fn to_api(self) -> bq::QueryParameter {
        bq::QueryParameter::new()
            .set_name(self.name)
            .set_parameter_type(bq::QueryParameterType::new().set_type(self.kind))
            .set_parameter_value(bq::QueryParameterValue::new().set_value(self.value))
    }
}

/// One row of a query's answer (`{"f": [{"v": ...}]}`) as its columns' values.
fn row_values(row: &serde_json::Map<String, serde_json::Value>) -> Vec<Option<String>> {
    let cells = row
        .get("f")
        .and_then(|f| f.as_array())
        .map(Vec::as_slice)
        .unwrap_or_default();
    cells
        .iter()
        .map(|cell| match cell.get("v") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            Some(other) => Some(other.to_string()),
        })
        .collect()
}

/// Table administration for one sink.
#[derive(Clone, Debug)]
pub struct Admin {
    clients: Clients,
    policy: RetryPolicy,
    timeout: Duration,
    /// Tables [`Admin::create_once`] made (or found), so each costs one DDL statement.
    created: Arc<std::sync::Mutex<HashSet<TableRef>>>,
}

impl Admin {
    /// Administration through `clients`, each call retried under `policy` and bounded by
    /// `timeout`.
    pub fn new(clients: Clients, policy: RetryPolicy, timeout: Duration) -> Self {
        Admin {
            clients,
            policy,
            timeout,
            created: Arc::default(),
        }
    }

    /// Runs `op` under the retry policy, each attempt cut at the request timeout or at the
    /// policy's deadline, whichever comes first; failures name the REST endpoint.
    async fn call<T, F, Fut>(&self, what: &str, op: F) -> Result<T>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = std::result::Result<T, google_cloud_gax::error::Error>>,
    {
        let endpoint = &self.clients.rest_endpoint;
        let doing = format!("{what} at {endpoint}");
        self.policy
            .retry_within(what, self.timeout, |limit| {
                let doing = &doing;
                let op = &op;
                async move {
                    let failed = match tokio::time::timeout(limit, op()).await {
                        Ok(Ok(value)) => return Ok(value),
                        Ok(Err(e)) => service_error(doing, e),
                        Err(_) => Error::new(
                            ErrorKind::Transient,
                            format!("{what}: {}", no_answer(endpoint, limit)),
                        ),
                    };
                    Err(failed.with_context("endpoint", endpoint.clone()))
                }
            })
            .await
    }

    /// The table, or `None` when it does not exist.
    pub async fn get(&self, t: &TableRef) -> Result<Option<TableInfo>> {
        let what = format!("tables.get {t}");
        let answer = self
            .call(&what, || async {
                match self
                    .clients
                    .tables
                    .get_table()
                    .set_project_id(&t.project)
                    .set_dataset_id(&t.dataset)
                    .set_table_id(&t.table)
                    .send()
                    .await
                {
                    Ok(table) => Ok(Some(table)),
                    Err(e) if is_not_found(&e) => Ok(None),
                    Err(e) => Err(e),
                }
            })
            .await?;
        Ok(answer.map(|table| TableInfo::from_api(t.clone(), &table)))
    }

    /// Whether the dataset `t` is in exists (a missing table's may not).
    pub async fn dataset_exists(&self, t: &TableRef) -> Result<bool> {
        let what = format!("datasets.get {}.{}", t.project, t.dataset);
        self.call(&what, || async {
            match self
                .clients
                .datasets
                .get_dataset()
                .set_project_id(&t.project)
                .set_dataset_id(&t.dataset)
                .send()
                .await
            {
                Ok(_) => Ok(true),
                Err(e) if is_not_found(&e) => Ok(false),
                Err(e) => Err(e),
            }
        })
        .await
    }

    /// Creates the table (with `primary_key`, `NOT ENFORCED` as BigQuery keys are, unless
    /// empty); when another writer created it first, returns theirs. The boolean says
    /// whether this call created it.
    pub async fn create(
        &self,
        t: &TableRef,
        schema: &TableSchema,
        partitioning: Option<&TimePartitioning>,
        clustering: &[String],
        primary_key: &[String],
    ) -> Result<(TableInfo, bool)> {
        let mut table = bq::Table::new()
            .set_table_reference(table_reference(t))
            .set_schema(bq::TableSchema::new().set_fields(schema.to_api()));
        if !primary_key.is_empty() {
            table = table.set_table_constraints(
                bq::TableConstraints::new()
                    .set_primary_key(bq::PrimaryKey::new().set_columns(primary_key.to_vec())),
            );
        }
        if let Some(p) = partitioning {
            table = table.set_time_partitioning(api_partitioning(p));
            if p.require_partition_filter {
                table = table.set_require_partition_filter(true);
            }
        }
        if !clustering.is_empty() {
            table = table.set_clustering(bq::Clustering::new().set_fields(clustering.to_vec()));
        }
        self.insert(t, table).await
    }

    async fn insert(&self, t: &TableRef, table: bq::Table) -> Result<(TableInfo, bool)> {
        let what = format!("tables.insert {t}");
        let created = self
            .call(&what, || async {
                self.clients
                    .tables
                    .insert_table()
                    .set_project_id(&t.project)
                    .set_dataset_id(&t.dataset)
                    .set_table(table.clone())
                    .send()
                    .await
            })
            .await;
        match created {
            Ok(table) => Ok((TableInfo::from_api(t.clone(), &table), true)),
            // A concurrent writer (or our own retried call) created it: use what is there.
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                let existing = self.get(t).await?.ok_or_else(|| {
                    Error::internal(format!(
                        "table {t} already exists, yet tables.get does not find it"
                    ))
                })?;
                Ok((existing, false))
            }
            Err(e) if e.kind() == ErrorKind::NotFound => Err(Error::not_found(
                "dataset",
                format!("{}.{}", t.project, t.dataset),
            )
            .with_context("table", t.to_string())
            .with_source(e)),
            // A writer racing this one may have created it, and the service says so in
            // other words (the emulator answers INVALID_ARGUMENT): look again first.
            Err(e) => match self.get(t).await {
                Ok(Some(existing)) => {
                    tracing::debug!(table = %t, error = %e, "created by another writer meanwhile");
                    Ok((existing, false))
                }
                _ => Err(e.with_context("table", t.to_string())),
            },
        }
    }

    /// Creates `staging` with `like`'s schema, partitioning and clustering, expiring in a
    /// day.
    pub async fn create_staging(&self, staging: &TableRef, like: &TableInfo) -> Result<TableInfo> {
        let expires = chrono::Utc::now().timestamp_millis() + STAGING_LIFETIME.as_millis() as i64;
        let mut table = bq::Table::new()
            .set_table_reference(table_reference(staging))
            .set_schema(bq::TableSchema::new().set_fields(like.api_fields.clone()))
            .set_expiration_time(expires)
            .set_description("Outflow staging table for a WRITE_TRUNCATE; deleted once swapped in");
        if let Some(p) = &like.time_partitioning {
            table = table.set_time_partitioning(p.clone());
        }
        if let Some(p) = &like.range_partitioning {
            table = table.set_range_partitioning(p.clone());
        }
        if let Some(c) = &like.clustering {
            table = table.set_clustering(c.clone());
        }
        if let Some(r) = like.require_partition_filter {
            table = table.set_require_partition_filter(r);
        }
        Ok(self.insert(staging, table).await?.0)
    }

    /// Replaces the table's schema with `fields` (tables.patch sends the whole schema) and
    /// checks that the answer holds every column and relaxation asked for.
    pub async fn patch_schema(
        &self,
        info: &TableInfo,
        fields: Vec<bq::TableFieldSchema>,
    ) -> Result<TableInfo> {
        let t = &info.table;
        let what = format!("tables.patch {t}");
        let patched = self
            .call(&what, || async {
                self.clients
                    .tables
                    .patch_table()
                    .set_project_id(&t.project)
                    .set_dataset_id(&t.dataset)
                    .set_table_id(&t.table)
                    .set_table(bq::Table::new().set_schema(bq::TableSchema::new().set_fields(fields.clone())))
                    .send()
                    .await
            })
            .await
            .map_err(|e| e.with_context("table", t.to_string()))?;
        let got = TableInfo::from_api(t.clone(), &patched);
        let missing = unapplied_changes(&TableSchema::from_api(&fields), &got.schema);
        if !missing.is_empty() {
            return Err(Error::new(
                ErrorKind::Conflict,
                format!(
                    "BigQuery did not apply the schema change to {t}: {}",
                    missing.join("; ")
                ),
            )
            .with_context("table", t.to_string())
            .with_retryable(false));
        }
        Ok(got)
    }

    /// Makes the plan's schema changes to the table, returning the table as it now is.
    pub async fn evolve(&self, info: &TableInfo, plan: &EvolutionPlan) -> Result<TableInfo> {
        let Some(planned) = plan.schema.as_ref().filter(|_| plan.changes_schema()) else {
            return Ok(info.clone());
        };
        let fields = evolve_api_fields(&info.api_fields, &planned.fields)?;
        self.patch_schema(info, fields).await
    }

    /// Whether the table holds no rows, by query: tables.get's numRows leaves out rows
    /// still in the streaming buffer (and the emulator's is an estimate).
    pub async fn is_empty(&self, t: &TableRef) -> Result<bool> {
        let what = format!("checking that {t} is empty");
        let sql = format!("SELECT 1 FROM {} LIMIT 1", t.sql());
        Ok(self.query(&t.project, &what, &sql, &[]).await?.is_empty())
    }

    /// Creates `t` with `ddl` (a `CREATE TABLE IF NOT EXISTS` statement), once per admin:
    /// later calls for the same table make no request.
    pub async fn create_once(&self, t: &TableRef, ddl: &str) -> Result<()> {
        let known = |t: &TableRef| self.created.lock().unwrap_or_else(|e| e.into_inner()).contains(t);
        if known(t) {
            return Ok(());
        }
        let what = format!("creating {t}");
        self.query(&t.project, &what, ddl, &[]).await?;
        self.created
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(t.clone());
        Ok(())
    }

    /// Runs a GoogleSQL statement in `project` with named parameters, waiting for it and
    /// reading every page of its result: each row as its columns' values (`None` for NULL).
    pub async fn query(
        &self,
        project: &str,
        what: &str,
        sql: &str,
        params: &[QueryParam<'_>],
    ) -> Result<Vec<Vec<Option<String>>>> {
        let timeout_ms = self.timeout.as_millis().min(u32::MAX as u128) as u32;
        let mut request = bq::QueryRequest::new()
            .set_query(sql)
            .set_use_legacy_sql(false)
            .set_timeout_ms(timeout_ms);
        if !params.is_empty() {
            request = request
                .set_parameter_mode("NAMED")
                .set_query_parameters(params.iter().copied().map(QueryParam::to_api));
        }
        let answer = self
            .call(what, || async {
                self.clients
                    .jobs
                    .query()
                    .set_project_id(project)
                    .set_query_request(request.clone())
                    .send()
                    .await
            })
            .await?;
        if let Some(e) = answer.errors.first() {
            return Err(Error::new(ErrorKind::Internal, format!("{what}: {}", e.message)));
        }
        let mut rows = answer.rows.iter().map(row_values).collect::<Vec<_>>();
        let mut complete = answer.job_complete != Some(false);
        let mut page_token = answer.page_token;
        let job = answer.job_reference.unwrap_or_default();
        let started = Instant::now();
        // A result too big for one answer (or not ready within the first) is read from the
        // query's job, page by page.
        while !complete || !page_token.is_empty() {
            if started.elapsed() > self.timeout {
                return Err(Error::new(
                    ErrorKind::Transient,
                    format!("{what}: the query did not finish within {:?}", self.timeout),
                ));
            }
            let page = self
                .call(what, || async {
                    let mut get = self
                        .clients
                        .jobs
                        .get_query_results()
                        .set_project_id(project)
                        .set_job_id(&job.job_id)
                        .set_timeout_ms(timeout_ms);
                    if !job.location.as_deref().unwrap_or_default().is_empty() {
                        get = get.set_location(job.location.clone().unwrap_or_default());
                    }
                    if !page_token.is_empty() {
                        get = get.set_page_token(&page_token);
                    }
                    get.send().await
                })
                .await?;
            if let Some(e) = page.errors.first() {
                return Err(Error::new(ErrorKind::Internal, format!("{what}: {}", e.message)));
            }
            complete = page.job_complete != Some(false);
            if complete {
                rows.extend(page.rows.iter().map(row_values));
                page_token = page.page_token;
            }
        }
        Ok(rows)
    }

    /// A new id for the copy job of [`Admin::copy_replace`], chosen before the job starts so
    /// that a ledger can record it first.
    pub fn new_copy_job_id() -> String {
        format!("outflow_copy_{}", uuid::Uuid::new_v4().simple())
    }

    /// Replaces `to`'s rows with `from`'s in one copy job (`WRITE_TRUNCATE`) with id
    /// `job_id`, waiting for it.
    pub async fn copy_replace(&self, from: &TableRef, to: &TableRef, job_id: &str) -> Result<()> {
        let job = bq::Job::new()
            .set_job_reference(
                bq::JobReference::new()
                    .set_project_id(&to.project)
                    .set_job_id(job_id),
            )
            .set_configuration(
                bq::JobConfiguration::new().set_copy(
                    bq::JobConfigurationTableCopy::new()
                        .set_source_table(table_reference(from))
                        .set_destination_table(table_reference(to))
                        .set_create_disposition("CREATE_NEVER")
                        .set_write_disposition("WRITE_TRUNCATE"),
                ),
            );
        let what = format!("copy job {from} -> {to}");
        // The job id is fixed, so a retried insert whose first answer was lost finds the job.
        let inserted = self
            .call(&what, || async {
                self.clients
                    .jobs
                    .insert_job()
                    .set_project_id(&to.project)
                    .set_job(job.clone())
                    .send()
                    .await
            })
            .await;
        let mut location = match inserted {
            Ok(job) => job
                .job_reference
                .map(|r| r.location.unwrap_or_default())
                .unwrap_or_default(),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => String::new(),
            Err(e) => return Err(e),
        };
        let started = Instant::now();
        let mut wait = Duration::from_millis(100);
        loop {
            let (state, found_in) = self.job_state(&to.project, job_id, &location).await?;
            if location.is_empty() {
                location = found_in;
            }
            match state {
                JobState::Succeeded => return Ok(()),
                JobState::Failed(why) => {
                    return Err(Error::new(ErrorKind::Conflict, format!("{what} failed: {why}"))
                        .with_context("table", to.to_string())
                        .with_retryable(false));
                }
                JobState::Unknown => {
                    return Err(Error::new(
                        ErrorKind::NotFound,
                        format!("{what}: BigQuery knows no job {job_id} after starting it"),
                    ));
                }
                JobState::Running => {}
            }
            if started.elapsed() > JOB_DEADLINE {
                return Err(Error::new(
                    ErrorKind::Transient,
                    format!("{what} still running after {JOB_DEADLINE:?}; job {job_id} may still finish"),
                )
                .with_retryable(false));
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_secs(5));
        }
    }

    /// Where job `job_id` of `project` stands (looked up in `location` when known), and the
    /// location BigQuery says it runs in.
    pub async fn job_state(&self, project: &str, job_id: &str, location: &str) -> Result<(JobState, String)> {
        let what = format!("jobs.get {job_id}");
        let got = self
            .call(&what, || async {
                let mut get = self
                    .clients
                    .jobs
                    .get_job()
                    .set_project_id(project)
                    .set_job_id(job_id);
                if !location.is_empty() {
                    get = get.set_location(location);
                }
                get.send().await
            })
            .await;
        let job = match got {
            Ok(job) => job,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok((JobState::Unknown, String::new())),
            Err(e) => return Err(e),
        };
        let found_in = job
            .job_reference
            .as_ref()
            .and_then(|r| r.location.clone())
            .unwrap_or_default();
        let status = job.status.unwrap_or_default();
        let state = match (status.state.as_str(), status.error_result) {
            ("DONE", None) => JobState::Succeeded,
            ("DONE", Some(e)) => JobState::Failed(format!("{} ({})", e.message, e.reason)),
            _ => JobState::Running,
        };
        Ok((state, found_in))
    }

    /// Deletes the table; a table already gone is fine.
    pub async fn delete(&self, t: &TableRef) -> Result<()> {
        let what = format!("tables.delete {t}");
        self.call(&what, || async {
            match self
                .clients
                .tables
                .delete_table()
                .set_project_id(&t.project)
                .set_dataset_id(&t.dataset)
                .set_table_id(&t.table)
                .send()
                .await
            {
                Err(e) if is_not_found(&e) => Ok(()),
                other => other,
            }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use outflow_core::SchemaEvolutionOption;
    use outflow_core::evolution::Verdict;
    use outflow_core::schema::{Field, PrimitiveType};

    use super::*;

    /// A tables.get answer as the service documents it (legacy type names, explicit modes,
    /// numbers as strings).
    const RECORDED_TABLE: &str = r#"{
        "kind": "bigquery#table",
        "id": "p:d.events",
        "tableReference": {"projectId": "p", "datasetId": "d", "tableId": "events"},
        "schema": {"fields": [
            {"name": "id", "type": "INTEGER", "mode": "REQUIRED"},
            {"name": "must", "type": "STRING", "mode": "REQUIRED", "description": "kept"},
            {"name": "rec", "type": "RECORD", "mode": "NULLABLE", "fields": [
                {"name": "a", "type": "INTEGER", "mode": "NULLABLE"}]},
            {"name": "ts", "type": "TIMESTAMP", "mode": "NULLABLE"}
        ]},
        "timePartitioning": {"type": "DAY", "field": "ts"},
        "clustering": {"fields": ["id"]},
        "numRows": "3"
    }"#;

    fn recorded() -> TableInfo {
        let table: bq::Table = serde_json::from_str(RECORDED_TABLE).unwrap();
        TableInfo::from_api(TableRef::new("p", "d", "events").unwrap(), &table)
    }

    fn config(options: &[SchemaEvolutionOption]) -> SchemaEvolutionConfig {
        SchemaEvolutionConfig::builder()
            .allow_all(options.iter().copied())
            .build()
            .unwrap()
    }

    fn input(fields: Vec<Field>) -> InputSchema {
        InputSchema::new(Schema::new(fields))
    }

    #[test]
    fn recorded_tables_read_back_with_partitioning_and_clustering() {
        let info = recorded();
        assert_eq!(info.schema.fields.len(), 4);
        assert!(info.core.field("id").unwrap().required);
        assert_eq!(info.clustering(), ["id"]);
        assert_eq!(
            info.time_partitioning.as_ref().unwrap().field.as_deref(),
            Some("ts")
        );
    }

    #[test]
    fn nested_addition_and_relaxation_make_one_patch() {
        // What the service applies and the emulator ignores (nested additions): the patch
        // body is checked here, the emulator's answer is caught by `unapplied_changes`.
        let info = recorded();
        let rec = Field::optional(
            "rec",
            outflow_core::schema::DataType::structure(vec![
                Field::optional("a", PrimitiveType::Long),
                Field::optional("c", PrimitiveType::String),
            ]),
        );
        let batch = input(vec![
            Field::required("id", PrimitiveType::Int),
            rec,
            Field::optional("extra", PrimitiveType::Double),
        ])
        .with_null_count("id", 0);
        let plan = plan_evolution(
            Some(&info.core),
            &batch,
            &config(&[
                SchemaEvolutionOption::AllowFieldAddition,
                SchemaEvolutionOption::AllowFieldRelaxation,
            ]),
        )
        .unwrap();
        assert_eq!(plan.verdicts[0].verdict, Verdict::FitsAfterEvolution);
        let fields = evolve_api_fields(&info.api_fields, &plan.schema.unwrap().fields).unwrap();
        let json = serde_json::to_value(&fields).unwrap();
        // `must` is missing from the input: relaxed. `rec.c` and `extra` added NULLABLE.
        assert_eq!(json[1]["mode"], "NULLABLE");
        assert_eq!(json[1]["description"], "kept");
        assert_eq!(json[2]["fields"][1]["name"], "c");
        assert_eq!(json[2]["fields"][1]["type"], "STRING");
        assert_eq!(json[4]["name"], "extra");
        assert_eq!(json[4]["type"], "FLOAT64");
        assert_eq!(json[0]["mode"], "REQUIRED");
    }

    #[test]
    fn without_options_the_same_input_is_refused_with_the_planners_reasons() {
        let info = recorded();
        let batch = input(vec![
            Field::required("id", PrimitiveType::Long),
            Field::optional("extra", PrimitiveType::String),
        ]);
        let plan = plan_evolution(Some(&info.core), &batch, &config(&[])).unwrap();
        assert_eq!(plan.verdicts[0].verdict, Verdict::Incompatible);
        let reasons: Vec<String> = plan
            .rejection_reasons()
            .iter()
            .map(|(_, r)| r.to_string())
            .collect();
        assert!(
            reasons
                .iter()
                .any(|r| r.starts_with("extra: the table has no such column")),
            "{reasons:?}"
        );
        assert!(
            reasons
                .iter()
                .any(|r| r.starts_with("must: required in the table")),
            "{reasons:?}"
        );
    }

    #[test]
    fn lossless_inputs_fit_and_conflicts_are_named() {
        let info = recorded();
        let batch = input(vec![
            Field::required("id", PrimitiveType::Int),
            Field::required("must", PrimitiveType::String),
            Field::optional("ts", PrimitiveType::TimestampTzNs),
        ]);
        let plan = plan_evolution(Some(&info.core), &batch, &config(&[])).unwrap();
        assert_eq!(plan.verdicts[0].verdict, Verdict::Fits);
        let conflict = input(vec![
            Field::required("id", PrimitiveType::String),
            Field::required("must", PrimitiveType::String),
        ]);
        let plan = plan_evolution(
            Some(&info.core),
            &conflict,
            &config(&[SchemaEvolutionOption::AllowFieldAddition]),
        )
        .unwrap();
        assert_eq!(plan.verdicts[0].verdict, Verdict::Incompatible);
        assert!(
            plan.render(None)
                .contains("! id: table long, input string (conflict)"),
            "{}",
            plan.render(None)
        );
    }

    #[test]
    fn partitioning_options_become_the_apis() {
        let p = api_partitioning(&TimePartitioning {
            expiration: Some(Duration::from_secs(86400)),
            ..TimePartitioning::on(crate::options::PartitionType::Month, "ts")
        });
        assert_eq!(p.r#type, "MONTH");
        assert_eq!(p.field.as_deref(), Some("ts"));
        assert_eq!(p.expiration_ms, Some(86_400_000));
    }
}
