//! Issue 14, end to end: for any table and any input batch the evolution planner accepts,
//! the table the Iceberg sink evolves and writes, read back by PyIceberg, returns the batch's
//! values exactly, each in the column the input's column matched (by id, by a former name in
//! the table's name mapping, or by name), with nulls in the table's other columns. An input
//! the planner refuses leaves the table as it was, and the refusal names a column.
//!
//! Each case is a fresh SQLite catalog, a few real commits and a PyIceberg read, so the
//! normal test run tries 64 cases (`OUTFLOW_PROPERTY_CASES` sets another number);
//! `scripts/property.sh` runs many more within a time budget (`OUTFLOW_PROPERTY_SECONDS`).
//!
//! Cases are drawn from a sequence of numbers proptest generates and shrinks (see [`Draw`]):
//! a failure shrinks to a small table and a small input, printed with the failure.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::sorted;
use arrow_array::{
    ArrayRef, BooleanArray, Date32Array, Decimal128Array, Float32Array, Float64Array, Int8Array, Int16Array,
    Int32Array, Int64Array, ListArray, MapArray, RecordBatch, StringArray, StructArray,
    TimestampMicrosecondArray, TimestampMillisecondArray, TimestampSecondArray,
};
use arrow_buffer::{NullBuffer, OffsetBuffer};
use arrow_schema::{DataType as ArrowType, Field as ArrowField, Fields, Schema as ArrowSchema, TimeUnit};
use outflow_core::schema::{DataType, FIELD_ID_KEY, Field, InputSchema, PrimitiveType, Schema};
use outflow_core::{
    CreateDisposition, EvolutionPlan, EvolutionPlanner, IncompatibleSchemaHandling, PrepareDestination,
    SchemaEvolutionConfig, SchemaEvolutionOption, Sink,
};
use outflow_iceberg::commit::{commit_schema, name_mapping};
use outflow_iceberg::schema::{from_iceberg_schema, parse_table_ident};
use outflow_iceberg::{CatalogConfig, IcebergCatalog, IcebergPreparer, IcebergSink, IcebergSinkOptions};
use outflow_testkit::iceberg::{Reader, TestCatalog};
use proptest::strategy::Strategy;
use proptest::test_runner::{Config, FileFailurePersistence, TestCaseError, TestRunner};
use serde_json::{Value, json};

const TABLE: &str = "prop.t";

// ---------------------------------------------------------------------------------------
// Drawing cases

/// Decisions drawn from numbers proptest generates. Zero is always the plainest choice and an
/// exhausted sequence draws zeros, so proptest's shrinking (shorter sequences, smaller
/// numbers) makes the case plainer: fewer columns, no variation, small values.
struct Draw {
    choices: Vec<u32>,
    next: usize,
}

impl Draw {
    fn raw(&mut self) -> u32 {
        let v = self.choices.get(self.next).copied().unwrap_or(0);
        self.next += 1;
        v
    }

    fn below(&mut self, n: usize) -> usize {
        self.raw() as usize % n
    }

    /// True `p` times in a hundred; a zero draws false.
    fn percent(&mut self, p: u32) -> bool {
        self.raw() % 100 >= 100 - p
    }

    fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())].clone()
    }

    fn raw64(&mut self) -> u64 {
        (u64::from(self.raw()) << 32) | u64::from(self.raw())
    }

    /// A value in `lo..=hi`, sometimes an edge of the range.
    fn int(&mut self, lo: i128, hi: i128) -> i128 {
        if self.percent(15) {
            let edges = [lo, hi, 0.clamp(lo, hi), 1.clamp(lo, hi), (-1).clamp(lo, hi)];
            return self.pick(&edges);
        }
        // Unsigned: a decimal(38)'s range is wider than i128's positive half.
        let span = hi.abs_diff(lo) + 1;
        let wide = (u128::from(self.raw64()) << 64) | u128::from(self.raw64());
        // Zero maps to the value nearest zero, so shrinking heads there.
        let from_zero = 0.clamp(lo, hi).abs_diff(lo);
        lo.wrapping_add(((wide % span + from_zero) % span) as i128)
    }
}

/// Column names per level: with dots, mixed case, and a former name that a rename leaves in
/// the name mapping. Top-level and nested pools never combine into one dotted full name
/// (`user` with child `id` would collide with `user.id` in Iceberg's name index).
const TOP_NAMES: [&str; 8] = [
    "id", "user.id", "UserName", "amount", "Score", "tags", "attrs", "ts",
];
const CHILD_NAMES: [&str; 5] = ["x", "y.z", "Label", "n", "Ctx"];
const EXTRA_NAMES: [&str; 4] = ["extra", "Extra.Col", "new_n", "later"];

fn table_primitive(d: &mut Draw) -> PrimitiveType {
    use PrimitiveType::*;
    d.pick(&[
        Long,
        Int,
        String,
        Double,
        Float,
        Decimal {
            precision: 12,
            scale: 2,
        },
        Decimal {
            precision: 38,
            scale: 10,
        },
        Date,
        Timestamp,
        TimestampTz,
        Boolean,
    ])
}

fn map_key_primitive(d: &mut Draw) -> PrimitiveType {
    use PrimitiveType::*;
    d.pick(&[String, Int, Long, Date])
}

/// A table type up to `depth` levels of nesting.
fn table_type(d: &mut Draw, depth: u32) -> DataType {
    let kind = if depth == 0 { 0 } else { d.below(10) };
    match kind {
        7 => DataType::structure(table_level(d, &CHILD_NAMES, 3, depth - 1)),
        8 => DataType::list(table_field(d, "element", depth - 1)),
        9 => DataType::map(
            Field::required("key", map_key_primitive(d)),
            table_field(d, "value", depth - 1),
        ),
        _ => DataType::Primitive(table_primitive(d)),
    }
}

fn table_field(d: &mut Draw, name: &str, depth: u32) -> Field {
    let data_type = table_type(d, depth);
    if d.percent(30) {
        Field::required(name, data_type)
    } else {
        Field::optional(name, data_type)
    }
}

/// One to `max` fields with distinct names from `pool`.
fn table_level(d: &mut Draw, pool: &[&str], max: usize, depth: u32) -> Vec<Field> {
    let mut names: Vec<&str> = pool.to_vec();
    let count = 1 + d.below(max);
    (0..count)
        .map(|_| {
            let name = names.remove(d.below(names.len()));
            table_field(d, name, depth)
        })
        .collect()
}

