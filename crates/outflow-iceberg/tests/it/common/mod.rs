//! Shared by the Iceberg integration tests: catalogs in temporary directories, batches of
//! every type, and comparisons with what the independent readers print.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{Int32Builder, MapBuilder, StringBuilder};
use arrow_array::{
    Array, ArrayRef, BinaryArray, BooleanArray, Date32Array, Decimal128Array, FixedSizeBinaryArray,
    Float32Array, Float64Array, Int32Array, Int64Array, ListArray, RecordBatch, StringArray, StructArray,
    Time64MicrosecondArray, TimestampMicrosecondArray, types::Int64Type,
};
use arrow_schema::{DataType, Field, Fields, Schema, TimeUnit};
use outflow_core::Sink;
use outflow_iceberg::{CatalogConfig, IcebergSink, IcebergSinkOptions};
use outflow_testkit::iceberg::TestCatalog;
use serde_json::{Value, json};

/// A SQL catalog in a fresh temporary directory, as Outflow and the readers see it.
pub struct SqlFixture {
    pub dir: tempfile::TempDir,
    pub config: CatalogConfig,
    pub readers: TestCatalog,
}

pub fn sql_catalog() -> SqlFixture {
    let dir = tempfile::tempdir().unwrap();
    let readers = TestCatalog::sql_in(dir.path());
    let config = CatalogConfig::sqlite_in(dir.path());
    SqlFixture { dir, config, readers }
}

/// The REST catalog server the test script started.
pub fn rest_catalog() -> (CatalogConfig, TestCatalog) {
    let readers = TestCatalog::rest();
    let TestCatalog::Rest { uri, name, .. } = &readers else {
        unreachable!()
    };
    let config = CatalogConfig::Rest {
        uri: uri.clone(),
        warehouse: None,
        name: name.clone(),
        properties: Default::default(),
    };
    (config, readers)
}

pub async fn sink(options: IcebergSinkOptions) -> IcebergSink {
    IcebergSink::connect(options).await.unwrap()
}

/// Rows sorted by their compact JSON, the way the readers sort them.
pub fn sorted(mut rows: Vec<Value>) -> Vec<Value> {
    rows.sort_by_key(|r| r.to_string());
    rows
}

/// The readers' rows, re-sorted with the same key as [`sorted`].
pub fn read_rows(read: &Value) -> Vec<Value> {
    sorted(outflow_testkit::iceberg::rows(read).clone())
}

/// `name -> (type, required)` of the top-level fields of a canonical read.
pub fn field_types(read: &Value) -> Vec<(String, Value, bool)> {
    outflow_testkit::iceberg::fields(read)
        .iter()
        .map(|f| {
            (
                f["name"].as_str().unwrap().to_string(),
                f["type"].clone(),
                f["required"].as_bool().unwrap(),
            )
        })
        .collect()
}

pub fn ids(n: i64) -> ArrayRef {
    Arc::new(Int64Array::from_iter_values(0..n))
}

pub fn batch(fields: Vec<(Field, ArrayRef)>) -> RecordBatch {
    let (fields, arrays): (Vec<Field>, Vec<ArrayRef>) = fields.into_iter().unzip();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).unwrap()
}

fn uuid_field(name: &str) -> Field {
    Field::new(name, DataType::FixedSizeBinary(16), true).with_metadata(HashMap::from([(
        "ARROW:extension:name".to_string(),
        "arrow.uuid".to_string(),
    )]))
}

