//! Manifest writing: iceberg-rust's `ManifestWriter` against Outflow's `AppendManifest` on
//! the same data files, in one process, printing microseconds per entry and the ratio;
//! then whole commits of 1,000, 10,000 and 100,000 data files to a SQLite catalog, printing
//! each commit's time and its cost per entry.
//!
//! ```text
//! cargo bench -p outflow-iceberg --bench manifest [-- ENTRIES]
//! ```
//!
//! Each data file carries the statistics AddFiles gives a six-column file (sizes, counts,
//! null counts and bounds per column). Two specs: unpartitioned, and identity(city) with
//! day(ts). Each writer runs five times per spec; the median is printed. Each commit
//! (`commit_data`: the manifests, the manifest list, the summary and the catalog's atomic
//! swap) is timed three times, each into a fresh table; the median is printed.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use iceberg::io::FileIO;
use iceberg::spec::{
    DataContentType, DataFile, DataFileBuilder, DataFileFormat, Datum, FormatVersion, Literal,
    ManifestWriterBuilder, NestedField, PartitionSpec, PartitionSpecRef, PrimitiveType, Schema, Struct,
    Transform, Type,
};
use outflow_core::RetryPolicy;
use outflow_iceberg::commit::{DataCommit, SnapshotKind, commit_data};
use outflow_iceberg::manifest::AppendManifest;
use outflow_iceberg::schema::parse_table_ident;
use outflow_iceberg::{CatalogConfig, IcebergCatalog};

const RUNS: usize = 5;

fn schema() -> Schema {
    let field = |id, name: &str, ty| Arc::new(NestedField::optional(id, name, Type::Primitive(ty)));
    Schema::builder()
        .with_fields(vec![
            field(1, "id", PrimitiveType::Long),
            field(2, "ts", PrimitiveType::Timestamptz),
            field(3, "city", PrimitiveType::String),
            field(
                4,
                "fare",
                PrimitiveType::Decimal {
                    precision: 12,
                    scale: 2,
                },
            ),
            field(5, "paid", PrimitiveType::Boolean),
            field(6, "note", PrimitiveType::String),
        ])
        .build()
        .expect("a schema")
}

fn files(n: usize, partitioned: bool) -> Vec<DataFile> {
    (0..n)
        .map(|i| {
            let per_column = |v: u64| (1..=6).map(|c| (c, v + c as u64)).collect::<HashMap<i32, u64>>();
            let partition = if partitioned {
                Struct::from_iter([
                    Some(Literal::string(format!("city-{}", i % 20))),
                    Some(Literal::date(20_000 + (i % 30) as i32)),
                ])
            } else {
                Struct::empty()
            };
            DataFileBuilder::default()
                .content(DataContentType::Data)
                .file_path(format!(
                    "/lake/warehouse/db/trips/data/part-{i:06}-0c8f2a.parquet"
                ))
                .file_format(DataFileFormat::Parquet)
                .partition(partition)
                .partition_spec_id(0)
                .record_count(1000)
                .file_size_in_bytes(30_000 + i as u64)
                .column_sizes(per_column(4000))
                .value_counts(per_column(1000))
                .null_value_counts(per_column(0))
                .lower_bounds(HashMap::from([
                    (1, Datum::long(i as i64 * 1000)),
                    (2, Datum::timestamptz_micros(1_700_000_000_000_000)),
                    (3, Datum::string("amsterdam")),
                    (6, Datum::string("a")),
                ]))
                .upper_bounds(HashMap::from([
                    (1, Datum::long(i as i64 * 1000 + 999)),
                    (2, Datum::timestamptz_micros(1_700_086_400_000_000)),
                    (3, Datum::string("zurich")),
                    (6, Datum::string("z")),
                ]))
                .split_offsets(Some(vec![4]))
                .build()
                .expect("a data file")
        })
        .collect()
}

