//! A bounded fuzz run of AddFiles' file-facing stages (not run by `cargo test`; see
//! `scripts/fuzz/add_files.sh`).
//!
//! Seed Parquet files of many shapes are written with parquet-rs, then mutated where files
//! go wrong: the footer's Thrift bytes (bit flips, overwritten runs, inserted and deleted
//! bytes, extreme varints), its length field, truncation, footers spliced from another file.
//! Each mutant goes through everything AddFiles does with a file before committing: footer
//! location and decoding, schema and statistics extraction, planning in a random window of
//! other schemas against a random table, leaf resolution through a name mapping, metrics and
//! bounds, and partition inference under a random spec. Separately, random schema windows
//! (random nesting, types, ids, null counts, options and pinned columns) go through the
//! planner, checked for order independence.
//!
//! A case fails when anything panics (the footer decoder's own panics are caught and turned
//! into per-file errors by design, and counted here as findings about the decoder) or takes
//! longer than [`CASE_LIMIT`]. Failing inputs are saved under `target/fuzz-add-files/`.
//! `OUTFLOW_FUZZ_SECONDS` bounds the run (default 60), `OUTFLOW_FUZZ_SEED` fixes the seed.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow_array::builder::{Int32Builder, ListBuilder, MapBuilder, StringBuilder};
use arrow_array::types::Int64Type;
use arrow_array::{
    ArrayRef, BinaryArray, BooleanArray, Date32Array, Decimal128Array, FixedSizeBinaryArray, Float32Array,
    Float64Array, Int32Array, Int64Array, ListArray, RecordBatch, StringArray, StructArray,
    TimestampMicrosecondArray, TimestampMillisecondArray, TimestampNanosecondArray,
};
use arrow_schema::{DataType as ArrowType, Field as ArrowField, Fields, Schema as ArrowSchema};
use iceberg::spec::{PartitionSpec, Transform, UnboundPartitionSpec};
use outflow_core::schema::{DataType, Field, InputSchema, NameMapping, PrimitiveType, Schema};
use outflow_core::{
    EvolutionPlanner, IncompatibleSchemaHandling, SchemaEvolutionConfig, SchemaEvolutionOption,
    UnverifiableFileHandling,
};
use parquet::arrow::ArrowWriter;
use parquet::file::properties::{EnabledStatistics, WriterProperties};

use super::footer::{self, FileFailure};
use super::{metrics, partition};
use crate::schema::to_iceberg_schema;

/// The last panic the hook saw (panics are findings, recorded rather than printed).
static LAST_PANIC: Mutex<Option<String>> = Mutex::new(None);

/// A case taking longer than this is reported as a hang.
const CASE_LIMIT: Duration = Duration::from_secs(10);

/// SplitMix64: small, seedable, and good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// What the run found.
#[derive(Debug, Default)]
struct Findings {
    cases: u64,
    footer_cases: u64,
    planner_cases: u64,
    /// Files rejected, by error kind.
    rejected: BTreeMap<String, u64>,
    /// Files that made it through every stage.
    accepted: u64,
    /// Decoder panics caught and reported as corrupt files, by message.
    decoder_panics: BTreeMap<String, u64>,
    /// Panics that escaped (bugs), with the saved input.
    panics: Vec<String>,
    /// Cases slower than the limit.
    hangs: Vec<String>,
    slowest: Duration,
}

