//! Writes a few thousand generated rows to an Iceberg table in a local SQLite catalog, then
//! reads the table's history back. No service is needed.
//!
//! ```text
//! cargo run -p outflow-iceberg --example iceberg_quickstart [DIR]
//! ```
//!
//! DIR defaults to `./outflow-quickstart`; the catalog is `DIR/catalog.db` and the data
//! lies under `DIR/warehouse`. Run it twice and the table holds twice the rows.

use std::sync::Arc;

use arrow_array::{Float64Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use outflow_core::Sink;
use outflow_iceberg::{CatalogConfig, IcebergSink, IcebergSinkOptions, TableCreateOptions};

const ROWS: i64 = 5_000;
const BATCH: i64 = 1_000;

fn trips(start: i64, len: i64) -> RecordBatch {
    let cities = ["Lisbon", "Porto", "Faro", "Braga"];
    let schema = Arc::new(Schema::new(vec![
        Field::new("trip_id", DataType::Int64, false),
        Field::new("city", DataType::Utf8, false),
        Field::new(
            "started_at",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ),
        Field::new("distance_km", DataType::Float64, true),
    ]));
    let ids = start..start + len;
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from_iter_values(ids.clone())),
            Arc::new(StringArray::from_iter_values(
                ids.clone().map(|i| cities[i as usize % cities.len()]),
            )),
            Arc::new(
                TimestampMicrosecondArray::from_iter_values(
                    ids.clone().map(|i| 1_764_374_400_000_000 + i * 60_000_000),
                )
                .with_timezone("UTC"),
            ),
            Arc::new(Float64Array::from_iter(
                ids.map(|i| (i % 7 != 0).then_some((i % 250) as f64 / 10.0)),
            )),
        ],
    )
    .expect("columns match the schema")
}

#[tokio::main]
async fn main() -> outflow_core::Result<()> {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "outflow-quickstart".to_string());
    let options = IcebergSinkOptions::builder()
        .catalog(CatalogConfig::sqlite_in(&dir))
        .table("quickstart.trips")
        .table_options(
            TableCreateOptions::builder()
                .partition_field("day(started_at)")
                .build()?,
        )
        .build()?;
    let mut sink = IcebergSink::connect(options).await?;
    for start in (0..ROWS).step_by(BATCH as usize) {
        sink.write(trips(start, BATCH)).await?;
    }
    let result = sink.close().await?;
    let stats = &result.destinations["quickstart.trips"];
    println!(
        "wrote {} rows in {} files ({} bytes) to quickstart.trips, {} commit",
        stats.rows, stats.files, stats.bytes, stats.commits
    );

    let table = sink
        .catalog()
        .require_table(&outflow_iceberg::schema::parse_table_ident("quickstart.trips")?)
        .await?;
    println!(
        "rows in the table now: {}",
        outflow_iceberg::table_row_count(&table).await?
    );
    println!("catalog:   {}/catalog.db (SQL catalog \"outflow\")", dir);
    println!("warehouse: {}/warehouse", dir);
    println!("read it with PyIceberg:");
    println!(
        "  SqlCatalog(\"outflow\", uri=\"sqlite:///{dir}/catalog.db\", warehouse=\"file://{dir}/warehouse\")\
         .load_table(\"quickstart.trips\").scan().to_arrow()"
    );
    Ok(())
}
