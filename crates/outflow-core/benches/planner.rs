//! How the evolution planner's time grows with the window: AddFiles plans every distinct
//! file schema of a window at once, so windows of 100, 1,000 and 10,000 distinct inputs are
//! planned against a table of 20 columns (nested structs, a list, a map).
//!
//! ```text
//! cargo bench -p outflow-core --bench planner [-- N...]
//! ```
//!
//! Two windows per N: `varied` (each input a variation of the table: an extra column, a
//! widened type, a missing optional or required column, null counts present or absent)
//! and `rejecting` (the same, plus a new column a third of the inputs type differently, so
//! they lose its union and the planner tries to readmit each of them). Prints the best of
//! a few runs per N and the ratio time(10k) / time(1k), about 10 when growth is linear.

use std::collections::BTreeSet;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::{Duration, Instant};

use outflow_core::evolution::{EvolutionPlanner, SchemaEvolutionConfig, SchemaEvolutionOption};
use outflow_core::schema::{DataType, Field, InputSchema, PrimitiveType::*, Schema};

/// The table's columns, without ids; inputs start from these.
fn columns() -> Vec<Field> {
    vec![
        Field::required("id", Long),
        Field::required("event_time", TimestampTz),
        Field::required("user_id", Long),
        Field::optional("session", String),
        Field::optional("country", String),
        Field::optional(
            "amount",
            Decimal {
                precision: 10,
                scale: 2,
            },
        ),
        Field::required("quantity", Int),
        Field::optional("price", Float),
        Field::optional("discount", Double),
        Field::required("status", String),
        Field::optional(
            "device",
            DataType::structure(vec![
                Field::optional("os", String),
                Field::optional("version", String),
                Field::optional("model", String),
            ]),
        ),
        Field::optional(
            "address",
            DataType::structure(vec![
                Field::optional("street", String),
                Field::required("city", String),
                Field::optional("zip", String),
                Field::optional(
                    "geo",
                    DataType::structure(vec![
                        Field::optional("lat", Double),
                        Field::optional("lon", Double),
                    ]),
                ),
            ]),
        ),
        Field::optional("tags", DataType::list(Field::optional("element", String))),
        Field::optional(
            "attributes",
            DataType::map(Field::required("key", String), Field::optional("value", String)),
        ),
        Field::required("created", Date),
        Field::optional("updated", Timestamp),
        Field::optional("flags", Int),
        Field::optional("ratio", Float),
        Field::optional("note", String),
        Field::optional("payload", Binary),
    ]
}

fn table() -> Schema {
    let mut t = Schema::new(columns());
    t.assign_missing_ids(0);
    t
}

/// A cheap deterministic mix of `i`, so variations combine rather than cycle together.
fn mix(i: usize, salt: u64) -> u64 {
    let mut x = (i as u64 ^ salt).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 31;
    x.wrapping_mul(0xBF58_476D_1CE4_E5B9) >> 33
}

fn set(fields: &mut [Field], name: &str, edit: impl FnOnce(&mut Field)) {
    edit(
        fields
            .iter_mut()
            .find(|f| f.name == name)
            .expect("a table column"),
    );
}

fn struct_fields<'f>(fields: &'f mut [Field], name: &str) -> &'f mut Vec<Field> {
    match &mut fields
        .iter_mut()
        .find(|f| f.name == name)
        .expect("a struct")
        .data_type
    {
        DataType::Struct { fields } => fields,
        _ => unreachable!("{name} is a struct"),
    }
}

/// Input `i` of a window: a variation of the table the way files of one window differ.
fn varied(i: usize) -> InputSchema {
    let mut fields = columns();
    let r = |salt| mix(i, salt);
    // A column of its own (a writer that added one), or one of a few shared ones.
    if r(1).is_multiple_of(5) {
        fields.push(Field::optional(format!("extra_{i}"), String));
    }
    if r(2).is_multiple_of(4) {
        let t = if r(3).is_multiple_of(2) { Int } else { Long };
        fields.push(Field::optional(format!("shared_{}", r(4) % 16), t));
    }
    // Widened types.
    match r(5) % 6 {
        0 => set(&mut fields, "quantity", |f| f.data_type = Long.into()),
        1 => set(&mut fields, "price", |f| f.data_type = Double.into()),
        2 => set(&mut fields, "amount", |f| {
            f.data_type = Decimal {
                precision: 12,
                scale: 2,
            }
            .into()
        }),
        _ => {}
    }
    // Missing optional columns, a dropped required one, a new nested column.
    match r(6) % 5 {
        0 => fields.retain(|f| f.name != "note"),
        1 => struct_fields(&mut fields, "device").retain(|f| f.name != "model"),
        2 => fields.retain(|f| f.name != "status"),
        3 => struct_fields(&mut fields, "device").push(Field::optional(format!("hint_{}", r(7) % 7), String)),
        _ => {}
    }
    // A required column written optional: proven null-free by a count, or not.
    let user_id_optional = r(8).is_multiple_of(3);
    if user_id_optional {
        set(&mut fields, "user_id", |f| f.required = false);
    }
    let mut input = InputSchema::new(Schema::new(fields));
    // Every file counts its nulls somewhere; some count them everywhere.
    input = input.with_null_count("country", i as u64);
    if r(9).is_multiple_of(2) {
        for (n, name) in ["id", "event_time", "session", "quantity", "created"]
            .iter()
            .enumerate()
        {
            input = input.with_null_count(*name, (n as u64) * (r(10) % 3));
        }
        if user_id_optional {
            input = input.with_null_count("user_id", r(11) % 2);
        }
    }
    input
}

