//! The BigQuery sink's options, as users write them in job files (YAML) and as the builder
//! makes them. Every options value is validated: deserializing runs the same checks as
//! [`BigQuerySinkOptionsBuilder::build`](crate::BigQuerySinkOptionsBuilder::build).
//!
//! ```yaml
//! sink:
//!   bigquery:
//!     project: my-project
//!     dataset: analytics
//!     table: events_{region}          # or a fixed name, dataset.table, project.dataset.table
//!     write_method: exactly_once      # or at_least_once (the default stream)
//!     stream_type: pending            # or committed (rows visible as sent); jobs default to pending
//!     create_disposition: create_if_needed
//!     write_disposition: append       # or truncate, empty
//!     schema:
//!       - {name: id, type: INT64, mode: REQUIRED}
//!       - {name: ts, type: TIMESTAMP}
//!     schema_evolution: {options: [allow_field_addition, allow_field_relaxation]}
//!     time_partitioning: {type: DAY, field: ts}
//!     clustering: [id]
//!     ignore_unknown_values: false
//!     connection: {emulator_host: "127.0.0.1:9050"}
//! ```

use std::fmt;
use std::path::Path;
use std::time::Duration;

use arrow_schema::Schema as ArrowSchema;
use outflow_core::changes::ChangeConfig;
use outflow_core::{
    CreateDisposition, Destination, Error, RetryPolicy, SchemaEvolutionConfig, WriteDisposition,
};
use serde::{Deserialize, Serialize};

use crate::builder::BigQuerySinkOptionsBuilder;
use crate::schema::TableSchema;

/// The Storage Write API's service limit for one AppendRows request.
pub const SERVICE_MAX_REQUEST_BYTES: usize = 10_000_000;
/// The default request size limit: under both the service's 10 MB and the 4 MiB that gRPC
/// servers accept by default (emulators), with room for the envelope.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 3 * 1024 * 1024;
/// The smallest request size limit accepted.
pub const MIN_MAX_REQUEST_BYTES: usize = 16 * 1024;

/// How rows reach BigQuery.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteMethod {
    /// Application-created streams with offsets (the default): a retried or replayed append
    /// at an offset BigQuery already holds is recognized, so every row lands once.
    #[default]
    #[serde(alias = "exactly-once", alias = "EXACTLY_ONCE", alias = "STORAGE_WRITE_API")]
    ExactlyOnce,
    /// The table's default stream, without offsets: a retried append may land twice.
    #[serde(
        alias = "at-least-once",
        alias = "AT_LEAST_ONCE",
        alias = "STORAGE_API_AT_LEAST_ONCE"
    )]
    AtLeastOnce,
}

/// The kind of stream an exactly-once sink writes through.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamType {
    /// Rows are visible as soon as each append is acknowledged (the default).
    #[default]
    #[serde(alias = "COMMITTED")]
    Committed,
    /// Rows become visible together at each flush, when the stream is committed.
    #[serde(alias = "PENDING")]
    Pending,
}

/// The time unit of a table's partitions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum PartitionType {
    /// One partition per hour.
    #[serde(alias = "hour")]
    Hour,
    /// One partition per day (the default).
    #[default]
    #[serde(alias = "day")]
    Day,
    /// One partition per month.
    #[serde(alias = "month")]
    Month,
    /// One partition per year.
    #[serde(alias = "year")]
    Year,
}

impl PartitionType {
    /// The API's name.
    pub fn as_str(self) -> &'static str {
        match self {
            PartitionType::Hour => "HOUR",
            PartitionType::Day => "DAY",
            PartitionType::Month => "MONTH",
            PartitionType::Year => "YEAR",
        }
    }
}

/// Time partitioning of a table the sink creates.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimePartitioning {
    /// The partition unit.
    #[serde(rename = "type", default)]
    pub partition_type: PartitionType,
    /// The DATE, DATETIME or TIMESTAMP column to partition by; none partitions by ingestion
    /// time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// How long partitions are kept (`30d`); forever when unset.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "outflow_core::duration::option"
    )]
    pub expiration: Option<Duration>,
    /// Whether queries must filter on the partition column.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub require_partition_filter: bool,
}

impl TimePartitioning {
    /// Partitions of `partition_type` on `field`.
    pub fn on(partition_type: PartitionType, field: impl Into<String>) -> Self {
        TimePartitioning {
            partition_type,
            field: Some(field.into()),
            ..TimePartitioning::default()
        }
    }
}

impl fmt::Display for TimePartitioning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.field {
            Some(field) => write!(f, "{}({field})", self.partition_type.as_str()),
            None => write!(f, "{}(_PARTITIONTIME)", self.partition_type.as_str()),
        }
    }
}

