//! A sink described as data: what a job file's `sink:` section holds, and what travels with
//! a plan to the processes that write (Ballista executors).

use outflow_core::{Result, Sink};
use serde::{Deserialize, Serialize};

/// One sink, keyed by its name (`iceberg`, `bigquery`, `bigtable`), holding exactly the
/// options of that sink's builder. The serde form is the `sink:` section of a job file:
///
/// ```yaml
/// iceberg:
///   catalog: { type: sql, uri: /data/lake/catalog.db, warehouse: /data/lake/warehouse }
///   table: analytics.trips
/// ```
///
/// Relative paths inside (a SQLite catalog, a key file) are resolved by whoever reads them;
/// a spec sent to other processes should hold absolute ones.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SinkSpec {
    /// Apache Iceberg (`outflow-iceberg`; options in docs/iceberg.md).
    Iceberg(Box<outflow_iceberg::IcebergSinkOptions>),
    /// Google BigQuery (`outflow-bigquery`; options in docs/bigquery.md).
    #[serde(rename = "bigquery")]
    BigQuery(Box<outflow_bigquery::BigQuerySinkOptions>),
    /// Google Cloud Bigtable (`outflow-bigtable`; options in docs/bigtable.md).
    Bigtable(Box<outflow_bigtable::BigtableSinkBuilder>),
}

impl SinkSpec {
    /// The sink's name as written under `sink:`.
    pub fn name(&self) -> &'static str {
        match self {
            SinkSpec::Iceberg(_) => "iceberg",
            SinkSpec::BigQuery(_) => "bigquery",
            SinkSpec::Bigtable(_) => "bigtable",
        }
    }

    /// Validates the options and opens the sink (connecting, creating nothing yet).
    pub async fn open(&self) -> Result<Box<dyn Sink>> {
        Ok(match self {
            SinkSpec::Iceberg(options) => {
                Box::new(outflow_iceberg::IcebergSink::connect(options.as_ref().clone()).await?)
            }
            SinkSpec::BigQuery(options) => Box::new(
                outflow_bigquery::BigQuerySink::builder(options.as_ref().clone())
                    .build()
                    .await?,
            ),
            SinkSpec::Bigtable(builder) => Box::new(builder.as_ref().clone().build()?),
        })
    }
}
