//! What users write to configure Iceberg: the catalog, the sink's options and the settings
//! of tables Outflow creates, as serde types whose field docs are the user docs. Their
//! builders are in [`crate::builder`]; `validate()` checks a deserialized value the same way.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use arrow_schema::Schema as ArrowSchema;
use outflow_core::changes::ChangeConfig;
use outflow_core::schema::Schema;
use outflow_core::{
    CreateDisposition, Destination, Error, Result, RetryPolicy, SchemaEvolutionConfig, WriteDisposition,
};
use serde::{Deserialize, Serialize};

use crate::builder::{IcebergSinkOptionsBuilder, TableCreateOptionsBuilder};
use crate::partition::{PartitionField, SortField, partition_spec, sort_order};
use crate::schema::to_iceberg_schema;

const DEFAULT_CATALOG_NAME: &str = "outflow";

fn default_name() -> String {
    DEFAULT_CATALOG_NAME.to_string()
}

/// Where an Iceberg catalog lives.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum CatalogConfig {
    /// A SQL catalog in a SQLite file, created if absent.
    Sql {
        /// The SQLite database: a path, or a `sqlite://` URI (`sqlite:///abs/catalog.db`).
        uri: String,
        /// The warehouse directory new tables go under: a path or a `file://` URL.
        warehouse: String,
        /// The catalog's name; readers must use the same name to see its tables.
        #[serde(default = "default_name")]
        name: String,
        /// Further catalog and FileIO properties.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        properties: BTreeMap<String, String>,
    },
    /// A throwaway catalog, removed when the process is done with it.
    Memory {
        /// The warehouse directory (inside the catalog's temporary directory when absent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        warehouse: Option<String>,
        /// The catalog's name.
        #[serde(default = "default_name")]
        name: String,
    },
    /// An Iceberg REST catalog.
    Rest {
        /// The server's base URI (`http://host:port`, without `/v1`).
        uri: String,
        /// The warehouse to ask the server for, if it serves several.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        warehouse: Option<String>,
        /// The catalog's name.
        #[serde(default = "default_name")]
        name: String,
        /// Further properties: `token` (a bearer token), `header.<Name>` (extra headers),
        /// `connect-timeout` (default `10s`) and `request-timeout` (default `30s`), the
        /// deadlines of each call to the catalog, FileIO settings.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        properties: BTreeMap<String, String>,
    },
}

impl CatalogConfig {
    /// A SQL catalog in `dir`: `dir/catalog.db` and `dir/warehouse`.
    pub fn sqlite_in(dir: impl AsRef<Path>) -> CatalogConfig {
        let dir = dir.as_ref();
        CatalogConfig::Sql {
            uri: dir.join("catalog.db").display().to_string(),
            warehouse: dir.join("warehouse").display().to_string(),
            name: default_name(),
            properties: BTreeMap::new(),
        }
    }

    /// The catalog's name.
    pub fn name(&self) -> &str {
        match self {
            CatalogConfig::Sql { name, .. }
            | CatalogConfig::Memory { name, .. }
            | CatalogConfig::Rest { name, .. } => name,
        }
    }

    /// The same config with relative local paths (SQLite file, warehouse) taken relative to
    /// `base` instead of the working directory; job files use this for their own directory.
    pub fn relative_to(&self, base: &Path) -> CatalogConfig {
        let resolve = |p: &str| -> String {
            if p.contains("://") || p.starts_with("sqlite:") || Path::new(p).is_absolute() {
                p.to_string()
            } else {
                base.join(p).display().to_string()
            }
        };
        match self {
            CatalogConfig::Sql {
                uri,
                warehouse,
                name,
                properties,
            } => CatalogConfig::Sql {
                uri: resolve(uri),
                warehouse: resolve(warehouse),
                name: name.clone(),
                properties: properties.clone(),
            },
            CatalogConfig::Memory { warehouse, name } => CatalogConfig::Memory {
                warehouse: warehouse.as_deref().map(resolve),
                name: name.clone(),
            },
            rest @ CatalogConfig::Rest { .. } => rest.clone(),
        }
    }

