//! Appends N rows of 10 columns to a BigQuery table through Outflow and prints one JSON line
//! with rows/s and peak memory; `scripts/bench/bigquery.sh` runs it next to the Python
//! Storage Write client on the same emulator.
//!
//! ```text
//! bigquery_bench --mode write  --dataset D --table T [--rows N] [--batch B] [--method at_least_once|exactly_once]
//!                [--pregenerate]
//! bigquery_bench --mode encode [--rows N] [--batch B]
//! ```
//!
//! `write` needs `OUTFLOW_BIGQUERY_REST`, `OUTFLOW_BIGQUERY_GRPC` and
//! `OUTFLOW_BIGQUERY_PROJECT`; the table is created by the sink, and the rows are generated
//! batch by batch inside the timed loop, as a pipeline would produce them. `encode` runs
//! everything the sink does to rows before sending them (names, planning, type conversion,
//! splitting, Arrow IPC encoding) on batches made beforehand and sends nothing, to measure
//! Outflow's own cost. Both use the formulas of `scripts/bench/bigquery_python.py`.
//!
//! Each prints the process's CPU time over the timed part (`cpu_s`, all threads). The
//! emulator sets the pace of every writer, so CPU per row is what compares clients. With
//! `--pregenerate` the write's batches are made before the clock starts, so that the CPU
//! is the sink's alone (Python makes some of its columns slowly, value by value).

use std::sync::Arc;
use std::time::Instant;

use arrow_array::{
    ArrayRef, BooleanArray, Date32Array, Decimal128Array, Float64Array, Int64Array, RecordBatch, StringArray,
    TimestampMicrosecondArray,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use outflow_bigquery::rows::encode_rows;
use outflow_bigquery::{
    BigQuerySink, BigQuerySinkOptions, ConnectionOptions, FieldType, TableField, TableSchema, WriteMethod,
};
use outflow_core::{SchemaEvolutionConfig, Sink};

const CATEGORIES: [&str; 4] = ["alpha", "beta", "gamma", "delta"];

fn table_schema() -> TableSchema {
    let f = TableField::new;
    TableSchema::new(vec![
        f("id", FieldType::Int64).required(),
        f("k", FieldType::Int64),
        f("x", FieldType::Float64),
        f("y", FieldType::Float64),
        f("flag", FieldType::Bool),
        f("name", FieldType::String),
        f("category", FieldType::String),
        f("ts", FieldType::Timestamp),
        f("d", FieldType::Date),
        f("amount", FieldType::Numeric),
    ])
}

fn arrow_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("k", DataType::Int64, true),
        Field::new("x", DataType::Float64, true),
        Field::new("y", DataType::Float64, true),
        Field::new("flag", DataType::Boolean, true),
        Field::new("name", DataType::Utf8, true),
        Field::new("category", DataType::Utf8, true),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
        Field::new("d", DataType::Date32, true),
        Field::new("amount", DataType::Decimal128(38, 9), true),
    ]))
}

/// Rows `start..start + n`.
fn generate(schema: &SchemaRef, start: i64, n: i64) -> RecordBatch {
    let ids = start..start + n;
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(ids.clone())),
        Arc::new(Int64Array::from_iter_values(ids.clone().map(|i| i % 1000))),
        Arc::new(Float64Array::from_iter_values(
            ids.clone().map(|i| i as f64 * 0.5),
        )),
        Arc::new(Float64Array::from_iter_values(
            ids.clone().map(|i| i as f64 / 3.0),
        )),
        Arc::new(BooleanArray::from_iter(ids.clone().map(|i| Some(i % 2 == 0)))),
        Arc::new(StringArray::from_iter_values(
            ids.clone().map(|i| format!("name-{i:010}")),
        )),
        Arc::new(StringArray::from_iter_values(
            ids.clone().map(|i| CATEGORIES[(i % 4) as usize]),
        )),
        Arc::new(
            TimestampMicrosecondArray::from_iter_values(
                ids.clone().map(|i| 1_700_000_000_000_000 + i * 1_000),
            )
            .with_timezone("UTC"),
        ),
        Arc::new(Date32Array::from_iter_values(
            ids.clone().map(|i| 19_000 + (i % 365) as i32),
        )),
        Arc::new(
            Decimal128Array::from_iter_values(ids.map(|i| i as i128 * 1_000_000_000 + 250_000_000))
                .with_precision_and_scale(38, 9)
                .expect("valid decimal"),
        ),
    ];
    RecordBatch::try_new(schema.clone(), columns).expect("valid batch")
}