/// Where credentials come from. Written as `auto`, `application_default` (or `adc`),
/// `anonymous`, or `{service_account_key: /path/key.json}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "CredentialsSpec", into = "CredentialsSpec")]
pub enum Credentials {
    /// Anonymous for an emulator (an emulator host, or `http://` endpoints), Application
    /// Default Credentials otherwise (the default).
    #[default]
    Auto,
    /// Application Default Credentials: `GOOGLE_APPLICATION_CREDENTIALS`, gcloud's user
    /// credentials, or the metadata server.
    ApplicationDefault,
    /// No credentials, for emulators.
    Anonymous,
    /// A service account key file (JSON).
    ServiceAccountKey(String),
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(untagged)]
enum CredentialsSpec {
    Name(String),
    Key {
        #[serde(rename = "service_account_key")]
        path: String,
    },
}

impl TryFrom<CredentialsSpec> for Credentials {
    type Error = String;

    fn try_from(spec: CredentialsSpec) -> Result<Self, String> {
        match spec {
            CredentialsSpec::Key { path } => Ok(Credentials::ServiceAccountKey(path)),
            CredentialsSpec::Name(name) => match name.to_ascii_lowercase().replace('-', "_").as_str() {
                "auto" => Ok(Credentials::Auto),
                "application_default" | "adc" => Ok(Credentials::ApplicationDefault),
                "anonymous" | "none" => Ok(Credentials::Anonymous),
                _ => Err(format!(
                    "unknown credentials {name:?} (auto, application_default, anonymous, or {{service_account_key: PATH}})"
                )),
            },
        }
    }
}

impl From<Credentials> for CredentialsSpec {
    fn from(c: Credentials) -> Self {
        match c {
            Credentials::Auto => CredentialsSpec::Name("auto".into()),
            Credentials::ApplicationDefault => CredentialsSpec::Name("application_default".into()),
            Credentials::Anonymous => CredentialsSpec::Name("anonymous".into()),
            Credentials::ServiceAccountKey(path) => CredentialsSpec::Key { path },
        }
    }
}

/// How to reach BigQuery. By default the service itself with Application Default
/// Credentials; an emulator through `emulator_host` (or the `BIGQUERY_EMULATOR_HOST`
/// environment variable) or explicit endpoints.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectionOptions {
    /// The REST endpoint for tables and jobs (`https://bigquery.googleapis.com`), as a URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rest_endpoint: Option<String>,
    /// The Storage Write API's gRPC endpoint (`https://bigquerystorage.googleapis.com`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc_endpoint: Option<String>,
    /// An emulator's REST `host:port`; overrides `BIGQUERY_EMULATOR_HOST`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub emulator_host: Option<String>,
    /// The emulator's gRPC `host:port`; overrides `BIGQUERY_EMULATOR_GRPC_HOST`. Defaults to
    /// the REST host on port 9060.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub emulator_grpc_host: Option<String>,
    /// Where credentials come from.
    #[serde(default, skip_serializing_if = "is_default")]
    pub credentials: Credentials,
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

impl ConnectionOptions {
    /// An emulator at explicit REST and gRPC URLs (`http://127.0.0.1:9050`), anonymously.
    pub fn emulator(rest_endpoint: impl Into<String>, grpc_endpoint: impl Into<String>) -> Self {
        ConnectionOptions {
            rest_endpoint: Some(rest_endpoint.into()),
            grpc_endpoint: Some(grpc_endpoint.into()),
            credentials: Credentials::Anonymous,
            ..ConnectionOptions::default()
        }
    }
}

/// The BigQuery sink's options, built by [`BigQuerySinkOptions::builder`] or read from a job
/// file; always valid.
#[derive(Clone, Debug, PartialEq)]
pub struct BigQuerySinkOptions {
    pub(crate) project: Option<String>,
    pub(crate) dataset: Option<String>,
    pub(crate) table: Destination,
    pub(crate) connection: ConnectionOptions,
    pub(crate) write_method: WriteMethod,
    pub(crate) stream_type: Option<StreamType>,
    pub(crate) create_disposition: CreateDisposition,
    pub(crate) write_disposition: WriteDisposition,
    pub(crate) schema: Option<TableSchema>,
    pub(crate) schema_evolution: SchemaEvolutionConfig,
    pub(crate) time_partitioning: Option<TimePartitioning>,
    pub(crate) clustering: Vec<String>,
    pub(crate) ignore_unknown_values: bool,
    pub(crate) retry: RetryPolicy,
    pub(crate) max_request_bytes: usize,
    pub(crate) request_timeout: Duration,
    pub(crate) changes: Option<ChangeConfig>,
}

