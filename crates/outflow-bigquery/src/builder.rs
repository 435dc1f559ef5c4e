//! Building [`BigQuerySinkOptions`]: setters never fail; `build()` checks everything before
//! any I/O and names the field at fault.

use std::collections::BTreeSet;
use std::time::Duration;

use outflow_core::{
    CreateDisposition, Destination, Error, Result, RetryPolicy, SchemaEvolutionConfig, SchemaEvolutionOption,
    WriteDisposition,
};

use crate::options::{
    BigQuerySinkOptions, ConnectionOptions, Credentials, DEFAULT_MAX_REQUEST_BYTES, MIN_MAX_REQUEST_BYTES,
    PartitionType, SERVICE_MAX_REQUEST_BYTES, StreamType, TimePartitioning, WriteMethod,
    default_request_timeout,
};
use crate::schema::{FieldMode, FieldType, TableSchema};
use crate::table_ref::{TableRef, validate_dataset, validate_project};

/// Builds [`BigQuerySinkOptions`].
#[derive(Clone, Debug, PartialEq)]
pub struct BigQuerySinkOptionsBuilder {
    options: BigQuerySinkOptions,
    table_set: bool,
}

impl Default for BigQuerySinkOptionsBuilder {
    fn default() -> Self {
        BigQuerySinkOptionsBuilder {
            options: BigQuerySinkOptions {
                project: None,
                dataset: None,
                table: Destination::Table(String::new()),
                connection: ConnectionOptions::default(),
                write_method: WriteMethod::default(),
                stream_type: None,
                create_disposition: CreateDisposition::default(),
                write_disposition: WriteDisposition::default(),
                schema: None,
                schema_evolution: SchemaEvolutionConfig::default(),
                time_partitioning: None,
                clustering: Vec::new(),
                ignore_unknown_values: false,
                retry: RetryPolicy::default(),
                max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
                request_timeout: default_request_timeout(),
                changes: None,
            },
            table_set: false,
        }
    }
}

impl BigQuerySinkOptionsBuilder {
    pub(crate) fn from_options(options: BigQuerySinkOptions) -> Self {
        BigQuerySinkOptionsBuilder {
            options,
            table_set: true,
        }
    }

    /// The default project for table names that name none.
    pub fn project(mut self, project: impl Into<String>) -> Self {
        self.options.project = Some(project.into());
        self
    }

    /// The default dataset for table names that name none.
    pub fn dataset(mut self, dataset: impl Into<String>) -> Self {
        self.options.dataset = Some(dataset.into());
        self
    }

    /// The table: `table`, `dataset.table`, `project.dataset.table`, or a template with
    /// `{field}` placeholders filled from each row (`events_{region}`).
    pub fn table(mut self, table: impl AsRef<str>) -> Self {
        self.options.table = Destination::parse(table.as_ref())
            .unwrap_or_else(|_| Destination::Table(table.as_ref().to_string()));
        self.table_set = true;
        self
    }

    /// Where rows go, including a function of the row (which cannot be serialized).
    pub fn destination(mut self, destination: Destination) -> Self {
        self.options.table = destination;
        self.table_set = true;
        self
    }

    /// How to reach BigQuery.
    pub fn connection(mut self, connection: ConnectionOptions) -> Self {
        self.options.connection = connection;
        self
    }

    /// Exactly-once (application streams with offsets) or at-least-once (default stream).
    pub fn write_method(mut self, method: WriteMethod) -> Self {
        self.options.write_method = method;
        self
    }

    /// Committed or pending streams, for exactly-once.
    pub fn stream_type(mut self, stream_type: StreamType) -> Self {
        self.options.stream_type = Some(stream_type);
        self
    }

    /// Whether a missing table may be created.
    pub fn create_disposition(mut self, disposition: CreateDisposition) -> Self {
        self.options.create_disposition = disposition;
        self
    }

    /// What happens to rows a table already holds.
    pub fn write_disposition(mut self, disposition: WriteDisposition) -> Self {
        self.options.write_disposition = disposition;
        self
    }

    /// The schema missing tables are created with.
    pub fn schema(mut self, schema: TableSchema) -> Self {
        self.options.schema = Some(schema);
        self
    }

    /// The schema changes the sink may make before the rows that need them (field
    /// addition, field relaxation), pinned columns, and what happens to rows that need
    /// changes it may not make (`on_incompatible`: failed records unless set to `fail`).
    pub fn schema_evolution(mut self, config: SchemaEvolutionConfig) -> Self {
        self.options.schema_evolution = config;
        self
    }

