//! Builders of the options in [`crate::options`]: setters that never fail, every check in
//! `build()`, naming the field at fault.

use std::time::Duration;

use outflow_core::{CreateDisposition, Destination, Result, RetryPolicy};

use crate::batch::Batching;
use crate::options::{BigtableSinkOptions, Changes, ColumnFamily, GcRule, TableCreateOptions, ValueType};
use crate::schema::{CellTimestamp, ColumnMapping, RowKey};

/// Builds [`TableCreateOptions`]; adding never fails, [`TableCreateOptionsBuilder::build`]
/// validates.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TableCreateOptionsBuilder {
    column_families: Vec<ColumnFamily>,
}

impl TableCreateOptionsBuilder {
    /// Adds a family (after the ones added before).
    pub fn column_family(mut self, family: ColumnFamily) -> Self {
        self.column_families.push(family);
        self
    }

    /// Adds a raw family with an optional GC rule.
    pub fn raw_family(self, name: impl Into<String>, gc_rule: Option<GcRule>) -> Self {
        let family = ColumnFamily {
            name: name.into(),
            gc_rule,
            value_type: ValueType::Raw,
        };
        self.column_family(family)
    }

    /// Validates and builds: at least one family, none blank or repeated.
    pub fn build(self) -> Result<TableCreateOptions> {
        TableCreateOptions::validate(self.column_families)
    }
}

/// Builds [`BigtableSinkOptions`]; setters never fail, [`BigtableSinkOptionsBuilder::build`]
/// validates.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BigtableSinkOptionsBuilder {
    options: BigtableSinkOptions,
}

impl BigtableSinkOptionsBuilder {
    /// A builder holding `options`.
    pub(crate) fn from_options(options: BigtableSinkOptions) -> Self {
        BigtableSinkOptionsBuilder { options }
    }

    /// The Google Cloud project.
    pub fn project(mut self, project: impl Into<String>) -> Self {
        self.options.project = project.into();
        self
    }

    /// The Bigtable instance.
    pub fn instance(mut self, instance: impl Into<String>) -> Self {
        self.options.instance = instance.into();
        self
    }

    /// Every row to this table (its id, not its full path).
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.options.destination = Some(Destination::Table(table.into()));
        self
    }

    /// Each row to the table a template or function picks for it.
    pub fn destination(mut self, destination: Destination) -> Self {
        self.options.destination = Some(destination);
        self
    }

    /// The app profile requests go through (the instance's default when unset).
    pub fn app_profile_id(mut self, app_profile_id: impl Into<String>) -> Self {
        self.options.app_profile_id = Some(app_profile_id.into());
        self
    }

    /// An explicit endpoint (`host:port`, `http://..` or `https://..`), used without
    /// credentials: an emulator or a local proxy. Without it, `BIGTABLE_EMULATOR_HOST` is
    /// used when set, and the service with Application Default Credentials otherwise.
    pub fn endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.options.endpoint = Some(endpoint.into());
        self
    }

    /// Whether a missing table may be created (the default) or is an error.
    pub fn create_disposition(mut self, disposition: CreateDisposition) -> Self {
        self.options.create_disposition = disposition;
        self
    }

    /// The families to create or add; required with `CreateIfNeeded`, refused with
    /// `CreateNever`.
    pub fn table_options(mut self, options: TableCreateOptions) -> Self {
        self.options.table_options = Some(options);
        self
    }

    /// How row keys are made.
    pub fn row_key(mut self, row_key: RowKey) -> Self {
        self.options.row_key = Some(row_key);
        self
    }

    /// Which fields go to which columns.
    pub fn columns(mut self, columns: ColumnMapping) -> Self {
        self.options.columns = Some(columns);
        self
    }

    /// Where cell timestamps come from.
    pub fn timestamp(mut self, timestamp: CellTimestamp) -> Self {
        self.options.timestamp = timestamp;
        self
    }

    /// A field saying whether a row writes or deletes: null (or `write`) writes; `row`
    /// deletes the row; `families` deletes the families the row has values in; `cells`
    /// deletes the columns it has values in (only the row's version when timestamps come
    /// from a field). A boolean field deletes the row when true.
    pub fn delete_marker(mut self, field: impl Into<String>) -> Self {
        self.options.delete_marker = Some(field.into());
        self
    }

    /// Change data: each row's operation in a column, applied by the row key; a delete
    /// removes what `changes.delete` says. Replaces `delete_marker`.
    pub fn changes(mut self, changes: Changes) -> Self {
        self.options.changes = Some(changes);
        self
    }

    /// Request sizes and flow control.
    pub fn batching(mut self, batching: Batching) -> Self {
        self.options.batching = batching;
        self
    }

    /// How transient failures are retried (idempotent entries only).
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.options.retry = policy;
        self
    }

    /// The longest one call may take (a MutateRows attempt, a table read or change) before
    /// it fails as transient and is retried; the retry policy's deadline bounds it too.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.options.request_timeout = timeout;
        self
    }

    /// Validates everything, naming the field at fault, and builds the options.
    pub fn build(self) -> Result<BigtableSinkOptions> {
        self.options.validate()?;
        Ok(self.options)
    }
}

