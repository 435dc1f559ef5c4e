//! Fixtures and helpers shared by the selection and flattening tests.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{
    Array, ArrayRef, Float64Array, Int32Array, Int64Array, ListArray, MapArray, RecordBatch, StringArray,
    StructArray,
};
use arrow_buffer::{NullBuffer, OffsetBuffer};
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use arrow_schema::{DataType, Field, FieldRef, Fields, Schema};
use proptest::prelude::*;

use crate::schema::FIELD_ID_KEY;

/// Each row of `batch` as `name=value` pairs, nulls shown as `null`.
pub(crate) fn render(batch: &RecordBatch) -> Vec<String> {
    let options = FormatOptions::new().with_null("null");
    let formatters: Vec<_> = batch
        .columns()
        .iter()
        .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).unwrap())
        .collect();
    (0..batch.num_rows())
        .map(|row| {
            batch
                .schema()
                .fields()
                .iter()
                .zip(&formatters)
                .map(|(field, f)| format!("{}={}", field.name(), f.value(row)))
                .collect::<Vec<_>>()
                .join(" | ")
        })
        .collect()
}

/// A field carrying a Parquet field id.
pub(crate) fn with_id(field: Field, id: i32) -> Field {
    field.with_metadata(HashMap::from([(FIELD_ID_KEY.to_string(), id.to_string())]))
}

pub(crate) fn nulls(valid: &[bool]) -> Option<NullBuffer> {
    Some(NullBuffer::from(valid.to_vec()))
}

pub(crate) fn offsets(offsets: &[i32]) -> OffsetBuffer<i32> {
    OffsetBuffer::new(offsets.to_vec().into())
}

fn location_fields() -> Fields {
    Fields::from(vec![
        with_id(Field::new("latitude", DataType::Float64, false), 10),
        Field::new("longitude", DataType::Float64, true),
    ])
}

fn location(lat: Vec<f64>, lon: Vec<Option<f64>>, valid: &[bool]) -> StructArray {
    StructArray::try_new(
        location_fields(),
        vec![
            Arc::new(Float64Array::from(lat)),
            Arc::new(Float64Array::from(lon)),
        ],
        nulls(valid),
    )
    .unwrap()
}

pub(crate) fn event_fields() -> Fields {
    Fields::from(vec![
        Field::new("location", DataType::Struct(location_fields()), true),
        Field::new("id", DataType::Int32, false),
    ])
}

pub(crate) fn event_item() -> FieldRef {
    Arc::new(with_id(
        Field::new("element", DataType::Struct(event_fields()), true),
        21,
    ))
}

pub(crate) fn attr_fields() -> Fields {
    Fields::from(vec![
        Field::new("score", DataType::Float64, true),
        Field::new("label", DataType::Utf8, true),
    ])
}

pub(crate) fn attr_entries() -> FieldRef {
    Arc::new(Field::new(
        "key_value",
        DataType::Struct(Fields::from(vec![
            Field::new("key", DataType::Utf8, false),
            Field::new("value", DataType::Struct(attr_fields()), true),
        ])),
        false,
    ))
}

/// Four rows with a nullable struct, a list of structs and a map of structs, with nulls at
/// every level:
///
/// | id | user                                   | events                         | attrs                      |
/// |----|----------------------------------------|--------------------------------|----------------------------|
/// | 1  | ann at (52.5, 13.4)                    | [(1, 2) #10, (null) #11]       | {a: (0.5, x)}              |
/// | 2  | null (its location is set underneath)  | null                           | null                       |
/// | 3  | bob, location null                     | []                             | {}                         |
/// | 4  | cy at (48.9, null)                     | [null, (3, 4) #13]             | {b: null, c: (1.5, null)}  |
pub(crate) fn fixture() -> RecordBatch {
    let user_location = location(
        vec![52.5, 9.9, 0.0, 48.9],
        vec![Some(13.4), Some(9.9), None, None],
        &[true, true, false, true],
    );
    let user_fields = Fields::from(vec![
        Field::new("name", DataType::Utf8, false),
        with_id(
            Field::new("location", DataType::Struct(location_fields()), true),
            3,
        ),
    ]);
    let user = StructArray::try_new(
        user_fields.clone(),
        vec![
            Arc::new(StringArray::from(vec!["ann", "zed", "bob", "cy"])),
            Arc::new(user_location),
        ],
        nulls(&[true, false, true, true]),
    )
    .unwrap();

    let event_location = location(
        vec![1.0, 0.0, 0.0, 3.0],
        vec![Some(2.0), None, None, Some(4.0)],
        &[true, false, false, true],
    );
    let event_values = StructArray::try_new(
        event_fields(),
        vec![
            Arc::new(event_location),
            Arc::new(Int32Array::from(vec![10, 11, 0, 13])),
        ],
        nulls(&[true, true, false, true]),
    )
    .unwrap();
    let events = ListArray::try_new(
        event_item(),
        offsets(&[0, 2, 2, 2, 4]),
        Arc::new(event_values),
        nulls(&[true, false, true, true]),
    )
    .unwrap();

    let attr_values = StructArray::try_new(
        attr_fields(),
        vec![
            Arc::new(Float64Array::from(vec![Some(0.5), None, Some(1.5)])),
            Arc::new(StringArray::from(vec![Some("x"), None, None])),
        ],
        nulls(&[true, false, true]),
    )
    .unwrap();
    let DataType::Struct(entry_fields) = attr_entries().data_type().clone() else {
        unreachable!()
    };
    let entries = StructArray::try_new(
        entry_fields,
        vec![
            Arc::new(StringArray::from(vec!["a", "b", "c"])),
            Arc::new(attr_values),
        ],
        None,
    )
    .unwrap();
    let attrs = MapArray::try_new(
        attr_entries(),
        offsets(&[0, 1, 1, 1, 3]),
        entries,
        nulls(&[true, false, true, true]),
        false,
    )
    .unwrap();

    let schema = Schema::new(vec![
        with_id(Field::new("id", DataType::Int64, false), 1),
        with_id(Field::new("user", DataType::Struct(user_fields), true), 2),
        with_id(Field::new("events", events.data_type().clone(), true), 20),
        with_id(Field::new("attrs", attrs.data_type().clone(), true), 30),
    ])
    .with_metadata(HashMap::from([("origin".to_string(), "fixture".to_string())]));
    RecordBatch::try_new(
        Arc::new(schema),
        vec![
            Arc::new(Int64Array::from(vec![1, 2, 3, 4])),
            Arc::new(user),
            Arc::new(events),
            Arc::new(attrs),
        ],
    )
    .unwrap()
}