    /// Time partitioning for tables the sink creates.
    pub fn time_partitioning(mut self, partitioning: TimePartitioning) -> Self {
        self.options.time_partitioning = Some(partitioning);
        self
    }

    /// Clustering columns for tables the sink creates (at most four).
    pub fn clustering<S: Into<String>>(mut self, columns: impl IntoIterator<Item = S>) -> Self {
        self.options.clustering = columns.into_iter().map(Into::into).collect();
        self
    }

    /// Drops input columns the table lacks instead of failing their rows.
    pub fn ignore_unknown_values(mut self, ignore: bool) -> Self {
        self.options.ignore_unknown_values = ignore;
        self
    }

    /// How service calls are retried.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.options.retry = policy;
        self
    }

    /// The largest AppendRows request, in bytes.
    pub fn max_request_bytes(mut self, bytes: usize) -> Self {
        self.options.max_request_bytes = bytes;
        self
    }

    /// How long one service call may take before it is abandoned and retried.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.options.request_timeout = timeout;
        self
    }

    /// Change data: each row upserts or deletes the row with its key (BigQuery's change data
    /// capture); needs `write_method: at_least_once` and `write_disposition: append`.
    pub fn changes(mut self, changes: outflow_core::changes::ChangeConfig) -> Self {
        self.options.changes = Some(changes);
        self
    }

    /// Validates and builds the options.
    pub fn build(self) -> Result<BigQuerySinkOptions> {
        let o = self.options;
        if let Some(project) = &o.project {
            validate_project(project)?;
        }
        if let Some(dataset) = &o.dataset {
            validate_dataset(dataset)?;
        }
        if !self.table_set {
            return Err(Error::invalid_config(
                "table",
                "required: the table rows are written to",
            ));
        }
        validate_destination(&o.table, o.project.as_deref(), o.dataset.as_deref())?;
        validate_connection(&o.connection)?;
        if o.write_method == WriteMethod::AtLeastOnce && o.stream_type.is_some() {
            return Err(Error::invalid_config(
                "stream_type",
                "applies to write_method exactly_once; at_least_once writes through the default stream",
            ));
        }
        if let Some(schema) = &o.schema {
            schema.validate()?;
        } else if o.create_disposition == CreateDisposition::CreateIfNeeded {
            return Err(Error::invalid_config(
                "schema",
                "required when create_disposition is create_if_needed: missing tables are created with it \
                 (or set create_disposition: create_never)",
            ));
        }
        if o.schema_evolution
            .allows(SchemaEvolutionOption::AllowTypePromotion)
        {
            return Err(Error::invalid_config(
                "schema_evolution.options",
                "allow_type_promotion is not a BigQuery schema update (BigQuery allows field addition and \
                 field relaxation)",
            ));
        }
        if o.schema_evolution.dry_run() {
            return Err(Error::invalid_config(
                "schema_evolution.dry_run",
                "a sink writes; to see what it would change, plan instead (`outflow plan`)",
            ));
        }
        let creates = o.create_disposition == CreateDisposition::CreateIfNeeded;
        if let Some(partitioning) = &o.time_partitioning {
            if !creates {
                return Err(Error::invalid_config(
                    "time_partitioning",
                    "applies to tables the sink creates, and create_disposition is create_never",
                ));
            }
            validate_partitioning(partitioning, o.schema.as_ref())?;
        }
        if !o.clustering.is_empty() {
            if !creates {
                return Err(Error::invalid_config(
                    "clustering",
                    "applies to tables the sink creates, and create_disposition is create_never",
                ));
            }
            validate_clustering(&o.clustering, o.schema.as_ref())?;
        }
        o.retry
            .validate()
            .map_err(|e| Error::invalid_config("retry", e.message()))?;
        if !(MIN_MAX_REQUEST_BYTES..=SERVICE_MAX_REQUEST_BYTES).contains(&o.max_request_bytes) {
            return Err(Error::invalid_config(
                "max_request_bytes",
                format!(
                    "{} is outside {MIN_MAX_REQUEST_BYTES}..={SERVICE_MAX_REQUEST_BYTES} (the service's limit per request)",
                    o.max_request_bytes
                ),
            ));
        }
        if o.request_timeout.is_zero() {
            return Err(Error::invalid_config(
                "request_timeout",
                "must be longer than zero",
            ));
        }
        if let Some(changes) = &o.changes {
            validate_changes(&o, changes)?;
        }
        Ok(o)
    }
}