fn seed_batches() -> Vec<(&'static str, RecordBatch, bool, bool)> {
    let n = 50usize;
    let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(0..n as i64));
    let names: ArrayRef =
        Arc::new(StringArray::from_iter((0..n).map(|i| {
            (i % 7 != 0).then(|| format!("name-{i:04}-{}", "x".repeat(i % 30)))
        })));
    let point = StructArray::new(
        Fields::from(vec![
            ArrowField::new("x", ArrowType::Float64, false),
            ArrowField::new("tag", ArrowType::Utf8, true),
        ]),
        vec![
            Arc::new(Float64Array::from_iter_values((0..n).map(|i| i as f64 / 3.0))) as ArrayRef,
            Arc::new(StringArray::from_iter(
                (0..n).map(|i| (i % 2 == 0).then_some("t")),
            )),
        ],
        Some((0..n).map(|i| i % 5 != 0).collect::<Vec<_>>().into()),
    );
    let tags = ListArray::from_iter_primitive::<Int64Type, _, _>(
        (0..n).map(|i| (i % 4 != 0).then(|| vec![Some(i as i64), None])),
    );
    let mut attrs = MapBuilder::new(None, StringBuilder::new(), Int32Builder::new());
    for i in 0..n {
        attrs.keys().append_value(format!("k{}", i % 3));
        attrs.values().append_value(i as i32);
        attrs.append(i % 6 != 0).unwrap();
    }
    let attrs = attrs.finish();
    let mut nested = ListBuilder::new(ListBuilder::new(StringBuilder::new()));
    for i in 0..n {
        nested.values().values().append_value(format!("{i}"));
        nested.values().append(true);
        nested.append(i % 3 != 0);
    }
    let nested = nested.finish();
    let field = |name: &str, a: &ArrayRef, nullable: bool| {
        (ArrowField::new(name, a.data_type().clone(), nullable), a.clone())
    };
    let mk = |cols: Vec<(ArrowField, ArrayRef)>| {
        let (fields, arrays): (Vec<_>, Vec<_>) = cols.into_iter().unzip();
        RecordBatch::try_new(Arc::new(ArrowSchema::new(fields)), arrays).unwrap()
    };
    let decimals: ArrayRef = Arc::new(
        Decimal128Array::from_iter_values((0..n).map(|i| i as i128 * 12_345 - 99_999))
            .with_precision_and_scale(18, 3)
            .unwrap(),
    );
    let small_decimals: ArrayRef = Arc::new(
        Decimal128Array::from_iter_values((0..n).map(|i| i as i128 - 25))
            .with_precision_and_scale(7, 2)
            .unwrap(),
    );
    let wide_decimals: ArrayRef = Arc::new(
        Decimal128Array::from_iter_values((0..n).map(|i| (i as i128) << 80))
            .with_precision_and_scale(38, 0)
            .unwrap(),
    );
    let everything = mk(vec![
        field("id", &ids, false),
        field("name", &names, true),
        field(
            "flag",
            &(Arc::new(BooleanArray::from_iter((0..n).map(|i| Some(i % 2 == 0)))) as ArrayRef),
            true,
        ),
        field(
            "small",
            &(Arc::new(Int32Array::from_iter(
                (0..n).map(|i| (i % 9 != 0).then_some(i as i32 - 20)),
            )) as ArrayRef),
            true,
        ),
        field(
            "ratio",
            &(Arc::new(Float32Array::from_iter_values(
                (0..n).map(|i| if i == 3 { f32::NAN } else { i as f32 }),
            )) as ArrayRef),
            true,
        ),
        field("d18", &decimals, true),
        field("d7", &small_decimals, true),
        field("d38", &wide_decimals, true),
        field(
            "day",
            &(Arc::new(Date32Array::from_iter_values(0..n as i32)) as ArrayRef),
            true,
        ),
        field(
            "ts_ms",
            &(Arc::new(
                TimestampMillisecondArray::from_iter_values((0..n as i64).map(|i| i * 86_400_000))
                    .with_timezone("UTC"),
            ) as ArrayRef),
            true,
        ),
        field(
            "ts_us",
            &(Arc::new(TimestampMicrosecondArray::from_iter_values(
                (0..n as i64).map(|i| i * 1_000_001),
            )) as ArrayRef),
            true,
        ),
        field(
            "ts_ns",
            &(Arc::new(TimestampNanosecondArray::from_iter_values(
                (0..n as i64).map(|i| i * 1_000_000_007 - 5),
            )) as ArrayRef),
            true,
        ),
        field(
            "blob",
            &(Arc::new(BinaryArray::from_iter_values(
                (0..n).map(|i| vec![0xffu8; i % 40]),
            )) as ArrayRef),
            true,
        ),
        field(
            "fixed",
            &(Arc::new(FixedSizeBinaryArray::try_from_iter((0..n).map(|i| [i as u8; 16])).unwrap())
                as ArrayRef),
            true,
        ),
        field("point", &(Arc::new(point) as ArrayRef), true),
        field("tags", &(Arc::new(tags) as ArrayRef), true),
        field("attrs", &(Arc::new(attrs) as ArrayRef), true),
        field("nested", &(Arc::new(nested) as ArrayRef), true),
    ]);
    let with_ids = {
        let mut schema = Schema::from_arrow(everything.schema().as_ref()).unwrap();
        schema.assign_missing_ids(0);
        let arrow = Arc::new(schema.to_arrow());
        outflow_core::schema::conform_batch(&everything, &arrow).unwrap()
    };
    let labels: ArrayRef = Arc::new(StringArray::from_iter_values(
        (0..n).map(|i| format!("label {i}")),
    ));
    let narrow = mk(vec![field("id", &ids, true), field("name", &labels, false)]);
    vec![
        ("everything", everything.clone(), true, false),
        ("no_stats", everything, false, false),
        ("with_ids", with_ids, true, true),
        ("narrow", narrow, true, false),
    ]
}