impl BigQuerySinkOptions {
    /// A builder with every default; `project`, `dataset` (unless the table names them),
    /// `table` and, for `create_if_needed`, `schema` must be set.
    pub fn builder() -> BigQuerySinkOptionsBuilder {
        BigQuerySinkOptionsBuilder::default()
    }

    /// A builder holding these options, to change some.
    pub fn to_builder(&self) -> BigQuerySinkOptionsBuilder {
        BigQuerySinkOptionsBuilder::from_options(self.clone())
    }

    /// Checks the options without I/O, naming the field at fault, as `build()` and
    /// deserializing do.
    pub fn validate(&self) -> Result<(), Error> {
        self.to_builder().build().map(|_| ())
    }

    /// The default project of table names that name none.
    pub fn project(&self) -> Option<&str> {
        self.project.as_deref()
    }

    /// The default dataset of table names that name none.
    pub fn dataset(&self) -> Option<&str> {
        self.dataset.as_deref()
    }

    /// Where rows go: one table, a template filled from each row, or a function.
    pub fn destination(&self) -> &Destination {
        &self.table
    }

    /// How to reach BigQuery.
    pub fn connection(&self) -> &ConnectionOptions {
        &self.connection
    }

    /// Exactly-once or at-least-once.
    pub fn write_method(&self) -> WriteMethod {
        self.write_method
    }

    /// The stream type of an exactly-once sink (committed unless set).
    pub fn stream_type(&self) -> StreamType {
        self.stream_type.unwrap_or_default()
    }

    /// The options for a batch load (a job `outflow run` runs): an exactly-once sink whose
    /// stream type is not set writes pending streams, so each table's rows become visible
    /// together when the load commits (as Beam's batch pipelines write), and a load that
    /// stops midway leaves none of them.
    pub fn for_batch_load(mut self) -> Self {
        if self.write_method == WriteMethod::ExactlyOnce {
            self.stream_type.get_or_insert(StreamType::Pending);
        }
        self
    }

    /// The options for the checkpoints of a streaming job. Each checkpoint's rows go to
    /// pending streams that the checkpoint commits with its offsets, so under exactly-once
    /// (`at_least_once` false) the write method must be `exactly_once`: the default
    /// stream's rows are visible as sent, and those of a checkpoint that did not commit
    /// would be there twice once the restarted job wrote them again. A streaming job
    /// appends: `truncate` would replace the table at every checkpoint, and `empty` would
    /// refuse the second.
    /// Change data is refused: each checkpoint's writer would send its changes as they come
    /// on the default stream, and this is not built (nor can the emulator show it working).
    pub fn for_checkpoints(&self, at_least_once: bool) -> Result<BigQuerySinkOptions, Error> {
        if self.changes.is_some() {
            return Err(Error::new(
                outflow_core::ErrorKind::Unsupported,
                "a streaming job does not take change data into BigQuery yet: run it as a batch job, \
                 or stream the changes into Iceberg or Bigtable",
            )
            .with_context("field", "changes"));
        }
        if !at_least_once && self.write_method == WriteMethod::AtLeastOnce {
            return Err(Error::invalid_config(
                "write_method",
                "at_least_once writes to the default stream, whose rows are visible as sent, so \
                 a streaming job that restarts would write the rows of its last uncommitted \
                 checkpoint twice: use exactly_once (pending streams committed with the \
                 offsets), or accept doubles with checkpoint.delivery: at_least_once",
            ));
        }
        if self.write_disposition != WriteDisposition::Append {
            return Err(Error::invalid_config(
                "write_disposition",
                "a streaming job appends at every checkpoint: use write_disposition append",
            ));
        }
        Ok(self.clone())
    }

    /// Whether a missing table may be created.
    pub fn create_disposition(&self) -> CreateDisposition {
        self.create_disposition
    }

    /// What happens to rows a table already holds.
    pub fn write_disposition(&self) -> WriteDisposition {
        self.write_disposition
    }

    /// The schema tables are created with.
    pub fn schema(&self) -> Option<&TableSchema> {
        self.schema.as_ref()
    }

    /// The schema changes the sink may make (field addition and relaxation), and what
    /// happens to rows that need others: failed records unless `on_incompatible: fail`.
    pub fn schema_evolution(&self) -> &SchemaEvolutionConfig {
        &self.schema_evolution
    }

    /// The time partitioning of tables the sink creates.
    pub fn time_partitioning(&self) -> Option<&TimePartitioning> {
        self.time_partitioning.as_ref()
    }