/// Change data goes through the default stream, so it is at-least-once (a change sent
/// twice is applied once: its sequence number says it is not newer), and it changes rows
/// in place, so the other dispositions mean nothing for it.
fn validate_changes(o: &BigQuerySinkOptions, changes: &outflow_core::changes::ChangeConfig) -> Result<()> {
    changes.validate()?;
    if o.write_method != WriteMethod::AtLeastOnce {
        return Err(Error::invalid_config(
            "write_method",
            "change data goes through the table's default stream (BigQuery's change data capture), which \
             is at-least-once: set write_method: at_least_once (a change sent twice is applied once)",
        ));
    }
    if o.write_disposition != WriteDisposition::Append {
        return Err(Error::invalid_config(
            "write_disposition",
            "change data upserts and deletes rows of the table as it is: use append",
        ));
    }
    if let Some(schema) = &o.schema {
        for key in &changes.key {
            if !schema.fields.iter().any(|f| f.name.eq_ignore_ascii_case(key)) {
                return Err(Error::invalid_config(
                    "changes.key",
                    format!("{key} is not a column of the schema tables are created with"),
                ));
            }
        }
    }
    Ok(())
}

/// A fixed table must parse; a template must produce valid names once filled (checked with
/// a sample value), and both need a project and a dataset from somewhere.
fn validate_destination(table: &Destination, project: Option<&str>, dataset: Option<&str>) -> Result<()> {
    match table {
        Destination::Table(name) => {
            if name.trim().is_empty() {
                return Err(Error::invalid_config(
                    "table",
                    "required: the table rows are written to",
                ));
            }
            TableRef::parse(name, project, dataset).map(|_| ())
        }
        Destination::Template(template) => {
            let mut sample = template.to_string();
            for field in template.fields() {
                sample = sample.replace(&format!("{{{field}}}"), "x");
            }
            TableRef::parse(&sample, project, dataset)
                .map(|_| ())
                .map_err(|e| {
                    Error::invalid_config("table", format!("template {template}: {}", e.message()))
                        .with_context("table", template.to_string())
                })
        }
        Destination::Function(_) => {
            if project.is_none() {
                return Err(Error::invalid_config(
                    "project",
                    "required with a destination function",
                ));
            }
            Ok(())
        }
    }
}

fn validate_connection(c: &ConnectionOptions) -> Result<()> {
    for (field, endpoint) in [
        ("connection.rest_endpoint", &c.rest_endpoint),
        ("connection.grpc_endpoint", &c.grpc_endpoint),
    ] {
        if let Some(e) = endpoint
            && !(e.starts_with("http://") || e.starts_with("https://"))
        {
            return Err(Error::invalid_config(
                field,
                format!("{e:?} is not an http:// or https:// URL"),
            ));
        }
    }
    if c.emulator_host.is_some() && (c.rest_endpoint.is_some() || c.grpc_endpoint.is_some()) {
        return Err(Error::invalid_config(
            "connection.emulator_host",
            "give either an emulator host or explicit endpoints, not both",
        ));
    }
    for (field, host) in [
        ("connection.emulator_host", &c.emulator_host),
        ("connection.emulator_grpc_host", &c.emulator_grpc_host),
    ] {
        if let Some(h) = host
            && h.trim().is_empty()
        {
            return Err(Error::invalid_config(field, "is blank"));
        }
    }
    if let Credentials::ServiceAccountKey(path) = &c.credentials
        && path.trim().is_empty()
    {
        return Err(Error::invalid_config(
            "connection.credentials",
            "the service account key path is blank",
        ));
    }
    Ok(())
}

fn validate_partitioning(p: &TimePartitioning, schema: Option<&TableSchema>) -> Result<()> {
    let field = "time_partitioning";
    let Some(name) = &p.field else {
        return Ok(());
    };
    let Some(schema) = schema else {
        return Err(Error::invalid_config(
            field,
            "a partitioning column needs a schema",
        ));
    };
    let column = schema.field(name).ok_or_else(|| {
        Error::invalid_config(field, format!("the schema has no top-level column {name:?}"))
    })?;
    let allowed = match column.field_type {
        FieldType::Date => p.partition_type != PartitionType::Hour,
        FieldType::Datetime | FieldType::Timestamp => true,
        _ => false,
    };
    if !allowed || column.mode == FieldMode::Repeated {
        return Err(Error::invalid_config(
            field,
            format!(
                "column {name} is {} {}: partition by a DATE (DAY, MONTH, YEAR), DATETIME or TIMESTAMP column",
                column.mode, column.field_type
            ),
        ));
    }
    Ok(())
}