fn write(batch: &RecordBatch, stats: bool, row_group: usize) -> Vec<u8> {
    let props = WriterProperties::builder()
        .set_statistics_enabled(if stats {
            EnabledStatistics::Chunk
        } else {
            EnabledStatistics::None
        })
        .set_max_row_group_row_count(Some(row_group))
        .build();
    let mut out = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut out, batch.schema(), Some(props)).unwrap();
    writer.write(batch).unwrap();
    writer.close().unwrap();
    out
}

/// The byte range of the footer's metadata, as the length field says (the whole file when
/// it says nothing sensible).
fn metadata_range(file: &[u8]) -> std::ops::Range<usize> {
    let n = file.len();
    if n < 12 {
        return 0..n;
    }
    let len = u32::from_le_bytes(file[n - 8..n - 4].try_into().unwrap()) as usize;
    match (n - 8).checked_sub(len) {
        Some(start) if start < n - 8 => start..n - 8,
        _ => 0..n,
    }
}

fn mutate(rng: &mut Rng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut file = rng.pick(seeds).clone();
    let rounds = 1 + rng.below(4);
    for _ in 0..rounds {
        let meta = metadata_range(&file);
        let at = |rng: &mut Rng| meta.start + rng.below(meta.len().max(1));
        match rng.below(10) {
            0..=2 => {
                let i = at(rng);
                if i < file.len() {
                    file[i] ^= 1 << rng.below(8);
                }
            }
            3 => {
                let i = at(rng);
                let run = 1 + rng.below(16);
                let byte = *rng.pick(&[0x00, 0xff, 0x7f, 0x80, 0x19, 0x1c, 0x15]);
                for j in i..(i + run).min(file.len()) {
                    file[j] = byte;
                }
            }
            4 => {
                // Insert bytes into the metadata and fix the length field (or not).
                let i = at(rng).min(file.len());
                let extra: Vec<u8> = (0..1 + rng.below(8)).map(|_| rng.next() as u8).collect();
                file.splice(i..i, extra.iter().copied());
                if rng.chance(70) {
                    fix_length(&mut file, meta.len() + extra.len());
                }
            }
            5 => {
                let i = at(rng);
                let end = (i + 1 + rng.below(8)).min(meta.end).min(file.len());
                if i < end {
                    let removed = end - i;
                    file.drain(i..end);
                    if rng.chance(70) {
                        fix_length(&mut file, meta.len().saturating_sub(removed));
                    }
                }
            }
            6 => {
                // Extreme varints where Thrift expects small ones.
                let i = at(rng);
                for j in i..(i + 10).min(file.len().saturating_sub(8)) {
                    file[j] = 0xff;
                }
            }
            7 => {
                let n = file.len();
                if n > 8 {
                    let len = rng.next() as u32 % (n as u32 * 2);
                    file[n - 8..n - 4].copy_from_slice(&len.to_le_bytes());
                }
            }
            8 => {
                let keep = rng.below(file.len() + 1);
                file.truncate(keep);
                if rng.chance(50) && keep > 8 {
                    file.extend_from_slice(b"PAR1");
                }
                return file;
            }
            _ => {
                // Another seed's footer on this file's data.
                let other = rng.pick(seeds);
                let other_meta = metadata_range(other);
                let body = meta.start.min(file.len());
                file.truncate(body);
                file.extend_from_slice(&other[other_meta.start..]);
            }
        }
    }
    file
}