/// Index paths (through `DataType::children`) of fields that can be renamed: those in a struct
/// or at the top level, not a list's element or a map's key and value.
fn renameable(fields: &[Field], prefix: &[usize], out: &mut Vec<Vec<usize>>) {
    for (i, f) in fields.iter().enumerate() {
        let mut path = prefix.to_vec();
        path.push(i);
        out.push(path.clone());
        nested_renameable(&f.data_type, &path, out);
    }
}

fn nested_renameable(t: &DataType, path: &[usize], out: &mut Vec<Vec<usize>>) {
    match t {
        DataType::Struct { fields } => renameable(fields, path, out),
        DataType::List { .. } | DataType::Map { .. } => {
            for (i, child) in t.children().into_iter().enumerate() {
                let mut p = path.to_vec();
                p.push(i);
                nested_renameable(&child.data_type, &p, out);
            }
        }
        DataType::Primitive(_) => {}
    }
}

fn field_at_mut<'a>(fields: &'a mut [Field], path: &[usize]) -> &'a mut Field {
    let field = &mut fields[path[0]];
    path[1..]
        .iter()
        .fold(field, |f, &i| f.data_type.children_mut().swap_remove(i))
}

/// What an input column is in Arrow, and what it is made of.
#[derive(Clone, Debug, PartialEq)]
enum InType {
    Prim(ArrowType),
    Struct(Vec<InCol>),
    List(Box<InCol>),
    Map(Box<InCol>, Box<InCol>),
}

/// An input column: its name and type in the batch and, when it was drawn from a table
/// column, that column's provisional id (extra columns have none).
#[derive(Clone, Debug, PartialEq)]
struct InCol {
    name: String,
    target: Option<i32>,
    nullable: bool,
    ty: InType,
}

/// What the drawn differences from the table need; `maybe_relax` is set where the table's
/// nullability and the input's may differ (the planner's statistics decide). `former_name`
/// needs nothing: it says a column goes by the name it had before a rename.
#[derive(Clone, Debug, Default)]
struct Needs {
    conflict: bool,
    promotion: bool,
    addition: bool,
    maybe_relax: bool,
    former_name: bool,
}

impl Needs {
    fn none(&self) -> bool {
        !(self.conflict || self.promotion || self.addition || self.maybe_relax)
    }
}

/// The Arrow type a table primitive is written as, exactly.
fn exact_arrow(p: PrimitiveType) -> ArrowType {
    use PrimitiveType::*;
    match p {
        Boolean => ArrowType::Boolean,
        Int => ArrowType::Int32,
        Long => ArrowType::Int64,
        Float => ArrowType::Float32,
        Double => ArrowType::Float64,
        Decimal { precision, scale } => ArrowType::Decimal128(precision, scale),
        Date => ArrowType::Date32,
        Timestamp => ArrowType::Timestamp(TimeUnit::Microsecond, None),
        TimestampTz => ArrowType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
        String => ArrowType::Utf8,
        other => unreachable!("the generator has no {other}"),
    }
}

/// Arrow types the table reads as `p` without any change: narrower integers, floats and
/// decimals, coarser timestamps.
fn narrower_arrow(p: PrimitiveType) -> Vec<ArrowType> {
    use PrimitiveType::*;
    match p {
        Int => vec![ArrowType::Int16, ArrowType::Int8],
        Long => vec![ArrowType::Int32, ArrowType::Int16],
        Double => vec![ArrowType::Float32],
        Decimal { precision, scale } => vec![ArrowType::Decimal128(precision - 3, scale)],
        Timestamp => vec![
            ArrowType::Timestamp(TimeUnit::Millisecond, None),
            ArrowType::Timestamp(TimeUnit::Second, None),
        ],
        // Another zone's label on the same instants is the same Iceberg type.
        TimestampTz => vec![
            ArrowType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            ArrowType::Timestamp(TimeUnit::Microsecond, Some("+05:30".into())),
        ],
        _ => vec![],
    }
}

/// Arrow types that need `p` promoted.
fn wider_arrow(p: PrimitiveType) -> Vec<ArrowType> {
    use PrimitiveType::*;
    match p {
        Int => vec![ArrowType::Int64],
        Float => vec![ArrowType::Float64],
        Decimal { precision, scale } if precision < 38 => {
            vec![ArrowType::Decimal128((precision + 4).min(38), scale)]
        }
        _ => vec![],
    }
}

/// Arrow types no option makes fit `p`.
fn conflicting_arrow(p: PrimitiveType) -> Vec<ArrowType> {
    use PrimitiveType::*;
    match p {
        String => vec![ArrowType::Int64, ArrowType::Boolean],
        Decimal { precision, scale } => vec![ArrowType::Decimal128(precision, scale + 1), ArrowType::Utf8],
        Boolean => vec![ArrowType::Int32],
        Timestamp => vec![ArrowType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()))],
        TimestampTz => vec![ArrowType::Timestamp(TimeUnit::Microsecond, None)],
        _ => vec![ArrowType::Utf8],
    }
}

/// An input column exactly like the table's column `field` (for rows the table holds before).
fn exact_col(field: &Field) -> InCol {
    let ty = match &field.data_type {
        DataType::Primitive(p) => InType::Prim(exact_arrow(*p)),
        DataType::Struct { fields } => InType::Struct(fields.iter().map(exact_col).collect()),
        DataType::List { list } => InType::List(Box::new(exact_col(list))),
        DataType::Map { map } => InType::Map(Box::new(exact_col(&map.key)), Box::new(exact_col(&map.value))),
    };
    InCol {
        name: field.name.clone(),
        target: field.id,
        nullable: !field.required,
        ty,
    }
}

/// An input column drawn from scratch (an extra column, or an extra child): every part new.
fn extra_col(field: &Field) -> InCol {
    let ty = match &field.data_type {
        DataType::Primitive(p) => InType::Prim(exact_arrow(*p)),
        DataType::Struct { fields } => InType::Struct(fields.iter().map(extra_col).collect()),
        DataType::List { list } => InType::List(Box::new(extra_col(list))),
        DataType::Map { map } => InType::Map(Box::new(extra_col(&map.key)), Box::new(extra_col(&map.value))),
    };
    InCol {
        name: field.name.clone(),
        target: None,
        nullable: !field.required,
        ty,
    }
}

