//! The Outflow side of `scripts/bench/compact.sh`, and its bare peer.
//!
//! ```text
//! compact_bench gen DIR FILES ROWS        FILES small Parquet files of ROWS rows in DIR/data
//! compact_bench register DIR              a fresh SQLite catalog in DIR/catalog, the files added
//! compact_bench compact DIR TARGET        Outflow's compaction of the table, TARGET bytes a file
//! compact_bench bare DIR TARGET           parquet-rs alone: read every file, write TARGET-byte files
//! ```
//!
//! Each prints one JSON line: the mode, the wall time in seconds, files and bytes in and
//! out, and the process's peak resident memory (VmHWM), so each figure comes from a process
//! that did nothing else first.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use outflow_core::RetryPolicy;
use outflow_iceberg::add_files::{AddFiles, AddFilesOptions};
use outflow_iceberg::maintenance::compact::{CompactOptions, compact};
use outflow_iceberg::{CatalogConfig, IcebergCatalog};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use serde_json::json;

const TABLE: &str = "bench.t";
const CITIES: [&str; 8] = [
    "Lisbon", "Oslo", "Lima", "Quito", "Accra", "Hanoi", "Perth", "Turin",
];

fn schema() -> Arc<Schema> {
    let field = |name: &str, ty: DataType, id: i32| {
        Field::new(name, ty, false).with_metadata([("PARQUET:field_id".to_string(), id.to_string())].into())
    };
    Arc::new(Schema::new(vec![
        field("id", DataType::Int64, 1),
        field("ts", DataType::Int64, 2),
        field("value", DataType::Float64, 3),
        field("name", DataType::Utf8, 4),
        field("city", DataType::Utf8, 5),
    ]))
}

/// Rows `first..first + rows`, with values that compress about as real ones do.
fn rows(first: i64, rows: i64) -> RecordBatch {
    let mut state = first as u64 ^ 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let ids = first..first + rows;
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(ids.clone())),
        Arc::new(Int64Array::from_iter_values(
            ids.clone().map(|i| 1_700_000_000_000_000 + i * 1_000),
        )),
        Arc::new(Float64Array::from_iter_values(
            (0..rows).map(|_| (next() % 1_000_000) as f64 / 100.0),
        )),
        Arc::new(StringArray::from_iter_values(
            (0..rows).map(|_| format!("{:012x}", next() & 0xffff_ffff_ffff)),
        )),
        Arc::new(StringArray::from_iter_values(
            (0..rows).map(|_| CITIES[(next() % 8) as usize]),
        )),
    ];
    RecordBatch::try_new(schema(), columns).expect("columns match the schema")
}

fn properties() -> WriterProperties {
    WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).expect("a zstd level")))
        .build()
}

fn data_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("data"))?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    files.sort();
    Ok(files)
}

fn bytes_of(files: &[PathBuf]) -> u64 {
    files.iter().map(|f| f.metadata().map_or(0, |m| m.len())).sum()
}

/// The process's peak resident set in MiB.
fn peak_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

fn catalog(dir: &Path) -> CatalogConfig {
    CatalogConfig::sqlite_in(dir.join("catalog"))
}