fn fix_length(file: &mut [u8], len: usize) {
    let n = file.len();
    if n >= 8 {
        file[n - 8..n - 4].copy_from_slice(&(len as u32).to_le_bytes());
    }
}

const PRIMITIVES: &[PrimitiveType] = &[
    PrimitiveType::Boolean,
    PrimitiveType::Int,
    PrimitiveType::Long,
    PrimitiveType::Float,
    PrimitiveType::Double,
    PrimitiveType::Decimal {
        precision: 9,
        scale: 2,
    },
    PrimitiveType::Decimal {
        precision: 18,
        scale: 2,
    },
    PrimitiveType::Decimal {
        precision: 18,
        scale: 3,
    },
    PrimitiveType::Date,
    PrimitiveType::Time,
    PrimitiveType::Timestamp,
    PrimitiveType::TimestampTz,
    PrimitiveType::String,
    PrimitiveType::Uuid,
    PrimitiveType::Fixed(4),
    PrimitiveType::Binary,
];

const NAMES: &[&str] = &["id", "name", "a", "b", "s", "tags", "attrs", "x", "y", "score"];

fn random_field(rng: &mut Rng, name: &str, depth: usize) -> Field {
    let data_type = match if depth < 3 { rng.below(8) } else { 0 } {
        5 => {
            let count = 1 + rng.below(3);
            let mut fields: Vec<Field> = Vec::new();
            for _ in 0..count {
                let n = *rng.pick(NAMES);
                if fields.iter().all(|f| f.name != n) {
                    fields.push(random_field(rng, n, depth + 1));
                }
            }
            DataType::structure(fields)
        }
        6 => DataType::list(random_field(rng, "element", depth + 1)),
        7 => DataType::map(
            Field::required("key", *rng.pick(&[PrimitiveType::String, PrimitiveType::Int])),
            random_field(rng, "value", depth + 1),
        ),
        _ => DataType::Primitive(*rng.pick(PRIMITIVES)),
    };
    Field {
        id: None,
        name: name.to_string(),
        required: rng.chance(30),
        data_type,
        doc: None,
    }
}

fn random_schema(rng: &mut Rng) -> Schema {
    let mut fields: Vec<Field> = Vec::new();
    for _ in 0..1 + rng.below(5) {
        let n = *rng.pick(NAMES);
        if fields.iter().all(|f| f.name != n) {
            fields.push(random_field(rng, n, 0));
        }
    }
    Schema::new(fields)
}

fn random_input(rng: &mut Rng) -> InputSchema {
    let mut schema = random_schema(rng);
    if rng.chance(20) {
        schema.assign_missing_ids(rng.below(5) as i32);
    }
    let mut input = InputSchema::new(schema.clone());
    for path in schema.paths() {
        if rng.chance(60) {
            input.null_counts.insert(path, *rng.pick(&[0, 0, 1, 5]));
        }
    }
    input
}

