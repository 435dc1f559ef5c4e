//! Builders of the options in [`crate::options`]: setters that never fail, every check in
//! `build()`, naming the field at fault.

use std::collections::BTreeMap;

use outflow_core::changes::ChangeConfig;
use outflow_core::{
    CreateDisposition, Destination, Error, Result, RetryPolicy, SchemaEvolutionConfig, WriteDisposition,
};

use crate::options::{
    CatalogConfig, DEFAULT_COMPRESSION_LEVEL, DEFAULT_TARGET_FILE_SIZE, IcebergSinkOptions,
    TableCreateOptions,
};

/// Builds [`TableCreateOptions`]; partition and sort fields are parsed in `build()`.
#[derive(Clone, Debug, Default)]
pub struct TableCreateOptionsBuilder {
    partition_fields: Vec<String>,
    sort_order: Vec<String>,
    properties: BTreeMap<String, String>,
}

impl TableCreateOptionsBuilder {
    /// Adds a partition field: `day(ts)`, `bucket(16, id)`, `region`, `truncate(4, name) as prefix`...
    pub fn partition_field(mut self, field: impl Into<String>) -> Self {
        self.partition_fields.push(field.into());
        self
    }

    /// Adds a sort field (`id desc nulls last`).
    pub fn sort_field(mut self, field: impl Into<String>) -> Self {
        self.sort_order.push(field.into());
        self
    }

    /// Sets a table property.
    pub fn property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.insert(key.into(), value.into());
        self
    }

    /// Parses the fields and builds the options.
    pub fn build(self) -> Result<TableCreateOptions> {
        Ok(TableCreateOptions {
            partition_fields: self
                .partition_fields
                .iter()
                .map(|f| f.parse())
                .collect::<Result<_>>()?,
            sort_order: self.sort_order.iter().map(|f| f.parse()).collect::<Result<_>>()?,
            properties: self.properties,
        })
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
    table_options: TableCreateOptions,
    target_file_size_bytes: Option<u64>,
    compression_level: Option<i32>,
    retry: RetryPolicy,
    writers_per_table: Option<usize>,
    changes: Option<ChangeConfig>,
}

impl IcebergSinkOptionsBuilder {
    /// A builder holding `options`.
    pub(crate) fn from_options(options: IcebergSinkOptions) -> Self {
        IcebergSinkOptionsBuilder {
            catalog: Some(options.catalog),
            table: None,
            destination: Some(options.table),
            create_disposition: options.create_disposition,
            write_disposition: options.write_disposition,
            schema_evolution: options.schema_evolution,
            table_options: options.table_options,
            target_file_size_bytes: Some(options.target_file_size_bytes),
            compression_level: Some(options.compression_level),
            retry: options.retry,
            writers_per_table: options.writers_per_table,
            changes: options.changes,
        }
    }

    /// The catalog.
    pub fn catalog(mut self, catalog: CatalogConfig) -> Self {
        self.catalog = Some(catalog);
        self
    }

    /// The table, `namespace.table`, or a template such as `ns.events_{region}`.
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = Some(table.into());
        self.destination = None;
        self
    }

    /// A destination chosen per row (a template or a function).
    pub fn destination(mut self, destination: Destination) -> Self {
        self.destination = Some(destination);
        self.table = None;
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

    /// Partitioning, sort order and properties of a table the sink creates.
    pub fn table_options(mut self, options: TableCreateOptions) -> Self {
        self.table_options = options;
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

    /// How catalog calls and commits are retried.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Data file writers per table (default: one per core, at most 4).
    pub fn writers_per_table(mut self, writers: usize) -> Self {
        self.writers_per_table = Some(writers);
        self
    }

    /// Upsert mode: the input is change data, applied by `changes.key`.
    pub fn changes(mut self, changes: ChangeConfig) -> Self {
        self.changes = Some(changes);
        self
    }

    /// Validates and builds the options.
    pub fn build(self) -> Result<IcebergSinkOptions> {
        let catalog = self
            .catalog
            .ok_or_else(|| Error::invalid_config("catalog", "is required"))?;
        let table = match (self.destination, self.table) {
            (Some(d), _) => d,
            (None, Some(t)) => {
                Destination::parse(&t).map_err(|e| Error::invalid_config("table", e.message()))?
            }
            (None, None) => return Err(Error::invalid_config("table", "is required")),
        };
        let options = IcebergSinkOptions {
            catalog,
            table,
            create_disposition: self.create_disposition,
            write_disposition: self.write_disposition,
            schema_evolution: self.schema_evolution,
            table_options: self.table_options,
            target_file_size_bytes: self.target_file_size_bytes.unwrap_or(DEFAULT_TARGET_FILE_SIZE),
            compression_level: self.compression_level.unwrap_or(DEFAULT_COMPRESSION_LEVEL),
            retry: self.retry,
            writers_per_table: self.writers_per_table,
            changes: self.changes,
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
        assert_eq!(o.create_disposition(), CreateDisposition::CreateIfNeeded);
        assert_eq!(o.write_disposition(), WriteDisposition::Append);
        assert!(!o.schema_evolution().is_enabled());
        assert!(o.table_options().is_empty());
        assert_eq!(o.target_file_size_bytes(), DEFAULT_TARGET_FILE_SIZE);
        assert_eq!(o.compression_level(), 3);
        assert_eq!(o.destination(), &Destination::Table("db.t".into()));
        assert_eq!(o.retry(), &RetryPolicy::default());
    }

    #[test]
    fn setters() {
        let o = IcebergSinkOptions::builder()
            .catalog(catalog())
            .table("db.events_{region}")
            .write_disposition(WriteDisposition::Truncate)
            .table_options(
                TableCreateOptions::builder()
                    .partition_field("day(ts)")
                    .sort_field("id desc")
                    .property("k", "v")
                    .build()
                    .unwrap(),
            )
            .target_file_size_bytes(1 << 20)
            .compression_level(9)
            .retry(RetryPolicy::none())
            .build()
            .unwrap();
        assert!(matches!(o.destination(), Destination::Template(_)));
        assert_eq!(o.table_options().partition_fields()[0].to_string(), "day(ts)");
        assert!(o.table_options().sort_order()[0].descending);
        assert_eq!(o.table_options().properties()["k"], "v");
        assert_eq!((o.target_file_size_bytes(), o.compression_level()), (1 << 20, 9));
        assert_eq!(o.retry().max_attempts(), 1);
        assert_eq!(o.to_builder().build().unwrap(), o);
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
        let partitioned = TableCreateOptions::builder()
            .partition_field("day(ts)")
            .build()
            .unwrap();
        let never = IcebergSinkOptions::builder()
            .catalog(catalog())
            .table("db.t")
            .create_disposition(CreateDisposition::CreateNever)
            .table_options(partitioned)
            .build()
            .unwrap_err();
        assert_eq!(
            never.context_value("field"),
            Some("table_options.partition_fields")
        );
        let level = IcebergSinkOptions::builder()
            .catalog(catalog())
            .table("db.t")
            .compression_level(0)
            .build();
        assert_eq!(
            level.unwrap_err().context_value("field"),
            Some("compression_level")
        );
        let bad_partition = TableCreateOptions::builder()
            .partition_field("day(")
            .build()
            .unwrap_err();
        assert_eq!(bad_partition.context_value("field"), Some("partition_fields"));
    }
}
