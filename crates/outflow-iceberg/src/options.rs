//! The Iceberg sink's options, as users write them in job files or build them in Rust.

use std::collections::BTreeMap;

use outflow_core::{
    CreateDisposition, Destination, Error, Result, RetryPolicy, SchemaEvolutionConfig, WriteDisposition,
};
use serde::{Deserialize, Serialize};

use crate::catalog::CatalogConfig;
use crate::partition::{PartitionField, SortField};

/// The default target size of a data file: 512 MiB, as Iceberg's `write.target-file-size-bytes`.
pub const DEFAULT_TARGET_FILE_SIZE: u64 = 512 * 1024 * 1024;

fn default_target_file_size() -> u64 {
    DEFAULT_TARGET_FILE_SIZE
}

fn default_compression_level() -> i32 {
    3
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
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
/// partition_fields: ["day(ts)", "bucket(16, user_id)"]
/// table_properties: { write.format.default: parquet }
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IcebergSinkOptions {
    /// The catalog.
    pub catalog: CatalogConfig,
    /// The table (`namespace.table`), or a template filled from each row
    /// (`namespace.events_{region}`).
    pub table: Destination,
    /// Whether a missing table may be created (from the input's schema).
    #[serde(default, skip_serializing_if = "is_default")]
    pub create_disposition: CreateDisposition,
    /// What happens to the rows the table already holds.
    #[serde(default, skip_serializing_if = "is_default")]
    pub write_disposition: WriteDisposition,
    /// How the table's schema may change to fit the input.
    #[serde(default, skip_serializing_if = "is_default")]
    pub schema_evolution: SchemaEvolutionConfig,
    /// Partition fields of a table the sink creates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partition_fields: Vec<PartitionField>,
    /// Sort order of a table the sink creates (recorded; the sink does not sort rows).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sort_order: Vec<SortField>,
    /// Properties of a table the sink creates.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub table_properties: BTreeMap<String, String>,
    /// Data files are closed when they reach about this many bytes.
    #[serde(default = "default_target_file_size")]
    pub target_file_size_bytes: u64,
    /// The zstd level of data files (1 to 22).
    #[serde(default = "default_compression_level")]
    pub compression_level: i32,
    /// How commits that lose races or hit transient errors are retried.
    #[serde(default, skip_serializing_if = "is_default")]
    pub commit_retry: RetryPolicy,
    /// Data file writers per table, each encoding in its own task (default: one per core,
    /// at most 4). Each writer has its own open files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writers_per_table: Option<usize>,
}

impl IcebergSinkOptions {
    /// How many data file writers each table gets.
    pub fn parallel_writers(&self) -> usize {
        self.writers_per_table.unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
                .min(4)
        })
    }

    /// A builder; `catalog` and `table` are required.
    pub fn builder() -> IcebergSinkOptionsBuilder {
        IcebergSinkOptionsBuilder::default()
    }

    /// Checks the options without I/O, naming the field at fault.
    pub fn validate(&self) -> Result<()> {
        self.catalog.validate()?;
        if let Destination::Table(name) = &self.table {
            crate::convert::parse_table_ident(name)?;
        }
        if self.create_disposition == CreateDisposition::CreateNever {
            let creation_only = [
                ("partition_fields", !self.partition_fields.is_empty()),
                ("sort_order", !self.sort_order.is_empty()),
                ("table_properties", !self.table_properties.is_empty()),
            ];
            if let Some((field, _)) = creation_only.iter().find(|(_, set)| *set) {
                return Err(Error::invalid_config(
                    field,
                    "only applies when the sink creates the table, and create_disposition is create_never",
                ));
            }
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
        self.commit_retry.validate()?;
        if self.writers_per_table == Some(0) {
            return Err(Error::invalid_config("writers_per_table", "must be at least 1"));
        }
        Ok(())
    }
}

