//! `outflow bigquery ensure-table`: create a table from a schema file, or evolve an existing
//! one towards it under the schema update options, and say what was done. A dry run says what
//! would be done and changes nothing.
//!
//! The schema file is BigQuery's JSON schema format (what `bq show --schema` prints), or the
//! same in YAML: a list of fields, or an object with a `fields` list; see
//! [`TableSchema`]. Against an existing table the file is the input to
//! the shared planner, as a load job's schema would be: a column the table lacks is added
//! (NULLABLE: BigQuery adds columns no other way) under `allow_field_addition`; a NULLABLE
//! column, or one the file lacks, relaxes a REQUIRED one under `allow_field_relaxation`;
//! a type that differs is a conflict. Any change the options do not allow makes the whole
//! call fail with the reasons and change nothing.
//!
//! ```no_run
//! # async fn run() -> outflow_core::Result<()> {
//! use outflow_bigquery::{EnsureTable, TableSchema, ensure_table};
//! let mut request = EnsureTable::new("my-project.analytics.events", TableSchema::from_file("events.json")?);
//! request.schema_evolution = outflow_core::SchemaEvolutionConfig::builder()
//!     .allow(outflow_core::SchemaEvolutionOption::AllowFieldAddition)
//!     .build()?;
//! let report = ensure_table(&request).await?;
//! println!("{report}");
//! # Ok(()) }
//! ```

use std::fmt;
use std::time::Duration;

use outflow_core::evolution::SchemaEvolutionConfig;
use outflow_core::schema::InputSchema;
use outflow_core::{CreateDisposition, DestinationPlan, Error, PlannedAction, Result, RetryPolicy};
use serde::{Deserialize, Serialize};

use crate::admin::{Admin, TableInfo, plan_evolution};
use crate::client::{Clients, ResolvedConnection, process_env};
use crate::options::{ConnectionOptions, TimePartitioning, default_request_timeout};
use crate::schema::TableSchema;
use crate::schema::types::to_core;
use crate::table_ref::TableRef;

/// What `ensure-table` is asked to do.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnsureTable {
    /// The table: `project.dataset.table`, `project:dataset.table`, or shorter with the
    /// defaults below.
    pub table: String,
    /// The default project for a table name that names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// The default dataset for a table name that names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<String>,
    /// The schema the table should have.
    pub schema: TableSchema,
    /// The changes allowed on an existing table (field addition and relaxation), and
    /// pinned columns.
    #[serde(default)]
    pub schema_evolution: SchemaEvolutionConfig,
    /// `create_never` fails on a missing table instead of creating it.
    #[serde(default)]
    pub create_disposition: CreateDisposition,
    /// Time partitioning of a table created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_partitioning: Option<TimePartitioning>,
    /// Clustering columns of a table created.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clustering: Vec<String>,
    /// How to reach BigQuery.
    #[serde(default)]
    pub connection: ConnectionOptions,
    /// How service calls are retried.
    #[serde(default)]
    pub retry: RetryPolicy,
    /// How long one service call may take.
    #[serde(default = "default_request_timeout", with = "outflow_core::duration")]
    pub request_timeout: Duration,
    /// Say what would be done, change nothing.
    #[serde(default)]
    pub dry_run: bool,
}

impl EnsureTable {
    /// Ensure `table` has `schema`, creating it if needed, allowing no schema change.
    pub fn new(table: impl Into<String>, schema: TableSchema) -> Self {
        EnsureTable {
            table: table.into(),
            project: None,
            dataset: None,
            schema,
            schema_evolution: SchemaEvolutionConfig::default(),
            create_disposition: CreateDisposition::CreateIfNeeded,
            time_partitioning: None,
            clustering: Vec::new(),
            connection: ConnectionOptions::default(),
            retry: RetryPolicy::default(),
            request_timeout: default_request_timeout(),
            dry_run: false,
        }
    }