/// The input's columns for one struct level of the table: some dropped, some under a former
/// name, some of other types, extra ones, in another order.
fn vary_level(
    d: &mut Draw,
    table: &[Field],
    former: &BTreeMap<i32, String>,
    needs: &mut Needs,
) -> Vec<InCol> {
    let mut cols = Vec::new();
    for f in table {
        if d.percent(15) {
            needs.maybe_relax |= f.required;
            continue;
        }
        let old = f.id.and_then(|id| former.get(&id));
        let name = match old {
            Some(old) if !d.percent(30) => {
                needs.former_name = true;
                old.clone()
            }
            _ => f.name.clone(),
        };
        cols.push(vary_field(d, f, name, former, needs));
    }
    if cols.is_empty() {
        // Arrow has no empty structs, nor Iceberg empty batches: keep one column.
        cols.push(vary_field(d, &table[0], table[0].name.clone(), former, needs));
    }
    if d.percent(25) {
        let taken: BTreeSet<String> = table
            .iter()
            .map(|f| f.name.clone())
            .chain(former.values().cloned())
            .collect();
        let mut candidates: Vec<String> = EXTRA_NAMES.iter().map(|n| n.to_string()).collect();
        // A name that differs from a table column's only in case is another column in Iceberg.
        candidates.extend(
            table
                .iter()
                .flat_map(|f| [f.name.to_lowercase(), f.name.to_uppercase()]),
        );
        candidates.retain(|n| !taken.contains(n));
        candidates.dedup();
        for _ in 0..1 + d.below(2) {
            if candidates.is_empty() {
                break;
            }
            let name = candidates.remove(d.below(candidates.len()));
            let field = table_field(d, &name, 1);
            cols.push(extra_col(&field));
            needs.addition = true;
        }
    }
    if d.percent(40) {
        for i in (1..cols.len()).rev() {
            cols.swap(i, d.below(i + 1));
        }
    }
    cols
}

fn vary_field(
    d: &mut Draw,
    f: &Field,
    name: String,
    former: &BTreeMap<i32, String>,
    needs: &mut Needs,
) -> InCol {
    let nullable = if f.required {
        let declared_optional = d.percent(35);
        needs.maybe_relax |= declared_optional;
        declared_optional
    } else {
        !d.percent(15)
    };
    let ty = match &f.data_type {
        DataType::Primitive(p) => InType::Prim(vary_primitive(d, *p, needs)),
        DataType::Struct { fields } => InType::Struct(vary_level(d, fields, former, needs)),
        DataType::List { list } => {
            let name = d.pick(&["element", "item"]).to_string();
            InType::List(Box::new(vary_field(d, list, name, former, needs)))
        }
        DataType::Map { map } => {
            let key_type = map.key.data_type.as_primitive().expect("primitive keys");
            let key = InCol {
                name: "key".into(),
                target: map.key.id,
                nullable: false,
                ty: InType::Prim(vary_primitive(d, key_type, needs)),
            };
            let value = vary_field(d, &map.value, "value".into(), former, needs);
            InType::Map(Box::new(key), Box::new(value))
        }
    };
    InCol {
        name,
        target: f.id,
        nullable,
        ty,
    }
}

/// The Arrow type of an input column drawn from a table column of type `p`: mostly `p`
/// itself, sometimes narrower, wider or conflicting.
fn vary_primitive(d: &mut Draw, p: PrimitiveType, needs: &mut Needs) -> ArrowType {
    let roll = d.below(20);
    let (narrower, wider, conflicting) = (narrower_arrow(p), wider_arrow(p), conflicting_arrow(p));
    // One conflict in twenty: a table has several columns, and one conflict refuses it all.
    if (13..16).contains(&roll) && !narrower.is_empty() {
        d.pick(&narrower)
    } else if (16..19).contains(&roll) && !wider.is_empty() {
        needs.promotion = true;
        d.pick(&wider)
    } else if roll == 19 {
        needs.conflict = true;
        d.pick(&conflicting)
    } else {
        exact_arrow(p)
    }
}

/// One value of an input column. A struct keeps its children's values even where it is null
/// (Arrow stores them; required children must hold something there).
#[derive(Clone, Debug, PartialEq)]
enum V {
    Null,
    Int(i128),
    F32(f32),
    F64(f64),
    Str(String),
    Bool(bool),
    Struct { valid: bool, fields: Vec<V> },
    List(Vec<V>),
    Map(Vec<(V, V)>),
}

const STRINGS: [&str; 8] = ["", "a", "héllo", "日本語", "with space", "🦀", "quote\"", "B"];
const KEYS: [&str; 5] = ["k", "", "K2", "a.b", "z"];

const MIN_DAY: i128 = -719_162; // 0001-01-01, the earliest date Python prints
const MAX_DAY: i128 = 2_932_896; // 9999-12-31
const MIN_MICROS: i128 = MIN_DAY * 86_400_000_000;
const MAX_MICROS: i128 = (MAX_DAY + 1) * 86_400_000_000 - 1;

fn primitive_value(d: &mut Draw, t: &ArrowType, key: bool) -> V {
    match t {
        ArrowType::Boolean => V::Bool(d.percent(50)),
        ArrowType::Int8 => V::Int(d.int(i8::MIN.into(), i8::MAX.into())),
        ArrowType::Int16 => V::Int(d.int(i16::MIN.into(), i16::MAX.into())),
        ArrowType::Int32 => V::Int(d.int(i32::MIN.into(), i32::MAX.into())),
        ArrowType::Int64 => V::Int(d.int(i64::MIN.into(), i64::MAX.into())),
        ArrowType::Float32 => V::F32(if d.percent(20) {
            d.pick(&[
                0.0,
                -0.0,
                1.5,
                f32::NAN,
                f32::INFINITY,
                f32::NEG_INFINITY,
                f32::MIN_POSITIVE,
                f32::MAX,
            ])
        } else {
            f32::from_bits(d.raw())
        }),
        ArrowType::Float64 => V::F64(if d.percent(20) {
            d.pick(&[
                0.0,
                -0.0,
                0.1,
                f64::NAN,
                f64::INFINITY,
                f64::NEG_INFINITY,
                1e-300,
                f64::MAX,
            ])
        } else {
            f64::from_bits(d.raw64())
        }),
        ArrowType::Decimal128(precision, _) => {
            let bound = 10i128.pow(u32::from(*precision)) - 1;
            V::Int(d.int(-bound, bound))
        }
        ArrowType::Date32 => V::Int(d.int(MIN_DAY, MAX_DAY)),
        ArrowType::Timestamp(unit, _) => {
            let per = micros_per(*unit);
            V::Int(d.int(MIN_MICROS.div_euclid(per) + 1, MAX_MICROS / per))
        }
        ArrowType::Utf8 if key => V::Str(if d.percent(30) {
            format!("k{}", d.raw() % 1000)
        } else {
            d.pick(&KEYS).to_string()
        }),
        ArrowType::Utf8 => V::Str(d.pick(&STRINGS).to_string()),
        other => unreachable!("the generator has no {other}"),
    }
}