/// Builds [`IcebergSinkOptions`]; setters never fail, `build()` validates.
#[derive(Clone, Debug, Default)]
pub struct IcebergSinkOptionsBuilder {
    catalog: Option<CatalogConfig>,
    table: Option<String>,
    destination: Option<Destination>,
    create_disposition: CreateDisposition,
    write_disposition: WriteDisposition,
    schema_evolution: SchemaEvolutionConfig,
    partition_fields: Vec<String>,
    sort_order: Vec<String>,
    table_properties: BTreeMap<String, String>,
    target_file_size_bytes: Option<u64>,
    compression_level: Option<i32>,
    commit_retry: RetryPolicy,
    writers_per_table: Option<usize>,
}

impl IcebergSinkOptionsBuilder {
    /// The catalog.
    pub fn catalog(mut self, catalog: CatalogConfig) -> Self {
        self.catalog = Some(catalog);
        self
    }

    /// The table, `namespace.table`, or a template such as `ns.events_{region}`.
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = Some(table.into());
        self
    }

    /// A destination chosen per row (a template or a function).
    pub fn destination(mut self, destination: Destination) -> Self {
        self.destination = Some(destination);
        self
    }

    /// Whether a missing table may be created.
    pub fn create_disposition(mut self, d: CreateDisposition) -> Self {
        self.create_disposition = d;
        self
    }

    /// What happens to existing rows.
    pub fn write_disposition(mut self, d: WriteDisposition) -> Self {
        self.write_disposition = d;
        self
    }

    /// How the schema may evolve.
    pub fn schema_evolution(mut self, config: SchemaEvolutionConfig) -> Self {
        self.schema_evolution = config;
        self
    }

    /// Adds a partition field (`day(ts)`, `bucket(16, id)`, `region`...) for creation.
    pub fn partition_field(mut self, field: impl Into<String>) -> Self {
        self.partition_fields.push(field.into());
        self
    }

    /// Adds a sort field (`id desc`) for creation.
    pub fn sort_field(mut self, field: impl Into<String>) -> Self {
        self.sort_order.push(field.into());
        self
    }

    /// Adds a table property for creation.
    pub fn table_property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.table_properties.insert(key.into(), value.into());
        self
    }

    /// The target size of data files, in bytes.
    pub fn target_file_size_bytes(mut self, bytes: u64) -> Self {
        self.target_file_size_bytes = Some(bytes);
        self
    }

    /// The zstd level of data files.
    pub fn compression_level(mut self, level: i32) -> Self {
        self.compression_level = Some(level);
        self
    }

    /// How commits are retried.
    pub fn commit_retry(mut self, policy: RetryPolicy) -> Self {
        self.commit_retry = policy;
        self
    }

    /// Data file writers per table (default: one per core, at most 4).
    pub fn writers_per_table(mut self, writers: usize) -> Self {
        self.writers_per_table = Some(writers);
        self
    }

    /// Validates and builds the options.
    pub fn build(self) -> Result<IcebergSinkOptions> {
        let catalog = self
            .catalog
            .ok_or_else(|| Error::invalid_config("catalog", "is required"))?;
        let table = match (self.destination, self.table) {
            (Some(d), None) => d,
            (None, Some(t)) => {
                Destination::parse(&t).map_err(|e| Error::invalid_config("table", e.message()))?
            }
            (Some(_), Some(_)) => {
                return Err(Error::invalid_config(
                    "table",
                    "give either a table or a destination, not both",
                ));
            }
            (None, None) => return Err(Error::invalid_config("table", "is required")),
        };
        let options = IcebergSinkOptions {
            catalog,
            table,
            create_disposition: self.create_disposition,
            write_disposition: self.write_disposition,
            schema_evolution: self.schema_evolution,
            partition_fields: self
                .partition_fields
                .iter()
                .map(|f| f.parse())
                .collect::<Result<_>>()?,
            sort_order: self.sort_order.iter().map(|f| f.parse()).collect::<Result<_>>()?,
            table_properties: self.table_properties,
            target_file_size_bytes: self.target_file_size_bytes.unwrap_or(DEFAULT_TARGET_FILE_SIZE),
            compression_level: self.compression_level.unwrap_or(default_compression_level()),
            commit_retry: self.commit_retry,
            writers_per_table: self.writers_per_table,
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
        let o = IcebergSinkOptions::builder()
            .catalog(catalog())
            .table("db.t")
            .build()
            .unwrap();
        assert_eq!(o.create_disposition, CreateDisposition::CreateIfNeeded);
        assert_eq!(o.write_disposition, WriteDisposition::Append);
        assert!(!o.schema_evolution.is_enabled());
        assert_eq!(o.target_file_size_bytes, DEFAULT_TARGET_FILE_SIZE);
        assert_eq!(o.compression_level, 3);
        assert_eq!(o.table, Destination::Table("db.t".into()));
    }

    #[test]
    fn setters() {
        let o = IcebergSinkOptions::builder()
            .catalog(catalog())
            .table("db.events_{region}")
            .write_disposition(WriteDisposition::Truncate)
            .partition_field("day(ts)")
            .sort_field("id desc")
            .table_property("k", "v")
            .target_file_size_bytes(1 << 20)
            .compression_level(9)
            .build()
            .unwrap();
        assert!(matches!(o.table, Destination::Template(_)));
        assert_eq!(o.partition_fields[0].to_string(), "day(ts)");
        assert!(o.sort_order[0].descending);
        assert_eq!(o.table_properties["k"], "v");
        assert_eq!((o.target_file_size_bytes, o.compression_level), (1 << 20, 9));
    }

    #[test]
    fn build_names_the_field_at_fault() {
        let missing = IcebergSinkOptions::builder().table("db.t").build().unwrap_err();
        assert_eq!(missing.context_value("field"), Some("catalog"));
        let bad_table = IcebergSinkOptions::builder()
            .catalog(catalog())
            .table("nonamespace")
            .build()
            .unwrap_err();
        assert_eq!(bad_table.context_value("field"), Some("table"));
        let blank = IcebergSinkOptions::builder()
            .catalog(catalog())
            .table("  ")
            .build()
            .unwrap_err();
        assert_eq!(blank.context_value("field"), Some("table"));
        let never = IcebergSinkOptions::builder()
            .catalog(catalog())
            .table("db.t")
            .create_disposition(CreateDisposition::CreateNever)
            .partition_field("day(ts)")
            .build()
            .unwrap_err();
        assert_eq!(never.context_value("field"), Some("partition_fields"));
        let level = IcebergSinkOptions::builder()
            .catalog(catalog())
            .table("db.t")
            .compression_level(0)
            .build();
        assert_eq!(
            level.unwrap_err().context_value("field"),
            Some("compression_level")
        );
    }

    #[test]
    fn serde_round_trip() {
        let yaml = r#"
catalog: { type: sql, uri: ./lake/catalog.db, warehouse: ./lake/warehouse }
table: analytics.events_{region}
write_disposition: truncate
schema_evolution: { options: [allow_field_addition], required_columns: [id] }
partition_fields: ["day(ts)", "bucket(16, user_id) as user_bucket"]
table_properties: { owner: data }
target_file_size_bytes: 1048576
"#;
        let o: IcebergSinkOptions = serde_yaml_ng::from_str(yaml).unwrap();
        o.validate().unwrap();
        assert_eq!(o.partition_fields[1].partition_name(), "user_bucket");
        let json = serde_json::to_string(&o).unwrap();
        assert_eq!(serde_json::from_str::<IcebergSinkOptions>(&json).unwrap(), o);
        let err =
            serde_yaml_ng::from_str::<IcebergSinkOptions>("catalog: {type: memory}\ntable: a.b\ntabel: c\n");
        assert!(err.unwrap_err().to_string().contains("tabel"));
    }
}
