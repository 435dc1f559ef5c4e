//! Building a [`BigtableSink`]: setters that never fail, and every check in
//! [`BigtableSinkBuilder::build`], before any I/O.
//!
//! The builder is also the sink's serde form, what a job file holds:
//!
//! ```yaml
//! project: my-project
//! instance: my-instance
//! table: events                  # or a template: events_{region}
//! create_disposition: create_if_needed
//! table_options:
//!   column_families:
//!     - {name: cf, gc_rule: {max_versions: 1}}
//!     - {name: clicks, type: {aggregate: sum}}
//! row_key: {fields: [region, id], separator: "#"}
//! columns: {explicit: [{field: name, family: cf}, {field: clicks, family: clicks}]}
//! timestamp: {field: event_time}   # or write_time (default), server_time
//! delete_marker: op                # optional
//! batching: {max_entries: 10000, max_bytes: 16777216, max_outstanding_requests: 4}
//! retry: {max_attempts: 10, deadline: 2m}
//! request_timeout: 60s
//! ```

use std::time::Duration;

use outflow_core::{CreateDisposition, Destination, Error, Result, RetryPolicy};
use serde::{Deserialize, Serialize};

use crate::batch::Batching;
use crate::client::BigtableConnection;
use crate::mutation::{CellTimestamp, ColumnMapping, RowKey, RowMapping};
use crate::options::TableCreateOptions;
use crate::sink::{BigtableSink, Settings};

fn default_request_timeout() -> Duration {
    Duration::from_secs(60)
}

fn is_default_request_timeout(d: &Duration) -> bool {
    *d == default_request_timeout()
}

/// Builds a [`BigtableSink`]; see the module docs for the serde form.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BigtableSinkBuilder {
    #[serde(default)]
    project: String,
    #[serde(default)]
    instance: String,
    #[serde(default, rename = "table", skip_serializing_if = "Option::is_none")]
    destination: Option<Destination>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    app_profile_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    endpoint: Option<String>,
    #[serde(default)]
    create_disposition: CreateDisposition,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    table_options: Option<TableCreateOptions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    row_key: Option<RowKey>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    columns: Option<ColumnMapping>,
    #[serde(default)]
    timestamp: CellTimestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    delete_marker: Option<String>,
    #[serde(default)]
    batching: Batching,
    #[serde(default)]
    retry: RetryPolicy,
    #[serde(
        default = "default_request_timeout",
        with = "outflow_core::duration",
        skip_serializing_if = "is_default_request_timeout"
    )]
    request_timeout: Duration,
}

impl Default for BigtableSinkBuilder {
    fn default() -> Self {
        BigtableSinkBuilder {
            project: String::new(),
            instance: String::new(),
            destination: None,
            app_profile_id: None,
            endpoint: None,
            create_disposition: CreateDisposition::default(),
            table_options: None,
            row_key: None,
            columns: None,
            timestamp: CellTimestamp::default(),
            delete_marker: None,
            batching: Batching::default(),
            retry: RetryPolicy::default(),
            request_timeout: default_request_timeout(),
        }
    }
}

impl BigtableSink {
    /// A builder with the defaults: create if needed (which needs table options), write
    /// time timestamps, default batching and retries, a 60 s limit per request.
    pub fn builder() -> BigtableSinkBuilder {
        BigtableSinkBuilder::default()
    }
}

impl BigtableSinkBuilder {
    /// The Google Cloud project.
    pub fn project(mut self, project: impl Into<String>) -> Self {
        self.project = project.into();
        self
    }

    /// The Bigtable instance.
    pub fn instance(mut self, instance: impl Into<String>) -> Self {
        self.instance = instance.into();
        self
    }

