//! The Outflow side of `scripts/bench/add_files.sh`.
//!
//! ```text
//! add_files_bench footers LIST CONCURRENCY          read and decode every footer, nothing else
//! add_files_bench add LIST CATALOG_DIR TABLE CONCURRENCY   AddFiles into a SQLite catalog
//! ```
//!
//! `LIST` is a file with one Parquet path per line. Each prints one JSON line with the
//! wall time in seconds.

use std::io::{Read, Seek, SeekFrom};
use std::time::Instant;

use futures::StreamExt;
use outflow_iceberg::CatalogConfig;
use outflow_iceberg::add_files::{AddFiles, AddFilesOptions};
use parquet::file::metadata::ParquetMetaDataReader;

/// The bare cost: open, read the tail, decode the metadata, as a footer reader must.
fn read_footer(path: &str) -> std::io::Result<usize> {
    let mut file = std::fs::File::open(path)?;
    let size = file.metadata()?.len();
    let tail = size.min(64 * 1024);
    let mut buf = vec![0; tail as usize];
    file.seek(SeekFrom::Start(size - tail))?;
    file.read_exact(&mut buf)?;
    let n = buf.len();
    let len = u32::from_le_bytes(buf[n - 8..n - 4].try_into().expect("four bytes")) as usize;
    let metadata = if len + 8 <= n {
        buf[n - 8 - len..n - 8].to_vec()
    } else {
        let mut longer = vec![0; len];
        file.seek(SeekFrom::Start(size - 8 - len as u64))?;
        file.read_exact(&mut longer)?;
        longer
    };
    let decoded = ParquetMetaDataReader::decode_metadata(&metadata).map_err(std::io::Error::other)?;
    Ok(decoded.num_row_groups())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: add_files_bench footers LIST CONCURRENCY | add LIST CATALOG_DIR TABLE CONCURRENCY";
    let mode = args.get(1).ok_or(usage)?;
    let list = std::fs::read_to_string(args.get(2).ok_or(usage)?)?;
    let files: Vec<String> = list
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect();
    match mode.as_str() {
        "footers" => {
            let concurrency: usize = args.get(3).ok_or(usage)?.parse()?;
            let started = Instant::now();
            let groups: Vec<usize> = futures::stream::iter(files.iter().cloned())
                .map(|path| async move {
                    tokio::task::spawn_blocking(move || read_footer(&path))
                        .await
                        .expect("the task ran")
                        .expect("the footer reads")
                })
                .buffer_unordered(concurrency)
                .collect()
                .await;
            let seconds = started.elapsed().as_secs_f64();
            println!(
                "{{\"mode\":\"footers\",\"files\":{},\"row_groups\":{},\"seconds\":{seconds:.3}}}",
                files.len(),
                groups.iter().sum::<usize>()
            );
        }
        "add" => {
            let dir = args.get(3).ok_or(usage)?;
            let table = args.get(4).ok_or(usage)?;
            let concurrency: usize = args.get(5).ok_or(usage)?.parse()?;
            let options = AddFilesOptions::builder()
                .catalog(CatalogConfig::sqlite_in(dir))
                .table(table.clone())
                .max_concurrent_reads(concurrency)
                .build()?;
            let started = Instant::now();
            let adder = AddFiles::connect(options).await?;
            let result = adder.run(&files).await?;
            let seconds = started.elapsed().as_secs_f64();
            if !result.errors.is_empty() {
                eprintln!("{}", result.render());
            }
            println!(
                "{{\"mode\":\"add\",\"files\":{},\"added\":{},\"records\":{},\"seconds\":{seconds:.3}}}",
                files.len(),
                result.files_added,
                result.records_added
            );
        }
        _ => return Err(usage.into()),
    }
    Ok(())
}
