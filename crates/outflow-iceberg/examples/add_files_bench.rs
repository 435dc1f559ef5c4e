//! The Outflow side of `scripts/bench/add_files.sh`.
//!
//! ```text
//! add_files_bench footers LIST CONCURRENCY [RUN]    read and decode every footer, nothing else,
//!                                                   RUN files a blocking task (default 1)
//! add_files_bench add LIST CATALOG_DIR TABLE CONCURRENCY   AddFiles into a SQLite catalog
//! add_files_bench s3-footers URL CONCURRENCY        list the objects under URL, then read
//!                                                   and decode their footers (OpenDAL, bare)
//! add_files_bench s3-add URL CATALOG_DIR WAREHOUSE TABLE CONCURRENCY
//!                                                   AddFiles of the prefix URL into a table
//!                                                   in the S3 warehouse WAREHOUSE
//! ```
//!
//! `LIST` is a file with one Parquet path per line; the S3 modes reach the store from
//! `OUTFLOW_S3_*` (`.cache/run/seaweedfs.env`). Each prints one JSON line with the wall
//! time in seconds.

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

/// The bare cost on S3: one listing, then per object one ranged read of its tail (a second
/// for a longer footer) and the decoding, `concurrency` at a time, through OpenDAL directly.
async fn s3_footers(url: &str, concurrency: usize) -> Result<(usize, usize), Box<dyn std::error::Error>> {
    let s3 = outflow_testkit::iceberg::S3Store::from_env();
    let (bucket, prefix) = url
        .trim_start_matches("s3://")
        .split_once('/')
        .ok_or("s3://bucket/prefix")?;
    let operator = opendal::Operator::new(
        opendal::services::S3::default()
            .bucket(bucket)
            .endpoint(&s3.endpoint)
            .region(&s3.region)
            .access_key_id(&s3.access_key_id)
            .secret_access_key(&s3.secret_access_key),
    )?
    .finish();
    let prefix = format!("{}/", prefix.trim_end_matches('/'));
    let listed = operator.list_with(&prefix).recursive(true).await?;
    let objects: Vec<(String, u64)> = listed
        .into_iter()
        .filter(|e| e.path().ends_with(".parquet"))
        .map(|e| (e.path().to_string(), e.metadata().content_length()))
        .collect();
    let groups: Vec<usize> = futures::stream::iter(objects.iter().cloned())
        .map(|(key, size)| {
            let operator = operator.clone();
            async move {
                let tail = size.min(64 * 1024);
                let buf = operator
                    .read_with(&key)
                    .range(size - tail..size)
                    .await
                    .expect("the tail")
                    .to_vec();
                let n = buf.len();
                let len = u32::from_le_bytes(buf[n - 8..n - 4].try_into().expect("four bytes")) as u64;
                let metadata = if len + 8 <= n as u64 {
                    buf[n - 8 - len as usize..n - 8].to_vec()
                } else {
                    let start = size - 8 - len;
                    operator
                        .read_with(&key)
                        .range(start..start + len)
                        .await
                        .expect("the footer")
                        .to_vec()
                };
                ParquetMetaDataReader::decode_metadata(&metadata)
                    .expect("a footer")
                    .num_row_groups()
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    Ok((objects.len(), groups.iter().sum()))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: add_files_bench footers LIST CONCURRENCY | add LIST CATALOG_DIR TABLE CONCURRENCY \
                 | s3-footers URL CONCURRENCY | s3-add URL CATALOG_DIR WAREHOUSE TABLE CONCURRENCY";
    let mode = args.get(1).ok_or(usage)?;
    match mode.as_str() {
        "s3-footers" => {
            let concurrency: usize = args.get(3).ok_or(usage)?.parse()?;
            let started = Instant::now();
            let (files, groups) = s3_footers(args.get(2).ok_or(usage)?, concurrency).await?;
            let seconds = started.elapsed().as_secs_f64();
            println!(
                "{{\"mode\":\"footers\",\"files\":{files},\"row_groups\":{groups},\"seconds\":{seconds:.3}}}"
            );
            return Ok(());
        }
        "s3-add" => {
            let [url, dir, warehouse, table, concurrency] = &args[2..] else {
                return Err(usage.into());
            };
            let options = AddFilesOptions::builder()
                .catalog(CatalogConfig::Sql {
                    uri: format!("{dir}/catalog.db"),
                    warehouse: warehouse.clone(),
                    name: "outflow".into(),
                    properties: outflow_testkit::iceberg::S3Store::from_env().properties(),
                })
                .table(table.clone())
                .max_concurrent_reads(concurrency.parse()?)
                .build()?;
            let started = Instant::now();
            let result = AddFiles::connect(options).await?.run(&[url]).await?;
            let seconds = started.elapsed().as_secs_f64();
            if !result.errors.is_empty() {
                eprintln!("{}", result.render());
            }
            println!(
                "{{\"mode\":\"add\",\"files\":{},\"added\":{},\"records\":{},\"seconds\":{seconds:.3}}}",
                result.files_given, result.files_added, result.records_added
            );
            return Ok(());
        }
        _ => {}
    }
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
            // RUN files a task, one after another: 1 is a thread woken for each file, 8 is
            // how AddFiles reads local files.
            let run: usize = args.get(4).map_or(Ok(1), |r| r.parse())?;
            let groups: Vec<usize> = futures::stream::iter(files.chunks(run.max(1)).map(<[String]>::to_vec))
                .map(|run| async move {
                    tokio::task::spawn_blocking(move || {
                        run.iter()
                            .map(|path| read_footer(path).expect("the footer reads"))
                            .sum::<usize>()
                    })
                    .await
                    .expect("the task ran")
                })
                .buffer_unordered(concurrency)
                .collect()
                .await;
            let seconds = started.elapsed().as_secs_f64();
            println!(
                "{{\"mode\":\"{}\",\"files\":{},\"row_groups\":{},\"seconds\":{seconds:.3}}}",
                if run > 1 { "footers-runs" } else { "footers" },
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
