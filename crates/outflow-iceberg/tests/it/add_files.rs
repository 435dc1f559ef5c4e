//! AddFiles against a real SQLite catalog (and the REST fixture), with Parquet files written
//! in the tests by pyarrow (as other tools write them: no field ids, every column declared
//! optional) and by parquet-rs. Every table is read back by PyIceberg and Java Iceberg.
//!
//! Java Iceberg's generic Parquet reader (`IcebergGenerics`, what the Java reader uses) gets
//! files without field ids wrong in two ways, whoever registered them (PyIceberg's own
//! `add_files` included): struct columns read as null, or fail once a struct gained a field
//! (apache/iceberg#11214, unfixed in 1.12), and columns in another order than the table's are
//! read by position. So for such files the two readers are compared on every column but the
//! struct ones, and where Java cannot read at all PyIceberg alone checks the values.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::common::*;
use arrow_array::{Array, ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field};
use outflow_core::{
    CreateDisposition, ErrorKind, IncompatibleSchemaHandling, SchemaEvolutionConfig,
    SchemaEvolutionOption as Opt, UnverifiableFileHandling,
};
use outflow_iceberg::add_files::{
    AddFiles, AddFilesOptions, AddFilesOptionsBuilder, AddFilesResult, BatchWindow, FileErrorKind, SkipReason,
};
use outflow_iceberg::schema::parse_table_ident;
use outflow_iceberg::{CatalogConfig, IcebergCatalog};
use outflow_testkit::iceberg::TestCatalog;
use outflow_testkit::unique_name;
use parquet::arrow::ArrowWriter;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use serde_json::{Value, json};

/// A catalog in a temporary directory and a place for the files to register.
struct Lake {
    fx: SqlFixture,
    files: PathBuf,
}

const PREAMBLE: &str = r#"
import sys, os, uuid, decimal as D, datetime as dt
import pyarrow as pa, pyarrow.parquet as pq
ROOT = sys.argv[1]
def out(rel):
    p = os.path.join(ROOT, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    return p
"#;

impl Lake {
    fn new() -> Lake {
        let fx = sql_catalog();
        let files = fx.dir.path().join("files");
        std::fs::create_dir_all(&files).unwrap();
        Lake { fx, files }
    }

    fn rest() -> (Lake, CatalogConfig, TestCatalog) {
        let (config, readers) = rest_catalog();
        (Lake::new(), config, readers)
    }

    /// The absolute path of `rel` under the files directory.
    fn path(&self, rel: &str) -> String {
        let p = self.files.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        p.display().to_string()
    }

    /// Runs pyarrow code; `out("x.parquet")` is a path under the files directory.
    fn pyarrow(&self, code: &str) {
        outflow_testkit::run(
            std::process::Command::new(outflow_testkit::python())
                .arg("-c")
                .arg(format!("{PREAMBLE}\n{code}"))
                .arg(&self.files),
        );
    }

    /// Writes `batch` with parquet-rs (statistics per chunk unless `stats` is false).
    fn parquet_rs(&self, rel: &str, batch: &RecordBatch, stats: bool) -> String {
        let path = self.path(rel);
        let level = if stats {
            EnabledStatistics::Chunk
        } else {
            EnabledStatistics::None
        };
        let props = WriterProperties::builder().set_statistics_enabled(level).build();
        let mut writer =
            ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), batch.schema(), Some(props)).unwrap();
        writer.write(batch).unwrap();
        writer.close().unwrap();
        path
    }

    fn options(&self, table: &str) -> AddFilesOptionsBuilder {
        AddFilesOptions::builder()
            .catalog(self.fx.config.clone())
            .table(table)
    }

    fn readers(&self) -> &TestCatalog {
        &self.fx.readers
    }

    /// Reads with both readers and returns what they agree on.
    fn read(&self, table: &str) -> Value {
        self.fx.readers.read_both(table)
    }

    /// What PyIceberg knows about the table's data files: counts, partition and bounds
    /// decoded with its own conversions, and the rows a filtered scan returns.
    fn pyiceberg(&self, table: &str, filter: Option<&str>) -> Value {
        let TestCatalog::Sql { name, db, warehouse } = self.readers() else {
            unreachable!()
        };
        let code = r#"
import sys, json
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.conversions import from_bytes
name, db, wh, table, flt = sys.argv[1:6]
t = SqlCatalog(name, uri=f"sqlite:///{db}", warehouse=f"file://{wh}").load_table(table)
schema = t.schema()
def col(i): return schema.find_column_name(i)
def val(i, b):
    v = from_bytes(schema.find_type(i), b)
    return v.hex() if isinstance(v, (bytes, bytearray)) else str(v)
files = []
for task in t.scan().plan_files():
    f = task.file
    files.append({
        "path": f.file_path, "records": f.record_count, "partition": [str(v) for v in f.partition],
        "spec_id": f.spec_id, "split_offsets": f.split_offsets,
        "values": {col(k): v for k, v in (f.value_counts or {}).items()},
        "nulls": {col(k): v for k, v in (f.null_value_counts or {}).items()},
        "sizes": {col(k): v for k, v in (f.column_sizes or {}).items()},
        "lower": {col(k): val(k, v) for k, v in (f.lower_bounds or {}).items()},
        "upper": {col(k): val(k, v) for k, v in (f.upper_bounds or {}).items()},
    })
files.sort(key=lambda f: f["path"])
out = {"files": files}
snap = t.current_snapshot()
out["manifests"] = 0 if snap is None else len(snap.manifests(t.io))
if flt:
    out["filtered_rows"] = t.scan(row_filter=flt).to_arrow().num_rows
print(json.dumps(out))
"#;
        outflow_testkit::run_json(
            std::process::Command::new(outflow_testkit::python())
                .arg("-c")
                .arg(code)
                .arg(name)
                .arg(db)
                .arg(warehouse)
                .arg(table)
                .arg(filter.unwrap_or("")),
        )
    }
}

/// Reads with both readers, compares everything except the values of `structs` columns
/// (see the module docs), and returns PyIceberg's reading.
fn read_except(readers: &TestCatalog, table: &str, structs: &[&str]) -> Value {
    use outflow_testkit::iceberg::Reader;
    let py = readers.read(Reader::PyIceberg, table);
    let java = readers.read(Reader::Java, table);
    for key in ["schema", "partition_spec", "properties", "snapshots", "row_count"] {
        assert_eq!(py[key], java[key], "readers disagree about {key} of {table}");
    }
    let strip = |read: &Value| {
        sorted(
            outflow_testkit::iceberg::rows(read)
                .iter()
                .map(|row| {
                    let mut row = row.clone();
                    for s in structs {
                        row.as_object_mut().unwrap().remove(*s);
                    }
                    row
                })
                .collect(),
        )
    };
    assert_eq!(
        strip(&py),
        strip(&java),
        "readers disagree about the rows of {table}"
    );
    py
}

fn evolution(options: &[Opt]) -> outflow_core::evolution::SchemaEvolutionConfigBuilder {
    SchemaEvolutionConfig::builder().allow_all(options.iter().copied())
}

fn routed(options: &[Opt]) -> SchemaEvolutionConfig {
    evolution(options)
        .on_incompatible(IncompatibleSchemaHandling::RouteToErrors)
        .build()
        .unwrap()
}

async fn add(options: AddFilesOptions, files: &[String]) -> AddFilesResult {
    AddFiles::connect(options)
        .await
        .unwrap()
        .run(files)
        .await
        .unwrap()
}

fn table_name() -> String {
    format!("{}.t", unique_name("af"))
}

fn types(read: &Value) -> Vec<(String, Value, bool)> {
    field_types(read)
}

fn t(s: &str) -> Value {
    Value::String(s.to_string())
}