    /// Checks the request as the sink's builder checks its options, naming the field.
    pub fn validate(&self) -> Result<TableRef> {
        let mut builder = crate::BigQuerySinkOptions::builder()
            .table(&self.table)
            .schema(self.schema.clone())
            .schema_evolution(self.schema_evolution.clone())
            .create_disposition(self.create_disposition)
            .clustering(self.clustering.clone())
            .connection(self.connection.clone())
            .retry(self.retry.clone())
            .request_timeout(self.request_timeout);
        if let Some(p) = &self.project {
            builder = builder.project(p);
        }
        if let Some(d) = &self.dataset {
            builder = builder.dataset(d);
        }
        if let Some(p) = &self.time_partitioning {
            builder = builder.time_partitioning(p.clone());
        }
        builder.build()?;
        TableRef::parse(&self.table, self.project.as_deref(), self.dataset.as_deref())
    }
}

/// What `ensure-table` did, or would do in a dry run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EnsureTableReport {
    /// The plan: the action (create, update, unchanged, fail), the schema changes with the
    /// planner's reasons, details, and the error when the action is `fail`.
    pub plan: DestinationPlan,
    /// Whether the changes were made (false in a dry run, and when the plan fails).
    pub applied: bool,
}

impl EnsureTableReport {
    /// Whether the table has (or in a dry run would have) the schema asked for.
    pub fn succeeded(&self) -> bool {
        self.plan.action != PlannedAction::Fail
    }
}

impl fmt::Display for EnsureTableReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = &self.plan;
        let verb = match (p.action, self.applied) {
            (PlannedAction::Create, true) => "created",
            (PlannedAction::Create, false) => "would create",
            (PlannedAction::Update, true) => "updated",
            (PlannedAction::Update, false) => "would update",
            (PlannedAction::Unchanged, _) => "unchanged",
            (PlannedAction::Fail, _) => "refused, nothing changed",
        };
        writeln!(f, "{}: {verb}", p.destination)?;
        for d in &p.details {
            writeln!(f, "  {d}")?;
        }
        if let Some(plan) = &p.evolution
            && p.action != PlannedAction::Create
        {
            f.write_str(&plan.render(Some(&["schema file".to_string()])))?;
        }
        if let Some(e) = &p.error {
            writeln!(f, "  error: {e}")?;
        }
        Ok(())
    }
}

/// Creates the table from the schema, or evolves it towards the schema under the schema
/// update options, and reports what it did (see the module docs). Errors are service and
/// configuration failures; a schema the options do not allow is a report whose action is
/// `fail`.
pub async fn ensure_table(request: &EnsureTable) -> Result<EnsureTableReport> {
    let t = request.validate()?;
    let connection = ResolvedConnection::resolve(&request.connection, process_env)?;
    let admin = Admin::new(
        Clients::connect(&connection).await?,
        request.retry.clone(),
        request.request_timeout,
    );
    let name = t.to_string();
    let Some(existing) = admin.get(&t).await? else {
        if request.create_disposition == CreateDisposition::CreateNever {
            let e = Error::not_found("table", &t);
            return Ok(EnsureTableReport {
                plan: DestinationPlan::failed(&name, &e).with_detail("create_disposition is create_never"),
                applied: false,
            });
        }
        let mut plan = DestinationPlan::new(&name, PlannedAction::Create).with_detail(format!(
            "{} columns from the schema file",
            request.schema.fields.len()
        ));
        if let Some(p) = &request.time_partitioning {
            plan = plan.with_detail(format!("time partitioning {p}"));
        }
        if !request.clustering.is_empty() {
            plan = plan.with_detail(format!("clustering by {}", request.clustering.join(", ")));
        }
        if request.dry_run {
            return Ok(EnsureTableReport { plan, applied: false });
        }
        let (_, created) = admin
            .create(
                &t,
                &request.schema,
                request.time_partitioning.as_ref(),
                &request.clustering,
                &[],
            )
            .await?;
        if !created {
            plan = plan.with_detail("another writer created the table meanwhile; it was left as it is");
        }
        return Ok(EnsureTableReport {
            plan,
            applied: created,
        });
    };
    evolve_existing(&admin, request, existing).await
}

