//! Every write method, every type, dynamic destinations.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{Int64Builder, ListBuilder, MapBuilder, StringBuilder};
use arrow_array::{
    Array, ArrayRef, BinaryArray, BooleanArray, Date32Array, Decimal128Array, Decimal256Array,
    FixedSizeBinaryArray, Float32Array, Int32Array, Int64Array, ListArray, RecordBatch, StringArray,
    StructArray, Time64NanosecondArray, TimestampMillisecondArray, TimestampNanosecondArray,
};
use arrow_buffer::i256;
use arrow_schema::{DataType, Field, Fields, Schema, TimeUnit};
use outflow_bigquery::{FieldType, StreamType, TableField, TableSchema, WriteMethod};
use outflow_core::Sink;
use serde_json::json;

use crate::common::*;

fn all_types_schema() -> TableSchema {
    let f = TableField::new;
    TableSchema::new(vec![
        f("id", FieldType::Int64).required(),
        f("small", FieldType::Int64),
        f("f", FieldType::Float64),
        f("n", FieldType::Numeric),
        f("bn", FieldType::BigNumeric),
        f("b", FieldType::Bool),
        f("s", FieldType::String),
        f("by", FieldType::Bytes),
        f("d", FieldType::Date),
        f("t", FieldType::Time),
        f("dt", FieldType::Datetime),
        f("ts", FieldType::Timestamp),
        f("j", FieldType::Json),
        f("tags", FieldType::String).repeated(),
        TableField::record("rec", vec![f("a", FieldType::Int64), f("b", FieldType::String)]),
        TableField::record("recs", vec![f("x", FieldType::Int64), f("y", FieldType::String)]).repeated(),
        TableField::record(
            "m",
            vec![
                f("key", FieldType::String).required(),
                f("value", FieldType::Int64),
            ],
        )
        .repeated(),
        f("u", FieldType::String),
    ])
}

