//! The cost of upsert mode: the same generated rows (the tests' change stream of creates,
//! updates and deletes) written once as change data (applied by key: data and equality
//! delete files in each commit) and once appended (the same rows without the operation
//! column), committing every FLUSH_BATCHES batches of 65,536 rows, into SQLite-catalog
//! tables on local disk. Prints rows/s of each and their ratio as JSON. `compact` compacts
//! a table, applying its deletes.
//!
//! ```text
//! cargo bench -p outflow-iceberg --bench upsert -- write CHANGES KEYS FLUSH_BATCHES OUT_DIR
//! cargo bench -p outflow-iceberg --bench upsert -- compact OUT_DIR TABLE
//! ```
//!
//! `scripts/bench/iceberg_upsert.sh` runs it with 1,000,000 changes over 100,000 keys and
//! has Java Iceberg read both tables.

use std::sync::Arc;
use std::time::Instant;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use outflow_core::changes::{ChangeConfig, OperationColumn};
use outflow_core::{RetryPolicy, Sink};
use outflow_iceberg::maintenance::CompactOptions;
use outflow_iceberg::{CatalogConfig, IcebergCatalog, IcebergSink, IcebergSinkOptions};

const BATCH_ROWS: usize = 65_536;

/// The shared generated change stream (`changes` changes over `keys` keys), in batches:
/// key, operation (`c`, `u`, `d`), a value and a label.
fn change_batches(changes: usize, keys: u64) -> Vec<RecordBatch> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("op", DataType::Utf8, false),
        Field::new("value", DataType::Int64, false),
        Field::new("label", DataType::Utf8, false),
    ]));
    let (stream, _) = outflow_testkit::changes::change_stream(0x5eed, keys, changes as u64);
    stream
        .chunks(BATCH_ROWS)
        .map(|part| {
            RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(Int64Array::from_iter_values(part.iter().map(|c| c.key as i64))),
                    Arc::new(StringArray::from_iter_values(part.iter().map(|c| c.op))),
                    Arc::new(Int64Array::from_iter_values(part.iter().map(|c| c.value as i64))),
                    Arc::new(StringArray::from_iter_values(
                        part.iter().map(|c| format!("label-{}", c.value)),
                    )),
                ],
            )
            .expect("a change batch")
        })
        .collect()
}

/// Writes `batches` through one sink with `options`, committing every `flush` batches,
/// closes it, and returns the seconds.
async fn timed(options: IcebergSinkOptions, batches: Vec<RecordBatch>, flush: usize) -> f64 {
    let started = Instant::now();
    let mut sink = IcebergSink::connect(options).await.expect("the sink connects");
    for (i, batch) in batches.into_iter().enumerate() {
        sink.write(batch).await.expect("a write");
        if (i + 1) % flush == 0 {
            sink.flush().await.expect("a commit");
        }
    }
    let result = sink.close().await.expect("the commit");
    assert!(result.failed.is_empty(), "{:?}", result.failed.first());
    started.elapsed().as_secs_f64()
}

#[tokio::main]
async fn main() {
    // `cargo test --all-targets` runs benches without `--bench`: nothing to measure then.
    if !std::env::args().any(|a| a == "--bench") {
        println!("upsert benchmark: run it through scripts/bench/iceberg_upsert.sh");
        return;
    }
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["write", changes, keys, flush, out] => {
            write(
                changes.parse().expect("CHANGES is a number"),
                keys.parse().expect("KEYS is a number"),
                flush.parse().expect("FLUSH_BATCHES is a number"),
                out,
            )
            .await
        }
        ["compact", out, table] => compact(out, table).await,
        _ => {
            eprintln!(
                "usage: upsert write CHANGES KEYS FLUSH_BATCHES OUT_DIR | upsert compact OUT_DIR TABLE"
            );
            std::process::exit(2);
        }
    }
}

/// Appends the rows to `bench.appended`, then applies them as changes to `bench.upserted`,
/// both committing every `flush` batches; prints the rates.
async fn write(changes: usize, keys: u64, flush: usize, out: &str) {
    let catalog = CatalogConfig::sqlite_in(out);
    let batches = change_batches(changes, keys);
    let appended: Vec<RecordBatch> = batches
        .iter()
        .map(|b| b.project(&[0, 2, 3]).expect("without the operation column"))
        .collect();
    let append = IcebergSinkOptions::builder()
        .catalog(catalog.clone())
        .table("bench.appended")
        .build()
        .expect("append options");
    let append_s = timed(append, appended, flush).await;

    let upsert = IcebergSinkOptions::builder()
        .catalog(catalog)
        .table("bench.upserted")
        .changes(ChangeConfig::new(["id"], OperationColumn::new("op")))
        .build()
        .expect("upsert options");
    let upsert_s = timed(upsert, batches, flush).await;

    let rate = |s: f64| (changes as f64 / s).round();
    println!(
        "{}",
        serde_json::json!({
            "changes": changes,
            "keys": keys,
            "commits": changes.div_ceil(BATCH_ROWS * flush),
            "append_rows_per_s": rate(append_s),
            "upsert_rows_per_s": rate(upsert_s),
            "upsert_to_append": (append_s / upsert_s * 1000.0).round() / 1000.0,
        })
    );
}

/// Compacts `table`, applying its deletes; prints the seconds and the report.
async fn compact(out: &str, table: &str) {
    let catalog = IcebergCatalog::connect(&CatalogConfig::sqlite_in(out))
        .await
        .expect("the catalog");
    let started = Instant::now();
    let report = outflow_iceberg::maintenance::compact(
        &catalog,
        table,
        &CompactOptions::default(),
        &RetryPolicy::default(),
    )
    .await
    .expect("compaction");
    println!(
        "{}",
        serde_json::json!({"compact_s": started.elapsed().as_secs_f64(), "report": report})
    );
}