async fn evolve_existing(
    admin: &Admin,
    request: &EnsureTable,
    existing: TableInfo,
) -> Result<EnsureTableReport> {
    let name = existing.table.to_string();
    let config = &request.schema_evolution;
    let input = InputSchema::new(to_core(&request.schema));
    let evolution = plan_evolution(Some(&existing.core), &input, config)?;
    let mut details = Vec::new();
    if let Some(p) = &request.time_partitioning {
        let current = existing.time_partitioning.as_ref().map(|t| match &t.field {
            Some(field) => format!("{}({field})", t.r#type),
            None => format!("{}(_PARTITIONTIME)", t.r#type),
        });
        if current.as_deref() != Some(p.to_string().as_str()) {
            details.push(format!(
                "time partitioning {p} differs from the table's ({}); it is set only when a table is created",
                current.unwrap_or_else(|| "none".into())
            ));
        }
    }
    if !request.clustering.is_empty() && existing.clustering() != request.clustering {
        details.push(format!(
            "clustering {} differs from the table's ({}); it is set only when a table is created",
            request.clustering.join(", "),
            existing.clustering().join(", ")
        ));
    }
    let with_details = |mut plan: DestinationPlan| {
        for d in &details {
            plan = plan.with_detail(d.clone());
        }
        plan
    };
    if !evolution.all_compatible() {
        let e = evolution.rejection_error(&format!("the schema file does not fit {name}"));
        return Ok(EnsureTableReport {
            plan: with_details(DestinationPlan::failed(&name, &e).with_evolution(evolution)),
            applied: false,
        });
    }
    if !evolution.changes_schema() {
        return Ok(EnsureTableReport {
            plan: with_details(
                DestinationPlan::new(&name, PlannedAction::Unchanged).with_evolution(evolution),
            ),
            applied: false,
        });
    }
    let plan =
        with_details(DestinationPlan::new(&name, PlannedAction::Update).with_evolution(evolution.clone()));
    if request.dry_run {
        return Ok(EnsureTableReport { plan, applied: false });
    }
    admin.evolve(&existing, &evolution).await?;
    Ok(EnsureTableReport { plan, applied: true })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{FieldType, TableField};

    #[test]
    fn requests_validate_like_sink_options() {
        let schema = TableSchema::new(vec![TableField::new("id", FieldType::Int64)]);
        assert_eq!(
            EnsureTable::new("p.d.t", schema.clone()).validate().unwrap(),
            TableRef::new("p", "d", "t").unwrap()
        );
        let err = EnsureTable::new("bad-name!", schema.clone())
            .validate()
            .unwrap_err();
        assert_eq!(err.context_value("field"), Some("table"));
        let mut r = EnsureTable::new("p.d.t", schema);
        r.clustering = vec!["nope".into()];
        assert_eq!(
            r.validate().unwrap_err().context_value("field"),
            Some("clustering")
        );
        let yaml = "table: p.d.t\nschema: [{name: id, type: INT64}]\nschema_evolution: {options: [allow_field_addition]}\ndry_run: true\n";
        let parsed: EnsureTable = serde_yaml_ng::from_str(yaml).unwrap();
        assert!(parsed.dry_run);
        assert_eq!(parsed.request_timeout, default_request_timeout());
    }

    #[test]
    fn reports_read_as_sentences() {
        let report = EnsureTableReport {
            plan: DestinationPlan::new("p.d.t", PlannedAction::Create)
                .with_detail("3 columns from the schema file"),
            applied: true,
        };
        assert_eq!(
            report.to_string(),
            "p.d.t: created\n  3 columns from the schema file\n"
        );
        let dry = EnsureTableReport {
            applied: false,
            ..report.clone()
        };
        assert!(dry.to_string().starts_with("p.d.t: would create"));
        assert!(dry.succeeded());
    }
}