fn random_config(rng: &mut Rng, table: Option<&Schema>) -> SchemaEvolutionConfig {
    let mut builder = SchemaEvolutionConfig::builder();
    for option in [
        SchemaEvolutionOption::AllowFieldAddition,
        SchemaEvolutionOption::AllowFieldRelaxation,
        SchemaEvolutionOption::AllowTypePromotion,
    ] {
        if rng.chance(60) {
            builder = builder.allow(option);
        }
    }
    if rng.chance(50) {
        builder = builder
            .on_incompatible(*rng.pick(&[
                IncompatibleSchemaHandling::Fail,
                IncompatibleSchemaHandling::RouteToErrors,
            ]))
            .on_unverifiable(
                *rng.pick(&[UnverifiableFileHandling::Reject, UnverifiableFileHandling::Accept]),
            );
        if let Some(path) = table.and_then(|t| t.paths().first().cloned()) {
            builder = builder.required_column(path);
        }
    }
    // A config with settings but no option is rejected by design: fall back to none.
    builder.build().unwrap_or_default()
}

/// One window through the planner, in two orders: the plans must agree.
fn plan_window(rng: &mut Rng, inputs: &mut [InputSchema]) {
    let table = rng.chance(70).then(|| {
        let mut t = random_schema(rng);
        t.assign_missing_ids(0);
        t
    });
    let config = random_config(rng, table.as_ref());
    let mapping = table.as_ref().map(NameMapping::from_schema);
    let plan_of = |inputs: &[InputSchema]| {
        let mut planner = EvolutionPlanner::new(&config);
        if let Some(t) = &table {
            planner = planner.table(t).last_column_id(t.max_field_id());
        }
        if let Some(m) = &mapping {
            planner = planner.name_mapping(m);
        }
        planner.plan(inputs).expect("the planner plans")
    };
    let plan = plan_of(inputs);
    assert_eq!(plan.verdicts.len(), inputs.len());
    inputs.reverse();
    let again = plan_of(inputs);
    assert_eq!(plan.schema, again.schema, "the plan depends on input order");
    if let Some(schema) = &plan.schema {
        // Either a valid Iceberg schema or a typed error.
        let _ = schema.validate();
        let mut s = schema.clone();
        s.assign_missing_ids(s.max_field_id());
        let _ = to_iceberg_schema(&s, 0);
    }
    let _ = plan.render(None);
}