fn micros_per(unit: TimeUnit) -> i128 {
    match unit {
        TimeUnit::Second => 1_000_000,
        TimeUnit::Millisecond => 1_000,
        TimeUnit::Microsecond => 1,
        TimeUnit::Nanosecond => unreachable!("the generator has no nanoseconds"),
    }
}

/// A value of `col`; `masked` where the enclosing struct is null, so that even a required
/// column may hold a null there, as Arrow allows (and pyarrow produces).
fn value(d: &mut Draw, col: &InCol, masked: bool) -> V {
    let null = (col.nullable || masked) && d.percent(20);
    match &col.ty {
        InType::Struct(children) => V::Struct {
            valid: !null,
            fields: children.iter().map(|c| value(d, c, null)).collect(),
        },
        _ if null => V::Null,
        InType::Prim(t) => primitive_value(d, t, false),
        InType::List(element) => V::List((0..d.below(4)).map(|_| value(d, element, false)).collect()),
        InType::Map(key, val) => {
            let mut entries: Vec<(V, V)> = Vec::new();
            for _ in 0..d.below(4) {
                let InType::Prim(t) = &key.ty else {
                    unreachable!("primitive keys")
                };
                let k = primitive_value(d, t, true);
                let v = value(d, val, false);
                if !entries.iter().any(|(e, _)| *e == k) {
                    entries.push((k, v));
                }
            }
            V::Map(entries)
        }
    }
}

/// Which input fields carry ids: none, all, or all but the n-th (depth first, wrapping).
#[derive(Clone, Copy, Debug)]
enum FieldIds {
    Without,
    All,
    AllBut(usize),
}

/// One drawn case: the table, a rename made after creating it, the sink's evolution options,
/// and the input batch.
struct Case {
    /// The table as created, with provisional ids (the catalog assigns the real ones).
    table: Schema,
    /// A column renamed after creation: its index path and new name.
    rename: Option<(Vec<usize>, String)>,
    options: Vec<SchemaEvolutionOption>,
    route_to_errors: bool,
    /// Which of the input's Arrow fields carry field ids (`PARQUET:field_id`).
    field_ids: FieldIds,
    input: Vec<InCol>,
    rows: Vec<Vec<V>>,
    needs: Needs,
    /// Rows written with the table's own schema before the rename, if any: evolution then
    /// meets a table with data files of the old schema.
    seed: Vec<Vec<V>>,
}

impl Case {
    fn draw(choices: Vec<u32>) -> Case {
        let d = &mut Draw { choices, next: 0 };
        let mut table = Schema::new(table_level(d, &TOP_NAMES, 4, 2));
        table.assign_missing_ids(0);
        let mut paths = Vec::new();
        renameable(&table.fields, &[], &mut paths);
        let mut renamed = table.clone();
        let mut former = BTreeMap::new();
        let rename = d.percent(40).then(|| {
            let path = d.pick(&paths);
            let field = field_at_mut(&mut renamed.fields, &path);
            let new_name = if d.percent(50) {
                format!("Renamed.{}", field.name)
            } else {
                format!("{}_v2", field.name)
            };
            former.insert(field.id.expect("ids assigned"), field.name.clone());
            field.name = new_name.clone();
            (path, new_name)
        });
        let options: Vec<SchemaEvolutionOption> = [
            SchemaEvolutionOption::AllowFieldAddition,
            SchemaEvolutionOption::AllowFieldRelaxation,
            SchemaEvolutionOption::AllowTypePromotion,
        ]
        .into_iter()
        .filter(|_| d.percent(60))
        .collect();
        let route_to_errors = !options.is_empty() && d.percent(50);
        let field_ids = match d.below(10) {
            0..=5 => FieldIds::Without,
            6..=8 => FieldIds::All,
            // One field without an id: ids are not trusted, names decide.
            _ => FieldIds::AllBut(d.below(8)),
        };
        let mut needs = Needs::default();
        let input = vary_level(d, &renamed.fields, &former, &mut needs);
        let rows = (0..1 + d.below(4))
            .map(|_| input.iter().map(|c| value(d, c, false)).collect())
            .collect();
        let exact: Vec<InCol> = table.fields.iter().map(exact_col).collect();
        let seed = (0..d.below(3))
            .map(|_| exact.iter().map(|c| value(d, c, false)).collect())
            .collect();
        Case {
            table,
            rename,
            options,
            route_to_errors,
            field_ids,
            input,
            rows,
            needs,
            seed,
        }
    }

    /// The columns of the seed rows.
    fn seed_cols(&self) -> Vec<InCol> {
        self.table.fields.iter().map(exact_col).collect()
    }

    fn config(&self) -> SchemaEvolutionConfig {
        if self.options.is_empty() {
            return SchemaEvolutionConfig::disabled();
        }
        let handling = if self.route_to_errors {
            IncompatibleSchemaHandling::RouteToErrors
        } else {
            IncompatibleSchemaHandling::Fail
        };
        SchemaEvolutionConfig::builder()
            .allow_all(self.options.iter().copied())
            .on_incompatible(handling)
            .build()
            .expect("a valid evolution config")
    }
}

impl fmt::Debug for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "table: {}", self.table)?;
        writeln!(f, "rename: {:?}", self.rename)?;
        writeln!(
            f,
            "options: {:?}, route_to_errors: {}",
            self.options, self.route_to_errors
        )?;
        writeln!(f, "input (ids: {:?}): {}", self.field_ids, show_cols(&self.input))?;
        for row in &self.rows {
            writeln!(f, "  row: {row:?}")?;
        }
        for row in &self.seed {
            writeln!(f, "  seed row (written before the rename): {row:?}")?;
        }
        write!(f, "needs: {:?}", self.needs)
    }
}

fn show_cols(cols: &[InCol]) -> String {
    let shown: Vec<String> = cols.iter().map(show_col).collect();
    shown.join(", ")
}

fn show_col(c: &InCol) -> String {
    let ty = match &c.ty {
        InType::Prim(t) => t.to_string(),
        InType::Struct(children) => format!("struct<{}>", show_cols(children)),
        InType::List(e) => format!("list<{}>", show_col(e)),
        InType::Map(k, v) => format!("map<{}, {}>", show_col(k), show_col(v)),
    };
    let target = c.target.map(|t| format!(" ->{t}")).unwrap_or_default();
    let null = if c.nullable { "" } else { " not null" };
    format!("{:?}{target}: {ty}{null}", c.name)
}

// ---------------------------------------------------------------------------------------
// Building the batch

/// The real ids the catalog gave the table's columns, by provisional id.
struct Ids(BTreeMap<i32, i32>);