/// The error kinds reported per file name (last path segment).
fn errors(result: &AddFilesResult) -> Vec<(String, FileErrorKind)> {
    let mut out: Vec<(String, FileErrorKind)> = result
        .errors
        .iter()
        .map(|e| (e.path.rsplit('/').next().unwrap().to_string(), e.kind))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn snapshots(read: &Value) -> usize {
    read["snapshots"].as_array().unwrap().len()
}

fn int64(name: &str, values: Vec<Option<i64>>, nullable: bool) -> (Field, ArrayRef) {
    (
        Field::new(name, DataType::Int64, nullable),
        Arc::new(Int64Array::from(values)),
    )
}

fn utf8(name: &str, values: Vec<Option<&str>>, nullable: bool) -> (Field, ArrayRef) {
    (
        Field::new(name, DataType::Utf8, nullable),
        Arc::new(StringArray::from(values)),
    )
}

// ------------------------------------------------------------------------------- types

const ALL_TYPES: &str = r#"
n = None
t = pa.table({
  "id": pa.array([1, 2, 3], pa.int64()),
  "b": pa.array([True, n, False]),
  "i8": pa.array([-8, 8, n], pa.int8()),
  "u16": pa.array([0, 65535, n], pa.uint16()),
  "i32": pa.array([-2147483648, 2147483647, n], pa.int32()),
  "f32": pa.array([1.5, float("nan"), n], pa.float32()),
  "f64": pa.array([-0.25, 1e300, n], pa.float64()),
  "d9": pa.array([D.Decimal("-123.45"), D.Decimal("999.99"), n], pa.decimal128(9, 2)),
  "d18": pa.array([D.Decimal("1.000"), D.Decimal("-99999999999999.999"), n], pa.decimal128(18, 3)),
  "d30": pa.array([D.Decimal("123456789012345678901234.567890"), D.Decimal("-1"), n], pa.decimal128(30, 6)),
  "day": pa.array([dt.date(2024, 2, 29), dt.date(1900, 1, 1), n], pa.date32()),
  "t_us": pa.array([dt.time(23, 59, 59, 999999), dt.time(0, 0), n], pa.time64("us")),
  "ts_s": pa.array([dt.datetime(2024, 1, 1), n, dt.datetime(1999, 12, 31, 23, 59, 59)], pa.timestamp("s")),
  "ts_ms": pa.array([dt.datetime(2024, 1, 1, 0, 0, 0, 1000), n, dt.datetime(1970, 1, 1)], pa.timestamp("ms", tz="UTC")),
  "ts_us": pa.array([dt.datetime(2024, 1, 1, 0, 0, 0, 1), n, dt.datetime(1970, 1, 1)], pa.timestamp("us", tz="UTC")),
  "ts_ns": pa.array([1704067200000000007, n, 0], pa.timestamp("ns")),
  "s": pa.array(["héllo", "", n]),
  "long_s": pa.array(["a" * 40, "b" * 20 + "\U0010ffff", n]),
  "ls": pa.array(["x", "y", n], pa.large_string()),
  "dict": pa.array(["p", "q", "p"]).dictionary_encode(),
  "bin": pa.array([b"\x00\xff", b"", n], pa.binary()),
  "long_bin": pa.array([b"\x01" * 30, b"\x02" * 10 + b"\xff" * 30, n], pa.binary()),
  "fix": pa.array([b"abcd", b"\x00\x00\x00\x00", n], pa.binary(4)),
  "u": pa.array([uuid.UUID(int=1).bytes, n, uuid.UUID(int=2**127).bytes], pa.uuid()),
  "st": pa.array([{"x": 1, "y": "a"}, {"x": n, "y": n}, n], pa.struct([("x", pa.int32()), ("y", pa.string())])),
  "l": pa.array([[1, 2], [], n], pa.list_(pa.int64())),
  "ll": pa.array([[{"k": "a"}], [n], n], pa.list_(pa.struct([("k", pa.string())]))),
  "m": pa.array([[("a", 1)], [], n], pa.map_(pa.string(), pa.int32())),
})
pq.write_table(t, out("all.parquet"), row_group_size=2)
"#;

#[tokio::test]
async fn every_type_pyarrow_writes_registers_with_its_metrics() {
    let lake = Lake::new();
    let table = table_name();
    lake.pyarrow(ALL_TYPES);
    let file = lake.path("all.parquet");
    let result = add(lake.options(&table).build().unwrap(), std::slice::from_ref(&file)).await;
    assert!(result.table_created && result.is_clean(), "{}", result.render());
    assert_eq!(
        (result.files_added, result.records_added, result.snapshots.len()),
        (1, 3, 1)
    );

    let read = read_except(lake.readers(), &table, &["st", "ll"]);
    let expected_types = [
        ("id", "long"),
        ("b", "boolean"),
        ("i8", "int"),
        ("u16", "int"),
        ("i32", "int"),
        ("f32", "float"),
        ("f64", "double"),
        ("d9", "decimal(9,2)"),
        ("d18", "decimal(18,3)"),
        ("d30", "decimal(30,6)"),
        ("day", "date"),
        ("t_us", "time"),
        ("ts_s", "timestamp"),
        ("ts_ms", "timestamptz"),
        ("ts_us", "timestamptz"),
        ("ts_ns", "timestamp"),
        ("s", "string"),
        ("long_s", "string"),
        ("ls", "string"),
        ("dict", "string"),
        ("bin", "binary"),
        ("long_bin", "binary"),
        ("fix", "fixed[4]"),
        ("u", "uuid"),
    ];
    let got = types(&read);
    for (i, (name, ty)) in expected_types.iter().enumerate() {
        // pyarrow declares every column optional: the table keeps that.
        assert_eq!(got[i], (name.to_string(), t(ty), false), "column {i}");
    }
    assert_eq!(
        read["properties"]["schema.name-mapping.default"]
            .as_str()
            .map(|s| s.contains("\"element\"")),
        Some(true)
    );
    let rows = read_rows(&read);
    let row = |id: i64| rows.iter().find(|r| r["id"] == json!(id)).unwrap();
    let first = row(1);
    assert_eq!(first["d30"], json!("123456789012345678901234.567890"));
    assert_eq!(first["ts_ms"], json!("2024-01-01T00:00:00.001000+00:00"));
    assert_eq!(first["ts_ns"], json!("2024-01-01T00:00:00.000000"));
    assert_eq!(first["u"], json!("00000000-0000-0000-0000-000000000001"));
    assert_eq!(first["st"], json!({"x": 1, "y": "a"}));
    assert_eq!(first["ll"], json!([{"k": "a"}]));
    assert_eq!(first["m"], json!([{"key": "a", "value": 1}]));
    assert_eq!(row(2)["f32"], json!("NaN"));
    assert_eq!(row(2)["st"], json!({"x": null, "y": null}));
    assert_eq!(row(3)["st"], Value::Null);

    // Metrics, decoded by PyIceberg's own conversions.
    let meta = lake.pyiceberg(&table, None);
    let f = &meta["files"][0];
    assert_eq!(f["records"], json!(3));
    assert_eq!(f["split_offsets"].as_array().unwrap().len(), 2, "{f}");
    let lower = |c: &str| f["lower"][c].as_str().map(str::to_string);
    let upper = |c: &str| f["upper"][c].as_str().map(str::to_string);
    assert_eq!((lower("id"), upper("id")), (Some("1".into()), Some("3".into())));
    assert_eq!(
        (lower("i8"), upper("u16")),
        (Some("-8".into()), Some("65535".into()))
    );
    // NaN is no bound: the float's bounds are its numbers.
    assert_eq!(
        (lower("f32"), upper("f32")),
        (Some("1.5".into()), Some("1.5".into()))
    );
    assert_eq!(
        (lower("d9"), upper("d9")),
        (Some("-123.45".into()), Some("999.99".into()))
    );
    assert_eq!(lower("d18").as_deref(), Some("-99999999999999.999"));
    assert_eq!(upper("d30").as_deref(), Some("123456789012345678901234.567890"));
    assert_eq!(
        (lower("day"), upper("day")),
        (Some("-25567".into()), Some("19782".into()))
    );
    assert_eq!(upper("ts_ms").as_deref(), Some("1704067200001000"));
    // Nanoseconds round outwards to microseconds.
    assert_eq!(upper("ts_ns").as_deref(), Some("1704067200000001"));
    assert_eq!(lower("ts_s").as_deref(), Some("946684799000000"));
    assert_eq!(lower("long_s").as_deref(), Some("aaaaaaaaaaaaaaaa"));
    assert_eq!(upper("long_s").as_deref(), Some("bbbbbbbbbbbbbbbc"));
    assert_eq!(lower("long_bin").as_deref(), Some("01".repeat(16).as_str()));
    // 16 bytes, trailing 0xff dropped, the last byte left incremented.
    assert_eq!(upper("long_bin"), Some(format!("{}03", "02".repeat(9))));
    assert_eq!(lower("u").as_deref(), Some("00000000000000000000000000000001"));
    assert_eq!(upper("u").as_deref(), Some("80000000000000000000000000000000"));
    assert_eq!(lower("st.x").as_deref(), Some("1"));
    // Like Java Iceberg and PyIceberg: counts but no bounds under lists and maps.
    assert_eq!((lower("l.element"), lower("m.key")), (None, None));
    assert_eq!(f["values"]["l.element"], json!(4));
    assert_eq!(
        (f["nulls"]["id"].clone(), f["nulls"]["s"].clone()),
        (json!(0), json!(1))
    );
    assert_eq!(f["values"]["id"], json!(3));
}

/// A parquet-rs batch: a required id, a name with a null, a decimal, a millisecond
/// timestamp, a list (parquet-rs names its element `item`) and a map.
fn parquet_rs_batch(ids: std::ops::Range<i64>) -> RecordBatch {
    use arrow_array::builder::{Int32Builder, MapBuilder, StringBuilder};
    use arrow_array::types::Int64Type;
    use arrow_array::{Decimal128Array, ListArray, TimestampMillisecondArray};
    let n = (ids.end - ids.start) as usize;
    let mut attrs = MapBuilder::new(None, StringBuilder::new(), Int32Builder::new());
    for i in ids.clone() {
        attrs.keys().append_value(format!("k{i}"));
        attrs.values().append_value(i as i32);
        attrs.append(true).unwrap();
    }
    let attrs = attrs.finish();
    let tags =
        ListArray::from_iter_primitive::<Int64Type, _, _>(ids.clone().map(|i| Some(vec![Some(i), None])));
    batch(vec![
        (
            Field::new("id", DataType::Int64, false),
            Arc::new(Int64Array::from_iter_values(ids.clone())) as ArrayRef,
        ),
        utf8(
            "name",
            (0..n).map(|i| if i == 0 { None } else { Some("n") }).collect(),
            true,
        ),
        (
            Field::new("amount", DataType::Decimal128(10, 2), true),
            Arc::new(
                Decimal128Array::from_iter_values(ids.clone().map(|i| i as i128 * 101))
                    .with_precision_and_scale(10, 2)
                    .unwrap(),
            ),
        ),
        (
            Field::new(
                "ts",
                DataType::Timestamp(arrow_schema::TimeUnit::Millisecond, Some("UTC".into())),
                true,
            ),
            Arc::new(
                TimestampMillisecondArray::from_iter_values(ids.clone().map(|i| i * 1000))
                    .with_timezone("UTC"),
            ),
        ),
        (Field::new("tags", tags.data_type().clone(), true), Arc::new(tags)),
        (
            Field::new("attrs", attrs.data_type().clone(), true),
            Arc::new(attrs),
        ),
    ])
}

/// `schema` with every field id moved by `by`.
fn shifted_ids(schema: &arrow_schema::Schema, by: i32) -> arrow_schema::SchemaRef {
    fn field(f: &Field, by: i32) -> Field {
        let mut md = f.metadata().clone();
        if let Some(id) = md.get("PARQUET:field_id").and_then(|v| v.parse::<i32>().ok()) {
            md.insert("PARQUET:field_id".into(), (id + by).to_string());
        }
        let ty = match f.data_type() {
            DataType::List(e) => DataType::List(Arc::new(field(e, by))),
            DataType::Map(e, sorted) => DataType::Map(Arc::new(field(e, by)), *sorted),
            DataType::Struct(fs) => DataType::Struct(fs.iter().map(|c| field(c, by)).collect()),
            other => other.clone(),
        };
        Field::new(f.name(), ty, f.is_nullable()).with_metadata(md)
    }
    Arc::new(arrow_schema::Schema::new(
        schema.fields().iter().map(|f| field(f, by)).collect::<Vec<_>>(),
    ))
}

#[tokio::test]
async fn parquet_rs_files_register_by_name_or_by_matching_field_ids() {
    let lake = Lake::new();
    let table = table_name();
    let plain = lake.parquet_rs("plain.parquet", &parquet_rs_batch(0..3), true);
    let result = add(
        lake.options(&table).build().unwrap(),
        std::slice::from_ref(&plain),
    )
    .await;
    assert!(result.table_created && result.is_clean(), "{}", result.render());

    // Files with the table's own field ids, with other ids, and with ids on some columns.
    let catalog = IcebergCatalog::connect(&lake.fx.config).await.unwrap();
    let ident = parse_table_ident(&table).unwrap();
    let iceberg_table = catalog.require_table(&ident).await.unwrap();
    let arrow = iceberg::arrow::schema_to_arrow_schema(iceberg_table.metadata().current_schema()).unwrap();
    let same =
        outflow_core::schema::conform_batch(&parquet_rs_batch(3..5), &Arc::new(arrow.clone())).unwrap();
    let same = lake.parquet_rs("same_ids.parquet", &same, true);
    let other =
        outflow_core::schema::conform_batch(&parquet_rs_batch(5..6), &shifted_ids(&arrow, 100)).unwrap();
    let other = lake.parquet_rs("other_ids.parquet", &other, true);
    let partial_schema = {
        let mut fields: Vec<Field> = arrow.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields[1] = fields[1].clone().with_metadata(Default::default());
        Arc::new(arrow_schema::Schema::new(fields))
    };
    let partial = outflow_core::schema::conform_batch(&parquet_rs_batch(6..7), &partial_schema).unwrap();
    let partial = lake.parquet_rs("partial_ids.parquet", &partial, true);
    let result = add(lake.options(&table).build().unwrap(), &[same, other, partial]).await;
    assert_eq!(result.files_added, 1, "{}", result.render());
    assert_eq!(
        errors(&result),
        vec![
            ("other_ids.parquet".to_string(), FileErrorKind::FieldIds),
            ("partial_ids.parquet".to_string(), FileErrorKind::FieldIds)
        ]
    );

    let read = lake.read(&table);
    assert_eq!(
        types(&read)[..4],
        [
            ("id".into(), t("long"), true),
            ("name".into(), t("string"), false),
            ("amount".into(), t("decimal(10,2)"), false),
            ("ts".into(), t("timestamptz"), false),
        ]
    );
    let rows = read_rows(&read);
    assert_eq!(rows.len(), 5);
    let row = |id: i64| rows.iter().find(|r| r["id"] == json!(id)).unwrap().clone();
    assert_eq!(
        row(1),
        json!({"id": 1, "name": "n", "amount": "1.01", "ts": "1970-01-01T00:00:01.000000+00:00",
               "tags": [1, null], "attrs": [{"key": "k1", "value": 1}]})
    );
    assert_eq!(row(3)["name"], Value::Null);
    assert_eq!(row(4)["tags"], json!([4, null]));
    let meta = lake.pyiceberg(&table, Some("id >= 3"));
    assert_eq!(meta["filtered_rows"], json!(2));
    let plain_file = meta["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"].as_str().unwrap().ends_with("plain.parquet"))
        .unwrap();
    assert_eq!(plain_file["lower"]["amount"], json!("0.00"));
    assert_eq!(plain_file["upper"]["ts"], json!("2000000"));
    assert_eq!(plain_file["nulls"]["name"], json!(1));
}