/// Everything AddFiles does with one file before committing.
fn through_add_files(rng: &mut Rng, bytes: &[u8], findings: &Mutex<Findings>) {
    let size = bytes.len() as u64;
    let read = |start: u64, len: u64| -> Result<Vec<u8>, FileFailure> {
        let s = start as usize;
        Ok(bytes[s..s + len as usize].to_vec())
    };
    let located = footer::tail_len(size).and_then(|tail| {
        match footer::inspect_tail(size, &read(size - tail, tail)?)? {
            footer::Tail::Metadata(m) => Ok(m),
            footer::Tail::Longer { start, len } => read(start, len),
            footer::Tail::NoMagic => Err(footer::no_magic(&bytes[..4.min(bytes.len())])),
        }
    });
    let facts = located.and_then(|m| footer::decode(&m)).and_then(|metadata| {
        footer::facts(
            "file:///fuzz.parquet".into(),
            size,
            &metadata,
            &Default::default(),
        )
    });
    let facts = match facts {
        Ok(f) => f,
        Err(failure) => {
            let mut f = findings.lock().unwrap();
            if failure.message.contains("the Parquet reader failed") {
                // The hook saw where the decoder panicked; that says more than the payload.
                let at = LAST_PANIC
                    .lock()
                    .unwrap()
                    .take()
                    .unwrap_or(failure.message.clone());
                *f.decoder_panics.entry(at).or_default() += 1;
            }
            *f.rejected.entry(failure.kind.to_string()).or_default() += 1;
            return;
        }
    };
    // Plan the file in a window of random schemas.
    let mut window = vec![InputSchema {
        schema: facts.schema.converted.schema.clone(),
        null_counts: facts.schema.null_counts.clone(),
    }];
    for _ in 0..rng.below(3) {
        window.push(random_input(rng));
    }
    plan_window(rng, &mut window);

    // Register it into a table of its own schema, found by name or by id.
    let mut table = facts.schema.converted.schema.clone();
    if !facts.schema.converted.uses_ids {
        table = table.without_ids();
        table.assign_missing_ids(0);
    }
    let Ok(iceberg) = to_iceberg_schema(&table, 0) else {
        findings.lock().unwrap().accepted += 1;
        return;
    };
    let mapping = NameMapping::from_schema(&table);
    let resolved = match metrics::resolve_leaves(
        &facts.schema.leaves,
        facts.schema.converted.uses_ids,
        &iceberg,
        Some(&mapping),
    ) {
        Ok(r) => r,
        Err(_) => {
            *findings
                .lock()
                .unwrap()
                .rejected
                .entry("resolution".into())
                .or_default() += 1;
            return;
        }
    };
    let primitives: Vec<(i32, String)> = iceberg
        .as_struct()
        .fields()
        .iter()
        .filter(|f| f.field_type.is_primitive())
        .map(|f| (f.id, f.name.clone()))
        .collect();
    let mut spec = PartitionSpec::unpartition_spec();
    if let Some((id, _)) = (!primitives.is_empty()).then(|| rng.pick(&primitives).clone()) {
        let transform = *rng.pick(&[
            Transform::Identity,
            Transform::Bucket(4),
            Transform::Truncate(3),
            Transform::Day,
            Transform::Year,
            Transform::Hour,
            Transform::Void,
        ]);
        if let Ok(bound) = UnboundPartitionSpec::builder()
            .add_partition_field(id, "p", transform)
            .map(|b| b.build())
            .and_then(|u| u.bind(iceberg.clone()))
        {
            spec = bound;
        }
    }
    let dirs = rng.chance(30).then(|| {
        vec![(
            "p".to_string(),
            rng.pick(&["1", "null", "2024-01-01", "x", "-3", "2024-13"])
                .to_string(),
        )]
    });
    let outcome = partition::partition_of(&facts, &resolved, &spec, &iceberg, dirs.as_deref())
        .and_then(|values| metrics::data_file(&facts, &resolved, values, spec.spec_id()));
    let mut f = findings.lock().unwrap();
    match outcome {
        Ok(_) => f.accepted += 1,
        Err(_) => *f.rejected.entry("partition".into()).or_default() += 1,
    }
}

fn out_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/fuzz-add-files");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs the saved input of one failing case again (`OUTFLOW_FUZZ_REPLAY=path`; the case
/// seed is in the file name), with the panic printed as usual.
#[test]
#[ignore = "replays a case saved by the fuzz run"]
fn fuzz_replay() {
    let Ok(path) = std::env::var("OUTFLOW_FUZZ_REPLAY") else {
        return;
    };
    let name = std::path::Path::new(&path)
        .file_stem()
        .unwrap()
        .to_string_lossy()
        .to_string();
    let case_seed = u64::from_str_radix(name.rsplit('-').next().unwrap(), 16).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let findings = Mutex::new(Findings::default());
    through_add_files(&mut Rng(case_seed ^ 0x5eed), &bytes, &findings);
    println!("{:?}", findings.lock().unwrap());
}