    /// Every row to this table (its id, not its full path).
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.destination = Some(Destination::Table(table.into()));
        self
    }

    /// Each row to the table a template or function picks for it.
    pub fn destination(mut self, destination: Destination) -> Self {
        self.destination = Some(destination);
        self
    }

    /// The app profile requests go through (the instance's default when unset).
    pub fn app_profile_id(mut self, app_profile_id: impl Into<String>) -> Self {
        self.app_profile_id = Some(app_profile_id.into());
        self
    }

    /// An explicit endpoint (`host:port`, `http://..` or `https://..`), used without
    /// credentials: an emulator or a local proxy. Without it, `BIGTABLE_EMULATOR_HOST` is
    /// used when set, and the service with Application Default Credentials otherwise.
    pub fn endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoint = Some(endpoint.into());
        self
    }

    /// Whether a missing table may be created (the default) or is an error.
    pub fn create_disposition(mut self, disposition: CreateDisposition) -> Self {
        self.create_disposition = disposition;
        self
    }

    /// The families to create or add; required with `CreateIfNeeded`, refused with
    /// `CreateNever`.
    pub fn table_options(mut self, options: TableCreateOptions) -> Self {
        self.table_options = Some(options);
        self
    }

    /// How row keys are made.
    pub fn row_key(mut self, row_key: RowKey) -> Self {
        self.row_key = Some(row_key);
        self
    }

    /// Which fields go to which columns.
    pub fn columns(mut self, columns: ColumnMapping) -> Self {
        self.columns = Some(columns);
        self
    }

    /// Where cell timestamps come from.
    pub fn timestamp(mut self, timestamp: CellTimestamp) -> Self {
        self.timestamp = timestamp;
        self
    }

    /// A field saying whether a row writes or deletes: null (or `write`) writes; `row`
    /// deletes the row; `families` deletes the families the row has values in; `cells`
    /// deletes the columns it has values in (only the row's version when timestamps come
    /// from a field). A boolean field deletes the row when true.
    pub fn delete_marker(mut self, field: impl Into<String>) -> Self {
        self.delete_marker = Some(field.into());
        self
    }

    /// Request sizes and flow control.
    pub fn batching(mut self, batching: Batching) -> Self {
        self.batching = batching;
        self
    }

    /// How transient failures are retried (idempotent entries only).
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// The longest one MutateRows attempt may take before it counts as a deadline failure.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Validates everything, naming the field at fault, and builds the sink. Nothing is
    /// connected yet: the sink connects when it first prepares or writes.
    pub fn build(self) -> Result<BigtableSink> {
        let mut connection = BigtableConnection::new(self.project.clone(), self.instance.clone());
        if let Some(profile) = &self.app_profile_id {
            connection = connection.with_app_profile_id(profile.clone());
        }
        if let Some(endpoint) = &self.endpoint {
            connection = connection.with_endpoint(endpoint.clone());
        }
        connection.validate()?;
        let destination = self.destination.ok_or_else(|| {
            Error::invalid_config("table", "name the table (or a per-row destination) to write to")
        })?;
        if let Destination::Table(table) = &destination
            && table.trim().is_empty()
        {
            return Err(Error::invalid_config("table", "must not be blank"));
        }
        match (self.create_disposition, &self.table_options) {
            (CreateDisposition::CreateNever, Some(_)) => {
                return Err(Error::invalid_config(
                    "table_options",
                    "table options cannot be combined with create_never: they describe a table to \
                     create or reconcile, and create_never never touches the table",
                ));
            }
            (CreateDisposition::CreateIfNeeded, None) => {
                return Err(Error::invalid_config(
                    "table_options",
                    "create_if_needed needs table options: a Bigtable table's schema is its column \
                     families, which the sink cannot guess (use create_never for an existing table)",
                ));
            }
            _ => {}
        }
        let row_key = self
            .row_key
            .ok_or_else(|| Error::invalid_config("row_key", "name the field(s) the row key is made of"))?;
        row_key.validate()?;
        let columns = self.columns.ok_or_else(|| {
            Error::invalid_config(
                "columns",
                "say where fields go: {family: NAME}, {explicit: [...]} or struct_families",
            )
        })?;
        columns.validate()?;
        if let CellTimestamp::Field(field) = &self.timestamp
            && field.trim().is_empty()
        {
            return Err(Error::invalid_config("timestamp.field", "must not be blank"));
        }
        if self.delete_marker.as_ref().is_some_and(|f| f.trim().is_empty()) {
            return Err(Error::invalid_config("delete_marker", "must not be blank"));
        }
        self.batching.validate()?;
        self.retry.validate().map_err(|e| {
            let field = e.context_value("field").unwrap_or_default();
            let why = e.message().split_once(": ").map_or(e.message(), |(_, why)| why);
            Error::invalid_config(&format!("retry.{field}"), why)
        })?;
        if self.request_timeout.is_zero() {
            return Err(Error::invalid_config(
                "request_timeout",
                "must be longer than zero",
            ));
        }
        Ok(BigtableSink::new(Settings {
            connection,
            destination,
            disposition: self.create_disposition,
            table_options: self.table_options,
            mapping: RowMapping {
                row_key,
                columns,
                timestamp: self.timestamp,
                delete_marker: self.delete_marker,
            },
            batching: self.batching,
            retry: self.retry,
            request_timeout: self.request_timeout,
        }))
    }
}