/// Dots are legal in Iceberg and Parquet names (pandas' `json_normalize` writes `user.id`):
/// columns named so register by name (the table's name mapping) and by field id, at the
/// top level and nested.
#[tokio::test]
async fn columns_with_dots_in_their_names_register_by_name_and_by_field_id() {
    use arrow_array::StructArray;
    let lake = Lake::new();
    let dotted = |ids: std::ops::Range<i64>| {
        let inner = Arc::new(Field::new("lat.deg", DataType::Int64, true));
        let geo = StructArray::from(vec![(
            inner,
            Arc::new(Int64Array::from_iter_values(ids.clone().map(|i| i * 10))) as ArrayRef,
        )]);
        batch(vec![
            int64("id", ids.clone().map(Some).collect(), false),
            int64("user.id", ids.clone().map(|i| Some(i + 100)).collect(), true),
            (Field::new("geo", geo.data_type().clone(), true), Arc::new(geo)),
        ])
    };
    let rows = |ids: std::ops::Range<i64>| -> Vec<Value> {
        ids.map(|i| json!({"id": i, "user.id": i + 100, "geo": {"lat.deg": i * 10}}))
            .collect()
    };

    // By name. Java reads the struct of a file without ids as null (module docs), so the
    // readers are compared without it and PyIceberg's rows are checked whole.
    let by_name = table_name();
    let file = lake.parquet_rs("by_name.parquet", &dotted(0..2), true);
    let result = add(lake.options(&by_name).build().unwrap(), &[file]).await;
    assert!(result.table_created && result.is_clean(), "{}", result.render());
    let read = read_except(lake.readers(), &by_name, &["geo"]);
    assert_eq!(types(&read)[1], ("user.id".into(), t("long"), false));
    assert_eq!(read_rows(&read), rows(0..2));

    // By field id: the sink writes a table with both (its files carry ids), and a file
    // with the table's ids registers.
    let by_id = table_name();
    let options = options(&lake.fx.config, &by_id).build().unwrap();
    write_all(options, vec![dotted(0..2)]).await.unwrap();
    let catalog = IcebergCatalog::connect(&lake.fx.config).await.unwrap();
    let ident = parse_table_ident(&by_id).unwrap();
    let iceberg_table = catalog.require_table(&ident).await.unwrap();
    let arrow = iceberg::arrow::schema_to_arrow_schema(iceberg_table.metadata().current_schema()).unwrap();
    let with_ids = outflow_core::schema::conform_batch(&dotted(2..3), &Arc::new(arrow)).unwrap();
    let with_ids = lake.parquet_rs("with_ids.parquet", &with_ids, true);
    let result = add(lake.options(&by_id).build().unwrap(), &[with_ids]).await;
    assert!(
        result.is_clean() && result.files_added == 1,
        "{}",
        result.render()
    );
    assert_eq!(read_rows(&lake.read(&by_id)), rows(0..3));
    let meta = lake.pyiceberg(&by_id, Some("id >= 1"));
    assert_eq!(meta["filtered_rows"], json!(2));
}

// ------------------------------------------------------------------------------- evolution rules

#[tokio::test]
async fn addition_adds_top_level_and_nested_columns_and_older_rows_read_null() {
    let lake = Lake::new();
    let table = table_name();
    lake.pyarrow(
        r#"
pq.write_table(pa.table({
  "id": pa.array([1], pa.int64()),
  "s": pa.array([{"p": 1}], pa.struct([("p", pa.int32())])),
  "evs": pa.array([[{"a": "x"}]], pa.list_(pa.struct([("a", pa.string())]))),
  "attrs": pa.array([[("k", {"x": 1.5})]], pa.map_(pa.string(), pa.struct([("x", pa.float64())]))),
}), out("old.parquet"))
pq.write_table(pa.table({
  "id": pa.array([2], pa.int64()),
  "extra": pa.array(["e"]),
  "s": pa.array([{"p": 2, "q": "new"}], pa.struct([("p", pa.int32()), ("q", pa.string())])),
  "evs": pa.array([[{"a": "y", "b": 7}]], pa.list_(pa.struct([("a", pa.string()), ("b", pa.int64())]))),
  "attrs": pa.array([[("k", {"x": 2.5, "y": True})]], pa.map_(pa.string(), pa.struct([("x", pa.float64()), ("y", pa.bool_())]))),
}), out("new.parquet"))
"#,
    );
    let options = || {
        lake.options(&table)
            .schema_evolution(evolution(&[Opt::AllowFieldAddition]).build().unwrap())
            .build()
            .unwrap()
    };
    let first = add(options(), &[lake.path("old.parquet")]).await;
    assert!(first.table_created && first.is_clean(), "{}", first.render());
    let second = add(options(), &[lake.path("new.parquet")]).await;
    assert!(second.is_clean(), "{}", second.render());
    assert_eq!(second.schema_commits, 1);
    let added: Vec<&str> = second
        .changes
        .iter()
        .filter(|c| c.applied)
        .map(|c| c.path.as_str())
        .collect();
    assert_eq!(added, ["attrs.value.y", "evs.element.b", "extra", "s.q"]);
    assert!(
        second
            .changes
            .iter()
            .all(|c| c.files == [lake.path("new.parquet")])
    );

    // Java's generic reader fails on these evolved structs (see the module docs).
    let read = lake
        .readers()
        .read(outflow_testkit::iceberg::Reader::PyIceberg, &table);
    let fields = outflow_testkit::iceberg::fields(&read);
    assert_eq!(fields[4]["name"], json!("extra"));
    assert_eq!(fields[4]["required"], json!(false));
    assert_eq!(fields[1]["type"]["fields"][1]["name"], json!("q"));
    assert_eq!(fields[2]["type"]["element"]["fields"][1]["name"], json!("b"));
    assert_eq!(fields[3]["type"]["value"]["fields"][1]["name"], json!("y"));
    let mapping = read["properties"]["schema.name-mapping.default"]
        .as_str()
        .unwrap();
    assert!(
        mapping.contains("\"extra\"") && mapping.contains("\"q\""),
        "{mapping}"
    );
    assert_eq!(
        read_rows(&read),
        vec![
            json!({"id": 1, "extra": null, "s": {"p": 1, "q": null}, "evs": [{"a": "x", "b": null}],
                   "attrs": [{"key": "k", "value": {"x": 1.5, "y": null}}]}),
            json!({"id": 2, "extra": "e", "s": {"p": 2, "q": "new"}, "evs": [{"a": "y", "b": 7}],
                   "attrs": [{"key": "k", "value": {"x": 2.5, "y": true}}]}),
        ]
    );
}