#[test]
#[ignore = "a bounded fuzz run; scripts/fuzz/add_files.sh runs it"]
fn fuzz_footers_and_schema_windows() {
    let seconds: u64 = std::env::var("OUTFLOW_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let seed: u64 = std::env::var("OUTFLOW_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    let mut seeds = Vec::new();
    for (_, batch, stats, _) in seed_batches() {
        for row_group in [7, 50] {
            seeds.push(write(&batch, stats, row_group));
        }
    }
    // Panics are findings: record them quietly rather than print a trace per case.
    std::panic::set_hook(Box::new(move |info| {
        *LAST_PANIC.lock().unwrap() = Some(format!("{info}"));
    }));

    let findings = Arc::new(Mutex::new(Findings::default()));
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut rng = Rng(seed);
    let dir = out_dir();
    while Instant::now() < deadline {
        let case_seed = rng.next();
        let footer_case = rng.chance(70);
        let input = footer_case.then(|| mutate(&mut Rng(case_seed), &seeds));
        let (tx, rx) = std::sync::mpsc::channel();
        let worker_findings = findings.clone();
        let worker_input = input.clone();
        let started = Instant::now();
        std::thread::spawn(move || {
            let mut rng = Rng(case_seed ^ 0x5eed);
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match &worker_input {
                Some(bytes) => through_add_files(&mut rng, bytes, &worker_findings),
                None => {
                    let mut window: Vec<InputSchema> =
                        (0..1 + rng.below(5)).map(|_| random_input(&mut rng)).collect();
                    plan_window(&mut rng, &mut window);
                }
            }));
            let _ = tx.send(result.is_ok());
        });
        let ok = match rx.recv_timeout(CASE_LIMIT) {
            Ok(ok) => ok,
            Err(_) => {
                let path = dir.join(format!("hang-{case_seed:016x}.parquet"));
                if let Some(bytes) = &input {
                    std::fs::write(&path, bytes).unwrap();
                }
                findings
                    .lock()
                    .unwrap()
                    .hangs
                    .push(format!("case {case_seed:016x} ({})", path.display()));
                // The stuck thread cannot be stopped; report and end the run here.
                break;
            }
        };
        let elapsed = started.elapsed();
        let mut f = findings.lock().unwrap();
        f.cases += 1;
        if footer_case {
            f.footer_cases += 1;
        } else {
            f.planner_cases += 1;
        }
        f.slowest = f.slowest.max(elapsed);
        if !ok {
            let message = LAST_PANIC.lock().unwrap().take().unwrap_or_default();
            let path = dir.join(format!("panic-{case_seed:016x}.parquet"));
            if let Some(bytes) = &input {
                std::fs::write(&path, bytes).unwrap();
            }
            f.panics
                .push(format!("case {case_seed:016x}: {message} ({})", path.display()));
        }
    }
    let _ = std::panic::take_hook();
    let f = findings.lock().unwrap();
    let mut report = String::new();
    let _ = writeln_report(&mut report, seed, seconds, &f);
    print!("{report}");
    let mut file = std::fs::File::create(dir.join("report.txt")).unwrap();
    file.write_all(report.as_bytes()).unwrap();
    assert!(
        f.panics.is_empty() && f.hangs.is_empty(),
        "the fuzz run found problems:\n{report}"
    );
}

fn writeln_report(out: &mut String, seed: u64, seconds: u64, f: &Findings) -> std::fmt::Result {
    use std::fmt::Write as _;
    writeln!(out, "AddFiles fuzz run: seed {seed}, {seconds} s")?;
    writeln!(
        out,
        "  cases: {} ({} mutated files, {} planner windows)",
        f.cases, f.footer_cases, f.planner_cases
    )?;
    writeln!(out, "  files through every stage: {}", f.accepted)?;
    writeln!(out, "  files rejected with a typed error: {:?}", f.rejected)?;
    writeln!(out, "  slowest case: {:?}", f.slowest)?;
    writeln!(
        out,
        "  decoder panics caught (reported as corrupt files): {}",
        f.decoder_panics.values().sum::<u64>()
    )?;
    for (message, n) in &f.decoder_panics {
        writeln!(out, "    {n} x {message}")?;
    }
    writeln!(out, "  escaped panics: {}", f.panics.len())?;
    for p in &f.panics {
        writeln!(out, "    {p}")?;
    }
    writeln!(out, "  hangs: {}", f.hangs.len())?;
    for h in &f.hangs {
        writeln!(out, "    {h}")?;
    }
    Ok(())
}