/// A batch with a single column.
pub(crate) fn batch_of(name: &str, array: ArrayRef) -> RecordBatch {
    let field = Field::new(name, array.data_type().clone(), true);
    RecordBatch::try_new(Arc::new(Schema::new(vec![field])), vec![array]).unwrap()
}

/// A struct `t: struct<x: int32?, y: int64>`, with its own validity and its children set
/// even where it is null.
#[derive(Clone, Debug)]
pub(crate) struct Inner {
    pub valid: bool,
    pub x: Option<i32>,
    pub y: i64,
}

/// One row of the random model: `s: struct<t, z: int32?>?` and
/// `l: list<struct<t, r: int32>?>?`, children set even under nulls.
#[derive(Clone, Debug)]
pub(crate) struct ModelRow {
    pub s_valid: bool,
    pub s_t: Inner,
    pub s_z: Option<i32>,
    pub l: Option<Vec<(bool, Inner, i32)>>,
}

fn inner() -> impl Strategy<Value = Inner> {
    (any::<bool>(), any::<Option<i32>>(), any::<i64>()).prop_map(|(valid, x, y)| Inner { valid, x, y })
}

pub(crate) fn model_rows() -> impl Strategy<Value = Vec<ModelRow>> {
    let element = (any::<bool>(), inner(), any::<i32>());
    let row = (
        any::<bool>(),
        inner(),
        any::<Option<i32>>(),
        prop::option::of(prop::collection::vec(element, 0..4)),
    )
        .prop_map(|(s_valid, s_t, s_z, l)| ModelRow { s_valid, s_t, s_z, l });
    prop::collection::vec(row, 1..24)
}

fn inner_fields() -> Fields {
    Fields::from(vec![
        Field::new("x", DataType::Int32, true),
        Field::new("y", DataType::Int64, false),
    ])
}

fn inner_array(values: &[&Inner]) -> StructArray {
    let valid: Vec<bool> = values.iter().map(|i| i.valid).collect();
    StructArray::try_new(
        inner_fields(),
        vec![
            Arc::new(Int32Array::from(values.iter().map(|i| i.x).collect::<Vec<_>>())),
            Arc::new(Int64Array::from(values.iter().map(|i| i.y).collect::<Vec<_>>())),
        ],
        nulls(&valid),
    )
    .unwrap()
}

/// The Arrow batch of the model rows.
pub(crate) fn model_batch(rows: &[ModelRow]) -> RecordBatch {
    let s_fields = Fields::from(vec![
        Field::new("t", DataType::Struct(inner_fields()), true),
        Field::new("z", DataType::Int32, true),
    ]);
    let s = StructArray::try_new(
        s_fields.clone(),
        vec![
            Arc::new(inner_array(&rows.iter().map(|r| &r.s_t).collect::<Vec<_>>())),
            Arc::new(Int32Array::from(rows.iter().map(|r| r.s_z).collect::<Vec<_>>())),
        ],
        nulls(&rows.iter().map(|r| r.s_valid).collect::<Vec<_>>()),
    )
    .unwrap();

    let element_fields = Fields::from(vec![
        Field::new("t", DataType::Struct(inner_fields()), true),
        Field::new("r", DataType::Int32, false),
    ]);
    let elements: Vec<&(bool, Inner, i32)> = rows.iter().flat_map(|r| r.l.iter().flatten()).collect();
    let values = StructArray::try_new_with_length(
        element_fields.clone(),
        vec![
            Arc::new(inner_array(&elements.iter().map(|e| &e.1).collect::<Vec<_>>())),
            Arc::new(Int32Array::from(elements.iter().map(|e| e.2).collect::<Vec<_>>())),
        ],
        nulls(&elements.iter().map(|e| e.0).collect::<Vec<_>>()),
        elements.len(),
    )
    .unwrap();
    let item = Arc::new(Field::new("item", DataType::Struct(element_fields), true));
    let l = ListArray::try_new(
        item,
        OffsetBuffer::from_lengths(rows.iter().map(|r| r.l.as_ref().map_or(0, Vec::len))),
        Arc::new(values),
        nulls(&rows.iter().map(|r| r.l.is_some()).collect::<Vec<_>>()),
    )
    .unwrap();

    let schema = Schema::new(vec![
        Field::new("s", DataType::Struct(s_fields), true),
        Field::new("l", l.data_type().clone(), true),
    ]);
    RecordBatch::try_new(Arc::new(schema), vec![Arc::new(s), Arc::new(l)]).unwrap()
}

/// A slice window `(offset, len)` within `rows` rows, picked from two seeds.
pub(crate) fn window(rows: usize, a: usize, b: usize) -> (usize, usize) {
    let offset = a % rows;
    (offset, b % (rows - offset + 1))
}