/// A table whose `id` and `name` are required (parquet-rs declares them so).
async fn required_table(lake: &Lake, table: &str) {
    let rows = batch(vec![
        int64("id", vec![Some(1), Some(2)], false),
        utf8("name", vec![Some("a"), Some("b")], false),
    ]);
    let file = lake.parquet_rs("base.parquet", &rows, true);
    let result = add(lake.options(table).build().unwrap(), &[file]).await;
    assert!(result.table_created && result.is_clean(), "{}", result.render());
}

#[tokio::test]
async fn relaxation_follows_statistics_not_declarations() {
    let lake = Lake::new();
    let table = table_name();
    required_table(&lake, &table).await;
    lake.pyarrow(
        r#"
pq.write_table(pa.table({"id": pa.array([3], pa.int64()), "name": pa.array(["c"])}), out("no_nulls.parquet"))
pq.write_table(pa.table({"id": pa.array([4, 5], pa.int64()), "name": pa.array(["d", None])}), out("null_name.parquet"))
pq.write_table(pa.table({"id": pa.array([6], pa.int64())}), out("no_name.parquet"))
"#,
    );
    // Without relaxation: declared-optional columns with zero nulls fit; nulls do not.
    let strict = lake
        .options(&table)
        .schema_evolution(routed(&[Opt::AllowTypePromotion]))
        .build()
        .unwrap();
    let files = ["no_nulls.parquet", "null_name.parquet", "no_name.parquet"].map(|f| lake.path(f));
    let result = add(strict, &files).await;
    assert_eq!(result.files_added, 1, "{}", result.render());
    assert_eq!(
        errors(&result),
        vec![
            ("no_name.parquet".into(), FileErrorKind::Incompatible),
            ("null_name.parquet".into(), FileErrorKind::Incompatible)
        ]
    );
    assert!(
        result
            .errors
            .iter()
            .any(|e| e.reason.contains("relaxation is not allowed")),
        "{:?}",
        result.errors
    );
    let read = lake.read(&table);
    assert_eq!(
        types(&read),
        [("id".into(), t("long"), true), ("name".into(), t("string"), true)]
    );

    // With it: the name becomes optional, the id (no nulls anywhere) stays required.
    let relaxing = lake
        .options(&table)
        .schema_evolution(evolution(&[Opt::AllowFieldRelaxation]).build().unwrap())
        .build()
        .unwrap();
    let result = add(relaxing, &files).await;
    assert_eq!(result.files_added, 2, "{}", result.render());
    assert_eq!(result.skipped.len(), 1);
    let relaxed: Vec<_> = result
        .changes
        .iter()
        .map(|c| (c.path.as_str(), c.kind.to_string(), c.files.len()))
        .collect();
    assert_eq!(relaxed, [("name", "relaxation".to_string(), 2)]);
    let read = lake.read(&table);
    assert_eq!(
        types(&read),
        [
            ("id".into(), t("long"), true),
            ("name".into(), t("string"), false)
        ]
    );
    let names: Vec<Value> = read_rows(&read).iter().map(|r| r["name"].clone()).collect();
    assert_eq!(
        names,
        [
            json!("a"),
            json!("b"),
            json!("c"),
            json!("d"),
            Value::Null,
            Value::Null
        ]
    );
}

#[tokio::test]
async fn promotion_widens_types_and_older_files_read_widened() {
    let lake = Lake::new();
    let table = table_name();
    lake.pyarrow(
        r#"
pq.write_table(pa.table({"n": pa.array([1], pa.int32()), "f": pa.array([0.5], pa.float32()),
                         "d": pa.array([D.Decimal("1.25")], pa.decimal128(9, 2))}), out("narrow.parquet"))
pq.write_table(pa.table({"n": pa.array([2**40], pa.int64()), "f": pa.array([1e300], pa.float64()),
                         "d": pa.array([D.Decimal("12345678901234.25")], pa.decimal128(18, 2))}), out("wide.parquet"))
pq.write_table(pa.table({"n": pa.array([3], pa.int64()), "f": pa.array([1.0], pa.float64()),
                         "d": pa.array([D.Decimal("1.250")], pa.decimal128(18, 3))}), out("scale.parquet"))
"#,
    );
    let first = add(
        lake.options(&table).build().unwrap(),
        &[lake.path("narrow.parquet")],
    )
    .await;
    assert!(first.is_clean(), "{}", first.render());
    let refused = add(
        lake.options(&table)
            .schema_evolution(routed(&[Opt::AllowFieldAddition]))
            .build()
            .unwrap(),
        &[lake.path("wide.parquet")],
    )
    .await;
    assert_eq!(
        errors(&refused),
        [("wide.parquet".into(), FileErrorKind::Incompatible)]
    );
    assert!(
        refused.errors[0].reason.contains("type promotion is not allowed"),
        "{:?}",
        refused.errors
    );

    let result = add(
        lake.options(&table)
            .schema_evolution(routed(&[Opt::AllowTypePromotion]))
            .build()
            .unwrap(),
        &[lake.path("wide.parquet"), lake.path("scale.parquet")],
    )
    .await;
    assert_eq!(result.files_added, 1, "{}", result.render());
    // Another scale is a conflict, whatever the options.
    assert_eq!(
        errors(&result),
        [("scale.parquet".into(), FileErrorKind::Incompatible)]
    );
    let conflict = result
        .changes
        .iter()
        .find(|c| c.path == "d" && !c.applied)
        .unwrap();
    // Conflicts name the table's type when the window started.
    assert_eq!(
        (conflict.from.as_deref(), conflict.to.as_deref()),
        (Some("decimal(9,2)"), Some("decimal(18,3)"))
    );
    let promoted: Vec<_> = result
        .changes
        .iter()
        .filter(|c| c.applied)
        .map(|c| (c.path.as_str(), c.from.clone().unwrap(), c.to.clone().unwrap()))
        .collect();
    assert_eq!(
        promoted,
        [
            ("d", "decimal(9,2)".to_string(), "decimal(18,2)".to_string()),
            ("f", "float".into(), "double".into()),
            ("n", "int".into(), "long".into())
        ]
    );
    let read = lake.read(&table);
    assert_eq!(
        types(&read),
        [
            ("n".into(), t("long"), false),
            ("f".into(), t("double"), false),
            ("d".into(), t("decimal(18,2)"), false)
        ]
    );
    assert_eq!(
        read_rows(&read),
        vec![
            json!({"n": 1, "f": 0.5, "d": "1.25"}),
            json!({"n": 1099511627776_i64, "f": 1e300, "d": "12345678901234.25"}),
        ]
    );
}

#[tokio::test]
async fn fail_commits_nothing_and_lists_every_incompatible_file_route_commits_the_rest() {
    let lake = Lake::new();
    let table = table_name();
    lake.pyarrow(
        r#"
pq.write_table(pa.table({"id": pa.array([1], pa.int64()), "name": pa.array(["a"])}), out("base.parquet"))
pq.write_table(pa.table({"id": pa.array([2], pa.int64()), "name": pa.array(["b"])}), out("good.parquet"))
pq.write_table(pa.table({"id": pa.array([3], pa.int64()), "name": pa.array([3], pa.int64())}), out("name_long.parquet"))
pq.write_table(pa.table({"id": pa.array(["4"]), "name": pa.array(["d"])}), out("id_string.parquet"))
pq.write_table(pa.table({"id": pa.array([5], pa.int64()), "name": pa.array(["e"]), "x": pa.array([1])}), out("extra.parquet"))
"#,
    );
    add(
        lake.options(&table).build().unwrap(),
        &[lake.path("base.parquet")],
    )
    .await;
    let before = lake.read(&table);
    let files = [
        "good.parquet",
        "name_long.parquet",
        "id_string.parquet",
        "extra.parquet",
    ]
    .map(|f| lake.path(f));

    let fail = lake
        .options(&table)
        .schema_evolution(evolution(&[Opt::AllowFieldAddition]).build().unwrap())
        .build()
        .unwrap();
    let result = add(fail, &files).await;
    assert!(result.rejected && !result.is_clean(), "{}", result.render());
    assert_eq!(
        errors(&result),
        [
            ("id_string.parquet".into(), FileErrorKind::Incompatible),
            ("name_long.parquet".into(), FileErrorKind::Incompatible)
        ]
    );
    assert!(
        result
            .errors
            .iter()
            .any(|e| e.reason.contains("id: the table has long, the input string")),
        "{:?}",
        result.errors
    );
    let not_processed: Vec<_> = result
        .skipped
        .iter()
        .filter(|s| s.reason == SkipReason::NotProcessed)
        .collect();
    assert_eq!(not_processed.len(), 2, "{:?}", result.skipped);
    assert!(result.snapshots.is_empty() && result.schema_commits == 0);
    let after = lake.read(&table);
    assert_eq!(after, before, "a rejected window must change nothing");
    assert!(result.render().contains("REJECTED"));

    let route = lake
        .options(&table)
        .schema_evolution(routed(&[Opt::AllowFieldAddition]))
        .build()
        .unwrap();
    let result = add(route, &files).await;
    assert!(!result.rejected && result.is_clean(), "{}", result.render());
    assert_eq!(
        (result.files_added, result.errors.len(), result.schema_commits),
        (2, 2, 1)
    );
    let read = lake.read(&table);
    assert_eq!(read_rows(&read).len(), 3);
    assert_eq!(types(&read)[2], ("x".into(), t("long"), false));
}