impl Ids {
    fn between(provisional: &[Field], real: &[Field]) -> Ids {
        fn walk(p: &[&Field], r: &[&Field], out: &mut BTreeMap<i32, i32>) {
            assert_eq!(p.len(), r.len(), "the created table has the drawn shape");
            for (p, r) in p.iter().zip(r) {
                out.insert(p.id.expect("provisional id"), r.id.expect("real id"));
                walk(&p.data_type.children(), &r.data_type.children(), out);
            }
        }
        let mut out = BTreeMap::new();
        walk(
            &provisional.iter().collect::<Vec<_>>(),
            &real.iter().collect::<Vec<_>>(),
            &mut out,
        );
        Ids(out)
    }

    fn real(&self, provisional: i32) -> i32 {
        self.0[&provisional]
    }
}

/// Assigns field ids to the input: the real id of the column drawn from, a fresh one (never
/// used by the table) for extra columns.
struct IdAssigner<'a> {
    ids: &'a Ids,
    fresh: i32,
    /// The field left without an id, counted down as fields are numbered.
    skip: Option<usize>,
}

impl IdAssigner<'_> {
    fn id(&mut self, col: &InCol) -> Option<i32> {
        if let Some(skip) = self.skip.as_mut() {
            if *skip == 0 {
                self.skip = None;
                return None;
            }
            *skip -= 1;
        }
        Some(match col.target {
            Some(t) => self.ids.real(t),
            None => {
                self.fresh += 1;
                self.fresh
            }
        })
    }
}

/// Input fields, depth first, as [`IdAssigner`] numbers them.
fn count_fields(cols: &[InCol]) -> usize {
    cols.iter()
        .map(|c| {
            1 + match &c.ty {
                InType::Prim(_) => 0,
                InType::Struct(children) => count_fields(children),
                InType::List(e) => count_fields(std::slice::from_ref(e)),
                InType::Map(k, v) => {
                    count_fields(std::slice::from_ref(k)) + count_fields(std::slice::from_ref(v))
                }
            }
        })
        .sum()
}

fn arrow_field(col: &InCol, ids: &mut Option<IdAssigner<'_>>) -> ArrowField {
    let id = ids.as_mut().and_then(|a| a.id(col));
    let ty = match &col.ty {
        InType::Prim(t) => t.clone(),
        InType::Struct(children) => {
            ArrowType::Struct(children.iter().map(|c| arrow_field(c, ids)).collect::<Fields>())
        }
        InType::List(element) => ArrowType::List(Arc::new(arrow_field(element, ids))),
        InType::Map(key, value) => {
            let entries = Fields::from(vec![arrow_field(key, ids), arrow_field(value, ids)]);
            ArrowType::Map(
                Arc::new(ArrowField::new("entries", ArrowType::Struct(entries), false)),
                false,
            )
        }
    };
    let field = ArrowField::new(&col.name, ty, col.nullable);
    match id {
        Some(id) => field.with_metadata([(FIELD_ID_KEY.to_string(), id.to_string())].into()),
        None => field,
    }
}

fn nulls_of(valid: Vec<bool>) -> Option<NullBuffer> {
    valid.iter().any(|v| !v).then(|| NullBuffer::from(valid))
}

fn int_of(v: &V) -> Option<i128> {
    match v {
        V::Int(i) => Some(*i),
        V::Null => None,
        other => unreachable!("an integer column holds {other:?}"),
    }
}

fn array(field: &ArrowField, values: &[&V]) -> ArrayRef {
    let ints = || values.iter().map(|v| int_of(v));
    match field.data_type() {
        ArrowType::Int8 => Arc::new(ints().map(|i| i.map(|i| i as i8)).collect::<Int8Array>()),
        ArrowType::Int16 => Arc::new(ints().map(|i| i.map(|i| i as i16)).collect::<Int16Array>()),
        ArrowType::Int32 => Arc::new(ints().map(|i| i.map(|i| i as i32)).collect::<Int32Array>()),
        ArrowType::Int64 => Arc::new(ints().map(|i| i.map(|i| i as i64)).collect::<Int64Array>()),
        ArrowType::Date32 => Arc::new(ints().map(|i| i.map(|i| i as i32)).collect::<Date32Array>()),
        ArrowType::Decimal128(p, s) => Arc::new(
            ints()
                .collect::<Decimal128Array>()
                .with_precision_and_scale(*p, *s)
                .expect("valid decimal"),
        ),
        ArrowType::Timestamp(TimeUnit::Second, tz) => Arc::new(
            ints()
                .map(|i| i.map(|i| i as i64))
                .collect::<TimestampSecondArray>()
                .with_timezone_opt(tz.clone()),
        ),
        ArrowType::Timestamp(TimeUnit::Millisecond, tz) => Arc::new(
            ints()
                .map(|i| i.map(|i| i as i64))
                .collect::<TimestampMillisecondArray>()
                .with_timezone_opt(tz.clone()),
        ),
        ArrowType::Timestamp(TimeUnit::Microsecond, tz) => Arc::new(
            ints()
                .map(|i| i.map(|i| i as i64))
                .collect::<TimestampMicrosecondArray>()
                .with_timezone_opt(tz.clone()),
        ),
        ArrowType::Float32 => Arc::new(
            values
                .iter()
                .map(|v| match v {
                    V::F32(x) => Some(*x),
                    _ => None,
                })
                .collect::<Float32Array>(),
        ),
        ArrowType::Float64 => Arc::new(
            values
                .iter()
                .map(|v| match v {
                    V::F64(x) => Some(*x),
                    _ => None,
                })
                .collect::<Float64Array>(),
        ),
        ArrowType::Utf8 => Arc::new(
            values
                .iter()
                .map(|v| match v {
                    V::Str(s) => Some(s.as_str()),
                    _ => None,
                })
                .collect::<StringArray>(),
        ),
        ArrowType::Boolean => Arc::new(
            values
                .iter()
                .map(|v| match v {
                    V::Bool(b) => Some(*b),
                    _ => None,
                })
                .collect::<BooleanArray>(),
        ),
        ArrowType::Struct(children) => {
            let valid = values
                .iter()
                .map(|v| matches!(v, V::Struct { valid: true, .. }))
                .collect();
            let columns = children
                .iter()
                .enumerate()
                .map(|(i, child)| {
                    let child_values: Vec<&V> = values
                        .iter()
                        .map(|v| match v {
                            V::Struct { fields, .. } => &fields[i],
                            other => unreachable!("a struct column holds {other:?}"),
                        })
                        .collect();
                    array(child, &child_values)
                })
                .collect();
            Arc::new(StructArray::try_new(children.clone(), columns, nulls_of(valid)).expect("valid struct"))
        }
        ArrowType::List(element) => {
            let items: Vec<&[V]> = values
                .iter()
                .map(|v| match v {
                    V::List(items) => items.as_slice(),
                    _ => &[],
                })
                .collect();
            let flat: Vec<&V> = items.iter().flat_map(|i| i.iter()).collect();
            Arc::new(
                ListArray::try_new(
                    element.clone(),
                    OffsetBuffer::from_lengths(items.iter().map(|i| i.len())),
                    array(element, &flat),
                    nulls_of(values.iter().map(|v| !matches!(v, V::Null)).collect()),
                )
                .expect("valid list"),
            )
        }
        ArrowType::Map(entries, _) => {
            let ArrowType::Struct(kv) = entries.data_type() else {
                unreachable!("map entries are a struct")
            };
            let maps: Vec<&[(V, V)]> = values
                .iter()
                .map(|v| match v {
                    V::Map(entries) => entries.as_slice(),
                    _ => &[],
                })
                .collect();
            let keys: Vec<&V> = maps.iter().flat_map(|m| m.iter().map(|(k, _)| k)).collect();
            let vals: Vec<&V> = maps.iter().flat_map(|m| m.iter().map(|(_, v)| v)).collect();
            let entry_array =
                StructArray::try_new(kv.clone(), vec![array(&kv[0], &keys), array(&kv[1], &vals)], None)
                    .expect("valid map entries");
            Arc::new(
                MapArray::try_new(
                    entries.clone(),
                    OffsetBuffer::from_lengths(maps.iter().map(|m| m.len())),
                    entry_array,
                    nulls_of(values.iter().map(|v| !matches!(v, V::Null)).collect()),
                    false,
                )
                .expect("valid map"),
            )
        }
        other => unreachable!("the generator has no {other}"),
    }
}