#[cfg(test)]
mod tests {
    use outflow_core::ErrorKind;

    use super::*;
    use crate::mutation::Column;
    use crate::options::{ColumnFamily, ValueType};

    fn options() -> TableCreateOptions {
        TableCreateOptions::builder()
            .column_family(ColumnFamily::new("cf"))
            .build()
            .unwrap()
    }

    fn complete() -> BigtableSinkBuilder {
        BigtableSink::builder()
            .project("p")
            .instance("i")
            .table("t")
            .table_options(options())
            .row_key(RowKey::field("id"))
            .columns(ColumnMapping::family("cf"))
    }

    fn field_of(builder: BigtableSinkBuilder) -> String {
        let err = builder.build().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
        err.context_value("field").unwrap().to_string()
    }

    #[test]
    fn defaults() {
        let b = BigtableSink::builder();
        assert_eq!(b.create_disposition, CreateDisposition::CreateIfNeeded);
        assert_eq!(b.timestamp, CellTimestamp::WriteTime);
        assert_eq!(b.batching, Batching::default());
        assert_eq!(b.retry, RetryPolicy::default());
        assert_eq!(b.request_timeout, Duration::from_secs(60));
        let sink = complete().build().unwrap();
        assert_eq!(sink.settings().connection, BigtableConnection::new("p", "i"));
        assert_eq!(sink.settings().mapping.timestamp, CellTimestamp::WriteTime);
    }

    #[test]
    fn setters() {
        let sink = complete()
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
        let s = sink.settings();
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
        without.table_options = None;
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
        let bad: BigtableSinkBuilder =
            serde_json::from_str(r#"{"project":"p","instance":"i","table":"t","retry":{"max_attempts":0}}"#)
                .unwrap();
        let err = bad
            .create_disposition(CreateDisposition::CreateNever)
            .row_key(RowKey::field("id"))
            .columns(ColumnMapping::family("cf"))
            .build()
            .unwrap_err();
        assert_eq!(err.context_value("field"), Some("retry.max_attempts"));
        assert_eq!(err.message(), "retry.max_attempts: must be at least 1");
        let mut no_table = complete();
        no_table.destination = None;
        assert_eq!(field_of(no_table), "table");
        let mut no_key = complete();
        no_key.row_key = None;
        assert_eq!(field_of(no_key), "row_key");
        let mut no_columns = complete();
        no_columns.columns = None;
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
        let builder: BigtableSinkBuilder = serde_yaml_ng::from_str(yaml).unwrap();
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
            serde_json::from_str::<BigtableSinkBuilder>(&json).unwrap(),
            builder
        );
        builder.build().unwrap();

        let short: BigtableSinkBuilder = serde_yaml_ng::from_str(
            "{project: p, instance: i, table: t, create_disposition: CREATE_NEVER, row_key: id, \
             columns: struct_families, timestamp: server_time}",
        )
        .unwrap();
        assert_eq!(short.row_key, Some(RowKey::field("id")));
        assert_eq!(short.columns, Some(ColumnMapping::StructFamilies));
        assert_eq!(short.timestamp, CellTimestamp::ServerTime);
        short.build().unwrap();
        assert!(serde_yaml_ng::from_str::<BigtableSinkBuilder>("{project: p, colour: red}").is_err());
    }
}