    /// The clustering columns of tables the sink creates.
    pub fn clustering(&self) -> &[String] {
        &self.clustering
    }

    /// Whether input columns the table lacks are dropped on purpose.
    pub fn ignore_unknown_values(&self) -> bool {
        self.ignore_unknown_values
    }

    /// How service calls are retried.
    pub fn retry(&self) -> &RetryPolicy {
        &self.retry
    }

    /// The largest AppendRows request, in bytes.
    pub fn max_request_bytes(&self) -> usize {
        self.max_request_bytes
    }

    /// How long one service call may take before it is abandoned (and retried).
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// Change data: rows upsert or delete the row with their primary key (BigQuery's change
    /// data capture, see [`crate::changes`]) instead of being appended.
    pub fn changes(&self) -> Option<&ChangeConfig> {
        self.changes.as_ref()
    }

    /// Checks the options against the schema of the rows the sink will receive, without
    /// I/O: the fields a table template names, and the time-partitioning and clustering
    /// columns of a table the sink would create, which the rows must have (a partitioning
    /// column the rows lack would put every row in the NULL partition). The error names the
    /// option and the column. What `outflow check` adds to [`validate`](Self::validate).
    pub fn check_input(&self, schema: &ArrowSchema) -> Result<(), Error> {
        self.table.validate(schema)?;
        if let Some(changes) = &self.changes {
            changes.check_input(schema)?;
        }
        let partitioning = self.time_partitioning.iter().filter_map(|p| p.field.as_deref());
        let named = partitioning
            .map(|column| ("time_partitioning.field", column))
            .chain(
                self.clustering
                    .iter()
                    .map(|column| ("clustering", column.as_str())),
            );
        for (key, column) in named {
            if !schema
                .fields()
                .iter()
                .any(|f| f.name().eq_ignore_ascii_case(column))
            {
                return Err(Error::invalid_config(
                    key,
                    format!("the rows have no column {column} (a table is created with it from `schema`)"),
                )
                .with_context("column", column.to_string()));
            }
        }
        Ok(())
    }

    /// The same options with a relative service-account key file taken relative to `base`
    /// instead of the working directory.
    pub fn relative_to(&self, base: &Path) -> BigQuerySinkOptions {
        let mut options = self.clone();
        if let Credentials::ServiceAccountKey(path) = &options.connection.credentials
            && Path::new(path).is_relative()
        {
            let resolved = base.join(path).display().to_string();
            options.connection.credentials = Credentials::ServiceAccountKey(resolved);
        }
        options
    }
}

/// The serialized form of [`BigQuerySinkOptions`]: the job file's keys.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OptionsSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<String>,
    pub table: Destination,
    #[serde(default, skip_serializing_if = "is_default")]
    pub connection: ConnectionOptions,
    #[serde(default)]
    pub write_method: WriteMethod,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_type: Option<StreamType>,
    #[serde(default)]
    pub create_disposition: CreateDisposition,
    #[serde(default)]
    pub write_disposition: WriteDisposition,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<TableSchema>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub schema_evolution: SchemaEvolutionConfig,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_partitioning: Option<TimePartitioning>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clustering: Vec<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignore_unknown_values: bool,
    #[serde(default, skip_serializing_if = "is_default")]
    pub retry: RetryPolicy,
    #[serde(default = "default_max_request_bytes")]
    pub max_request_bytes: usize,
    #[serde(default = "default_request_timeout", with = "outflow_core::duration")]
    pub request_timeout: Duration,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes: Option<ChangeConfig>,
}

fn default_max_request_bytes() -> usize {
    DEFAULT_MAX_REQUEST_BYTES
}

/// The default time one service call may take.
pub(crate) fn default_request_timeout() -> Duration {
    Duration::from_secs(60)
}

impl TryFrom<OptionsSpec> for BigQuerySinkOptions {
    type Error = Error;

    fn try_from(spec: OptionsSpec) -> Result<Self, Error> {
        BigQuerySinkOptionsBuilder::from_options(BigQuerySinkOptions {
            project: spec.project,
            dataset: spec.dataset,
            table: spec.table,
            connection: spec.connection,
            write_method: spec.write_method,
            stream_type: spec.stream_type,
            create_disposition: spec.create_disposition,
            write_disposition: spec.write_disposition,
            schema: spec.schema,
            schema_evolution: spec.schema_evolution,
            time_partitioning: spec.time_partitioning,
            clustering: spec.clustering,
            ignore_unknown_values: spec.ignore_unknown_values,
            retry: spec.retry,
            max_request_bytes: spec.max_request_bytes,
            request_timeout: spec.request_timeout,
            changes: spec.changes,
        })
        .build()
    }
}