fn validate_clustering(columns: &[String], schema: Option<&TableSchema>) -> Result<()> {
    let field = "clustering";
    if columns.len() > 4 {
        return Err(Error::invalid_config(
            field,
            format!("{} columns given; BigQuery clusters by at most 4", columns.len()),
        ));
    }
    let Some(schema) = schema else {
        return Err(Error::invalid_config(field, "clustering columns need a schema"));
    };
    let mut seen = BTreeSet::new();
    for name in columns {
        if !seen.insert(name.to_ascii_lowercase()) {
            return Err(Error::invalid_config(
                field,
                format!("column {name} is listed twice"),
            ));
        }
        let column = schema.field(name).ok_or_else(|| {
            Error::invalid_config(field, format!("the schema has no top-level column {name:?}"))
        })?;
        let clusterable = !matches!(
            column.field_type,
            FieldType::Record | FieldType::Float64 | FieldType::Json
        );
        if !clusterable || column.mode == FieldMode::Repeated {
            return Err(Error::invalid_config(
                field,
                format!(
                    "column {name} is {} {}, which BigQuery cannot cluster by",
                    column.mode, column.field_type
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::TableField;

    fn schema() -> TableSchema {
        TableSchema::new(vec![
            TableField::new("id", FieldType::Int64).required(),
            TableField::new("ts", FieldType::Timestamp),
            TableField::new("d", FieldType::Date),
            TableField::new("f", FieldType::Float64),
            TableField::new("tags", FieldType::String).repeated(),
        ])
    }

    fn base() -> BigQuerySinkOptionsBuilder {
        BigQuerySinkOptions::builder()
            .project("p")
            .dataset("d")
            .table("t")
            .schema(schema())
    }

    #[test]
    fn defaults() {
        let o = base().build().unwrap();
        assert_eq!(o.write_method(), WriteMethod::ExactlyOnce);
        assert_eq!(o.stream_type(), StreamType::Committed);
        assert_eq!(o.create_disposition(), CreateDisposition::CreateIfNeeded);
        assert_eq!(o.write_disposition(), WriteDisposition::Append);
        assert!(!o.schema_evolution().is_enabled());
        assert!(!o.ignore_unknown_values());
        assert_eq!(o.max_request_bytes(), DEFAULT_MAX_REQUEST_BYTES);
        const { assert!(DEFAULT_MAX_REQUEST_BYTES < 4 * 1024 * 1024) };
        assert_eq!(o.request_timeout(), Duration::from_secs(60));
        assert_eq!(o.retry(), &RetryPolicy::default());
        assert_eq!(o.connection(), &ConnectionOptions::default());
        assert_eq!(o.destination(), &Destination::Table("t".into()));
    }

    #[test]
    fn setters() {
        let o = BigQuerySinkOptions::builder()
            .project("p")
            .dataset("d")
            .table("events_{region}")
            .connection(ConnectionOptions::emulator(
                "http://127.0.0.1:9050",
                "http://127.0.0.1:9060",
            ))
            .write_method(WriteMethod::ExactlyOnce)
            .stream_type(StreamType::Pending)
            .create_disposition(CreateDisposition::CreateIfNeeded)
            .write_disposition(WriteDisposition::Truncate)
            .schema(schema())
            .schema_evolution(
                SchemaEvolutionConfig::builder()
                    .allow(SchemaEvolutionOption::AllowFieldAddition)
                    .allow(SchemaEvolutionOption::AllowFieldRelaxation)
                    .build()
                    .unwrap(),
            )
            .time_partitioning(TimePartitioning::on(PartitionType::Day, "ts"))
            .clustering(["id", "d"])
            .ignore_unknown_values(true)
            .retry(RetryPolicy::none())
            .max_request_bytes(1 << 20)
            .request_timeout(Duration::from_secs(5))
            .build()
            .unwrap();
        assert_eq!(o.project(), Some("p"));
        assert_eq!(o.dataset(), Some("d"));
        assert!(matches!(o.destination(), Destination::Template(_)));
        assert_eq!(o.connection().credentials, Credentials::Anonymous);
        assert_eq!(o.stream_type(), StreamType::Pending);
        assert_eq!(o.write_disposition(), WriteDisposition::Truncate);
        assert_eq!(o.schema_evolution().options().len(), 2);
        assert_eq!(o.time_partitioning().unwrap().to_string(), "DAY(ts)");
        assert_eq!(o.clustering(), ["id", "d"]);
        assert!(o.ignore_unknown_values());
        assert_eq!(o.retry().max_attempts(), 1);
        assert_eq!(o.max_request_bytes(), 1 << 20);
        assert_eq!(o.request_timeout(), Duration::from_secs(5));
        assert_eq!(o.to_builder().build().unwrap(), o);
    }

    fn field_of(builder: BigQuerySinkOptionsBuilder) -> (String, String) {
        let err = builder.build().unwrap_err();
        (
            err.context_value("field").unwrap_or_default().to_string(),
            err.to_string(),
        )
    }

    #[test]
    fn build_rejects_bad_settings_naming_the_field() {
        let cases: Vec<(BigQuerySinkOptionsBuilder, &str, &str)> = vec![
            (
                BigQuerySinkOptions::builder()
                    .project("p")
                    .dataset("d")
                    .table("t"),
                "schema",
                "create_if_needed",
            ),
            (
                BigQuerySinkOptions::builder()
                    .project("p")
                    .dataset("d")
                    .schema(schema()),
                "table",
                "required",
            ),
            (base().table("bad-name!"), "table", "bad-name!"),
            (base().table("events_{region}!"), "table", "template"),
            (base().table("a.b.c.d"), "table", "a.b.c.d"),
            (
                BigQuerySinkOptions::builder()
                    .dataset("d")
                    .table("t")
                    .schema(schema()),
                "table",
                "no project",
            ),
            (base().project("Bad_Project"), "project", "Bad_Project"),
            (base().dataset("has-dash"), "dataset", "has-dash"),
            (
                base()
                    .write_method(WriteMethod::AtLeastOnce)
                    .stream_type(StreamType::Pending),
                "stream_type",
                "default stream",
            ),
            (
                base().schema_evolution(
                    SchemaEvolutionConfig::builder()
                        .allow(SchemaEvolutionOption::AllowTypePromotion)
                        .build()
                        .unwrap(),
                ),
                "schema_evolution.options",
                "promotion",
            ),
            (
                base().time_partitioning(TimePartitioning::on(PartitionType::Day, "nope")),
                "time_partitioning",
                "nope",
            ),
            (
                base().time_partitioning(TimePartitioning::on(PartitionType::Day, "f")),
                "time_partitioning",
                "FLOAT64",
            ),
            (
                base().time_partitioning(TimePartitioning::on(PartitionType::Hour, "d")),
                "time_partitioning",
                "DATE",
            ),
            (
                base()
                    .create_disposition(CreateDisposition::CreateNever)
                    .time_partitioning(TimePartitioning::default()),
                "time_partitioning",
                "create_never",
            ),
            (
                base().clustering(["id", "ts", "d", "tags", "id"]),
                "clustering",
                "at most 4",
            ),
            (base().clustering(["f"]), "clustering", "FLOAT64"),
            (base().clustering(["tags"]), "clustering", "REPEATED"),
            (base().clustering(["id", "ID"]), "clustering", "twice"),
            (
                base().max_request_bytes(20_000_000),
                "max_request_bytes",
                "10000000",
            ),
            (base().request_timeout(Duration::ZERO), "request_timeout", "zero"),
            (
                base().connection(ConnectionOptions {
                    rest_endpoint: Some("127.0.0.1:9050".into()),
                    ..ConnectionOptions::default()
                }),
                "connection.rest_endpoint",
                "URL",
            ),
            (
                base().connection(ConnectionOptions {
                    emulator_host: Some("127.0.0.1:9050".into()),
                    grpc_endpoint: Some("http://127.0.0.1:9060".into()),
                    ..ConnectionOptions::default()
                }),
                "connection.emulator_host",
                "not both",
            ),
            (
                base().schema(TableSchema::new(vec![TableField::new(
                    "x",
                    "WIBBLE".parse().unwrap(),
                )])),
                "schema",
                "WIBBLE",
            ),
        ];
        for (builder, field, text) in cases {
            let (got, message) = field_of(builder);
            assert_eq!(got, field, "{message}");
            assert!(message.contains(text), "{field}: {message}");
        }
        // create_never needs no schema.
        let o = BigQuerySinkOptions::builder()
            .project("p")
            .dataset("d")
            .table("t")
            .create_disposition(CreateDisposition::CreateNever)
            .build()
            .unwrap();
        assert!(o.schema().is_none());
    }

    #[test]
    fn change_data_needs_the_default_stream_append_and_key_columns_of_the_schema() {
        use outflow_core::changes::{ChangeConfig, OperationColumn};
        let changes = |key: &[&str]| ChangeConfig::new(key.iter().copied(), OperationColumn::new("op"));
        let o = base()
            .write_method(WriteMethod::AtLeastOnce)
            .changes(changes(&["id"]))
            .build()
            .unwrap();
        assert_eq!(o.changes(), Some(&changes(&["id"])));
        let yaml = serde_yaml_ng::to_string(&o).unwrap();
        assert!(yaml.contains("changes:"), "{yaml}");
        assert_eq!(serde_yaml_ng::from_str::<BigQuerySinkOptions>(&yaml).unwrap(), o);

        let cases = [
            (base().changes(changes(&["id"])), "write_method", "at_least_once"),
            (
                base()
                    .write_method(WriteMethod::AtLeastOnce)
                    .write_disposition(WriteDisposition::Truncate)
                    .changes(changes(&["id"])),
                "write_disposition",
                "append",
            ),
            (
                base()
                    .write_method(WriteMethod::AtLeastOnce)
                    .changes(changes(&["region"])),
                "changes.key",
                "region",
            ),
            (
                base()
                    .write_method(WriteMethod::AtLeastOnce)
                    .changes(changes(&["op"])),
                "changes.key",
                "operation column",
            ),
        ];
        for (builder, field, says) in cases {
            let err = builder.build().unwrap_err();
            assert_eq!(err.context_value("field"), Some(field), "{err}");
            assert!(err.message().contains(says), "{err}");
        }
    }

    #[test]
    fn serde_round_trip_and_validation() {
        let yaml = r#"
project: p
dataset: d
table: events_{region}
write_method: exactly_once
stream_type: pending
write_disposition: WRITE_TRUNCATE
schema:
  - {name: id, type: INTEGER, mode: REQUIRED}
  - {name: ts, type: TIMESTAMP}
schema_evolution: {options: [ALLOW_FIELD_ADDITION, allow_field_relaxation]}
time_partitioning: {type: DAY, field: ts, expiration: 30d}
clustering: [id]
ignore_unknown_values: true
connection: {emulator_host: "127.0.0.1:9050"}
retry: {max_attempts: 3, deadline: 30s}
max_request_bytes: 1048576
request_timeout: 10s
"#;
        let o: BigQuerySinkOptions = serde_yaml_ng::from_str(yaml).unwrap();
        assert_eq!(o.stream_type(), StreamType::Pending);
        assert_eq!(o.write_disposition(), WriteDisposition::Truncate);
        assert_eq!(
            o.time_partitioning().unwrap().expiration,
            Some(Duration::from_secs(30 * 86400))
        );
        assert_eq!(o.retry().max_attempts(), 3);
        let json = serde_json::to_string(&o).unwrap();
        assert_eq!(serde_json::from_str::<BigQuerySinkOptions>(&json).unwrap(), o);
        let back = serde_yaml_ng::to_string(&o).unwrap();
        assert_eq!(serde_yaml_ng::from_str::<BigQuerySinkOptions>(&back).unwrap(), o);
        let minimal: BigQuerySinkOptions =
            serde_yaml_ng::from_str("table: p.d.t\ncreate_disposition: create_never\n").unwrap();
        assert_eq!(minimal.write_method(), WriteMethod::ExactlyOnce);
        let err = serde_yaml_ng::from_str::<BigQuerySinkOptions>("table: p.d.t\n").unwrap_err();
        assert!(err.to_string().contains("schema"), "{err}");
        let err = serde_yaml_ng::from_str::<BigQuerySinkOptions>(
            "table: p.d.t\ncreate_disposition: create_never\ntabel: x\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("tabel"), "{err}");
        let creds: ConnectionOptions =
            serde_yaml_ng::from_str("credentials: {service_account_key: /k.json}\n").unwrap();
        assert_eq!(
            creds.credentials,
            Credentials::ServiceAccountKey("/k.json".into())
        );
        let adc: ConnectionOptions = serde_yaml_ng::from_str("credentials: adc\n").unwrap();
        assert_eq!(adc.credentials, Credentials::ApplicationDefault);
    }
}