#[tokio::test]
async fn pinned_columns_are_never_relaxed_and_unproven_ones_are_unverifiable() {
    let lake = Lake::new();
    let table = table_name();
    lake.pyarrow(
        r#"
pq.write_table(pa.table({"id": pa.array([1], pa.int64()), "v": pa.array(["a"])}), out("ok.parquet"))
pq.write_table(pa.table({"id": pa.array([2, None], pa.int64()), "v": pa.array(["b", "c"])}), out("null_id.parquet"))
pq.write_table(pa.table({"v": pa.array(["d"])}), out("no_id.parquet"))
pq.write_table(pa.table({"id": pa.array([4], pa.int64()), "v": pa.array(["e"])}), out("no_stats.parquet"), write_statistics=False)
"#,
    );
    let files = [
        "ok.parquet",
        "null_id.parquet",
        "no_id.parquet",
        "no_stats.parquet",
    ]
    .map(|f| lake.path(f));
    let pinned = |accept: bool| {
        let mut config = evolution(&[Opt::AllowFieldAddition, Opt::AllowFieldRelaxation])
            .required_column("id")
            .on_incompatible(IncompatibleSchemaHandling::RouteToErrors);
        if accept {
            config = config.on_unverifiable(UnverifiableFileHandling::Accept);
        }
        lake.options(&table)
            .schema_evolution(config.build().unwrap())
            .build()
            .unwrap()
    };
    let result = add(pinned(false), &files).await;
    assert!(result.table_created, "{}", result.render());
    assert_eq!(result.files_added, 1, "{}", result.render());
    assert_eq!(
        errors(&result),
        [
            ("no_id.parquet".into(), FileErrorKind::Incompatible),
            ("no_stats.parquet".into(), FileErrorKind::Unverifiable),
            ("null_id.parquet".into(), FileErrorKind::Incompatible)
        ]
    );
    let read = lake.read(&table);
    // Created from the union: the pinned column required, the rest optional.
    assert_eq!(
        types(&read),
        [("id".into(), t("long"), true), ("v".into(), t("string"), false)]
    );

    let result = add(pinned(true), &files).await;
    assert_eq!(result.files_added, 1, "{}", result.render());
    assert_eq!(result.skipped[0].reason, SkipReason::AlreadyRegistered);
    assert_eq!(errors(&result).len(), 2);
    let read = lake.read(&table);
    assert_eq!(types(&read)[0], ("id".into(), t("long"), true));
    assert_eq!(
        read_rows(&read),
        vec![json!({"id": 1, "v": "a"}), json!({"id": 4, "v": "e"})]
    );
}

#[tokio::test]
async fn new_columns_take_the_widest_type_of_the_window() {
    let lake = Lake::new();
    let table = table_name();
    lake.pyarrow(
        r#"
pq.write_table(pa.table({"id": pa.array([0], pa.int64())}), out("base.parquet"))
pq.write_table(pa.table({"id": pa.array([1], pa.int64()), "score": pa.array([10], pa.int32())}), out("int.parquet"))
pq.write_table(pa.table({"id": pa.array([2], pa.int64()), "score": pa.array([2**40], pa.int64())}), out("long.parquet"))
pq.write_table(pa.table({"id": pa.array([3], pa.int64()), "score": pa.array(["x"])}), out("string.parquet"))
"#,
    );
    add(
        lake.options(&table).build().unwrap(),
        &[lake.path("base.parquet")],
    )
    .await;
    let files = ["int.parquet", "long.parquet", "string.parquet"].map(|f| lake.path(f));
    let result = add(
        lake.options(&table)
            .schema_evolution(routed(&[Opt::AllowFieldAddition]))
            .build()
            .unwrap(),
        &files,
    )
    .await;
    assert_eq!(result.files_added, 2, "{}", result.render());
    assert_eq!(
        errors(&result),
        [("string.parquet".into(), FileErrorKind::Incompatible)]
    );
    let read = lake.read(&table);
    assert_eq!(types(&read)[1], ("score".into(), t("long"), false));
    let scores: Vec<Value> = read_rows(&read).iter().map(|r| r["score"].clone()).collect();
    assert_eq!(scores, [Value::Null, json!(10), json!(1099511627776_i64)]);
}

#[tokio::test]
async fn without_addition_a_table_is_created_from_the_schema_most_files_share() {
    let lake = Lake::new();
    let table = table_name();
    lake.pyarrow(
        r#"
for i in range(2):
    pq.write_table(pa.table({"id": pa.array([i], pa.int64()), "name": pa.array(["n"])}), out(f"common{i}.parquet"))
pq.write_table(pa.table({"id": pa.array([9], pa.int64()), "name": pa.array(["x"]), "extra": pa.array([1.0])}), out("odd.parquet"))
"#,
    );
    let files = ["common0.parquet", "odd.parquet", "common1.parquet"].map(|f| lake.path(f));
    let result = add(
        lake.options(&table)
            .schema_evolution(routed(&[Opt::AllowFieldRelaxation]))
            .build()
            .unwrap(),
        &files,
    )
    .await;
    assert!(result.table_created, "{}", result.render());
    assert_eq!(result.files_added, 2);
    assert_eq!(
        errors(&result),
        [("odd.parquet".into(), FileErrorKind::Incompatible)]
    );
    assert!(result.errors[0].reason.contains("field addition is not allowed"));
    let read = lake.read(&table);
    assert_eq!(
        types(&read),
        [
            ("id".into(), t("long"), false),
            ("name".into(), t("string"), false)
        ]
    );
}

#[tokio::test]
async fn a_dry_run_reports_every_change_and_its_files_and_commits_nothing() {
    let lake = Lake::new();
    let table = table_name();
    lake.pyarrow(
        r#"
pq.write_table(pa.table({"id": pa.array([1], pa.int32())}), out("base.parquet"))
pq.write_table(pa.table({"id": pa.array([2], pa.int64()), "extra": pa.array(["x"])}), out("a.parquet"))
pq.write_table(pa.table({"id": pa.array([3], pa.int64()), "extra": pa.array(["y"])}), out("b.parquet"))
pq.write_table(pa.table({"id": pa.array(["bad"])}), out("c.parquet"))
"#,
    );
    let dry = |table: &str| {
        lake.options(table)
            .schema_evolution(
                evolution(&[Opt::AllowFieldAddition, Opt::AllowTypePromotion])
                    .on_incompatible(IncompatibleSchemaHandling::RouteToErrors)
                    .dry_run(true)
                    .build()
                    .unwrap(),
            )
            .build()
            .unwrap()
    };
    // A missing table is not created.
    let missing = table_name();
    let result = add(dry(&missing), &[lake.path("a.parquet")]).await;
    assert!(
        result.dry_run && result.table_created && result.snapshots.is_empty(),
        "{}",
        result.render()
    );
    assert_eq!(result.files_added, 1);
    let catalog = IcebergCatalog::connect(&lake.fx.config).await.unwrap();
    assert!(
        catalog
            .load_table(&parse_table_ident(&missing).unwrap())
            .await
            .unwrap()
            .is_none()
    );

    add(
        lake.options(&table).build().unwrap(),
        &[lake.path("base.parquet")],
    )
    .await;
    let before = lake.read(&table);
    let files = ["a.parquet", "b.parquet", "c.parquet"].map(|f| lake.path(f));
    let result = add(dry(&table), &files).await;
    assert!(result.dry_run && result.snapshots.is_empty() && result.schema_commits == 0);
    assert_eq!(result.files_added, 2, "{}", result.render());
    let change = |path: &str, kind: &str| {
        result
            .changes
            .iter()
            .find(|c| c.path == path && c.kind.to_string() == kind)
            .unwrap_or_else(|| panic!("no {kind} of {path} in {:?}", result.changes))
    };
    let promotion = change("id", "promotion");
    assert_eq!(
        (promotion.from.as_deref(), promotion.to.as_deref()),
        (Some("int"), Some("long"))
    );
    assert_eq!(promotion.files, [files[0].clone(), files[1].clone()]);
    assert_eq!(change("extra", "addition").files.len(), 2);
    let conflict = change("id", "conflict");
    assert_eq!(
        (conflict.applied, conflict.files.clone()),
        (false, vec![files[2].clone()])
    );
    assert_eq!(result.schemas.len(), 2);
    let text = result.render();
    assert!(
        text.contains("dry run") && text.contains("^ id: int -> long\n"),
        "{text}"
    );
    assert_eq!(lake.read(&table), before);
}

// ------------------------------------------------------------------------------- partitions