/// Input `i` of a window where many inputs are rejected: a third type a new column `score`
/// as a string where the rest have a double, and lose its union; they also make `bucket` a
/// string, so the few with a long `bucket` lose too and are readmitted once the strings are
/// out. Some conflict with the table.
fn rejecting(i: usize) -> InputSchema {
    let mut input = varied(i);
    let fields = &mut input.schema.fields;
    if i.is_multiple_of(3) {
        fields.push(Field::optional("score", String));
        fields.push(Field::optional("bucket", String));
    } else {
        fields.push(Field::optional("score", Double));
        if i % 10 == 1 {
            fields.push(Field::optional("bucket", Long));
        }
    }
    if i.is_multiple_of(11) {
        set(fields, "quantity", |f| f.data_type = String.into());
    }
    input
}

/// Makes input `i` of a window.
type MakeInput = fn(usize) -> InputSchema;

struct Figures {
    best: Duration,
    admitted: usize,
    changes: usize,
    /// A hash of the serialized plan, so runs before and after a change show the same plan.
    fingerprint: u64,
}

fn measure(table: &Schema, config: &SchemaEvolutionConfig, inputs: &[InputSchema], runs: usize) -> Figures {
    let mut best = Duration::MAX;
    let mut plan = None;
    for _ in 0..runs {
        let started = Instant::now();
        let p = EvolutionPlanner::new(config)
            .table(table)
            .plan(inputs)
            .expect("the planner plans");
        best = best.min(started.elapsed());
        plan = Some(p);
    }
    let plan = plan.expect("at least one run");
    let mut hasher = DefaultHasher::new();
    serde_json::to_string(&plan)
        .expect("plans serialize")
        .hash(&mut hasher);
    Figures {
        fingerprint: hasher.finish(),
        best,
        admitted: plan.compatible_inputs().len(),
        changes: plan.changes.len(),
    }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs benches without it
    // (and with a test filter as argument): nothing to measure then.
    if !std::env::args().any(|a| a == "--bench") {
        println!("planner benchmark: run it with cargo bench -p outflow-core --bench planner");
        return;
    }
    let sizes: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let sizes = if sizes.is_empty() {
        vec![100, 1_000, 10_000]
    } else {
        sizes
    };
    let config = SchemaEvolutionConfig::builder()
        .allow_all([
            SchemaEvolutionOption::AllowFieldAddition,
            SchemaEvolutionOption::AllowFieldRelaxation,
            SchemaEvolutionOption::AllowTypePromotion,
        ])
        .build()
        .expect("a valid config");
    let table = table();
    let windows: [(&str, MakeInput); 2] = [("varied", varied), ("rejecting", rejecting)];
    for (name, make) in windows {
        let mut times = Vec::new();
        for &n in &sizes {
            let inputs: Vec<InputSchema> = (0..n).map(make).collect();
            let distinct: BTreeSet<std::string::String> = inputs
                .iter()
                .map(|i| serde_json::to_string(i).expect("serializes"))
                .collect();
            assert_eq!(distinct.len(), n, "the {name} window's inputs are distinct");
            let runs = if n <= 1_000 { 5 } else { 3 };
            let f = measure(&table, &config, &inputs, runs);
            let ms = f.best.as_secs_f64() * 1e3;
            println!(
                "{name:<9} N={n:>6}: {ms:>10.1} ms total, {:>8.1} µs per input ({} admitted, {} changes, plan {:016x})",
                ms * 1e3 / n as f64,
                f.admitted,
                f.changes,
                f.fingerprint
            );
            times.push((n, f.best));
        }
        let at = |n| times.iter().find(|(m, _)| *m == n).map(|(_, t)| t.as_secs_f64());
        if let (Some(small), Some(large)) = (at(1_000), at(10_000)) {
            println!("{name:<9} time(10k) / time(1k) = {:.1}", large / small);
        }
    }
}