/// Three rows of every primitive type and nested structs, lists and maps, with nulls.
pub fn all_types_batch() -> RecordBatch {
    let point_fields = Fields::from(vec![
        Field::new("x", DataType::Float64, false),
        Field::new("label", DataType::Utf8, true),
    ]);
    let point = StructArray::new(
        point_fields.clone(),
        vec![
            Arc::new(Float64Array::from(vec![1.5, -2.25, 0.0])) as ArrayRef,
            Arc::new(StringArray::from(vec![Some("a"), None, Some("c")])),
        ],
        Some(vec![true, true, false].into()),
    );
    let tags = ListArray::from_iter_primitive::<Int64Type, _, _>(vec![
        Some(vec![Some(1), Some(2)]),
        Some(vec![]),
        None,
    ]);
    let mut attrs = MapBuilder::new(None, StringBuilder::new(), Int32Builder::new());
    attrs.keys().append_value("k1");
    attrs.values().append_value(10);
    attrs.append(true).unwrap();
    attrs.append(true).unwrap();
    attrs.keys().append_value("k2");
    attrs.values().append_null();
    attrs.append(true).unwrap();
    let attrs = attrs.finish();
    let uuids = FixedSizeBinaryArray::try_from_sparse_iter_with_size(
        vec![
            Some(*b"\x12\x34\x56\x78\x12\x34\x56\x78\x12\x34\x56\x78\x12\x34\x56\x78"),
            None,
            Some([0u8; 16]),
        ]
        .into_iter(),
        16,
    )
    .unwrap();
    batch(vec![
        (Field::new("id", DataType::Int64, false), ids(3)),
        (
            Field::new("flag", DataType::Boolean, true),
            Arc::new(BooleanArray::from(vec![Some(true), None, Some(false)])),
        ),
        (
            Field::new("small", DataType::Int32, true),
            Arc::new(Int32Array::from(vec![Some(-1), Some(7), None])),
        ),
        (
            Field::new("ratio", DataType::Float32, true),
            Arc::new(Float32Array::from(vec![Some(0.5), None, Some(-4.0)])),
        ),
        (
            Field::new("amount", DataType::Decimal128(12, 2), true),
            Arc::new(
                Decimal128Array::from(vec![Some(12345), Some(-5), None])
                    .with_precision_and_scale(12, 2)
                    .unwrap(),
            ),
        ),
        (
            Field::new("day", DataType::Date32, true),
            Arc::new(Date32Array::from(vec![Some(0), Some(20_000), None])),
        ),
        (
            Field::new("at", DataType::Time64(TimeUnit::Microsecond), true),
            Arc::new(Time64MicrosecondArray::from(vec![
                Some(3_723_000_001),
                None,
                Some(0),
            ])),
        ),
        (
            Field::new("local_ts", DataType::Timestamp(TimeUnit::Microsecond, None), true),
            Arc::new(TimestampMicrosecondArray::from(vec![
                Some(1_700_000_000_123_456),
                None,
                Some(0),
            ])),
        ),
        (
            Field::new(
                "ts",
                DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
                true,
            ),
            Arc::new(
                TimestampMicrosecondArray::from(vec![Some(1_700_000_000_000_000), Some(-1), None])
                    .with_timezone("+00:00"),
            ),
        ),
        (
            Field::new("name", DataType::Utf8, true),
            Arc::new(StringArray::from(vec![Some("héllo"), Some(""), None])),
        ),
        (uuid_field("uid"), Arc::new(uuids)),
        (
            Field::new("blob", DataType::Binary, true),
            Arc::new(BinaryArray::from(vec![
                Some(&b"\x00\xff"[..]),
                None,
                Some(&b""[..]),
            ])),
        ),
        (
            Field::new("point", DataType::Struct(point_fields), true),
            Arc::new(point),
        ),
        (Field::new("tags", tags.data_type().clone(), true), Arc::new(tags)),
        (
            Field::new("attrs", attrs.data_type().clone(), true),
            Arc::new(attrs),
        ),
    ])
}

/// What the readers print for [`all_types_batch`].
pub fn all_types_rows() -> Vec<Value> {
    sorted(vec![
        json!({"id": 0, "flag": true, "small": -1, "ratio": 0.5, "amount": "123.45", "day": "1970-01-01",
               "at": "01:02:03.000001", "local_ts": "2023-11-14T22:13:20.123456", "ts": "2023-11-14T22:13:20.000000+00:00",
               "name": "héllo", "uid": "12345678-1234-5678-1234-567812345678", "blob": "00ff",
               "point": {"x": 1.5, "label": "a"}, "tags": [1, 2], "attrs": [{"key": "k1", "value": 10}]}),
        json!({"id": 1, "flag": null, "small": 7, "ratio": null, "amount": "-0.05", "day": "2024-10-04",
               "at": null, "local_ts": null, "ts": "1969-12-31T23:59:59.999999+00:00",
               "name": "", "uid": null, "blob": null,
               "point": {"x": -2.25, "label": null}, "tags": [], "attrs": []}),
        json!({"id": 2, "flag": false, "small": null, "ratio": -4.0, "amount": null, "day": null,
               "at": "00:00:00.000000", "local_ts": "1970-01-01T00:00:00.000000", "ts": null,
               "name": null, "uid": "00000000-0000-0000-0000-000000000000", "blob": "",
               "point": null, "tags": null, "attrs": [{"key": "k2", "value": null}]}),
    ])
}