const EVENTS: &str = r#"
def events(rel, rows, **kw):
    ids, regions, days = zip(*rows)
    ts = [None if d is None else dt.datetime.fromisoformat(d).replace(tzinfo=dt.timezone.utc) for d in days]
    pq.write_table(pa.table({
        "id": pa.array(ids, pa.int64()),
        "region": pa.array(regions),
        "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
    }), out(rel), **kw)
"#;

#[tokio::test]
async fn partition_values_come_from_hive_paths_after_the_prefix() {
    let lake = Lake::new();
    let table = table_name();
    lake.pyarrow(&format!(
        r#"{EVENTS}
events("lake/region=eu/ts_day=2024-01-01/a.parquet", [(1, "eu", "2024-01-01T10:00:00"), (2, "eu", "2024-01-01T23:00:00")])
events("lake/region=us/ts_day=2024-01-02/b.parquet", [(3, "us", "2024-01-02T00:00:00")])
events("lake/region=us/ts_day=2024-01-03/wrong.parquet", [(4, "eu", "2024-01-03T00:00:00")])
events("lake/region=eu/ts_day=2024-01-04/no_stats.parquet", [(5, "eu", "2024-01-04T01:00:00")], write_statistics=False)
events("elsewhere/region=eu/ts_day=2024-01-05/c.parquet", [(6, "eu", "2024-01-05T00:00:00")])
"#
    ));
    let files = [
        "lake/region=eu/ts_day=2024-01-01/a.parquet",
        "lake/region=us/ts_day=2024-01-02/b.parquet",
        "lake/region=us/ts_day=2024-01-03/wrong.parquet",
        "lake/region=eu/ts_day=2024-01-04/no_stats.parquet",
        "elsewhere/region=eu/ts_day=2024-01-05/c.parquet",
    ]
    .map(|f| lake.path(f));
    let result = add(
        lake.options(&table)
            .table_options(partitioned(&["region", "day(ts)"]))
            .location_prefix(lake.path("lake"))
            .build()
            .unwrap(),
        &files,
    )
    .await;
    assert_eq!(result.files_added, 3, "{}", result.render());
    assert_eq!(
        errors(&result),
        [
            ("c.parquet".into(), FileErrorKind::Partition),
            ("wrong.parquet".into(), FileErrorKind::Partition)
        ]
    );
    let wrong = result
        .errors
        .iter()
        .find(|e| e.path.ends_with("wrong.parquet"))
        .unwrap();
    assert!(
        wrong.reason.contains("the path says region=us"),
        "{}",
        wrong.reason
    );
    assert!(
        result
            .errors
            .iter()
            .any(|e| e.reason.contains("not under the location prefix"))
    );

    let read = lake.read(&table);
    assert_eq!(read["partition_spec"][0]["name"], json!("region"));
    assert_eq!(read["partition_spec"][1]["transform"], json!("day"));
    assert_eq!(read_rows(&read).len(), 4);
    // Pruned scans find their rows: the partition values are right.
    let eu = lake.pyiceberg(&table, Some("region == 'eu'"));
    assert_eq!(eu["filtered_rows"], json!(3));
    let day = lake.pyiceberg(
        &table,
        Some("ts >= '2024-01-02T00:00:00+00:00' and ts < '2024-01-03T00:00:00+00:00'"),
    );
    assert_eq!(day["filtered_rows"], json!(1));
    let partitions: Vec<Value> = eu["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["partition"].clone())
        .collect();
    assert_eq!(partitions[0], json!(["eu", "19723"]));
}

#[tokio::test]
async fn partition_values_come_from_bounds_only_when_they_prove_one_value() {
    let lake = Lake::new();
    let table = table_name();
    lake.pyarrow(&format!(
        r#"{EVENTS}
events("one_day.parquet", [(1, "eu", "2024-03-01T01:00:00"), (1, "eu", "2024-03-01T22:00:00")])
events("other_day.parquet", [(2, "eu", "2024-03-02T00:00:00")])
events("two_days.parquet", [(1, "eu", "2024-03-01T01:00:00"), (1, "eu", "2024-03-02T01:00:00")])
events("two_ids.parquet", [(1, "eu", "2024-03-01T01:00:00"), (2, "eu", "2024-03-01T01:00:00")])
events("null_ts.parquet", [(1, "eu", None)])
events("some_null.parquet", [(1, "eu", None), (1, "eu", "2024-03-01T01:00:00")])
events("no_stats.parquet", [(1, "eu", "2024-03-01T01:00:00")], write_statistics=False)
"#
    ));
    let names = [
        "one_day.parquet",
        "other_day.parquet",
        "two_days.parquet",
        "two_ids.parquet",
        "null_ts.parquet",
        "some_null.parquet",
        "no_stats.parquet",
    ];
    let files = names.map(|f| lake.path(f));
    let result = add(
        lake.options(&table)
            .table_options(partitioned(&["day(ts)", "bucket(4, id)"]))
            .build()
            .unwrap(),
        &files,
    )
    .await;
    assert_eq!(result.files_added, 3, "{}", result.render());
    assert_eq!(
        errors(&result),
        [
            ("no_stats.parquet".into(), FileErrorKind::Partition),
            ("some_null.parquet".into(), FileErrorKind::Partition),
            ("two_days.parquet".into(), FileErrorKind::Partition),
            ("two_ids.parquet".into(), FileErrorKind::Partition)
        ]
    );
    let reason = |name: &str| {
        result
            .errors
            .iter()
            .find(|e| e.path.ends_with(name))
            .unwrap()
            .reason
            .clone()
    };
    assert!(
        reason("two_days.parquet").contains("spans partitions"),
        "{}",
        reason("two_days.parquet")
    );
    assert!(reason("two_ids.parquet").contains("spans partitions"));
    assert!(reason("some_null.parquet").contains("nulls and"));
    assert!(reason("no_stats.parquet").contains("no statistics"));

    let read = lake.read(&table);
    assert_eq!(read_rows(&read).len(), 4);
    let march1 = lake.pyiceberg(
        &table,
        Some("ts >= '2024-03-01T00:00:00+00:00' and ts < '2024-03-02T00:00:00+00:00'"),
    );
    assert_eq!(march1["filtered_rows"], json!(2));
    let by_path: Vec<(String, Value)> = march1["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"]
                    .as_str()
                    .unwrap()
                    .rsplit('/')
                    .next()
                    .unwrap()
                    .to_string(),
                f["partition"].clone(),
            )
        })
        .collect();
    // Day 19783 is 2024-03-01; a file of null timestamps is in the null partition.
    assert!(
        by_path.contains(&("one_day.parquet".to_string(), json!(["19783", "0"]))),
        "{by_path:?}"
    );
    assert!(
        by_path.contains(&("null_ts.parquet".to_string(), json!(["None", "0"]))),
        "{by_path:?}"
    );
    let id2 = lake.pyiceberg(&table, Some("id == 2"));
    assert_eq!(id2["filtered_rows"], json!(1));
}

// ------------------------------------------------------------------------------- inputs

#[tokio::test]
async fn duplicates_registered_files_and_reruns_commit_nothing_new() {
    let lake = Lake::new();
    let table = table_name();
    lake.pyarrow(
        r#"
for name in "abcd":
    pq.write_table(pa.table({"id": pa.array([ord(name)], pa.int64())}), out(f"{name}.parquet"))
"#,
    );
    let [a, b, c, d] = ["a", "b", "c", "d"].map(|f| lake.path(&format!("{f}.parquet")));
    let progress = Arc::new(AtomicUsize::new(0));
    let seen = progress.clone();
    let adder = AddFiles::connect(lake.options(&table).build().unwrap())
        .await
        .unwrap()
        .on_progress(move |p| {
            seen.store(p.read, Ordering::SeqCst);
            assert!(p.read <= p.total);
        });
    let file_url = format!("file://{a}");
    let result = adder
        .run(&[a.clone(), b.clone(), a.clone(), file_url])
        .await
        .unwrap();
    assert_eq!(result.files_added, 2, "{}", result.render());
    assert_eq!(progress.load(Ordering::SeqCst), 2);
    // The same file under two spellings is reported once.
    assert_eq!(result.skipped.len(), 1);
    assert_eq!(result.skipped[0].reason, SkipReason::DuplicateInput);

    let again = adder.run(&[a.clone(), b.clone(), c.clone()]).await.unwrap();
    assert_eq!(again.files_added, 1);
    assert!(
        again
            .skipped
            .iter()
            .all(|s| s.reason == SkipReason::AlreadyRegistered)
            && again.skipped.len() == 2
    );
    let read = lake.read(&table);
    assert_eq!(snapshots(&read), 2);
    let rerun = adder.run(&[a.clone(), b.clone(), c.clone()]).await.unwrap();
    assert_eq!(
        (rerun.files_added, rerun.snapshots.len(), rerun.skipped.len()),
        (0, 0, 3)
    );
    assert_eq!(snapshots(&lake.read(&table)), 2);

    // Files PyIceberg registered (as plain paths) are recognised too.
    lake.readers().pyiceberg_add_files(&table, &[PathBuf::from(&d)]);
    let result = adder.run(std::slice::from_ref(&d)).await.unwrap();
    assert_eq!(
        result.skipped[0].reason,
        SkipReason::AlreadyRegistered,
        "{}",
        result.render()
    );
    assert_eq!(read_rows(&lake.read(&table)).len(), 4);
}