fn median(mut times: Vec<f64>) -> f64 {
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

async fn iceberg_rust(io: &FileIO, schema: &Schema, spec: &PartitionSpecRef, files: &[DataFile]) -> f64 {
    let started = Instant::now();
    let output = io.new_output("memory:///bench/theirs.avro").expect("an output");
    let mut writer =
        ManifestWriterBuilder::new(output, Some(1), Arc::new(schema.clone()), spec.as_ref().clone())
            .build_v2_data();
    for file in files {
        writer.add_file(file.clone(), -1).expect("added");
    }
    writer.write_manifest_file().await.expect("written");
    started.elapsed().as_secs_f64()
}

async fn outflow(io: &FileIO, schema: &Schema, spec: &PartitionSpecRef, files: &[DataFile]) -> f64 {
    let started = Instant::now();
    let mut manifest = AppendManifest::new(FormatVersion::V2, 1, schema, spec)
        .expect("a manifest")
        .expect("covered");
    for file in files {
        manifest.add_file(file).expect("added");
    }
    let (bytes, _) = manifest.finish("memory:///bench/ours.avro".into());
    let output = io.new_output("memory:///bench/ours.avro").expect("an output");
    output.write(bytes.into()).await.expect("written");
    started.elapsed().as_secs_f64()
}

/// One append of `files` into a fresh table of `schema` in a SQLite catalog, timed.
async fn commit(schema: &Schema, files: Vec<DataFile>) -> f64 {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let catalog = IcebergCatalog::connect(&CatalogConfig::sqlite_in(dir.path()))
        .await
        .expect("a catalog");
    let ident = parse_table_ident("db.trips").expect("a name");
    catalog
        .create_table(&ident, schema.clone(), None, None, HashMap::new())
        .await
        .expect("a table");
    let commit = DataCommit::of_files("db.trips", SnapshotKind::Append, files, 0);
    let started = Instant::now();
    commit_data(&catalog, &ident, &commit, &RetryPolicy::default())
        .await
        .expect("committed");
    started.elapsed().as_secs_f64()
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs benches without it.
    if !std::env::args().any(|a| a == "--bench") {
        println!("manifest benchmark: run it with cargo bench -p outflow-iceberg --bench manifest");
        return;
    }
    let entries: usize = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .map(|a| a.parse().expect("ENTRIES is a number"))
        .unwrap_or(10_000);
    let schema = schema();
    let io = FileIO::new_with_memory();
    for partitioned in [false, true] {
        let mut spec = PartitionSpec::builder(schema.clone()).with_spec_id(0);
        if partitioned {
            spec = spec
                .add_partition_field("city", "city", Transform::Identity)
                .expect("a field")
                .add_partition_field("ts", "ts_day", Transform::Day)
                .expect("a field");
        }
        let spec = Arc::new(spec.build().expect("a spec"));
        let files = files(entries, partitioned);
        let mut theirs = Vec::new();
        let mut ours = Vec::new();
        for _ in 0..RUNS {
            theirs.push(iceberg_rust(&io, &schema, &spec, &files).await);
            ours.push(outflow(&io, &schema, &spec, &files).await);
        }
        let (theirs, ours) = (median(theirs), median(ours));
        let per = |s: f64| s * 1e6 / entries as f64;
        println!(
            "{{\"spec\": \"{}\", \"entries\": {entries}, \"iceberg_rust_us_per_entry\": {:.2}, \"outflow_us_per_entry\": {:.2}, \"speedup\": {:.1}}}",
            if partitioned {
                "identity(city), day(ts)"
            } else {
                "unpartitioned"
            },
            per(theirs),
            per(ours),
            theirs / ours
        );
    }
    for entries in [1_000, 10_000, 100_000] {
        let mut times = Vec::new();
        for _ in 0..3 {
            times.push(commit(&schema, files(entries, false)).await);
        }
        let seconds = median(times);
        println!(
            "{{\"commit_entries\": {entries}, \"seconds\": {seconds:.4}, \"us_per_entry\": {:.2}}}",
            seconds * 1e6 / entries as f64
        );
    }
}
