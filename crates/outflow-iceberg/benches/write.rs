//! The write benchmark's Rust side: reads a Parquet file in batches and writes its rows
//! through Outflow's Iceberg sink (one commit), through a bare parquet-rs `ArrowWriter`
//! (zstd, one file), or through as many bare writers as the machine has cores (the batches
//! dealt out in turn, a file each), printing rows/s as JSON. `scripts/bench/iceberg_write.sh`
//! runs it beside PyIceberg on the same file and measures peak memory.
//!
//! ```text
//! cargo bench -p outflow-iceberg --bench write -- outflow|parquet-rs|parquet-rs-cores SOURCE.parquet OUT_DIR
//! ```
//!
//! With `OUTFLOW_BENCH_WAREHOUSE=s3://bucket/prefix`, Outflow's table goes to that S3
//! warehouse (the store from `OUTFLOW_S3_*`), its SQLite catalog staying in `OUT_DIR`.

use std::time::Instant;

use arrow_array::RecordBatchReader;
use outflow_core::Sink;
use outflow_iceberg::{CatalogConfig, IcebergSink, IcebergSinkOptions};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

const BATCH_ROWS: usize = 65_536;

fn batches(source: &str) -> ParquetRecordBatchReader {
    let file = std::fs::File::open(source).expect("the source file opens");
    ParquetRecordBatchReaderBuilder::try_new(file)
        .expect("the source is Parquet")
        .with_batch_size(BATCH_ROWS)
        .build()
        .expect("a reader")
}

/// The source's batches, and their schema.
fn batches_with_schema(source: &str) -> (arrow_schema::SchemaRef, ParquetRecordBatchReader) {
    let reader = batches(source);
    (reader.schema(), reader)
}

/// A bare zstd writer into a new file at `path`.
fn bare_writer(path: &str, schema: arrow_schema::SchemaRef) -> ArrowWriter<std::fs::File> {
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).expect("a zstd level")))
        .build();
    let file = std::fs::File::create(path).expect("the output file");
    ArrowWriter::try_new(file, schema, Some(props)).expect("a writer")
}

#[tokio::main]
async fn main() {
    // `cargo bench` and the benchmark script pass `--bench`; `cargo test --all-targets` runs
    // benches without it (and with a test filter as argument): nothing to measure then.
    if !std::env::args().any(|a| a == "--bench") {
        println!("write benchmark: run it through scripts/bench/iceberg_write.sh");
        return;
    }
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let [mode, source, out] = args.as_slice() else {
        eprintln!("usage: write outflow|parquet-rs|parquet-rs-cores SOURCE.parquet OUT_DIR");
        std::process::exit(2);
    };
    std::fs::create_dir_all(out).expect("the output directory");
    let started = Instant::now();
    let mut rows = 0u64;
    match mode.as_str() {
        "outflow" => {
            let catalog = match std::env::var("OUTFLOW_BENCH_WAREHOUSE") {
                Ok(warehouse) => CatalogConfig::Sql {
                    uri: format!("{out}/catalog.db"),
                    warehouse,
                    name: "outflow".into(),
                    properties: outflow_testkit::iceberg::S3Store::from_env().properties(),
                },
                Err(_) => CatalogConfig::sqlite_in(out),
            };
            let options = IcebergSinkOptions::builder()
                .catalog(catalog)
                .table("bench.events")
                .build()
                .expect("valid options");
            let mut sink = IcebergSink::connect(options).await.expect("the catalog opens");
            for batch in batches(source) {
                let batch = batch.expect("a source batch");
                rows += batch.num_rows() as u64;
                sink.write(batch).await.expect("the sink writes");
            }
            sink.close().await.expect("the sink commits");
        }
        "parquet-rs" => {
            let (schema, reader) = batches_with_schema(source);
            let mut writer = bare_writer(&format!("{out}/bare.parquet"), schema);
            for batch in reader {
                let batch = batch.expect("a source batch");
                rows += batch.num_rows() as u64;
                writer.write(&batch).expect("parquet-rs writes");
            }
            writer.close().expect("parquet-rs closes");
        }
        "parquet-rs-cores" => {
            // One writer thread per core, each fed batches in turn through a channel of one
            // batch, so at most two batches a writer are in memory besides its row group.
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            let (schema, reader) = batches_with_schema(source);
            let (senders, writers): (Vec<_>, Vec<_>) = (0..cores)
                .map(|i| {
                    let (tx, rx) = std::sync::mpsc::sync_channel::<arrow_array::RecordBatch>(1);
                    let mut writer = bare_writer(&format!("{out}/bare-{i}.parquet"), schema.clone());
                    let thread = std::thread::spawn(move || {
                        for batch in rx {
                            writer.write(&batch).expect("parquet-rs writes");
                        }
                        writer.close().expect("parquet-rs closes");
                    });
                    (tx, thread)
                })
                .unzip();
            for (i, batch) in reader.enumerate() {
                let batch = batch.expect("a source batch");
                rows += batch.num_rows() as u64;
                senders[i % cores]
                    .send(batch)
                    .expect("the writer takes the batch");
            }
            drop(senders);
            for writer in writers {
                writer.join().expect("the writer finishes");
            }
        }
        other => panic!("unknown mode {other}"),
    }
    let seconds = started.elapsed().as_secs_f64();
    println!("{{\"peer\":\"{mode}\",\"rows\":{rows},\"seconds\":{seconds:.3}}}");
}