fn batch_of(cols: &[InCol], rows: &[Vec<V>], field_ids: FieldIds, ids: &Ids) -> RecordBatch {
    let skip = match field_ids {
        FieldIds::Without => None,
        FieldIds::All => Some(None),
        FieldIds::AllBut(n) => Some(Some(n % count_fields(cols))),
    };
    let mut assigner = skip.map(|skip| IdAssigner {
        ids,
        fresh: 10_000,
        skip,
    });
    let fields: Vec<ArrowField> = cols.iter().map(|c| arrow_field(c, &mut assigner)).collect();
    let columns = fields
        .iter()
        .enumerate()
        .map(|(i, f)| array(f, &rows.iter().map(|r| &r[i]).collect::<Vec<_>>()))
        .collect();
    RecordBatch::try_new(Arc::new(ArrowSchema::new(fields)), columns).expect("a valid input batch")
}

// ---------------------------------------------------------------------------------------
// What the reader should print

/// The input column a table field (as the reader prints it) holds: the one drawn from it
/// (same real id), or an extra column added under its own name.
fn source_of<'a>(field: &Value, level: &'a [InCol], ids: &Ids) -> Option<&'a InCol> {
    let id = field["id"].as_i64().expect("field id") as i32;
    level
        .iter()
        .find(|c| c.target.is_some_and(|t| ids.real(t) == id))
        .or_else(|| {
            level
                .iter()
                .find(|c| c.target.is_none() && field["name"] == c.name.as_str())
        })
}

/// Asserts that every input column of `level` found a column of the written table.
fn check_all_landed(fields: &[Value], level: &[InCol], ids: &Ids, path: &str) {
    for col in level {
        let here = format!("{path}/{}", col.name);
        let found = fields
            .iter()
            .find(|f| source_of(f, std::slice::from_ref(col), ids).is_some())
            .unwrap_or_else(|| panic!("input column {here} has no column in the written table"));
        check_nested_landed(&found["type"], col, ids, &here);
    }
}

fn check_nested_landed(ty: &Value, col: &InCol, ids: &Ids, path: &str) {
    match &col.ty {
        InType::Struct(children) => {
            let fields = ty["fields"]
                .as_array()
                .unwrap_or_else(|| panic!("{path} is a struct in the input, {ty} in the table"));
            check_all_landed(fields, children, ids, path);
        }
        InType::List(element) => {
            check_nested_landed(&ty["element"], element, ids, &format!("{path}/element"))
        }
        InType::Map(_, value) => check_nested_landed(&ty["value"], value, ids, &format!("{path}/value")),
        InType::Prim(_) => {}
    }
}

/// What a reader should print for the input's rows.
struct Expected<'a> {
    ids: &'a Ids,
    /// PyIceberg 0.12 reads a null list of structs, or a null map of struct values, as empty:
    /// its projection rebuilds those arrays from their offsets and drops the null bitmap
    /// (`ArrowProjectionVisitor.list` and `.map` in `pyiceberg/io/pyarrow.py`). Expected so
    /// for PyIceberg, and such cases are read with Java Iceberg too, with nulls expected.
    pyiceberg: bool,
    /// Whether that reading applied to a value.
    emptied_nulls: Cell<bool>,
}

impl Expected<'_> {
    fn row(&self, fields: &[Value], level: &[InCol], values: &[V]) -> Value {
        let mut row = serde_json::Map::new();
        for field in fields {
            let value = source_of(field, level, self.ids)
                .map(|col| {
                    let i = level.iter().position(|c| std::ptr::eq(c, col)).expect("in level");
                    self.value(&field["type"], col, &values[i])
                })
                .unwrap_or_else(|| self.null(&field["type"]));
            row.insert(field["name"].as_str().expect("name").to_string(), value);
        }
        Value::Object(row)
    }

    /// A null in a column of type `ty`, as the reader prints it.
    fn null(&self, ty: &Value) -> Value {
        let of_structs = match ty["type"].as_str() {
            Some("list") => ty["element"]["type"] == "struct",
            Some("map") => ty["value"]["type"] == "struct",
            _ => false,
        };
        if self.pyiceberg && of_structs {
            self.emptied_nulls.set(true);
            json!([])
        } else {
            Value::Null
        }
    }

    /// A value as the reader prints it in a column of type `ty` (the table's, after
    /// evolution).
    fn value(&self, ty: &Value, col: &InCol, v: &V) -> Value {
        match (v, &col.ty) {
            (V::Null, _) | (V::Struct { valid: false, .. }, _) => self.null(ty),
            (V::Struct { fields, .. }, InType::Struct(children)) => {
                self.row(ty["fields"].as_array().expect("struct fields"), children, fields)
            }
            (V::List(items), InType::List(element)) => Value::Array(
                items
                    .iter()
                    .map(|item| self.value(&ty["element"], element, item))
                    .collect(),
            ),
            (V::Map(entries), InType::Map(key, value)) => {
                let mut out: Vec<Value> = entries
                    .iter()
                    .map(|(k, v)| {
                        json!({"key": self.value(&ty["key"], key, k), "value": self.value(&ty["value"], value, v)})
                    })
                    .collect();
                out.sort_by_key(|e| e["key"].to_string());
                Value::Array(out)
            }
            (v, InType::Prim(from)) => primitive_json(ty.as_str().expect("a primitive type"), from, v),
            (v, t) => unreachable!("{v:?} in a {t:?} column"),
        }
    }
}