    /// Checks the values without connecting.
    pub fn validate(&self) -> Result<()> {
        if self.name().trim().is_empty() {
            return Err(Error::invalid_config("catalog.name", "is blank"));
        }
        match self {
            CatalogConfig::Sql { uri, warehouse, .. } => {
                if uri.trim().is_empty() {
                    return Err(Error::invalid_config("catalog.uri", "is blank"));
                }
                if warehouse.trim().is_empty() {
                    return Err(Error::invalid_config("catalog.warehouse", "is blank"));
                }
            }
            CatalogConfig::Rest { uri, properties, .. } => {
                url::Url::parse(uri).map_err(|e| {
                    Error::invalid_config("catalog.uri", format!("{uri:?} is not a URL: {e}"))
                })?;
                crate::client::RestEndpoint::new(uri, properties)?;
            }
            CatalogConfig::Memory { .. } => {}
        }
        Ok(())
    }
}

fn is_secret(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    [
        "token",
        "credential",
        "secret",
        "password",
        "authorization",
        "key",
    ]
    .iter()
    .any(|s| key.contains(s))
}

/// Debug output never shows secret property values.
impl fmt::Debug for CatalogConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let redacted = |props: &BTreeMap<String, String>| -> BTreeMap<String, String> {
            props
                .iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        if is_secret(k) {
                            "<redacted>".into()
                        } else {
                            v.clone()
                        },
                    )
                })
                .collect()
        };
        match self {
            CatalogConfig::Sql {
                uri,
                warehouse,
                name,
                properties,
            } => f
                .debug_struct("Sql")
                .field("uri", uri)
                .field("warehouse", warehouse)
                .field("name", name)
                .field("properties", &redacted(properties))
                .finish(),
            CatalogConfig::Memory { warehouse, name } => f
                .debug_struct("Memory")
                .field("warehouse", warehouse)
                .field("name", name)
                .finish(),
            CatalogConfig::Rest {
                uri,
                warehouse,
                name,
                properties,
            } => f
                .debug_struct("Rest")
                .field("uri", uri)
                .field("warehouse", warehouse)
                .field("name", name)
                .field("properties", &redacted(properties))
                .finish(),
        }
    }
}

/// The default target size of a data file: 512 MiB, as Iceberg's `write.target-file-size-bytes`.
pub const DEFAULT_TARGET_FILE_SIZE: u64 = 512 * 1024 * 1024;

/// The default zstd level of data files.
pub const DEFAULT_COMPRESSION_LEVEL: i32 = 3;

fn default_target_file_size() -> u64 {
    DEFAULT_TARGET_FILE_SIZE
}

