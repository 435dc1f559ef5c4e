//! What every emulator test shares: a fresh dataset, sink options pointing at the emulator,
//! tables.get, and the independent Python reader.

use std::sync::Arc;
use std::time::Duration;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use google_cloud_bigquery_v2::client::TableService;
use google_cloud_bigquery_v2::model as bq;
use outflow_bigquery::{
    BigQuerySink, BigQuerySinkOptions, BigQuerySinkOptionsBuilder, ConnectionOptions, FieldType, TableField,
    TableSchema,
};
use outflow_core::{RetryPolicy, SchemaEvolutionConfig, SchemaEvolutionOption, Sink, WriteResult};
use outflow_testkit::bigquery::{BigQueryEnv, Dataset};
use serde_json::Value;

/// One test's dataset on the emulator.
pub struct Ctx {
    pub env: BigQueryEnv,
    /// Deleted when the test is done (kept when it fails), so the emulator stays fast.
    pub dataset: Dataset,
    tables: TableService,
}

impl Ctx {
    /// A new dataset with a random name. Panics (never skips) when the emulator is absent.
    pub async fn new() -> Ctx {
        let env = BigQueryEnv::from_env();
        let anonymous = google_cloud_auth::credentials::anonymous::Builder::new().build();
        let tables = TableService::builder()
            .with_endpoint(&env.rest)
            .with_credentials(anonymous)
            .build()
            .await
            .expect("table client");
        let dataset = env.new_dataset("outflow");
        Ctx { env, dataset, tables }
    }

    /// A retry policy that gives up quickly, so a test that goes wrong fails fast.
    pub fn quick_retry() -> RetryPolicy {
        RetryPolicy::builder()
            .max_attempts(4)
            .initial_backoff(Duration::from_millis(50))
            .max_backoff(Duration::from_millis(500))
            .deadline(Duration::from_secs(20))
            .build()
            .unwrap()
    }

    /// Options for `table` in this dataset on the emulator.
    pub fn options(&self, table: &str) -> BigQuerySinkOptionsBuilder {
        BigQuerySinkOptions::builder()
            .project(&self.env.project)
            .dataset(self.dataset.name())
            .table(table)
            .connection(self.connection())
            .retry(Self::quick_retry())
            .request_timeout(Duration::from_secs(30))
    }

    /// The emulator's endpoints, anonymously.
    pub fn connection(&self) -> ConnectionOptions {
        ConnectionOptions::emulator(&self.env.rest, &self.env.grpc)
    }

    /// `project.dataset.table`.
    pub fn full(&self, table: &str) -> String {
        format!("{}.{}.{table}", self.env.project, self.dataset)
    }

    /// tables.get, or `None` for a missing table.
    pub async fn get(&self, table: &str) -> Option<bq::Table> {
        match self
            .tables
            .get_table()
            .set_project_id(&self.env.project)
            .set_dataset_id(self.dataset.name())
            .set_table_id(table)
            .send()
            .await
        {
            Ok(t) => Some(t),
            Err(e) if e.http_status_code() == Some(404) => None,
            Err(e) => panic!("tables.get {table}: {e}"),
        }
    }

    /// The table names in the dataset.
    pub async fn list(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .tables
            .list_tables()
            .set_project_id(&self.env.project)
            .set_dataset_id(self.dataset.name())
            .send()
            .await
            .expect("tables.list")
            .tables
            .into_iter()
            .filter_map(|t| t.table_reference.map(|r| r.table_id))
            .collect();
        out.sort();
        out
    }

    /// Creates a table directly (not through Outflow).
    pub async fn create(&self, table: &str, schema: &TableSchema) {
        self.tables
            .insert_table()
            .set_project_id(&self.env.project)
            .set_dataset_id(self.dataset.name())
            .set_table(
                bq::Table::new()
                    .set_table_reference(
                        bq::TableReference::new()
                            .set_project_id(&self.env.project)
                            .set_dataset_id(self.dataset.name())
                            .set_table_id(table),
                    )
                    .set_schema(bq::TableSchema::new().set_fields(schema.to_api())),
            )
            .send()
            .await
            .expect("tables.insert");
    }

    /// The table as Google's Python client reads it.
    pub fn read(&self, table: &str) -> Value {
        self.env.read_table(&self.dataset, table)
    }

    /// The rows Google's Python client reads.
    pub fn rows(&self, table: &str) -> Vec<Value> {
        self.read(table)["rows"].as_array().cloned().unwrap_or_default()
    }

    /// The `id` column of every row, sorted.
    pub fn ids(&self, table: &str) -> Vec<i64> {
        let mut ids: Vec<i64> = self
            .rows(table)
            .iter()
            .map(|r| r["id"].as_i64().expect("id"))
            .collect();
        ids.sort_unstable();
        ids
    }

    /// The schema as Google's Python client reads it: `name type mode` per column, nested
    /// with dots.
    pub fn columns(&self, table: &str) -> Vec<String> {
        fn walk(prefix: &str, fields: &Value, out: &mut Vec<String>) {
            for f in fields.as_array().into_iter().flatten() {
                let name = format!("{prefix}{}", f["name"].as_str().unwrap());
                out.push(format!(
                    "{name} {} {}",
                    f["type"].as_str().unwrap(),
                    f["mode"].as_str().unwrap()
                ));
                walk(&format!("{name}."), &f["fields"], out);
            }
        }
        let mut out = Vec::new();
        walk("", &self.read(table)["schema"], &mut out);
        out
    }
}

/// A sink for `options`.
pub async fn sink(options: BigQuerySinkOptions) -> BigQuerySink {
    BigQuerySink::connect(options).await.expect("connect the sink")
}

/// Evolution allowing `options`.
pub fn evolution(options: &[SchemaEvolutionOption]) -> SchemaEvolutionConfig {
    SchemaEvolutionConfig::builder()
        .allow_all(options.iter().copied())
        .build()
        .expect("evolution options")
}

/// Writes every batch, closes, and returns the result.
pub async fn write_all(options: BigQuerySinkOptions, batches: Vec<RecordBatch>) -> WriteResult {
    let mut s = sink(options).await;
    for b in batches {
        s.write(b).await.expect("write");
    }
    s.close().await.expect("close")
}

/// `id INT64 REQUIRED, name STRING`.
pub fn id_name_schema() -> TableSchema {
    TableSchema::new(vec![
        TableField::new("id", FieldType::Int64).required(),
        TableField::new("name", FieldType::String),
    ])
}

/// A batch of `id` (non-null Int64) and `name` (`n{id}`).
pub fn id_name(ids: std::ops::Range<i64>) -> RecordBatch {
    let names: Vec<String> = ids.clone().map(|i| format!("n{i}")).collect();
    RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ])),
        vec![
            Arc::new(Int64Array::from_iter_values(ids)) as ArrayRef,
            Arc::new(StringArray::from(names)),
        ],
    )
    .unwrap()
}

/// A batch from (name, nullable, array) columns.
pub fn batch(columns: Vec<(&str, bool, ArrayRef)>) -> RecordBatch {
    let fields: Vec<Field> = columns
        .iter()
        .map(|(n, nullable, a)| Field::new(*n, a.data_type().clone(), *nullable))
        .collect();
    RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns.into_iter().map(|(_, _, a)| a).collect(),
    )
    .unwrap()
}