fn float_json(x: f64) -> Value {
    if x.is_nan() {
        json!("NaN")
    } else if x.is_infinite() {
        json!(if x > 0.0 { "Infinity" } else { "-Infinity" })
    } else {
        // The reader's shortest round-trip digits reach us through serde_json's parser, which
        // may land one ulp off; the same digits parsed the same way compare exactly.
        serde_json::from_str(&json!(x).to_string()).expect("a number")
    }
}

fn primitive_json(ty: &str, from: &ArrowType, v: &V) -> Value {
    match (ty, v) {
        ("int" | "long", V::Int(i)) => json!(*i as i64),
        ("float" | "double", V::F32(x)) => float_json(f64::from(*x)),
        ("double", V::F64(x)) => float_json(*x),
        ("string", V::Str(s)) => json!(s),
        ("boolean", V::Bool(b)) => json!(b),
        ("date", V::Int(days)) => {
            let day = chrono::NaiveDate::from_ymd_opt(1970, 1, 1).expect("epoch")
                + chrono::Duration::days(*days as i64);
            json!(day.format("%Y-%m-%d").to_string())
        }
        ("timestamp" | "timestamptz", V::Int(t)) => {
            let ArrowType::Timestamp(unit, _) = from else {
                unreachable!("a timestamp from {from}")
            };
            let micros = (*t * micros_per(*unit)) as i64;
            let at = chrono::DateTime::from_timestamp_micros(micros).expect("in range");
            let text = at.naive_utc().format("%Y-%m-%dT%H:%M:%S%.6f").to_string();
            json!(if ty == "timestamptz" {
                text + "+00:00"
            } else {
                text
            })
        }
        (decimal, V::Int(unscaled)) if decimal.starts_with("decimal(") => {
            let ArrowType::Decimal128(_, scale) = from else {
                unreachable!("a decimal from {from}")
            };
            json!(decimal_text(*unscaled, *scale as usize))
        }
        _ => panic!("the table's {ty} column holds {v:?} from an input of {from}: no exact reading"),
    }
}

fn decimal_text(unscaled: i128, scale: usize) -> String {
    let digits = format!("{:0>width$}", unscaled.unsigned_abs(), width = scale + 1);
    let (whole, frac) = digits.split_at(digits.len() - scale);
    let sign = if unscaled < 0 { "-" } else { "" };
    if scale == 0 {
        format!("{sign}{whole}")
    } else {
        format!("{sign}{whole}.{frac}")
    }
}

// ---------------------------------------------------------------------------------------
// Running a case

/// How a case ended, for the count printed at the end.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Outcome {
    /// Written and read back; what the case exercised.
    Written(Vec<&'static str>),
    Refused,
}

async fn run_case(case: &Case) -> Outcome {
    let dir = tempfile::tempdir().expect("temp dir");
    let readers = TestCatalog::sql_in(dir.path());
    let config = CatalogConfig::sqlite_in(dir.path());
    let catalog = IcebergCatalog::connect(&config).await.expect("catalog");
    let ident = parse_table_ident(TABLE).expect("table name");

    // Created as any Outflow table is (with its name mapping), from the drawn schema.
    let create = IcebergSinkOptions::builder()
        .catalog(config.clone())
        .table(TABLE)
        .build()
        .expect("create options");
    IcebergPreparer::new(catalog.clone(), create)
        .prepare(TABLE, &Arc::new(case.table.without_ids().to_arrow()))
        .await
        .expect("the table is created");
    let mut table = catalog.require_table(&ident).await.expect("created");
    let mut current = from_iceberg_schema(table.metadata().current_schema());
    let ids = Ids::between(&case.table.fields, &current.fields);
    let seed_cols = case.seed_cols();
    if !case.seed.is_empty() {
        let options = IcebergSinkOptions::builder()
            .catalog(config.clone())
            .table(TABLE)
            .build()
            .expect("seed options");
        let mut sink = IcebergSink::connect(options).await.expect("sink");
        sink.write(batch_of(&seed_cols, &case.seed, FieldIds::Without, &ids))
            .await
            .expect("the seed rows fit the table");
        sink.close().await.expect("the seed rows commit");
        table = catalog.require_table(&ident).await.expect("seeded");
    }

    // A rename, committed as Outflow commits schemas: the mapping keeps the former name.
    if let Some((path, new_name)) = &case.rename {
        let mut renamed = current.clone();
        field_at_mut(&mut renamed.fields, path).name = new_name.clone();
        let mapping = name_mapping(&table)
            .expect("readable mapping")
            .expect("Outflow tables have a name mapping")
            .updated_with(&renamed);
        commit_schema(&catalog, &table, &renamed, Some(&mapping))
            .await
            .expect("the rename commits");
        table = catalog.require_table(&ident).await.expect("renamed");
        current = from_iceberg_schema(table.metadata().current_schema());
    }
    let before = table.metadata_ref();

    let batch = batch_of(&case.input, &case.rows, case.field_ids, &ids);
    let evolution = case.config();
    let plan = planned(&evolution, &table, &batch);
    let verdict = &plan.verdicts[0];
    assert!(
        !(case.needs.conflict && verdict.verdict.is_compatible()),
        "the planner accepted a conflicting type:\n{}",
        plan.render(None)
    );
    assert!(
        !case.needs.none() || verdict.verdict.is_compatible(),
        "the planner refused an input that needs no change:\n{}",
        plan.render(None)
    );

    let options = IcebergSinkOptions::builder()
        .catalog(config.clone())
        .table(TABLE)
        .create_disposition(CreateDisposition::CreateNever)
        .schema_evolution(evolution)
        .build()
        .expect("sink options");
    let mut sink = IcebergSink::connect(options).await.expect("sink");
    let written = match sink.write(batch.clone()).await {
        Ok(()) => sink.close().await,
        Err(e) => Err(e),
    };

    if !verdict.verdict.is_compatible() {
        let reasons = plan.rejection_reasons();
        let column = &reasons.first().expect("a refusal has reasons").1.path;
        assert!(
            !column.is_empty(),
            "the refusal names no column:\n{}",
            plan.render(None)
        );
        match written {
            Err(e) => assert!(
                e.to_string().contains(column.as_str()),
                "{e} does not name {column}"
            ),
            Ok(result) => {
                assert!(case.route_to_errors, "refused but written: {result:?}");
                assert_eq!(result.failed.len(), batch.num_rows(), "every row comes back");
                assert_eq!(result.rows_written(), 0);
                for failed in &result.failed {
                    assert!(
                        failed.reason.contains(column.as_str()),
                        "{failed:?} does not name {column}"
                    );
                }
            }
        }
        let after = catalog.require_table(&ident).await.expect("still there");
        assert_eq!(
            after.metadata().snapshots().count(),
            before.snapshots().count(),
            "a refused input committed data"
        );
        assert_eq!(
            after.metadata().current_schema(),
            before.current_schema(),
            "a refused input changed the schema"
        );
        assert_eq!(after.metadata().properties(), before.properties());
        return Outcome::Refused;
    }

    let result = written.unwrap_or_else(|e| {
        panic!(
            "the planner accepted the input, the sink failed: {e}\nplan:\n{}\ntable: {current}",
            plan.render(None)
        )
    });
    assert!(
        result.failed.is_empty(),
        "accepted rows came back: {:?}",
        result.failed
    );
    assert_eq!(result.rows_written(), batch.num_rows() as u64);

    let mut reader = Reader::PyIceberg;
    loop {
        let read = readers.read(reader, TABLE);
        assert_eq!(
            read["snapshots"].as_array().map(Vec::len),
            Some(before.snapshots().count() + 1),
            "one append"
        );
        let fields = outflow_testkit::iceberg::fields(&read);
        check_all_landed(fields, &case.input, &ids, "");
        let expected = Expected {
            ids: &ids,
            pyiceberg: reader == Reader::PyIceberg,
            emptied_nulls: Cell::new(false),
        };
        let rows: Vec<Value> = case
            .rows
            .iter()
            .map(|row| expected.row(fields, &case.input, row))
            .chain(case.seed.iter().map(|row| expected.row(fields, &seed_cols, row)))
            .collect();
        assert_eq!(
            sorted(outflow_testkit::iceberg::rows(&read).clone()),
            sorted(rows),
            "{reader:?} read back other rows than the input's\nschema read: {}",
            read["schema"]
        );
        if !expected.emptied_nulls.get() {
            let kinds: BTreeSet<&'static str> = plan.applied_changes().map(|c| c.kind.as_str()).collect();
            let mut tags: Vec<&'static str> = kinds.into_iter().collect();
            if case.needs.former_name {
                tags.push("former names");
            }
            if !case.seed.is_empty() {
                tags.push("rows before");
            }
            tags.push(match case.field_ids {
                FieldIds::Without => "no ids",
                FieldIds::All => "ids",
                FieldIds::AllBut(_) => "ids but one",
            });
            if reader == Reader::Java {
                tags.push("Java reads");
            }
            return Outcome::Written(tags);
        }
        reader = Reader::Java;
    }
}