/// parquet-rs alone: one thread reads the files in turn, another writes the batches into
/// files rolled at `target` bytes, so that reading and writing overlap as in a compaction.
fn bare(dir: &Path, target: u64) -> Result<(usize, u64), Box<dyn std::error::Error>> {
    let inputs = data_files(dir)?;
    let out_dir = dir.join("bare");
    let _ = std::fs::remove_dir_all(&out_dir);
    std::fs::create_dir_all(&out_dir)?;
    let (tx, rx) = std::sync::mpsc::sync_channel::<RecordBatch>(2);
    let reader = std::thread::spawn(move || -> Result<(), String> {
        for path in inputs {
            let file = std::fs::File::open(&path).map_err(|e| e.to_string())?;
            // The same batch size as Outflow's compaction reads with.
            let batches = ParquetRecordBatchReaderBuilder::try_new(file)
                .and_then(|b| b.with_batch_size(8 * 1024).build())
                .map_err(|e| e.to_string())?;
            for batch in batches {
                if tx.send(batch.map_err(|e| e.to_string())?).is_err() {
                    return Ok(());
                }
            }
        }
        Ok(())
    });
    let mut written = Vec::new();
    let mut writer: Option<ArrowWriter<std::fs::File>> = None;
    for batch in rx {
        if writer.is_none() {
            let path = out_dir.join(format!("{:05}.parquet", written.len()));
            written.push(path.clone());
            writer = Some(ArrowWriter::try_new(
                std::fs::File::create(path)?,
                schema(),
                Some(properties()),
            )?);
        }
        let open = writer.as_mut().expect("opened above");
        open.write(&batch)?;
        if open.bytes_written() + open.in_progress_size() >= target as usize {
            writer.take().expect("open").close()?;
        }
    }
    if let Some(open) = writer {
        open.close()?;
    }
    reader.join().expect("the reader thread ran")?;
    Ok((written.len(), bytes_of(&written)))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let usage =
        "usage: compact_bench gen DIR FILES ROWS | register DIR | compact DIR TARGET | bare DIR TARGET";
    let mode = args.get(1).ok_or(usage)?.as_str();
    let dir = PathBuf::from(args.get(2).ok_or(usage)?);
    let arg =
        |i: usize| -> Result<u64, Box<dyn std::error::Error>> { Ok(args.get(i).ok_or(usage)?.parse()?) };
    let started = Instant::now();
    let result = match mode {
        "gen" => {
            let (files, per_file) = (arg(3)? as i64, arg(4)? as i64);
            std::fs::create_dir_all(dir.join("data"))?;
            for f in 0..files {
                let path = dir.join("data").join(format!("{f:06}.parquet"));
                let mut writer =
                    ArrowWriter::try_new(std::fs::File::create(path)?, schema(), Some(properties()))?;
                writer.write(&rows(f * per_file, per_file))?;
                writer.close()?;
            }
            let inputs = data_files(&dir)?;
            json!({"files_out": inputs.len(), "bytes_out": bytes_of(&inputs)})
        }
        "register" => {
            let _ = std::fs::remove_dir_all(dir.join("catalog"));
            std::fs::create_dir_all(dir.join("catalog"))?;
            let inputs: Vec<String> = data_files(&dir)?
                .iter()
                .map(|p| p.display().to_string())
                .collect();
            let options = AddFilesOptions::builder()
                .catalog(catalog(&dir))
                .table(TABLE)
                .build()?;
            let result = AddFiles::connect(options).await?.run(&inputs).await?;
            if !result.errors.is_empty() {
                return Err(result.render().into());
            }
            json!({"files_out": result.files_added})
        }
        "compact" => {
            let catalog = IcebergCatalog::connect(&catalog(&dir)).await?;
            let options = CompactOptions {
                target_file_size_bytes: Some(arg(3)?),
                ..CompactOptions::default()
            };
            let report = compact(&catalog, TABLE, &options, &RetryPolicy::default()).await?;
            let bytes_in: u64 = report.groups.iter().map(|g| g.input_bytes).sum();
            let files_in: usize = report.groups.iter().map(|g| g.input_files).sum();
            let files_out: usize = report.groups.iter().map(|g| g.output_files).sum();
            json!({"files_in": files_in, "bytes_in": bytes_in, "files_out": files_out})
        }
        "read" => {
            // Only the read side of a compaction: iceberg-rust's reader over every file.
            let catalog = IcebergCatalog::connect(&catalog(&dir)).await?;
            let ident = outflow_iceberg::schema::parse_table_ident(TABLE)?;
            let table = catalog.require_table(&ident).await?;
            let mut stream = table.scan().select_all().build()?.to_arrow().await?;
            let mut rows = 0;
            while let Some(batch) = futures::StreamExt::next(&mut stream).await {
                rows += batch?.num_rows();
            }
            json!({"rows": rows})
        }
        "bare-read" => {
            let mut rows = 0;
            for path in data_files(&dir)? {
                let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(path)?)?.build()?;
                for batch in reader {
                    rows += batch?.num_rows();
                }
            }
            json!({"rows": rows})
        }
        "bare" => {
            let inputs = data_files(&dir)?;
            let (files_out, bytes_out) = bare(&dir, arg(3)?)?;
            json!({"files_in": inputs.len(), "bytes_in": bytes_of(&inputs), "files_out": files_out, "bytes_out": bytes_out})
        }
        _ => return Err(usage.into()),
    };
    let mut result = result;
    result["mode"] = json!(mode);
    result["seconds"] = json!((started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0);
    result["peak_mib"] = json!((peak_mib() * 10.0).round() / 10.0);
    println!("{result}");
    Ok(())
}
