//! AddFiles' options, as users write them in job files or build them in Rust.

use outflow_core::{CreateDisposition, Error, Result, RetryPolicy, SchemaEvolutionConfig};
use serde::{Deserialize, Serialize};

use crate::options::{CatalogConfig, TableCreateOptions};

/// Footers read at once unless set otherwise.
pub const DEFAULT_MAX_CONCURRENT_READS: usize = 32;

fn default_max_concurrent_reads() -> usize {
    DEFAULT_MAX_CONCURRENT_READS
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// How many files are planned and committed together; written `all` or a number of files.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "WindowSpec", try_from = "WindowSpec")]
pub enum BatchWindow {
    /// Every file of a call in one window: at most one schema commit and one snapshot per
    /// call (the default). A long-running job calling [`AddFiles::run`](super::AddFiles::run)
    /// once per batch gets one window per call.
    #[default]
    All,
    /// Windows of this many files, in input order: one schema commit and one snapshot each.
    Files(usize),
}

/// The serialized form of a [`BatchWindow`]: `all` or a count.
#[derive(Clone, Serialize, Deserialize)]
#[serde(untagged)]
enum WindowSpec {
    Name(String),
    Files(usize),
}

impl From<BatchWindow> for WindowSpec {
    fn from(w: BatchWindow) -> Self {
        match w {
            BatchWindow::All => WindowSpec::Name("all".into()),
            BatchWindow::Files(n) => WindowSpec::Files(n),
        }
    }
}

impl TryFrom<WindowSpec> for BatchWindow {
    type Error = String;

    fn try_from(spec: WindowSpec) -> std::result::Result<Self, String> {
        match spec {
            WindowSpec::Name(name) if name == "all" => Ok(BatchWindow::All),
            WindowSpec::Name(name) => Err(format!("window {name:?}: write `all` or a number of files")),
            WindowSpec::Files(n) => Ok(BatchWindow::Files(n)),
        }
    }
}

/// Everything AddFiles needs, serializable. Build it with [`AddFilesOptions::builder`] or
/// read it from a job file:
///
/// ```yaml
/// catalog: { type: sql, uri: ./lake/catalog.db, warehouse: ./lake/warehouse }
/// table: analytics.events
/// schema_evolution: { options: [allow_field_addition, allow_type_promotion] }
/// table_options: { partition_fields: ["day(ts)"] }
/// location_prefix: /data/events
/// window: 1000
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddFilesOptions {
    /// The catalog.
    pub catalog: CatalogConfig,
    /// The table, `namespace.table`.
    pub table: String,
    /// Whether a missing table may be created (from the union of the files' schemas).
    #[serde(default, skip_serializing_if = "is_default")]
    pub create_disposition: CreateDisposition,
    /// How the table's schema may change to fit the files.
    #[serde(default, skip_serializing_if = "is_default")]
    pub schema_evolution: SchemaEvolutionConfig,
    /// Partitioning, sort order and properties of a table AddFiles creates.
    #[serde(default, skip_serializing_if = "TableCreateOptions::is_empty")]
    pub table_options: TableCreateOptions,
    /// Where Hive-style partition directories start: a file at
    /// `<prefix>/region=eu/ts_day=2026-11-29/f.parquet` is in partition `region=eu`,
    /// `ts_day=2026-11-29`. Without it, partition values come from footer statistics only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location_prefix: Option<String>,
    /// At most this many files per manifest (0: one manifest per snapshot).
    #[serde(default, skip_serializing_if = "is_default")]
    pub files_per_manifest: usize,
    /// How many files are planned and committed together.
    #[serde(default, skip_serializing_if = "is_default")]
    pub window: BatchWindow,
    /// Footers read at once.
    #[serde(default = "default_max_concurrent_reads")]
    pub max_concurrent_reads: usize,
    /// How catalog calls and commits that lose races or hit transient errors are retried.
    #[serde(default, skip_serializing_if = "is_default")]
    pub retry: RetryPolicy,
}

impl AddFilesOptions {
    /// A builder; `catalog` and `table` are required.
    pub fn builder() -> AddFilesOptionsBuilder {
        AddFilesOptionsBuilder::default()
    }

    /// Checks the options without I/O, naming the field at fault.
    pub fn validate(&self) -> Result<()> {
        self.catalog.validate()?;
        crate::schema::parse_table_ident(&self.table)?;
        self.table_options.validate(self.create_disposition, "AddFiles")?;
        if let Some(prefix) = &self.location_prefix
            && prefix.trim().is_empty()
        {
            return Err(Error::invalid_config("location_prefix", "is blank"));
        }
        if self.window == BatchWindow::Files(0) {
            return Err(Error::invalid_config(
                "window",
                "a window holds at least one file",
            ));
        }
        if self.max_concurrent_reads == 0 {
            return Err(Error::invalid_config(
                "max_concurrent_reads",
                "must be at least 1",
            ));
        }
        self.retry.validate()?;
        Ok(())
    }
}

/// Builds [`AddFilesOptions`]; setters never fail, `build()` validates.
#[derive(Clone, Debug, Default)]
pub struct AddFilesOptionsBuilder {
    catalog: Option<CatalogConfig>,
    table: Option<String>,
    create_disposition: CreateDisposition,
    schema_evolution: SchemaEvolutionConfig,
    table_options: TableCreateOptions,
    location_prefix: Option<String>,
    files_per_manifest: usize,
    window: BatchWindow,
    max_concurrent_reads: Option<usize>,
    retry: RetryPolicy,
}

impl AddFilesOptionsBuilder {
    /// The catalog.
    pub fn catalog(mut self, catalog: CatalogConfig) -> Self {
        self.catalog = Some(catalog);
        self
    }

    /// The table, `namespace.table`.
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = Some(table.into());
        self
    }

    /// Whether a missing table may be created.
    pub fn create_disposition(mut self, d: CreateDisposition) -> Self {
        self.create_disposition = d;
        self
    }

    /// How the schema may evolve, with the handling of incompatible and unverifiable files
    /// and dry run.
    pub fn schema_evolution(mut self, config: SchemaEvolutionConfig) -> Self {
        self.schema_evolution = config;
        self
    }

    /// Partitioning, sort order and properties of a table AddFiles creates.
    pub fn table_options(mut self, options: TableCreateOptions) -> Self {
        self.table_options = options;
        self
    }

    /// Where Hive-style partition directories start (a path or a URL).
    pub fn location_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.location_prefix = Some(prefix.into());
        self
    }

    /// At most this many files per manifest (0: one manifest per snapshot).
    pub fn files_per_manifest(mut self, files: usize) -> Self {
        self.files_per_manifest = files;
        self
    }

    /// How many files are planned and committed together.
    pub fn window(mut self, window: BatchWindow) -> Self {
        self.window = window;
        self
    }

    /// Footers read at once.
    pub fn max_concurrent_reads(mut self, reads: usize) -> Self {
        self.max_concurrent_reads = Some(reads);
        self
    }

    /// How catalog calls and commits are retried.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Validates and builds the options.
    pub fn build(self) -> Result<AddFilesOptions> {
        let options = AddFilesOptions {
            catalog: self
                .catalog
                .ok_or_else(|| Error::invalid_config("catalog", "is required"))?,
            table: self
                .table
                .ok_or_else(|| Error::invalid_config("table", "is required"))?,
            create_disposition: self.create_disposition,
            schema_evolution: self.schema_evolution,
            table_options: self.table_options,
            location_prefix: self.location_prefix,
            files_per_manifest: self.files_per_manifest,
            window: self.window,
            max_concurrent_reads: self.max_concurrent_reads.unwrap_or(DEFAULT_MAX_CONCURRENT_READS),
            retry: self.retry,
        };
        options.validate()?;
        Ok(options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog() -> CatalogConfig {
        CatalogConfig::sqlite_in("/tmp/outflow-test")
    }

    #[test]
    fn defaults() {
        let o = AddFilesOptions::builder()
            .catalog(catalog())
            .table("db.t")
            .build()
            .unwrap();
        assert_eq!(o.create_disposition, CreateDisposition::CreateIfNeeded);
        assert!(!o.schema_evolution.is_enabled());
        assert_eq!(o.window, BatchWindow::All);
        assert_eq!(o.files_per_manifest, 0);
        assert_eq!(o.max_concurrent_reads, DEFAULT_MAX_CONCURRENT_READS);
        assert_eq!(o.location_prefix, None);
    }

    #[test]
    fn setters() {
        let o = AddFilesOptions::builder()
            .catalog(catalog())
            .table("db.t")
            .table_options(
                TableCreateOptions::builder()
                    .partition_field("day(ts)")
                    .sort_field("id desc")
                    .property("k", "v")
                    .build()
                    .unwrap(),
            )
            .location_prefix("/data/t")
            .files_per_manifest(100)
            .window(BatchWindow::Files(10))
            .max_concurrent_reads(4)
            .retry(RetryPolicy::none())
            .build()
            .unwrap();
        assert_eq!(o.table_options.partition_fields()[0].to_string(), "day(ts)");
        assert!(o.table_options.sort_order()[0].descending);
        assert_eq!(o.table_options.properties()["k"], "v");
        assert_eq!(o.location_prefix.as_deref(), Some("/data/t"));
        assert_eq!(
            (o.files_per_manifest, o.window, o.max_concurrent_reads),
            (100, BatchWindow::Files(10), 4)
        );
        assert_eq!(o.retry, RetryPolicy::none());
    }

    #[test]
    fn build_names_the_field_at_fault() {
        let field =
            |b: AddFilesOptionsBuilder| b.build().unwrap_err().context_value("field").map(str::to_string);
        let base = || AddFilesOptions::builder().catalog(catalog()).table("db.t");
        assert_eq!(
            field(AddFilesOptions::builder().table("db.t")).as_deref(),
            Some("catalog")
        );
        assert_eq!(field(base().table("t")).as_deref(), Some("table"));
        assert_eq!(
            field(base().window(BatchWindow::Files(0))).as_deref(),
            Some("window")
        );
        assert_eq!(
            field(base().max_concurrent_reads(0)).as_deref(),
            Some("max_concurrent_reads")
        );
        assert_eq!(
            field(base().location_prefix(" ")).as_deref(),
            Some("location_prefix")
        );
        let bad_partition = TableCreateOptions::builder().partition_field("week(ts)").build();
        assert_eq!(
            bad_partition.unwrap_err().context_value("field"),
            Some("partition_fields")
        );
        let never = base()
            .create_disposition(CreateDisposition::CreateNever)
            .table_options(TableCreateOptions::builder().property("k", "v").build().unwrap());
        assert_eq!(field(never).as_deref(), Some("table_options.properties"));
    }

    #[test]
    fn serde_round_trip() {
        let yaml = r#"
catalog: { type: sql, uri: ./lake/catalog.db, warehouse: ./lake/warehouse }
table: analytics.events
schema_evolution: { options: [allow_field_addition], on_incompatible: route_to_errors }
table_options: { partition_fields: ["day(ts)"] }
location_prefix: /data/events
window: 1000
files_per_manifest: 500
"#;
        let o: AddFilesOptions = serde_yaml_ng::from_str(yaml).unwrap();
        o.validate().unwrap();
        assert_eq!(o.window, BatchWindow::Files(1000));
        let json = serde_json::to_string(&o).unwrap();
        assert_eq!(serde_json::from_str::<AddFilesOptions>(&json).unwrap(), o);
        let all: AddFilesOptions =
            serde_yaml_ng::from_str("catalog: {type: memory}\ntable: a.b\nwindow: all\n").unwrap();
        assert_eq!(all.window, BatchWindow::All);
        let err =
            serde_yaml_ng::from_str::<AddFilesOptions>("catalog: {type: memory}\ntable: a.b\nwindwo: all\n");
        assert!(err.unwrap_err().to_string().contains("windwo"));
    }
}