/// The planner's own verdict on the batch, as the sink plans it: against the table's schema,
/// name mapping and last column id, with the batch's null counts.
fn planned(
    config: &SchemaEvolutionConfig,
    table: &iceberg::table::Table,
    batch: &RecordBatch,
) -> EvolutionPlan {
    let current = from_iceberg_schema(table.metadata().current_schema());
    let mapping = name_mapping(table).expect("readable mapping");
    let mut planner = EvolutionPlanner::new(config)
        .table(&current)
        .last_column_id(table.metadata().last_column_id());
    if let Some(mapping) = &mapping {
        planner = planner.name_mapping(mapping);
    }
    let input = InputSchema::from_batch(batch).expect("a plannable batch");
    planner
        .plan(std::slice::from_ref(&input))
        .expect("the planner plans")
}

fn env_number(var: &str) -> Option<u64> {
    std::env::var(var).ok().map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{var} must be a whole number, not {v:?}"))
    })
}

#[test]
fn what_the_planner_accepts_is_written_exactly() {
    let cases = env_number("OUTFLOW_PROPERTY_CASES").unwrap_or(64) as u32;
    let budget = env_number("OUTFLOW_PROPERTY_SECONDS").map(Duration::from_secs);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let strategy = proptest::collection::vec(proptest::num::u32::ANY, 0..300).prop_map(Case::draw);
    let start = Instant::now();
    let mut counts: BTreeMap<&str, u32> = BTreeMap::new();
    let mut ran = 0;
    // Runs of at most 25 cases, so that a time budget ends the test between runs (each run
    // draws from a fresh seed, and replays the saved failures first).
    while ran < cases && budget.is_none_or(|b| start.elapsed() < b) {
        let chunk = (cases - ran).min(25);
        let config = Config {
            cases: chunk,
            failure_persistence: Some(Box::new(FileFailurePersistence::Direct(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/proptest-regressions/evolution_property.txt"
            )))),
            // Each shrinking step writes a table; bound the search, not the first failure.
            max_shrink_time: 600_000,
            max_shrink_iters: 1_000,
            ..Config::default()
        };
        let outcomes = RefCell::new(Vec::new());
        // A failing case panics once per shrinking step; proptest keeps the message and
        // reports the last one, so the hook stays quiet meanwhile.
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let result = TestRunner::new(config).run(&strategy, |case| {
            outcomes.borrow_mut().push(runtime.block_on(run_case(&case)));
            Ok::<(), TestCaseError>(())
        });
        std::panic::set_hook(hook);
        if let Err(e) = result {
            panic!("{e}");
        }
        // The saved failures replayed first come on top of the run's own cases.
        for outcome in outcomes.borrow().iter().rev().take(chunk as usize) {
            match outcome {
                Outcome::Written(tags) => {
                    for tag in tags.iter().chain(&["written"]) {
                        *counts.entry(tag).or_default() += 1;
                    }
                }
                Outcome::Refused => *counts.entry("refused").or_default() += 1,
            }
        }
        ran += chunk;
    }
    let written = counts.remove("written").unwrap_or(0);
    let refused = counts.remove("refused").unwrap_or(0);
    let tags: Vec<String> = counts.iter().map(|(tag, n)| format!("{n} {tag}")).collect();
    println!(
        "evolution property: {ran} cases ({written} written and read back: {}; {refused} refused) in {:.1} s",
        tags.join(", "),
        start.elapsed().as_secs_f64()
    );
}