/// CPU seconds (user and system, all threads) the process has used. Linux counts them in
/// ticks of 1/100 s (`USER_HZ`, 100 on every Linux kernel this runs on).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // Fields after the command name, which is in parentheses and may hold spaces.
    let after = &stat[stat.rfind(')').expect("a command name") + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| fields[i].parse::<u64>().expect("a tick count");
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    (ticks(11) + ticks(12)) as f64 / 100.0
}

/// The process's peak resident memory, in KiB.
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set; source .cache/run/<instance>.env"))
}

#[tokio::main]
async fn main() -> outflow_core::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let mode = arg(&args, "--mode").unwrap_or_else(|| "write".into());
    let rows: i64 = arg(&args, "--rows").map_or(1_000_000, |v| v.parse().expect("--rows"));
    let batch: i64 = arg(&args, "--batch").map_or(10_000, |v| v.parse().expect("--batch"));
    let method = match arg(&args, "--method").as_deref() {
        None | Some("at_least_once") => WriteMethod::AtLeastOnce,
        Some("exactly_once") => WriteMethod::ExactlyOnce,
        Some(other) => panic!("unknown --method {other}"),
    };
    let pregenerate = args.iter().any(|a| a == "--pregenerate");
    let schema = arrow_schema();
    let mut started = Instant::now();
    let mut cpu_at_start = cpu_seconds();
    let mut bytes = 0u64;
    let mut requests = 0u64;
    match mode.as_str() {
        "encode" => {
            let table = table_schema();
            let config = SchemaEvolutionConfig::disabled();
            // The batches are made first: only what the sink does to them is timed.
            let batches: Vec<RecordBatch> = (0..rows)
                .step_by(batch as usize)
                .map(|start| generate(&schema, start, batch.min(rows - start)))
                .collect();
            started = Instant::now();
            cpu_at_start = cpu_seconds();
            for b in &batches {
                let (encoded, failed) = encode_rows("bench", &table, b, &config, false, 3 * 1024 * 1024)?;
                assert!(failed.is_empty(), "{failed:?}");
                for r in encoded.expect("rows").requests {
                    bytes += r.bytes.len() as u64;
                    requests += 1;
                }
            }
        }
        "write" => {
            let dataset = arg(&args, "--dataset").expect("--dataset");
            let table = arg(&args, "--table").expect("--table");
            let options = BigQuerySinkOptions::builder()
                .project(env("OUTFLOW_BIGQUERY_PROJECT"))
                .dataset(dataset)
                .table(table)
                .schema(table_schema())
                .write_method(method)
                .connection(ConnectionOptions::emulator(
                    env("OUTFLOW_BIGQUERY_REST"),
                    env("OUTFLOW_BIGQUERY_GRPC"),
                ))
                .build()?;
            let mut made: Vec<RecordBatch> = Vec::new();
            if pregenerate {
                made = (0..rows)
                    .step_by(batch as usize)
                    .map(|start| generate(&schema, start, batch.min(rows - start)))
                    .collect();
                started = Instant::now();
                cpu_at_start = cpu_seconds();
            }
            let mut sink = BigQuerySink::connect(options).await?;
            if pregenerate {
                for b in made {
                    sink.write(b).await?;
                }
            } else {
                let mut start = 0;
                while start < rows {
                    let n = batch.min(rows - start);
                    sink.write(generate(&schema, start, n)).await?;
                    start += n;
                }
            }
            let result = sink.close().await?;
            assert!(
                result.failed.is_empty(),
                "{:?}",
                &result.failed[..result.failed.len().min(3)]
            );
            assert_eq!(result.rows_written(), rows as u64);
            bytes = result.bytes_written();
            requests = result.destinations.values().map(|d| d.commits).sum();
        }
        other => panic!("unknown --mode {other}"),
    }
    let seconds = started.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu_at_start;
    println!(
        "{}",
        serde_json::json!({
            "tool": "outflow",
            "mode": mode,
            "method": if mode == "write" { format!("{method:?}") } else { "-".into() },
            "rows": rows,
            "batch": batch,
            "requests": requests,
            "bytes": bytes,
            "seconds": (seconds * 1000.0).round() / 1000.0,
            "rows_per_s": (rows as f64 / seconds).round() as u64,
            "peak_rss_kib": peak_rss_kib(),
            "pregenerated": pregenerate || mode == "encode",
            "cpu_s": (cpu * 100.0).round() / 100.0,
        })
    );
    Ok(())
}