fn default_compression_level() -> i32 {
    DEFAULT_COMPRESSION_LEVEL
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// How a table Outflow creates is laid out: partitioning, sort order and properties. Used
/// only when a table is created (by the sink under `create_if_needed`, or by AddFiles), so
/// it is refused with `create_never`. Build it with [`TableCreateOptions::builder`] or write
/// it under `table_options:`:
///
/// ```yaml
/// partition_fields: ["day(ts)", "bucket(16, user_id)"]
/// sort_order: ["ts desc"]
/// properties: { write.format.default: parquet }
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableCreateOptions {
    /// Partition fields: `column`, `identity(column)`, `bucket(N, column)`,
    /// `truncate(W, column)`, `year|month|day|hour(column)`, each optionally `as name`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) partition_fields: Vec<PartitionField>,
    /// The sort order recorded in the table (`id desc nulls last`); rows are not sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) sort_order: Vec<SortField>,
    /// Table properties.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) properties: BTreeMap<String, String>,
}

impl TableCreateOptions {
    /// A builder with no partitioning, no sort order and no properties.
    pub fn builder() -> TableCreateOptionsBuilder {
        TableCreateOptionsBuilder::default()
    }

    /// The partition fields.
    pub fn partition_fields(&self) -> &[PartitionField] {
        &self.partition_fields
    }

    /// The sort order.
    pub fn sort_order(&self) -> &[SortField] {
        &self.sort_order
    }

    /// The table properties.
    pub fn properties(&self) -> &BTreeMap<String, String> {
        &self.properties
    }

    /// Whether nothing is set (a plain, unpartitioned table).
    pub fn is_empty(&self) -> bool {
        self == &TableCreateOptions::default()
    }

    /// Refuses settings that would silently do nothing: table options where nothing is
    /// created. `creator` names who would create the table, for the message.
    /// The error names the setting given (`table_options.partition_fields`...).
    pub(crate) fn validate(&self, create: CreateDisposition, creator: &str) -> Result<()> {
        if create != CreateDisposition::CreateNever {
            return Ok(());
        }
        let given = [
            ("table_options.partition_fields", self.partition_fields.is_empty()),
            ("table_options.sort_order", self.sort_order.is_empty()),
            ("table_options.properties", self.properties.is_empty()),
        ];
        match given.into_iter().find(|(_, empty)| !empty) {
            Some((key, _)) => Err(Error::invalid_config(
                key,
                format!(
                    "only applies when {creator} creates the table, and create_disposition is create_never"
                ),
            )),
            None => Ok(()),
        }
    }

    /// Checks the partition and sort fields against the schema of the rows a table would
    /// be created from, without I/O: every column they name exists and has a type its
    /// transform takes. The error names the setting and the column.
    pub fn check_input(&self, schema: &ArrowSchema) -> Result<()> {
        if self.partition_fields.is_empty() && self.sort_order.is_empty() {
            return Ok(());
        }
        let mut input = Schema::from_arrow(schema)?.without_ids();
        input.assign_missing_ids(0);
        let table = to_iceberg_schema(&input, 0)?;
        partition_spec(&table, &self.partition_fields)?;
        sort_order(&table, &self.sort_order)?;
        Ok(())
    }
}

/// Everything the Iceberg sink needs, serializable. Build it with
/// [`IcebergSinkOptions::builder`] or read it from a job file:
///
/// ```yaml
/// catalog: { type: sql, uri: ./lake/catalog.db, warehouse: ./lake/warehouse }
/// table: analytics.events_{region}
/// create_disposition: create_if_needed
/// write_disposition: append
/// schema_evolution: { options: [allow_field_addition] }
/// table_options:
///   partition_fields: ["day(ts)", "bucket(16, user_id)"]
///   properties: { write.format.default: parquet }
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IcebergSinkOptions {
    /// The catalog.
    pub(crate) catalog: CatalogConfig,
    /// The table (`namespace.table`), or a template filled from each row
    /// (`namespace.events_{region}`).
    pub(crate) table: Destination,
    /// Whether a missing table may be created (from the input's schema).
    #[serde(default, skip_serializing_if = "is_default")]
    pub(crate) create_disposition: CreateDisposition,
    /// What happens to the rows the table already holds.
    #[serde(default, skip_serializing_if = "is_default")]
    pub(crate) write_disposition: WriteDisposition,
    /// How the table's schema may change to fit the input.
    #[serde(default, skip_serializing_if = "is_default")]
    pub(crate) schema_evolution: SchemaEvolutionConfig,
    /// Partitioning, sort order and properties of a table the sink creates.
    #[serde(default, skip_serializing_if = "TableCreateOptions::is_empty")]
    pub(crate) table_options: TableCreateOptions,
    /// Data files are closed when they reach about this many bytes.
    #[serde(default = "default_target_file_size")]
    pub(crate) target_file_size_bytes: u64,
    /// The zstd level of data files (1 to 22).
    #[serde(default = "default_compression_level")]
    pub(crate) compression_level: i32,
    /// How commits that lose races or hit transient errors are retried.
    #[serde(default, skip_serializing_if = "is_default")]
    pub(crate) retry: RetryPolicy,
    /// Data file writers per table, each encoding in its own task (default: one per core,
    /// at most 4). Each writer has its own open files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) writers_per_table: Option<usize>,
    /// Upsert mode: the input is change data (inserts, upserts, deletes by key) and each
    /// commit holds the changed rows' data files with equality delete files for their keys.
    /// Needs an unpartitioned format v2 table; the key is the table's identifier fields
    /// when `key` is empty, and a table the sink creates gets the key as its identifier
    /// fields, required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) changes: Option<ChangeConfig>,
}

impl IcebergSinkOptions {
    /// A builder; `catalog` and `table` are required.
    pub fn builder() -> IcebergSinkOptionsBuilder {
        IcebergSinkOptionsBuilder::default()
    }

    /// A builder holding these options, to change some.
    pub fn to_builder(&self) -> IcebergSinkOptionsBuilder {
        IcebergSinkOptionsBuilder::from_options(self.clone())
    }

    /// The catalog.
    pub fn catalog(&self) -> &CatalogConfig {
        &self.catalog
    }

    /// Where rows go: one table, a template filled from each row, or a function.
    pub fn destination(&self) -> &Destination {
        &self.table
    }

    /// Whether a missing table may be created.
    pub fn create_disposition(&self) -> CreateDisposition {
        self.create_disposition
    }

    /// What happens to the rows a table already holds.
    pub fn write_disposition(&self) -> WriteDisposition {
        self.write_disposition
    }

    /// How a table's schema may change.
    pub fn schema_evolution(&self) -> &SchemaEvolutionConfig {
        &self.schema_evolution
    }

    /// The layout of tables the sink creates.
    pub fn table_options(&self) -> &TableCreateOptions {
        &self.table_options
    }

    /// The target size of data files, in bytes.
    pub fn target_file_size_bytes(&self) -> u64 {
        self.target_file_size_bytes
    }

    /// The zstd level of data files.
    pub fn compression_level(&self) -> i32 {
        self.compression_level
    }

    /// How catalog calls and commits are retried.
    pub fn retry(&self) -> &RetryPolicy {
        &self.retry
    }

    /// Upsert mode's key and operation column, when the input is change data.
    pub fn changes(&self) -> Option<&ChangeConfig> {
        self.changes.as_ref()
    }

    /// How many data file writers each table gets.
    pub fn parallel_writers(&self) -> usize {
        self.writers_per_table.unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
                .min(4)
        })
    }

    /// The same options with relative local paths (the SQLite file, the warehouse) taken
    /// relative to `base` instead of the working directory.
    pub fn relative_to(&self, base: &Path) -> IcebergSinkOptions {
        IcebergSinkOptions {
            catalog: self.catalog.relative_to(base),
            ..self.clone()
        }
    }

    /// Checks the options against the schema of the rows the sink will receive, without
    /// I/O: the fields a table template names, and the partition and sort fields of a table
    /// the sink would create. What `outflow check` adds to [`validate`](Self::validate).
    pub fn check_input(&self, schema: &ArrowSchema) -> Result<()> {
        self.table.validate(schema)?;
        if let Some(changes) = &self.changes {
            changes.check_input(schema)?;
        }
        self.table_options.check_input(schema)
    }

    /// Checks the options without I/O, naming the field at fault.
    pub fn validate(&self) -> Result<()> {
        self.catalog.validate()?;
        if let Destination::Table(name) = &self.table {
            crate::schema::parse_table_ident(name)?;
        }
        self.table_options.validate(self.create_disposition, "the sink")?;
        if self.schema_evolution.dry_run() {
            return Err(Error::invalid_config(
                "schema_evolution.dry_run",
                "a sink writes; to see what it would change, plan instead (`outflow plan`)",
            ));
        }
        if self.target_file_size_bytes < 1024 {
            return Err(Error::invalid_config(
                "target_file_size_bytes",
                "must be at least 1024",
            ));
        }
        if !(1..=22).contains(&self.compression_level) {
            return Err(Error::invalid_config(
                "compression_level",
                "must be between 1 and 22",
            ));
        }
        self.retry.validate()?;
        if self.writers_per_table == Some(0) {
            return Err(Error::invalid_config("writers_per_table", "must be at least 1"));
        }
        if let Some(changes) = &self.changes {
            changes.validate()?;
            if self.write_disposition == WriteDisposition::Truncate {
                return Err(Error::invalid_config(
                    "changes",
                    "upsert mode applies changes to the rows a table holds; it cannot truncate it",
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_round_trip() {
        let yaml = r#"
catalog: { type: sql, uri: ./lake/catalog.db, warehouse: ./lake/warehouse }
table: analytics.events_{region}
write_disposition: truncate
schema_evolution: { options: [allow_field_addition], required_columns: [id] }
table_options:
  partition_fields: ["day(ts)", "bucket(16, user_id) as user_bucket"]
  properties: { owner: data }
target_file_size_bytes: 1048576
"#;
        let o: IcebergSinkOptions = serde_yaml_ng::from_str(yaml).unwrap();
        o.validate().unwrap();
        assert_eq!(
            o.table_options().partition_fields()[1].partition_name(),
            "user_bucket"
        );
        let json = serde_json::to_string(&o).unwrap();
        assert_eq!(serde_json::from_str::<IcebergSinkOptions>(&json).unwrap(), o);
        let err =
            serde_yaml_ng::from_str::<IcebergSinkOptions>("catalog: {type: memory}\ntable: a.b\ntabel: c\n");
        assert!(err.unwrap_err().to_string().contains("tabel"));
        let flat = serde_yaml_ng::from_str::<IcebergSinkOptions>(
            "catalog: {type: memory}\ntable: a.b\npartition_fields: [id]\n",
        );
        assert!(flat.unwrap_err().to_string().contains("partition_fields"));
    }

    #[test]
    fn check_input_names_a_change_column_the_input_lacks() {
        use arrow_schema::{DataType, Field};
        let options = IcebergSinkOptions::builder()
            .catalog(CatalogConfig::sqlite_in("lake"))
            .table("db.t")
            .changes(ChangeConfig::new(
                ["id"],
                outflow_core::changes::OperationColumn::new("op"),
            ))
            .build()
            .unwrap();
        let input = |names: &[&str]| {
            ArrowSchema::new(
                names
                    .iter()
                    .map(|n| Field::new(*n, DataType::Utf8, true))
                    .collect::<Vec<_>>(),
            )
        };
        options.check_input(&input(&["id", "op", "name"])).unwrap();
        let err = options.check_input(&input(&["id", "name"])).unwrap_err();
        assert!(err.to_string().contains("changes.operation.column"), "{err}");
        let err = options.check_input(&input(&["key", "op"])).unwrap_err();
        assert!(
            err.to_string().contains("changes.key") && err.to_string().contains("\"id\""),
            "{err}"
        );
    }

    #[test]
    fn deserialized_options_validate_like_built_ones() {
        let never: IcebergSinkOptions = serde_yaml_ng::from_str(
            "catalog: {type: memory}\ntable: a.b\ncreate_disposition: create_never\ntable_options: {partition_fields: [id]}\n",
        )
        .unwrap();
        assert_eq!(
            never.validate().unwrap_err().context_value("field"),
            Some("table_options.partition_fields")
        );
        let dry: IcebergSinkOptions = serde_yaml_ng::from_str(
            "catalog: {type: memory}\ntable: a.b\nschema_evolution: {options: [addition], dry_run: true}\n",
        )
        .unwrap();
        assert_eq!(
            dry.validate().unwrap_err().context_value("field"),
            Some("schema_evolution.dry_run")
        );
    }

    fn rows() -> ArrowSchema {
        use arrow_schema::{DataType, Field, Fields, TimeUnit};
        ArrowSchema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("city", DataType::Utf8, true),
            Field::new(
                "ts",
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                true,
            ),
            Field::new("score", DataType::Float64, true),
            Field::new(
                "user",
                DataType::Struct(Fields::from(vec![Field::new("name", DataType::Utf8, true)])),
                true,
            ),
        ])
    }

    fn laid_out(partition_fields: &[&str], sort_order: &[&str]) -> IcebergSinkOptions {
        let mut layout = TableCreateOptions::builder();
        for field in partition_fields {
            layout = layout.partition_field(*field);
        }
        for field in sort_order {
            layout = layout.sort_field(*field);
        }
        IcebergSinkOptions::builder()
            .catalog(CatalogConfig::Memory {
                warehouse: None,
                name: default_name(),
            })
            .table("db.t_{city}")
            .table_options(layout.build().unwrap())
            .build()
            .unwrap()
    }

    #[test]
    fn check_input_accepts_fields_the_rows_have() {
        laid_out(
            &["day(ts)", "bucket(16, id)", "truncate(4, city)", "user.name"],
            &["id desc", "user.name"],
        )
        .check_input(&rows())
        .unwrap();
        laid_out(&[], &[]).check_input(&rows()).unwrap();
    }

    #[test]
    fn check_input_names_the_setting_and_the_column() {
        let cases = [
            (
                &["day(started)"][..],
                &[][..],
                "table_options.partition_fields",
                "started",
                "the rows have no column started",
            ),
            (
                &["day(city)"],
                &[],
                "table_options.partition_fields",
                "city",
                "column city is string, which the day transform does not take",
            ),
            (
                &["month(id)"],
                &[],
                "table_options.partition_fields",
                "id",
                "which the month transform does not take",
            ),
            (
                &["bucket(8, score)"],
                &[],
                "table_options.partition_fields",
                "score",
                "column score is double",
            ),
            (
                &["truncate(4, ts)"],
                &[],
                "table_options.partition_fields",
                "ts",
                "truncate transform",
            ),
            (
                &["user"],
                &[],
                "table_options.partition_fields",
                "user",
                "identity transform",
            ),
            (
                &[],
                &["nope desc"],
                "table_options.sort_order",
                "nope",
                "the rows have no column nope",
            ),
            (
                &[],
                &["user"],
                "table_options.sort_order",
                "user",
                "sort by a column of a primitive type",
            ),
        ];
        for (partition, sort, key, column, says) in cases {
            let err = laid_out(partition, sort).check_input(&rows()).unwrap_err();
            assert_eq!(err.kind(), outflow_core::ErrorKind::InvalidConfig, "{err}");
            assert_eq!(err.context_value("field"), Some(key), "{err}");
            assert_eq!(err.context_value("column"), Some(column), "{err}");
            assert!(err.to_string().contains(says), "{partition:?} {sort:?}: {err}");
        }
        let collides = laid_out(&["day(ts) as city"], &[])
            .check_input(&rows())
            .unwrap_err();
        assert_eq!(
            collides.context_value("field"),
            Some("table_options.partition_fields")
        );
    }

    #[test]
    fn check_input_checks_template_fields() {
        let err = IcebergSinkOptions::builder()
            .catalog(CatalogConfig::Memory {
                warehouse: None,
                name: default_name(),
            })
            .table("db.t_{region}")
            .build()
            .unwrap()
            .check_input(&rows())
            .unwrap_err();
        assert_eq!(err.context_value("field"), Some("table"), "{err}");
        assert_eq!(err.context_value("column"), Some("region"), "{err}");
    }

    #[test]
    fn relative_paths_resolve_against_a_base() {
        let o = IcebergSinkOptions::builder()
            .catalog(CatalogConfig::sqlite_in("lake"))
            .table("db.t")
            .build()
            .unwrap();
        let moved = o.relative_to(Path::new("/jobs"));
        let CatalogConfig::Sql { uri, warehouse, .. } = moved.catalog() else {
            panic!("{:?}", moved.catalog());
        };
        assert_eq!(
            (uri.as_str(), warehouse.as_str()),
            ("/jobs/lake/catalog.db", "/jobs/lake/warehouse")
        );
    }
}