impl From<BigQuerySinkOptions> for OptionsSpec {
    fn from(o: BigQuerySinkOptions) -> Self {
        OptionsSpec {
            project: o.project,
            dataset: o.dataset,
            table: o.table,
            connection: o.connection,
            write_method: o.write_method,
            stream_type: o.stream_type,
            create_disposition: o.create_disposition,
            write_disposition: o.write_disposition,
            schema: o.schema,
            schema_evolution: o.schema_evolution,
            time_partitioning: o.time_partitioning,
            clustering: o.clustering,
            ignore_unknown_values: o.ignore_unknown_values,
            retry: o.retry,
            max_request_bytes: o.max_request_bytes,
            request_timeout: o.request_timeout,
            changes: o.changes,
        }
    }
}

impl Serialize for BigQuerySinkOptions {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        OptionsSpec::from(self.clone()).serialize(s)
    }
}

impl<'de> Deserialize<'de> for BigQuerySinkOptions {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let spec = OptionsSpec::deserialize(d)?;
        BigQuerySinkOptions::try_from(spec).map_err(|e| serde::de::Error::custom(e.message()))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn partitioned() -> BigQuerySinkOptions {
        use crate::schema::{FieldType, TableField};
        BigQuerySinkOptions::builder()
            .table("p.d.events_{region}")
            .schema(TableSchema::new(vec![
                TableField::new("id", FieldType::Int64),
                TableField::new("region", FieldType::String),
                TableField::new("ts", FieldType::Timestamp),
            ]))
            .time_partitioning(TimePartitioning::on(PartitionType::Day, "ts"))
            .clustering(["ID", "region"])
            .build()
            .unwrap()
    }

    #[test]
    fn check_input_needs_the_columns_the_options_name() {
        use arrow_schema::{DataType, Field, TimeUnit};
        let id = Field::new("id", DataType::Int64, true);
        let region = Field::new("region", DataType::Utf8, true);
        let ts = Field::new("ts", DataType::Timestamp(TimeUnit::Microsecond, None), true);
        let options = partitioned();
        options
            .check_input(&ArrowSchema::new(vec![id.clone(), region.clone(), ts.clone()]))
            .unwrap();
        let cases = [
            (vec![id.clone(), region.clone()], "time_partitioning.field", "ts"),
            (vec![region.clone(), ts.clone()], "clustering", "ID"),
            (vec![id, ts], "table", "region"),
        ];
        for (fields, key, column) in cases {
            let err = options.check_input(&ArrowSchema::new(fields)).unwrap_err();
            assert_eq!(err.kind(), outflow_core::ErrorKind::InvalidConfig, "{err}");
            assert_eq!(err.context_value("field"), Some(key), "{err}");
            assert_eq!(err.context_value("column"), Some(column), "{err}");
        }
    }

    /// Change data into an existing table `p.d.t`, keyed by `id`.
    pub(crate) fn change_options() -> BigQuerySinkOptions {
        use outflow_core::changes::{ChangeConfig, OperationColumn};
        BigQuerySinkOptions::builder()
            .table("p.d.t")
            .create_disposition(CreateDisposition::CreateNever)
            .write_method(WriteMethod::AtLeastOnce)
            .changes(ChangeConfig::new(["id"], OperationColumn::new("op")))
            .build()
            .unwrap()
    }

    #[test]
    fn streaming_jobs_refuse_change_data_by_name() {
        let options = change_options();
        for at_least_once in [false, true] {
            let err = options.for_checkpoints(at_least_once).unwrap_err();
            assert_eq!(err.kind(), outflow_core::ErrorKind::Unsupported, "{err}");
            assert_eq!(err.context_value("field"), Some("changes"), "{err}");
        }
    }

    #[test]
    fn a_relative_key_file_resolves_against_a_base() {
        let options = BigQuerySinkOptions::builder()
            .table("p.d.t")
            .create_disposition(CreateDisposition::CreateNever)
            .connection(ConnectionOptions {
                credentials: Credentials::ServiceAccountKey("keys/sa.json".into()),
                ..ConnectionOptions::default()
            })
            .build()
            .unwrap();
        let moved = options.relative_to(Path::new("/jobs"));
        assert_eq!(
            moved.connection().credentials,
            Credentials::ServiceAccountKey("/jobs/keys/sa.json".into())
        );
        assert_eq!(moved.relative_to(Path::new("/elsewhere")), moved);
    }
}
