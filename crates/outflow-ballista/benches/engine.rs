//! The same `INSERT INTO ... SELECT` into a new Iceberg table (SQLite catalog), four ways:
//! Outflow's spec-built table in DataFusion (a writer per partition, one commit), Outflow's
//! closure-built table (one stream, one sink), Outflow on a Ballista cluster, and
//! iceberg-datafusion's own insert. Run by `scripts/bench/engine.sh`, which generates the
//! source, starts the cluster and collects the figures; each run prints one JSON line.
//!
//! ```text
//! engine generate <source-dir> <rows> <files>
//! engine <datafusion|datafusion-single|iceberg-datafusion> <source-dir> <lake-dir> <partitions>
//! engine ballista <source-dir> <lake-dir> <partitions> <scheduler-url>
//! ```

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::error::Result;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use outflow_core::EvolutionPlanner;
use outflow_core::Sink;
use outflow_core::schema::{InputSchema, Schema};
use outflow_datafusion::{SinkSpec, SinkTable};
use outflow_iceberg::schema::{parse_table_ident, to_iceberg_schema};
use outflow_iceberg::{CatalogConfig, IcebergCatalog, IcebergSink, IcebergSinkOptions};

const TABLE: &str = "bench.trips";

#[tokio::main]
async fn main() -> Result<()> {
    // `cargo bench` and the benchmark script pass `--bench`; `cargo test --all-targets` runs
    // benches without it (and with a test filter as argument): nothing to measure then.
    if !std::env::args().any(|a| a == "--bench") {
        println!("engine benchmark: run it through scripts/bench/engine.sh");
        return Ok(());
    }
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let arg = |i: usize| -> &str {
        args.get(i)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("missing argument {i}; see the file's header"))
    };
    if arg(0) == "generate" {
        return generate(
            Path::new(arg(1)),
            arg(2).parse().unwrap(),
            arg(3).parse().unwrap(),
        )
        .await;
    }
    let (mode, source, lake, partitions) = (
        arg(0),
        arg(1),
        Path::new(arg(2)),
        arg(3).parse::<usize>().unwrap(),
    );
    let config = SessionConfig::new().with_target_partitions(partitions);
    let ctx = match mode {
        "ballista" => {
            let ctx = outflow_ballista::connect(arg(4)).await?;
            ctx.sql(&format!(
                "SET datafusion.execution.target_partitions = {partitions}"
            ))
            .await?
            .collect()
            .await?;
            ctx
        }
        _ => SessionContext::new_with_config(config),
    };
    ctx.register_parquet("source", source, ParquetReadOptions::default())
        .await?;
    let schema = ctx.table("source").await?.schema().inner().clone();
    let options = IcebergSinkOptions::builder()
        .catalog(CatalogConfig::sqlite_in(lake))
        .table(TABLE)
        .build()
        .expect("valid options");
    let sql = match mode {
        "datafusion" | "ballista" => {
            let table = SinkTable::from_spec(schema, SinkSpec::Iceberg(Box::new(options.clone())));
            ctx.register_table("trips", Arc::new(table))?;
            "INSERT INTO trips SELECT * FROM source"
        }
        "datafusion-single" => {
            let open = options.clone();
            let table = SinkTable::new(schema, move || {
                let options = open.clone();
                async move { Ok(Box::new(IcebergSink::connect(options).await?) as Box<dyn Sink>) }
            });
            ctx.register_table("trips", Arc::new(table))?;
            "INSERT INTO trips SELECT * FROM source"
        }
        "iceberg-datafusion" => {
            let catalog = create_table(options.catalog(), &schema).await;
            let provider = iceberg_datafusion::IcebergCatalogProvider::try_new(catalog.iceberg().clone())
                .await
                .expect("iceberg-datafusion catalog");
            ctx.register_catalog("lake", Arc::new(provider));
            "INSERT INTO lake.bench.trips SELECT * FROM source"
        }
        other => panic!("unknown mode {other}"),
    };

    let started = Instant::now();
    let batches = ctx.sql(sql).await?.collect().await?;
    let seconds = started.elapsed().as_secs_f64();
    let answered: u64 = batches
        .iter()
        .map(|b| {
            b.column(0)
                .as_any()
                .downcast_ref::<datafusion::arrow::array::UInt64Array>()
                .expect("a count column")
                .value(0)
        })
        .sum();

    // What the table holds now, from its own metadata.
    let catalog = IcebergCatalog::connect(options.catalog()).await.expect("catalog");
    let table = catalog
        .require_table(&parse_table_ident(TABLE).unwrap())
        .await
        .expect("the table");
    let committed = outflow_iceberg::table_row_count(&table).await.expect("row count");
    println!(
        "{}",
        serde_json::json!({
            "mode": mode,
            "partitions": partitions,
            "rows": committed,
            "answered": answered,
            "seconds": seconds,
            "rows_per_second": committed as f64 / seconds,
        })
    );
    Ok(())
}

/// An empty table for iceberg-datafusion, which writes only into existing tables.
async fn create_table(config: &CatalogConfig, schema: &SchemaRef) -> IcebergCatalog {
    let catalog = IcebergCatalog::connect(config).await.expect("catalog");
    // The planner numbers the fields, as it does when a sink creates a table.
    let input = InputSchema::new(Schema::from_arrow(schema).expect("schema"));
    let plan = EvolutionPlanner::new(&Default::default())
        .plan(&[input])
        .expect("plan");
    let iceberg = to_iceberg_schema(plan.schema.as_ref().expect("a schema"), 0).expect("schema");
    catalog
        .create_table(
            &parse_table_ident(TABLE).unwrap(),
            iceberg,
            None,
            None,
            HashMap::new(),
        )
        .await
        .expect("create the table");
    catalog
}

/// `files` Parquet files with `rows` trips in all: id, vendor, city, fare, passengers, ts.
async fn generate(dir: &Path, rows: u64, files: u64) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let ctx = SessionContext::new();
    let per_file = rows.div_ceil(files);
    for f in 0..files {
        let first = f * per_file + 1;
        let last = rows.min((f + 1) * per_file);
        let path = dir.join(format!("part-{f:03}.parquet"));
        ctx.sql(&format!(
            "COPY (SELECT value AS id, \
                 CAST(value % 7 AS INT) AS vendor, \
                 'city-' || CAST(value % 97 AS VARCHAR) AS city, \
                 CAST(value % 10000 AS DOUBLE) / 100 AS fare, \
                 CAST(value % 6 AS INT) + 1 AS passengers, \
                 to_timestamp_micros(1767225600000000 + value * 1000) AS ts \
               FROM generate_series({first}, {last})) TO '{}' STORED AS PARQUET",
            path.display()
        ))
        .await?
        .collect()
        .await?;
    }
    Ok(())
}