#[cfg(test)]
mod tests {
    use outflow_core::ErrorKind;

    use super::*;
    use crate::client::BigtableConnection;
    use crate::schema::Column;

    fn options() -> TableCreateOptions {
        TableCreateOptions::builder()
            .column_family(ColumnFamily::new("cf"))
            .build()
            .unwrap()
    }

    fn complete() -> BigtableSinkOptionsBuilder {
        BigtableSinkOptions::builder()
            .project("p")
            .instance("i")
            .table("t")
            .table_options(options())
            .row_key(RowKey::field("id"))
            .columns(ColumnMapping::family("cf"))
    }

    fn field_of(builder: BigtableSinkOptionsBuilder) -> String {
        let err = builder.build().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
        err.context_value("field").unwrap().to_string()
    }

    #[test]
    fn defaults() {
        let b = BigtableSinkOptions::builder().options;
        assert_eq!(b.create_disposition, CreateDisposition::CreateIfNeeded);
        assert_eq!(b.timestamp, CellTimestamp::WriteTime);
        assert_eq!(b.batching, Batching::default());
        assert_eq!(b.retry, RetryPolicy::default());
        assert_eq!(b.request_timeout, Duration::from_secs(60));
        let settings = complete().build().unwrap().settings().unwrap();
        assert_eq!(settings.connection, BigtableConnection::new("p", "i"));
        assert_eq!(settings.mapping.timestamp, CellTimestamp::WriteTime);
    }

    #[test]
    fn setters() {
        let options = complete()
            .app_profile_id("batch")
            .endpoint("127.0.0.1:8086")
            .timestamp(CellTimestamp::Field("ts".into()))
            .delete_marker("op")
            .batching(Batching::new().with_max_entries(10))
            .retry(RetryPolicy::none())
            .request_timeout(Duration::from_secs(5))
            .columns(ColumnMapping::explicit([
                Column::new("a", "cf").with_qualifier("x")
            ]))
            .build()
            .unwrap();
        assert_eq!(options.to_builder().build().unwrap(), options);
        let s = options.settings().unwrap();
        assert_eq!(s.connection.app_profile_id(), Some("batch"));
        assert_eq!(s.connection.endpoint(), Some("127.0.0.1:8086"));
        assert_eq!(s.mapping.delete_marker.as_deref(), Some("op"));
        assert_eq!(s.batching.max_entries(), 10);
        assert_eq!(s.retry.max_attempts(), 1);
        assert_eq!(s.request_timeout, Duration::from_secs(5));
        assert_eq!(s.destination, Destination::Table("t".into()));
    }

    #[test]
    fn dispositions_and_options_must_agree() {
        let err = complete()
            .create_disposition(CreateDisposition::CreateNever)
            .build()
            .unwrap_err();
        assert_eq!(err.context_value("field"), Some("table_options"));
        assert!(
            err.to_string().contains("cannot be combined with create_never"),
            "{err}"
        );

        let mut without = complete();
        without.options.table_options = None;
        let err = without.clone().build().unwrap_err();
        assert_eq!(err.context_value("field"), Some("table_options"));
        assert!(
            err.to_string().contains("create_if_needed needs table options"),
            "{err}"
        );

        assert!(
            without
                .create_disposition(CreateDisposition::CreateNever)
                .build()
                .is_ok()
        );
    }