/// The Iceberg types the readers report for [`all_types_batch`]'s columns.
pub fn all_types_schema() -> Vec<(String, Value, bool)> {
    let t = |s: &str| Value::String(s.to_string());
    vec![
        ("id".into(), t("long"), true),
        ("flag".into(), t("boolean"), false),
        ("small".into(), t("int"), false),
        ("ratio".into(), t("float"), false),
        ("amount".into(), t("decimal(12,2)"), false),
        ("day".into(), t("date"), false),
        ("at".into(), t("time"), false),
        ("local_ts".into(), t("timestamp"), false),
        ("ts".into(), t("timestamptz"), false),
        ("name".into(), t("string"), false),
        ("uid".into(), t("uuid"), false),
        ("blob".into(), t("binary"), false),
    ]
}

/// Table options partitioning a created table by `fields`.
pub fn partitioned(fields: &[&str]) -> outflow_iceberg::TableCreateOptions {
    fields
        .iter()
        .fold(outflow_iceberg::TableCreateOptions::builder(), |b, f| {
            b.partition_field(*f)
        })
        .build()
        .unwrap()
}

/// A sink's options for `table` in `catalog`, to finish with more settings.
pub fn options(catalog: &CatalogConfig, table: &str) -> outflow_iceberg::IcebergSinkOptionsBuilder {
    IcebergSinkOptions::builder()
        .catalog(catalog.clone())
        .table(table)
}

/// Writes `batches` through one sink and closes it.
pub async fn write_all(
    options: IcebergSinkOptions,
    batches: Vec<RecordBatch>,
) -> outflow_core::Result<outflow_core::WriteResult> {
    let mut sink = sink(options).await;
    for b in batches {
        sink.write(b).await?;
    }
    sink.close().await
}

/// How many snapshots a reader saw.
pub fn snapshot_count(read: &Value) -> usize {
    read["snapshots"].as_array().unwrap().len()
}

/// Rows `ids` of the events table (id, ts, region, name, n), all in `region`.
pub fn events(ids: std::ops::Range<i64>, region: &str) -> RecordBatch {
    let n = ids.end - ids.start;
    batch(vec![
        (
            Field::new("id", DataType::Int64, false),
            Arc::new(Int64Array::from_iter_values(ids.clone())) as ArrayRef,
        ),
        (
            Field::new(
                "ts",
                DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
                false,
            ),
            Arc::new(
                TimestampMicrosecondArray::from_iter_values(
                    ids.clone().map(|i| 1_700_000_000_000_000 + i * 3_600_000_000),
                )
                .with_timezone("+00:00"),
            ),
        ),
        (
            Field::new("region", DataType::Utf8, false),
            Arc::new(StringArray::from_iter_values((0..n).map(|_| region))),
        ),
        (
            Field::new("name", DataType::Utf8, true),
            Arc::new(StringArray::from_iter_values(
                ids.clone().map(|i| format!("name-{i:04}")),
            )),
        ),
        (
            Field::new("n", DataType::Int32, true),
            Arc::new(Int32Array::from_iter_values(ids.map(|i| i as i32))),
        ),
    ])
}

/// Asserts that no delete file applies to any live data file of `table` (as Java Iceberg
/// plans it): what a compaction that applied the deletes leaves.
pub fn assert_no_deletes_apply(fixture: &SqlFixture, table: &str) {
    let files = fixture.readers.java_files(table);
    assert!(
        files["files"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["delete_files"] == 0),
        "a delete file still applies: {files}"
    );
}