/// Two rows in the Arrow types people have, most of them not BigQuery's own.
fn all_types_batch(first_id: i64) -> RecordBatch {
    let ts_ns = 1_705_322_096_789_012_345i64; // 2024-01-15T12:34:56.789012345Z
    let rec = StructArray::new(
        Fields::from(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("b", DataType::Utf8, true),
        ]),
        vec![
            Arc::new(Int64Array::from(vec![Some(10), None])) as ArrayRef,
            Arc::new(StringArray::from(vec![Some("bee"), None])),
        ],
        Some(vec![true, false].into()),
    );
    let recs_item = Fields::from(vec![
        Field::new("x", DataType::Int64, true),
        Field::new("y", DataType::Utf8, true),
    ]);
    let recs_values = StructArray::new(
        recs_item.clone(),
        vec![
            Arc::new(Int64Array::from(vec![Some(1), Some(2), None])) as ArrayRef,
            Arc::new(StringArray::from(vec![Some("one"), None, Some("three")])),
        ],
        None,
    );
    let recs = ListArray::new(
        Arc::new(Field::new("item", DataType::Struct(recs_item), true)),
        arrow_buffer::OffsetBuffer::new(vec![0, 2, 3].into()),
        Arc::new(recs_values),
        None,
    );
    let mut tags = ListBuilder::new(StringBuilder::new());
    tags.values().append_value("x");
    tags.values().append_value("y");
    tags.append(true);
    tags.append(false); // a NULL array reads back empty
    let mut m = MapBuilder::new(None, StringBuilder::new(), Int64Builder::new());
    m.keys().append_value("k");
    m.values().append_value(7);
    m.append(true).unwrap();
    m.append(true).unwrap();
    let uuid = FixedSizeBinaryArray::try_from_iter([[0x11u8; 16], [0xabu8; 16]].into_iter()).unwrap();
    let uuid_field = Field::new("u", DataType::FixedSizeBinary(16), true).with_metadata(HashMap::from([(
        "ARROW:extension:name".to_string(),
        "arrow.uuid".to_string(),
    )]));
    let columns: Vec<(Field, ArrayRef)> = vec![
        (
            Field::new("id", DataType::Int64, false),
            Arc::new(Int64Array::from(vec![first_id, first_id + 1])),
        ),
        (
            Field::new("small", DataType::Int32, true),
            Arc::new(Int32Array::from(vec![Some(-5), None])),
        ),
        (
            Field::new("f", DataType::Float32, true),
            Arc::new(Float32Array::from(vec![1.5, -0.25])),
        ),
        (
            Field::new("n", DataType::Decimal128(10, 3), true),
            Arc::new(
                Decimal128Array::from(vec![Some(123_456), Some(-7)])
                    .with_precision_and_scale(10, 3)
                    .unwrap(),
            ),
        ),
        (
            Field::new("bn", DataType::Decimal256(40, 3), true),
            Arc::new(
                Decimal256Array::from(vec![Some(i256::from_i128(123_456)), None])
                    .with_precision_and_scale(40, 3)
                    .unwrap(),
            ),
        ),
        (
            Field::new("b", DataType::Boolean, true),
            Arc::new(BooleanArray::from(vec![Some(true), Some(false)])),
        ),
        (
            Field::new("s", DataType::Utf8, true),
            Arc::new(StringArray::from(vec![Some("héllo"), None])),
        ),
        (
            Field::new("by", DataType::Binary, true),
            Arc::new(BinaryArray::from(vec![Some(&b"\xde\xad"[..]), Some(&b""[..])])),
        ),
        (
            Field::new("d", DataType::Date32, true),
            Arc::new(Date32Array::from(vec![19737, -1])),
        ),
        (
            Field::new("t", DataType::Time64(TimeUnit::Nanosecond), true),
            Arc::new(Time64NanosecondArray::from(vec![45_296_789_012_345, 0])),
        ),
        (
            Field::new("dt", DataType::Timestamp(TimeUnit::Millisecond, None), true),
            Arc::new(TimestampMillisecondArray::from(vec![1_705_322_096_789, 0])),
        ),
        (
            Field::new(
                "ts",
                DataType::Timestamp(TimeUnit::Nanosecond, Some("+02:00".into())),
                true,
            ),
            Arc::new(TimestampNanosecondArray::from(vec![ts_ns, -1_500]).with_timezone("+02:00")),
        ),
        (
            Field::new("j", DataType::Utf8, true),
            Arc::new(StringArray::from(vec![Some(r#"{"s":"x","k":[1,2]}"#), None])),
        ),
        (
            Field::new(
                "tags",
                DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
                true,
            ),
            Arc::new(tags.finish()),
        ),
        (Field::new("rec", rec.data_type().clone(), true), Arc::new(rec)),
        (Field::new("recs", recs.data_type().clone(), true), Arc::new(recs)),
        {
            let m = m.finish();
            (Field::new("m", m.data_type().clone(), true), Arc::new(m))
        },
        (uuid_field, Arc::new(uuid)),
    ];
    let (fields, arrays): (Vec<_>, Vec<_>) = columns.into_iter().unzip();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).unwrap()
}

fn expected_rows(first_id: i64) -> Vec<serde_json::Value> {
    let mut rows = vec![
        json!({
            "id": first_id, "small": -5, "f": 1.5, "n": "123.456", "bn": "123.456", "b": true, "s": "héllo",
            "by": "dead", "d": "2024-01-15", "t": "12:34:56.789012", "dt": "2024-01-15T12:34:56.789000",
            "ts": "2024-01-15T12:34:56.789012Z", "j": r#"{"k":[1,2],"s":"x"}"#, "tags": ["x", "y"],
            "rec": {"a": 10, "b": "bee"}, "recs": [{"x": 1, "y": "one"}, {"x": 2, "y": null}],
            "m": [{"key": "k", "value": 7}], "u": "11111111-1111-1111-1111-111111111111"
        }),
        json!({
            "id": first_id + 1, "small": null, "f": -0.25, "n": "-0.007", "bn": null, "b": false, "s": null,
            "by": "", "d": "1969-12-31", "t": "00:00:00.000000", "dt": "1970-01-01T00:00:00.000000",
            // -1500 ns: sub-microsecond digits are dropped (towards zero), -1 µs.
            "ts": "1969-12-31T23:59:59.999999Z", "j": null, "tags": [],
            "rec": null, "recs": [{"x": null, "y": "three"}], "m": [], "u": "abababab-abab-abab-abab-abababababab"
        }),
    ];
    rows.sort_by_key(|r| r.to_string());
    rows
}

async fn write_every_type(method: WriteMethod, stream_type: Option<StreamType>) {
    let ctx = Ctx::new().await;
    let mut options = ctx
        .options("all_types")
        .schema(all_types_schema())
        .write_method(method);
    if let Some(t) = stream_type {
        options = options.stream_type(t);
    }
    let result = write_all(options.build().unwrap(), vec![all_types_batch(1)]).await;
    assert!(result.failed.is_empty(), "{:?}", result.failed);
    assert_eq!(result.rows_written(), 2);
    let mut rows = ctx.rows("all_types");
    rows.sort_by_key(|r| r.to_string());
    assert_eq!(rows, expected_rows(1), "{method:?} {stream_type:?}");
}

#[tokio::test]
async fn at_least_once_writes_every_type() {
    write_every_type(WriteMethod::AtLeastOnce, None).await;
}

#[tokio::test]
async fn exactly_once_committed_writes_every_type() {
    write_every_type(WriteMethod::ExactlyOnce, Some(StreamType::Committed)).await;
}

#[tokio::test]
async fn exactly_once_pending_writes_every_type() {
    write_every_type(WriteMethod::ExactlyOnce, Some(StreamType::Pending)).await;
}

#[tokio::test]
async fn committed_rows_show_at_once_and_pending_rows_at_the_flush() {
    let ctx = Ctx::new().await;
    let committed = ctx
        .options("c")
        .schema(id_name_schema())
        .stream_type(StreamType::Committed)
        .build()
        .unwrap();
    let mut c = sink(committed).await;
    c.write(id_name(0..3)).await.unwrap();
    assert_eq!(ctx.ids("c"), [0, 1, 2]);
    c.close().await.unwrap();

    let pending = ctx
        .options("p")
        .schema(id_name_schema())
        .stream_type(StreamType::Pending)
        .build()
        .unwrap();
    let mut p = sink(pending).await;
    p.write(id_name(0..3)).await.unwrap();
    p.write(id_name(3..5)).await.unwrap();
    assert!(
        ctx.ids("p").is_empty(),
        "pending rows are invisible before the commit"
    );
    p.flush().await.unwrap();
    assert_eq!(ctx.ids("p"), [0, 1, 2, 3, 4]);
    p.write(id_name(5..6)).await.unwrap();
    let result = p.close().await.unwrap();
    assert_eq!(ctx.ids("p"), [0, 1, 2, 3, 4, 5]);
    assert_eq!(result.rows_written(), 6);
}

#[tokio::test]
async fn rows_go_to_the_table_their_fields_name() {
    let ctx = Ctx::new().await;
    let region = StringArray::from(vec!["eu", "us", "eu", "us", "ap"]);
    let ids = Int64Array::from_iter_values(0..5);
    let input = batch(vec![
        ("id", false, Arc::new(ids) as ArrayRef),
        ("region", true, Arc::new(region)),
    ]);
    let schema = TableSchema::new(vec![
        TableField::new("id", FieldType::Int64).required(),
        TableField::new("region", FieldType::String),
    ]);
    let options = ctx.options("events_{region}").schema(schema).build().unwrap();
    let result = write_all(options, vec![input]).await;
    assert_eq!(result.destinations.len(), 3);
    assert_eq!(result.destinations[&ctx.full("events_eu")].rows, 2);
    assert_eq!(ctx.ids("events_eu"), [0, 2]);
    assert_eq!(ctx.ids("events_us"), [1, 3]);
    assert_eq!(ctx.ids("events_ap"), [4]);
}