    #[test]
    fn build_names_the_missing_or_blank_field() {
        assert_eq!(field_of(complete().project(" ")), "project");
        assert_eq!(field_of(complete().instance("")), "instance");
        assert_eq!(field_of(complete().table("")), "table");
        assert_eq!(field_of(complete().endpoint("")), "endpoint");
        assert_eq!(
            field_of(complete().row_key(RowKey::fields(Vec::<String>::new(), "#"))),
            "row_key"
        );
        assert_eq!(
            field_of(complete().row_key(RowKey::fields(["a", " "], "#"))),
            "row_key.fields[1]"
        );
        assert_eq!(
            field_of(complete().columns(ColumnMapping::family(""))),
            "columns.family"
        );
        assert_eq!(
            field_of(complete().columns(ColumnMapping::explicit([]))),
            "columns.explicit"
        );
        assert_eq!(
            field_of(complete().columns(ColumnMapping::explicit([Column::new("a", " ")]))),
            "columns.explicit[0].family"
        );
        assert_eq!(
            field_of(complete().timestamp(CellTimestamp::Field(" ".into()))),
            "timestamp.field"
        );
        assert_eq!(field_of(complete().delete_marker("")), "delete_marker");
        assert_eq!(
            field_of(complete().batching(Batching::new().with_max_entries(0))),
            "batching.max_entries"
        );
        assert_eq!(
            field_of(complete().request_timeout(Duration::ZERO)),
            "request_timeout"
        );
        let bad: BigtableSinkOptions =
            serde_json::from_str(r#"{"project":"p","instance":"i","table":"t","retry":{"max_attempts":0}}"#)
                .unwrap();
        let err = bad
            .to_builder()
            .create_disposition(CreateDisposition::CreateNever)
            .row_key(RowKey::field("id"))
            .columns(ColumnMapping::family("cf"))
            .build()
            .unwrap_err();
        assert_eq!(err.context_value("field"), Some("retry.max_attempts"));
        assert_eq!(err.message(), "retry.max_attempts: must be at least 1");
        let mut no_table = complete();
        no_table.options.destination = None;
        assert_eq!(field_of(no_table), "table");
        let mut no_key = complete();
        no_key.options.row_key = None;
        assert_eq!(field_of(no_key), "row_key");
        let mut no_columns = complete();
        no_columns.options.columns = None;
        assert_eq!(field_of(no_columns), "columns");
    }

    #[test]
    fn the_job_file_form_round_trips() {
        let yaml = r#"
project: p
instance: i
table: events_{region}
endpoint: 127.0.0.1:8086
table_options:
  column_families:
    - {name: cf, gc_rule: {max_versions: 1}}
    - {name: clicks, type: {aggregate: sum}}
row_key: {fields: [region, id], separator: "/"}
columns:
  explicit:
    - {field: name, family: cf}
    - {field: clicks, family: clicks, qualifier: n}
timestamp: {field: ts}
delete_marker: op
batching: {max_entries: 500}
retry: {max_attempts: 3}
request_timeout: 10s
"#;
        let builder: BigtableSinkOptions = serde_yaml_ng::from_str(yaml).unwrap();
        assert_eq!(builder.row_key, Some(RowKey::fields(["region", "id"], "/")));
        assert_eq!(
            builder
                .table_options
                .as_ref()
                .unwrap()
                .family("clicks")
                .unwrap()
                .value_type(),
            ValueType::Sum
        );
        assert!(matches!(builder.destination, Some(Destination::Template(_))));
        let json = serde_json::to_string(&builder).unwrap();
        assert_eq!(
            serde_json::from_str::<BigtableSinkOptions>(&json).unwrap(),
            builder
        );
        builder.validate().unwrap();

        let short: BigtableSinkOptions = serde_yaml_ng::from_str(
            "{project: p, instance: i, table: t, create_disposition: CREATE_NEVER, row_key: id, \
             columns: struct_families, timestamp: server_time}",
        )
        .unwrap();
        assert_eq!(short.row_key, Some(RowKey::field("id")));
        assert_eq!(short.columns, Some(ColumnMapping::StructFamilies));
        assert_eq!(short.timestamp, CellTimestamp::ServerTime);
        short.validate().unwrap();
        assert!(serde_yaml_ng::from_str::<BigtableSinkOptions>("{project: p, colour: red}").is_err());
    }
}