/// File names a URL parser would misread: each is registered as the file it names, with
/// that file's count and bounds. `pct%20y` sits beside `pct y`, whose footer a decoded
/// `%20` would read instead.
#[tokio::test]
async fn file_names_with_url_characters_register_as_the_files_they_name() {
    let lake = Lake::new();
    let table = table_name();
    let names = [
        "pct y.parquet",
        "pct%20y.parquet",
        "sp ace .parquet",
        "h#frag.parquet",
        "q?x=1.parquet",
        "ünï-códe.parquet",
        "new\nline.parquet",
        "100%.parquet",
    ];
    let files: Vec<String> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let ids: Vec<Option<i64>> = (0..=i as i64).map(|r| Some(100 * i as i64 + r)).collect();
            lake.parquet_rs(name, &batch(vec![int64("id", ids, false)]), true)
        })
        .collect();
    // The first file also as a `file:` URL, percent-encoded as a URL must be: the same file.
    let as_url = url::Url::from_file_path(&files[0]).unwrap().to_string();
    assert!(as_url.contains("pct%20y.parquet"), "{as_url}");
    let mut given = files.clone();
    given.push(as_url);
    let result = add(lake.options(&table).build().unwrap(), &given).await;
    assert!(result.errors.is_empty(), "{}", result.render());
    assert_eq!(result.files_added, names.len(), "{}", result.render());
    assert_eq!(result.skipped.len(), 1, "the URL names a file already given");

    let py = lake.pyiceberg(&table, Some("id >= 700"));
    let mut by_path: Vec<(String, u64, String, String)> = py["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_string(),
                f["records"].as_u64().unwrap(),
                f["lower"]["id"].as_str().unwrap().to_string(),
                f["upper"]["id"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    by_path.sort();
    let mut expected: Vec<(String, u64, String, String)> = files
        .iter()
        .enumerate()
        .map(|(i, path)| {
            let low = 100 * i as i64;
            (
                path.clone(),
                i as u64 + 1,
                low.to_string(),
                (low + i as i64).to_string(),
            )
        })
        .collect();
    expected.sort();
    assert_eq!(
        by_path, expected,
        "each path registered verbatim with its own footer"
    );
    // The scan opens every file by its registered path: 1 + 2 + ... + 8 rows, and the
    // filter keeps the last file's 8.
    assert_eq!(py["filtered_rows"], 8);
    let read = lake.read(&table);
    assert_eq!(read["row_count"], 36);

    // A rerun under either spelling finds every file registered.
    let again = add(lake.options(&table).build().unwrap(), &given).await;
    assert_eq!(again.files_added, 0, "{}", again.render());
}

#[tokio::test]
async fn concurrent_runs_of_the_same_files_commit_them_once() {
    let lake = Lake::new();
    let table = table_name();
    lake.pyarrow(
        r#"
for i in range(4):
    pq.write_table(pa.table({"id": pa.array([i], pa.int64())}), out(f"f{i}.parquet"))
"#,
    );
    let files: Vec<String> = (0..4).map(|i| lake.path(&format!("f{i}.parquet"))).collect();
    add(lake.options(&table).build().unwrap(), &files[..1]).await;
    // Both runs see the files as new; the second to commit finds the first's commit id (the
    // id follows the files) and appends nothing.
    let one = AddFiles::connect(lake.options(&table).build().unwrap())
        .await
        .unwrap();
    let two = AddFiles::connect(lake.options(&table).build().unwrap())
        .await
        .unwrap();
    let (a, b) = tokio::join!(one.run(&files[1..]), two.run(&files[1..]));
    let (a, b) = (a.unwrap(), b.unwrap());
    let outcomes: Vec<(usize, bool)> = [&a, &b]
        .iter()
        .flat_map(|r| r.snapshots.iter().map(|s| (s.files, s.already_committed)))
        .collect();
    // Whichever is second finds the files committed: at its commit (the same commit id)
    // or, when the first had committed before it read the table, when it plans (skipped).
    let second_skipped = [&a, &b]
        .iter()
        .any(|r| r.snapshots.is_empty() && r.skipped.len() == 3);
    assert!(
        outcomes == [(3, false), (3, true)]
            || outcomes == [(3, true), (3, false)]
            || (outcomes == [(3, false)] && second_skipped),
        "{outcomes:?}\n{}\n{}",
        a.render(),
        b.render()
    );
    let committed: Vec<&str> = [&a, &b]
        .iter()
        .flat_map(|r| r.snapshots.iter().map(|s| s.commit_id.as_str()))
        .collect();
    assert!(committed.iter().all(|id| *id == committed[0]), "{committed:?}");
    let read = lake.read(&table);
    assert_eq!((snapshots(&read), read_rows(&read).len()), (2, 4));
    // (Snapshots are listed in metadata order, which is not commit order.)
    let ids: Vec<&Value> = read["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| &s["summary"]["outflow.commit-id"])
        .collect();
    assert!(ids.contains(&&json!(committed[0])), "{ids:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_runs_register_each_file_once() {
    let lake = Lake::new();
    lake.pyarrow(
        r#"
for i in range(20):
    pq.write_table(pa.table({"id": pa.array([i], pa.int64())}), out(f"f{i:02}.parquet"))
"#,
    );
    let files: Vec<String> = (0..20).map(|i| lake.path(&format!("f{i:02}.parquet"))).collect();
    let slices = [0..10, 5..15, 10..20, 0..20];
    for round in 0..10 {
        let table = table_name();
        add(lake.options(&table).build().unwrap(), &files[19..]).await;
        // Four runs at once over lists that overlap: each commit that loses the race must
        // drop the files the winners registered meanwhile, not register them again.
        let mut runs = Vec::new();
        for slice in slices.clone() {
            let add = AddFiles::connect(lake.options(&table).build().unwrap())
                .await
                .unwrap();
            let files = files[slice].to_vec();
            runs.push(tokio::spawn(async move { add.run(&files).await }));
        }
        let mut added = 0;
        let mut reports = String::new();
        for (run, slice) in runs.into_iter().zip(slices.clone()) {
            let result = run.await.unwrap().unwrap();
            reports.push_str(&result.render());
            assert!(result.errors.is_empty(), "round {round}: {}", result.render());
            let skipped = result
                .skipped
                .iter()
                .filter(|s| s.reason == SkipReason::AlreadyRegistered)
                .count();
            assert_eq!(
                result.files_added + skipped,
                slice.len(),
                "round {round}: every file is added or already registered\n{}",
                result.render()
            );
            // Two runs left with the same files share a commit id: the second finds the
            // first's snapshot and reports it as already committed.
            added += result
                .snapshots
                .iter()
                .filter(|s| !s.already_committed)
                .map(|s| s.files)
                .sum::<usize>();
        }
        assert_eq!(
            added, 19,
            "round {round}: the runs' new snapshots hold each new file once\n{reports}"
        );
        let read = lake.read(&table);
        let mut ids: Vec<i64> = read_rows(&read)
            .iter()
            .map(|r| r["id"].as_i64().unwrap())
            .collect();
        ids.sort_unstable();
        assert_eq!(ids, (0..20).collect::<Vec<i64>>(), "round {round}");
    }
}

#[tokio::test]
async fn unreadable_files_are_errors_for_those_files_only() {
    let lake = Lake::new();
    let table = table_name();
    lake.pyarrow(
        r#"
pq.write_table(pa.table({"id": pa.array(range(1000), pa.int64()), "s": pa.array([str(i) for i in range(1000)])}), out("good.parquet"))
data = open(out("good.parquet"), "rb").read()
open(out("truncated.parquet"), "wb").write(data[: len(data) // 2])
open(out("empty.parquet"), "wb").write(b"")
open(out("text.parquet"), "wb").write(b"id,s\n1,a\n" * 10)
tail = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
bad = bytearray(data)
for i in range(tail, tail + 40):
    bad[i] = 0xFF
open(out("bad_footer.parquet"), "wb").write(bytes(bad))
long_len = bytearray(data)
long_len[-8:-4] = (len(data) * 2).to_bytes(4, "little")
open(out("bad_length.parquet"), "wb").write(bytes(long_len))
os.makedirs(out("dir.parquet/x"), exist_ok=True)
"#,
    );
    let names = [
        "good.parquet",
        "truncated.parquet",
        "empty.parquet",
        "text.parquet",
        "bad_footer.parquet",
        "bad_length.parquet",
        "dir.parquet",
        "missing.parquet",
    ];
    let files = names.map(|f| lake.files.join(f).display().to_string());
    let result = add(lake.options(&table).build().unwrap(), &files).await;
    assert_eq!(result.files_added, 1, "{}", result.render());
    assert_eq!(
        errors(&result),
        [
            ("bad_footer.parquet".into(), FileErrorKind::Corrupt),
            ("bad_length.parquet".into(), FileErrorKind::Corrupt),
            ("dir.parquet".into(), FileErrorKind::Unreadable),
            ("empty.parquet".into(), FileErrorKind::Empty),
            ("missing.parquet".into(), FileErrorKind::Unreadable),
            ("text.parquet".into(), FileErrorKind::NotParquet),
            ("truncated.parquet".into(), FileErrorKind::Corrupt)
        ]
    );
    assert!(!result.is_clean());
    let read = lake.read(&table);
    assert_eq!(read_rows(&read).len(), 1000);
}

#[tokio::test]
async fn the_same_files_read_the_same_as_after_pyiceberg_add_files() {
    let lake = Lake::new();
    let ours = table_name();
    lake.pyarrow(
        r#"
for i in range(3):
    pq.write_table(pa.table({
        "id": pa.array([i * 10 + j for j in range(3)], pa.int64()),
        "name": pa.array([None if j == 1 else f"n{i}{j}" for j in range(3)]),
        "amount": pa.array([D.Decimal(f"{i}.{j}5") for j in range(3)], pa.decimal128(12, 2)),
        "day": pa.array([dt.date(2024, 1, 1 + j) for j in range(3)], pa.date32()),
        "ts": pa.array([dt.datetime(2024, 1, 1, j, tzinfo=dt.timezone.utc) for j in range(3)], pa.timestamp("us", tz="UTC")),
        "tags": pa.array([[f"t{j}"] * j for j in range(3)], pa.list_(pa.string())),
        "attrs": pa.array([[("k", j)] for j in range(3)], pa.map_(pa.string(), pa.int64())),
    }), out(f"f{i}.parquet"))
"#,
    );
    let files: Vec<String> = (0..3).map(|i| lake.path(&format!("f{i}.parquet"))).collect();
    let result = add(lake.options(&ours).build().unwrap(), &files).await;
    assert!(result.is_clean(), "{}", result.render());

    // PyIceberg's add_files needs the table: one with the same schema, no mapping (it adds one).
    let theirs = format!("{}.pyiceberg", unique_name("af"));
    let catalog = IcebergCatalog::connect(&lake.fx.config).await.unwrap();
    let schema = catalog
        .require_table(&parse_table_ident(&ours).unwrap())
        .await
        .unwrap()
        .metadata()
        .current_schema()
        .as_ref()
        .clone();
    catalog
        .create_table(
            &parse_table_ident(&theirs).unwrap(),
            schema,
            None,
            None,
            Default::default(),
        )
        .await
        .unwrap();
    let paths: Vec<PathBuf> = files.iter().map(PathBuf::from).collect();
    lake.readers().pyiceberg_add_files(&theirs, &paths);

    let a = lake.read(&ours);
    let b = lake.read(&theirs);
    assert_eq!(read_rows(&a), read_rows(&b));
    assert_eq!(a["schema"], b["schema"]);
    assert_eq!(read_rows(&a).len(), 9);
    // Both record the same counts and bounds.
    let strip = |v: Value| {
        v["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                (
                    f["records"].clone(),
                    f["nulls"].clone(),
                    f["lower"].clone(),
                    f["upper"].clone(),
                    f["values"].clone(),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        strip(lake.pyiceberg(&ours, None)),
        strip(lake.pyiceberg(&theirs, None))
    );
}

#[tokio::test]
async fn windows_and_manifests_split_the_commits() {
    let lake = Lake::new();
    let table = table_name();
    lake.pyarrow(
        r#"
for i in range(5):
    pq.write_table(pa.table({"id": pa.array([i], pa.int64())}), out(f"f{i}.parquet"))
"#,
    );
    let files: Vec<String> = (0..5).map(|i| lake.path(&format!("f{i}.parquet"))).collect();
    let result = add(
        lake.options(&table)
            .window(BatchWindow::Files(2))
            .build()
            .unwrap(),
        &files[..3],
    )
    .await;
    assert_eq!(
        result
            .snapshots
            .iter()
            .map(|s| (s.window, s.files))
            .collect::<Vec<_>>(),
        [(0, 2), (1, 1)]
    );
    let result = add(
        lake.options(&table).files_per_manifest(1).build().unwrap(),
        &files[3..],
    )
    .await;
    assert_eq!(result.snapshots.len(), 1);
    let meta = lake.pyiceberg(&table, None);
    // Two manifests from the windows' snapshots, two for the last snapshot's two files.
    assert_eq!(meta["manifests"], json!(4));
    let read = lake.read(&table);
    assert_eq!((snapshots(&read), read_rows(&read).len()), (3, 5));
}

#[tokio::test]
async fn files_join_a_table_pyiceberg_wrote() {
    let lake = Lake::new();
    let table = table_name();
    lake.pyarrow(
        r#"
pq.write_table(pa.table({"id": pa.array([1, 2], pa.int64()), "v": pa.array(["a", "b"])}), out("seed.parquet"))
pq.write_table(pa.table({"id": pa.array([3], pa.int64()), "v": pa.array(["c"])}), out("more.parquet"))
pq.write_table(pa.table({"v": pa.array(["d"]), "id": pa.array([4], pa.int64())}), out("reordered.parquet"))
"#,
    );
    // PyIceberg's table has field ids in its files and no name mapping.
    lake.readers()
        .pyiceberg_create_and_append(&table, Path::new(&lake.path("seed.parquet")), &[]);
    let result = add(
        lake.options(&table).build().unwrap(),
        &[lake.path("more.parquet")],
    )
    .await;
    assert!(
        result.is_clean() && result.files_added == 1,
        "{}",
        result.render()
    );
    let read = lake.read(&table);
    assert!(
        read["properties"]["schema.name-mapping.default"].is_string(),
        "AddFiles gives the table a name mapping"
    );
    assert_eq!(
        read_rows(&read),
        vec![
            json!({"id": 1, "v": "a"}),
            json!({"id": 2, "v": "b"}),
            json!({"id": 3, "v": "c"})
        ]
    );
    // Columns in another order resolve by name (Java's generic reader reads them by
    // position, see the module docs, so PyIceberg checks them).
    let result = add(
        lake.options(&table).build().unwrap(),
        &[lake.path("reordered.parquet")],
    )
    .await;
    assert!(
        result.is_clean() && result.files_added == 1,
        "{}",
        result.render()
    );
    let read = lake
        .readers()
        .read(outflow_testkit::iceberg::Reader::PyIceberg, &table);
    assert_eq!(read_rows(&read).last().unwrap(), &json!({"id": 4, "v": "d"}));
}

#[tokio::test]
async fn the_rest_catalog_takes_files_too() {
    let (lake, config, readers) = Lake::rest();
    let table = format!("{}.t", unique_name("afrest"));
    lake.pyarrow(
        r#"
pq.write_table(pa.table({"id": pa.array([1, 2], pa.int64()), "v": pa.array(["a", None])}), out("a.parquet"))
pq.write_table(pa.table({"id": pa.array([3], pa.int64()), "v": pa.array(["c"]), "w": pa.array([1.5])}), out("b.parquet"))
"#,
    );
    let options = AddFilesOptions::builder()
        .catalog(config)
        .table(&table)
        .schema_evolution(evolution(&[Opt::AllowFieldAddition]).build().unwrap())
        .build()
        .unwrap();
    let result = add(options.clone(), &[lake.path("a.parquet")]).await;
    assert!(result.table_created && result.is_clean(), "{}", result.render());
    let result = add(options, &[lake.path("b.parquet")]).await;
    assert_eq!(
        (result.files_added, result.schema_commits),
        (1, 1),
        "{}",
        result.render()
    );
    let read = readers.read_both(&table);
    assert_eq!(
        read_rows(&read),
        vec![
            json!({"id": 1, "v": "a", "w": null}),
            json!({"id": 2, "v": null, "w": null}),
            json!({"id": 3, "v": "c", "w": 1.5})
        ]
    );
}

#[tokio::test]
async fn a_table_every_file_would_be_refused_from_is_not_created() {
    let lake = Lake::new();
    let table = table_name();
    lake.pyarrow(
        r#"
pq.write_table(pa.table({"id": pa.array([2, None], pa.int64())}), out("null_id.parquet"))
pq.write_table(pa.table({"v": pa.array(["d"])}), out("no_id.parquet"))
"#,
    );
    let config = evolution(&[Opt::AllowFieldAddition])
        .required_column("id")
        .on_incompatible(IncompatibleSchemaHandling::RouteToErrors)
        .build()
        .unwrap();
    let options = lake.options(&table).schema_evolution(config).build().unwrap();
    let result = add(
        options,
        &["null_id.parquet", "no_id.parquet"].map(|f| lake.path(f)),
    )
    .await;
    assert!(!result.table_created, "{}", result.render());
    assert_eq!(result.files_added, 0);
    assert_eq!(
        errors(&result),
        [
            ("no_id.parquet".into(), FileErrorKind::Incompatible),
            ("null_id.parquet".into(), FileErrorKind::Incompatible)
        ]
    );
    let catalog = IcebergCatalog::connect(&lake.fx.config).await.unwrap();
    let loaded = catalog
        .load_table(&parse_table_ident(&table).unwrap())
        .await
        .unwrap();
    assert!(
        loaded.is_none(),
        "a table was created from files that were all refused"
    );
}

#[tokio::test]
async fn a_missing_table_under_create_never_is_an_error_naming_it() {
    let lake = Lake::new();
    let table = table_name();
    let options = lake
        .options(&table)
        .create_disposition(CreateDisposition::CreateNever)
        .build()
        .unwrap();
    let err = AddFiles::connect(options)
        .await
        .unwrap()
        .run(&["/nowhere.parquet"])
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(err.to_string().contains(&table), "{err}");
}

#[tokio::test]
async fn an_identity_partition_value_iceberg_rust_cannot_print_is_an_error_not_a_panic() {
    let lake = Lake::new();
    let table = table_name();
    lake.pyarrow(
        r#"
ts = lambda us: pa.array([us], pa.int64()).cast(pa.timestamp("us", tz="UTC"))
pq.write_table(pa.table({"id": pa.array([1], pa.int64()), "ts": ts(-86_400_000_000)}), out("whole.parquet"))
pq.write_table(pa.table({"id": pa.array([2], pa.int64()), "ts": ts(-1)}), out("fraction.parquet"))
"#,
    );
    let files = ["whole.parquet", "fraction.parquet"].map(|f| lake.path(f));
    let result = add(
        lake.options(&table)
            .table_options(partitioned(&["ts"]))
            .build()
            .unwrap(),
        &files,
    )
    .await;
    assert_eq!(result.files_added, 1, "{}", result.render());
    assert_eq!(
        errors(&result),
        [("fraction.parquet".into(), FileErrorKind::Partition)]
    );
    let read = lake.read(&table);
    assert_eq!(
        read_rows(&read),
        vec![json!({"id": 1, "ts": "1969-12-31T00:00:00.000000+00:00"})]
    );
}
