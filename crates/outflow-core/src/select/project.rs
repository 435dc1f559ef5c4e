//! Selecting fields by a [`FieldAccessDescriptor`].

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{DataType, Field, FieldRef, Fields, Schema, SchemaRef};

use super::descriptor::{FieldAccessDescriptor, FieldPath, SELECT, Segment};
use super::plan::{Column, Reshape, output_batch, output_schema};
use crate::schema::{LIST_ELEMENT, MAP_VALUE};
use crate::{Error, ErrorKind, Result};

/// The schema that selecting `fields` from `schema` yields.
///
/// Each path of the descriptor yields output columns, in the order the paths were written:
///
/// - A path ending at a field keeps that field whole, under its own name: `user` keeps the
///   struct `user` as a struct, `location.latitude` yields a top-level `latitude`.
/// - A path ending in `*` yields every field of the struct it reaches, each under its own
///   name: `user.*` puts user's fields at the top level, `*` keeps every top-level field.
/// - A path that goes through a list or map keeps the container and selects inside its
///   elements (a map's values; its keys are kept whole) by the same rules:
///   `events.location.latitude` on `events: list<struct<location: struct<latitude,
///   longitude>, id>>` yields `events: list<struct<latitude>>`, not `list<double>`, and
///   `attrs.score` on `attrs: map<string, struct<score, ...>>` yields
///   `attrs: map<string, struct<score>>`. The element and value may also be named:
///   `events.element.id`, `attrs.value.score`. Paths through the same container merge
///   into one output column, their fields in the order the paths were written.
///
/// A field taken from under a nullable struct becomes nullable, since it is null wherever
/// that struct is. Selected fields keep their metadata (such as `PARQUET:field_id`), and
/// the schema keeps its own metadata.
///
/// Fails, naming the path, when a field does not exist, a path continues past a field that
/// has no fields, or two outputs of the same struct would have the same name (naming both
/// paths).
pub fn select_schema(schema: &Schema, fields: &FieldAccessDescriptor) -> Result<SchemaRef> {
    let columns = plan(schema, fields)?;
    Ok(output_schema(schema, &columns))
}

/// Selects `fields` from `batch`: the result's schema is what [`select_schema`] returns for
/// the batch's schema.
///
/// Values are not copied where they can be shared. A leaf taken from under a struct is null
/// in every row where that struct (or any struct above it) is null. Lists and maps keep
/// their offsets and nulls exactly as they were, and sliced batches are handled as they
/// are.
pub fn select_batch(batch: &RecordBatch, fields: &FieldAccessDescriptor) -> Result<RecordBatch> {
    let columns = plan(batch.schema_ref(), fields)?;
    output_batch(batch, &columns)
}

fn plan(schema: &Schema, descriptor: &FieldAccessDescriptor) -> Result<Vec<Column>> {
    let requests = descriptor
        .field_paths()
        .iter()
        .map(|path| Request { path, at: 0 })
        .collect();
    plan_struct(schema.fields(), requests)
}

/// A path and how far into it planning has got.
#[derive(Clone, Copy)]
struct Request<'a> {
    path: &'a FieldPath,
    /// The index of the next segment.
    at: usize,
}

impl Request<'_> {
    fn rest(&self) -> &[Segment] {
        &self.path.segments()[self.at..]
    }

    /// Where in the schema the path has got to, for messages.
    fn location(&self) -> String {
        self.path.prefix(self.at)
    }
}

/// An output of a struct being planned: finished, or a container still collecting the
/// paths that go through it.
enum Slot<'a> {
    Done(Column),
    Through {
        source: Vec<usize>,
        field: FieldRef,
        under_nullable: bool,
        requests: Vec<Request<'a>>,
    },
}

/// Plans the outputs that `requests` yield from a struct with `fields`.
fn plan_struct(fields: &Fields, requests: Vec<Request<'_>>) -> Result<Vec<Column>> {
    let mut slots: Vec<Slot<'_>> = Vec::new();
    // Output name -> the path that produced it.
    let mut names: HashMap<String, String> = HashMap::new();

    for mut request in requests {
        let mut current = fields;
        let mut source = Vec::new();
        let mut under_nullable = false;
        loop {
            let name = match request.rest().first() {
                Some(Segment::Field(name)) => name,
                Some(Segment::All) => {
                    for (i, field) in current.iter().enumerate() {
                        claim(&mut names, field.name(), request.path.text().to_string())?;
                        slots.push(Slot::Done(Column {
                            field: nullable_under(field, under_nullable),
                            source: [source.as_slice(), &[i]].concat(),
                            reshape: Reshape::Keep,
                        }));
                    }
                    break;
                }
                None => return Err(Error::internal("select: a field path ran out of segments")),
            };
            let Some((index, field)) = current.find(name) else {
                return Err(unknown_field(&request, name, current));
            };
            source.push(index);
            request.at += 1;
            if request.rest().is_empty() {
                claim(&mut names, field.name(), request.path.text().to_string())?;
                slots.push(Slot::Done(Column {
                    field: nullable_under(field, under_nullable),
                    source,
                    reshape: Reshape::Keep,
                }));
                break;
            }
            match field.data_type() {
                DataType::Struct(children) => {
                    under_nullable |= field.is_nullable();
                    current = children;
                }
                data_type if is_container(data_type) => {
                    let existing = slots.iter_mut().find_map(|slot| match slot {
                        Slot::Through {
                            source: s, requests, ..
                        } if *s == source => Some(requests),
                        _ => None,
                    });
                    if let Some(requests) = existing {
                        requests.push(request);
                    } else {
                        claim(&mut names, field.name(), request.path.text().to_string())?;
                        slots.push(Slot::Through {
                            source,
                            field: field.clone(),
                            under_nullable,
                            requests: vec![request],
                        });
                    }
                    break;
                }
                other => return Err(no_fields(&request, other)),
            }
        }
    }

    slots
        .into_iter()
        .map(|slot| match slot {
            Slot::Done(column) => Ok(column),
            Slot::Through {
                source,
                field,
                under_nullable,
                requests,
            } => {
                let (reshape, data_type) = plan_container(field.name(), field.data_type(), requests)?;
                let nullable = field.is_nullable() || under_nullable;
                let field = field
                    .as_ref()
                    .clone()
                    .with_data_type(data_type)
                    .with_nullable(nullable);
                Ok(Column {
                    field: Arc::new(field),
                    source,
                    reshape,
                })
            }
        })
        .collect()
}

/// Plans the paths going through a list or map: returns how its elements (or values) are
/// reshaped and the container's output type. `name` is the output field's, for messages.
fn plan_container(
    name: &str,
    data_type: &DataType,
    requests: Vec<Request<'_>>,
) -> Result<(Reshape, DataType)> {
    let (marker, element) = match data_type {
        DataType::List(item) | DataType::LargeList(item) | DataType::FixedSizeList(item, _) => {
            (LIST_ELEMENT, item.data_type())
        }
        DataType::Map(entries, _) => (MAP_VALUE, map_value(entries)?.data_type()),
        other => return Err(Error::internal(format!("select: {other} is not a list or map"))),
    };
    // The element or value may be named explicitly; skip the name when it is.
    let requests: Vec<Request<'_>> = requests
        .into_iter()
        .map(|mut r| {
            if matches!(r.rest().first(), Some(Segment::Field(s)) if s == marker) {
                r.at += 1;
            }
            r
        })
        .collect();
    if let Some(whole) = requests.iter().find(|r| r.rest().is_empty()) {
        if let Some(other) = requests.iter().find(|r| r.path != whole.path) {
            return Err(duplicate(name, whole.path.text(), other.path.text()));
        }
        return Ok((Reshape::Keep, data_type.clone()));
    }

    let (inner, inner_type) = plan_element(name, element, requests)?;
    let inner = Box::new(inner);
    Ok(match data_type {
        DataType::List(item) => {
            let item = retyped(item, inner_type);
            (
                Reshape::List {
                    item: item.clone(),
                    inner,
                },
                DataType::List(item),
            )
        }
        DataType::LargeList(item) => {
            let item = retyped(item, inner_type);
            (
                Reshape::List {
                    item: item.clone(),
                    inner,
                },
                DataType::LargeList(item),
            )
        }
        DataType::FixedSizeList(item, size) => {
            let item = retyped(item, inner_type);
            (
                Reshape::List {
                    item: item.clone(),
                    inner,
                },
                DataType::FixedSizeList(item, *size),
            )
        }
        DataType::Map(entries, ordered) => {
            let DataType::Struct(parts) = entries.data_type() else {
                return Err(Error::internal("select: map entries are not a struct"));
            };
            let value = retyped(&parts[1], inner_type);
            let entries = retyped(entries, DataType::Struct(vec![parts[0].clone(), value].into()));
            (
                Reshape::MapValue {
                    entries: entries.clone(),
                    inner,
                },
                DataType::Map(entries, *ordered),
            )
        }
        other => return Err(Error::internal(format!("select: {other} is not a list or map"))),
    })
}

/// Plans the paths continuing into a container's element (or value) type.
fn plan_element(name: &str, data_type: &DataType, requests: Vec<Request<'_>>) -> Result<(Reshape, DataType)> {
    match data_type {
        DataType::Struct(fields) => {
            let columns = plan_struct(fields, requests)?;
            let fields: Fields = columns.iter().map(|c| c.field.clone()).collect();
            Ok((Reshape::Struct(columns), DataType::Struct(fields)))
        }
        other if is_container(other) => plan_container(name, other, requests),
        other => Err(no_fields(&requests[0], other)),
    }
}

/// Lists and maps that selection can go through.
fn is_container(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..) | DataType::Map(..)
    )
}

fn map_value(entries: &FieldRef) -> Result<&FieldRef> {
    match entries.data_type() {
        DataType::Struct(parts) if parts.len() == 2 => Ok(&parts[1]),
        other => Err(Error::internal(format!(
            "select: map entries are {other}, not a key-value struct"
        ))),
    }
}

fn retyped(field: &FieldRef, data_type: DataType) -> FieldRef {
    Arc::new(field.as_ref().clone().with_data_type(data_type))
}

/// The field as output from under structs of which at least one is nullable (or none).
fn nullable_under(field: &FieldRef, under_nullable: bool) -> FieldRef {
    if under_nullable && !field.is_nullable() {
        Arc::new(Field::clone(field).with_nullable(true))
    } else {
        field.clone()
    }
}

/// Records that `path` yields an output named `name`, failing if another path already does.
fn claim(names: &mut HashMap<String, String>, name: &str, path: String) -> Result<()> {
    match names.get(name) {
        Some(first) => Err(duplicate(name, first, &path)),
        None => {
            names.insert(name.to_string(), path);
            Ok(())
        }
    }
}

fn duplicate(name: &str, first: &str, second: &str) -> Error {
    Error::invalid_config(
        SELECT,
        format!("output field {name:?} would come from both {first:?} and {second:?}"),
    )
    .with_context("path", first)
    .with_context("other_path", second)
}

fn unknown_field(request: &Request<'_>, name: &str, fields: &Fields) -> Error {
    const SHOWN: usize = 12;
    let location = request.location();
    let place = if location.is_empty() {
        "the schema".to_string()
    } else {
        format!("{location:?}")
    };
    let mut known: Vec<&str> = fields.iter().take(SHOWN).map(|f| f.name().as_str()).collect();
    if fields.len() > SHOWN {
        known.push("...");
    }
    let known = if known.is_empty() {
        "it has none".to_string()
    } else {
        format!("it has {}", known.join(", "))
    };
    Error::invalid_config(
        SELECT,
        format!(
            "field path {:?}: {place} has no field {name:?} ({known})",
            request.path.text()
        ),
    )
    .with_context("path", request.path.text())
    .with_context("segment", name)
}

fn no_fields(request: &Request<'_>, data_type: &DataType) -> Error {
    let location = request.location();
    let text = request.path.text();
    if matches!(data_type, DataType::ListView(_) | DataType::LargeListView(_)) {
        return Error::new(
            ErrorKind::Unsupported,
            format!(
                "{SELECT}: field path {text:?}: selecting inside list views ({location:?}) is not supported"
            ),
        )
        .with_context("path", text);
    }
    Error::invalid_config(
        SELECT,
        format!("field path {text:?}: {location:?} holds {data_type}, which has no fields"),
    )
    .with_context("path", text)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::cast::AsArray;
    use arrow_array::types::Int32Type;
    use arrow_array::{
        Array, ArrayRef, FixedSizeListArray, Int32Array, LargeListArray, ListArray, RecordBatch, RunArray,
        StructArray,
    };
    use arrow_buffer::OffsetBuffer;
    use arrow_schema::{DataType, Field, Fields, Schema};
    use proptest::prelude::*;

    use super::*;
    use crate::schema::FIELD_ID_KEY;
    use crate::select::testing::*;

    fn select(batch: &RecordBatch, paths: &[&str]) -> Result<RecordBatch> {
        let fields = FieldAccessDescriptor::parse(paths)?;
        let schema = select_schema(batch.schema_ref(), &fields)?;
        let selected = select_batch(batch, &fields)?;
        assert_eq!(selected.schema(), schema, "schema and data disagree");
        Ok(selected)
    }

    fn select_err(batch: &RecordBatch, paths: &[&str]) -> Error {
        let fields = FieldAccessDescriptor::parse(paths).unwrap();
        let err = select_schema(batch.schema_ref(), &fields).unwrap_err();
        assert_eq!(select_batch(batch, &fields).unwrap_err().message(), err.message());
        err
    }

    fn field_id(field: &Field) -> Option<&str> {
        field.metadata().get(FIELD_ID_KEY).map(String::as_str)
    }

    #[test]
    fn a_selected_struct_stays_whole() {
        let batch = fixture();
        let out = select(&batch, &["user", "id"]).unwrap();
        assert_eq!(out.schema().field(0), batch.schema().field(1));
        assert_eq!(out.schema().field(1), batch.schema().field(0));
        assert_eq!(out.column(0).as_ref(), batch.column(1).as_ref());
        assert_eq!(out.schema().metadata()["origin"], "fixture");
    }

    #[test]
    fn a_nested_leaf_comes_up_under_its_own_name_with_parent_nulls() {
        let batch = fixture();
        let out = select(&batch, &["user.location.latitude", "user.name"]).unwrap();
        let expected = Field::new("latitude", DataType::Float64, true);
        let latitude = out.schema().field(0).clone();
        assert_eq!(latitude.clone().with_metadata(Default::default()), expected);
        assert_eq!(field_id(&latitude), Some("10"));
        // Row 2's user is null although its location is set: the leaf is null there too.
        assert_eq!(
            render(&out),
            [
                "latitude=52.5 | name=ann",
                "latitude=null | name=null",
                "latitude=null | name=bob",
                "latitude=48.9 | name=cy",
            ]
        );
        assert!(out.schema().field(1).is_nullable());
    }

    #[test]
    fn a_struct_under_a_null_struct_takes_its_nulls() {
        let batch = fixture();
        let out = select(&batch, &["user.location"]).unwrap();
        assert_eq!(field_id(out.schema().field(0)), Some("3"));
        let location = out.column(0).as_struct();
        assert_eq!(
            (0..4).map(|i| location.is_valid(i)).collect::<Vec<_>>(),
            [true, false, false, true]
        );
    }

    #[test]
    fn star_takes_a_structs_fields_or_everything() {
        let batch = fixture();
        let out = select(&batch, &["user.*"]).unwrap();
        let names: Vec<_> = out.schema().fields().iter().map(|f| f.name().clone()).collect();
        assert_eq!(names, ["name", "location"]);
        assert!(out.schema().fields().iter().all(|f| f.is_nullable()));
        assert_eq!(
            render(&out)[1],
            "name=null | location=null",
            "row 2's user is null"
        );

        let all = select(&batch, &["*"]).unwrap();
        assert_eq!(all, batch);
    }

    #[test]
    fn a_path_through_a_list_keeps_the_list() {
        let batch = fixture();
        let out = select(&batch, &["events.location.latitude"]).unwrap();
        let item = Field::new(
            "element",
            DataType::Struct(Fields::from(vec![with_id(
                Field::new("latitude", DataType::Float64, true),
                10,
            )])),
            true,
        );
        let item = with_id(item, 21);
        let expected = with_id(Field::new("events", DataType::List(Arc::new(item)), true), 20);
        assert_eq!(out.schema().field(0), &expected);
        assert_eq!(
            render(&out),
            [
                "events=[{latitude: 1.0}, {latitude: null}]",
                "events=null",
                "events=[]",
                "events=[null, {latitude: 3.0}]",
            ]
        );
        let (input, output) = (batch.column(2).as_list::<i32>(), out.column(0).as_list::<i32>());
        assert_eq!(output.offsets(), input.offsets());
        assert_eq!(output.nulls(), input.nulls());
    }

    #[test]
    fn paths_through_one_list_merge_in_written_order() {
        let batch = fixture();
        let out = select(&batch, &["events.location.latitude", "id", "events.element.id"]).unwrap();
        let names: Vec<_> = out.schema().fields().iter().map(|f| f.name().clone()).collect();
        assert_eq!(names, ["events", "id"]);
        let DataType::List(item) = out.schema().field(0).data_type().clone() else {
            panic!("events is not a list")
        };
        let DataType::Struct(fields) = item.data_type() else {
            panic!("the element is not a struct")
        };
        assert_eq!(
            fields
                .iter()
                .map(|f| (f.name().as_str(), f.is_nullable()))
                .collect::<Vec<_>>(),
            [("latitude", true), ("id", false)]
        );
        assert_eq!(
            render(&out),
            [
                "events=[{latitude: 1.0, id: 10}, {latitude: null, id: 11}] | id=1",
                "events=null | id=2",
                "events=[] | id=3",
                "events=[null, {latitude: 3.0, id: 13}] | id=4",
            ]
        );
    }

    #[test]
    fn a_path_through_a_map_goes_into_its_values() {
        let batch = fixture();
        for paths in [["attrs.score"], ["attrs.value.score"]] {
            let out = select(&batch, &paths).unwrap();
            let field = out.schema().field(0).clone();
            assert_eq!(field_id(&field), Some("30"));
            let DataType::Map(entries, false) = field.data_type() else {
                panic!("attrs is not a map")
            };
            assert_eq!(entries.name(), "key_value");
            let expected_value = Field::new(
                "value",
                DataType::Struct(Fields::from(vec![Field::new("score", DataType::Float64, true)])),
                true,
            );
            let DataType::Struct(parts) = entries.data_type() else {
                panic!("entries are not a struct")
            };
            assert_eq!(parts[0].as_ref(), &Field::new("key", DataType::Utf8, false));
            assert_eq!(parts[1].as_ref(), &expected_value);
            assert_eq!(
                render(&out),
                [
                    "attrs={a: {score: 0.5}}",
                    "attrs=null",
                    "attrs={}",
                    "attrs={b: null, c: {score: 1.5}}",
                ]
            );
            let (input, output) = (batch.column(3).as_map(), out.column(0).as_map());
            assert_eq!(output.offsets(), input.offsets());
            assert_eq!(output.nulls(), input.nulls());
        }
    }

    #[test]
    fn the_whole_container_or_its_whole_element_is_kept_as_is() {
        let batch = fixture();
        for paths in [["events"], ["events.element"]] {
            let out = select(&batch, &paths).unwrap();
            assert_eq!(out.schema().field(0), batch.schema().field(2));
            assert_eq!(out.column(0).as_ref(), batch.column(2).as_ref());
        }
        let out = select(&batch, &["attrs.value", "events.*"]).unwrap();
        assert_eq!(out.schema().field(0), batch.schema().field(3));
        assert_eq!(out.schema().field(1), batch.schema().field(2));
        assert_eq!(out.column(0).as_ref(), batch.column(3).as_ref());
        assert_eq!(out.column(1).as_ref(), batch.column(2).as_ref());
    }

    #[test]
    fn sliced_batches_select_the_same_rows() {
        let batch = fixture();
        let paths = [
            "events.location.latitude",
            "user.location.latitude",
            "attrs.score",
            "events.id",
            "user.*",
        ];
        let whole = render(&select(&batch, &paths).unwrap());
        for (offset, len) in [(1, 3), (2, 2), (3, 1), (0, 0), (4, 0)] {
            let input = batch.slice(offset, len);
            let out = select(&input, &paths).unwrap();
            assert_eq!(render(&out), whole[offset..offset + len], "slice {offset}+{len}");
            let (list_in, list_out) = (input.column(2).as_list::<i32>(), out.column(0).as_list::<i32>());
            assert_eq!(list_out.offsets(), list_in.offsets());
            assert_eq!(list_out.nulls(), list_in.nulls());
            let (map_in, map_out) = (input.column(3).as_map(), out.column(2).as_map());
            assert_eq!(map_out.offsets(), map_in.offsets());
        }
    }

    #[test]
    fn a_container_under_a_null_struct_takes_its_nulls_and_keeps_offsets() {
        let tags = ListArray::try_new(
            Arc::new(Field::new("item", DataType::Int32, true)),
            offsets(&[0, 1, 3, 4]),
            Arc::new(Int32Array::from(vec![1, 2, 3, 4])),
            None,
        )
        .unwrap();
        let s = StructArray::try_new(
            Fields::from(vec![Field::new("tags", tags.data_type().clone(), false)]),
            vec![Arc::new(tags)],
            nulls(&[true, false, true]),
        )
        .unwrap();
        let batch = batch_of("s", Arc::new(s)).slice(1, 2);
        let out = select(&batch, &["s.tags"]).unwrap();
        assert!(out.schema().field(0).is_nullable());
        assert_eq!(render(&out), ["tags=null", "tags=[4]"]);
        let list = out.column(0).as_list::<i32>();
        assert_eq!(list.offsets().as_ref(), &[1, 3, 4]);
    }

    #[test]
    fn large_fixed_size_and_nested_lists_are_gone_through() {
        let element = StructArray::try_new(
            Fields::from(vec![
                Field::new("x", DataType::Int32, false),
                Field::new("y", DataType::Int32, false),
            ]),
            vec![
                Arc::new(Int32Array::from(vec![1, 2, 3, 4])),
                Arc::new(Int32Array::from(vec![5, 6, 7, 8])),
            ],
            None,
        )
        .unwrap();
        let item = Arc::new(Field::new("item", element.data_type().clone(), false));
        let element: ArrayRef = Arc::new(element);
        let large = LargeListArray::try_new(
            item.clone(),
            OffsetBuffer::new(vec![0i64, 3, 4].into()),
            element.clone(),
            None,
        )
        .unwrap();
        let fixed =
            FixedSizeListArray::try_new(item.clone(), 2, element.clone(), nulls(&[true, false])).unwrap();
        let inner = ListArray::try_new(item, offsets(&[0, 1, 4]), element, None).unwrap();
        let nested = ListArray::try_new(
            Arc::new(Field::new("item", inner.data_type().clone(), true)),
            offsets(&[0, 2, 2]),
            Arc::new(inner),
            None,
        )
        .unwrap();
        let schema = Schema::new(vec![
            Field::new("large", large.data_type().clone(), false),
            Field::new("fixed", fixed.data_type().clone(), true),
            Field::new("nested", nested.data_type().clone(), false),
        ]);
        let batch = RecordBatch::try_new(
            Arc::new(schema),
            vec![Arc::new(large), Arc::new(fixed), Arc::new(nested)],
        )
        .unwrap();
        let out = select(
            &batch,
            &[
                "large.y",
                "fixed.element.x",
                "nested.element.element.y",
                "nested.x",
            ],
        )
        .unwrap();
        assert!(matches!(
            out.schema().field(0).data_type(),
            DataType::LargeList(_)
        ));
        assert!(matches!(
            out.schema().field(1).data_type(),
            DataType::FixedSizeList(_, 2)
        ));
        assert_eq!(
            render(&out),
            [
                "large=[{y: 5}, {y: 6}, {y: 7}] | fixed=[{x: 1}, {x: 2}] | nested=[[{y: 5, x: 1}], [{y: 6, x: 2}, {y: 7, x: 3}, {y: 8, x: 4}]]",
                "large=[{y: 8}] | fixed=null | nested=[]",
            ]
        );
    }

    #[test]
    fn unknown_fields_name_the_path_and_the_segment() {
        let batch = fixture();
        let err = select_err(&batch, &["id", "usr"]);
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert_eq!(
            err.message(),
            "select: field path \"usr\": the schema has no field \"usr\" (it has id, user, events, attrs)"
        );
        assert_eq!(err.context_value("path"), Some("usr"));
        assert_eq!(err.context_value("segment"), Some("usr"));

        let err = select_err(&batch, &["events.location.lat"]);
        assert_eq!(
            err.message(),
            "select: field path \"events.location.lat\": \"events.location\" has no field \"lat\" (it has latitude, longitude)"
        );
        assert_eq!(err.context_value("segment"), Some("lat"));

        let err = select_err(&batch, &["attrs.key"]);
        assert_eq!(
            err.message(),
            "select: field path \"attrs.key\": \"attrs\" has no field \"key\" (it has score, label)"
        );
    }

    #[test]
    fn paths_past_a_leaf_are_rejected() {
        let batch = fixture();
        let err = select_err(&batch, &["id.value"]);
        assert_eq!(
            err.message(),
            "select: field path \"id.value\": \"id\" holds Int64, which has no fields"
        );
        let err = select_err(&batch, &["id.*"]);
        assert_eq!(
            err.message(),
            "select: field path \"id.*\": \"id\" holds Int64, which has no fields"
        );
        let tags = ListArray::from_iter_primitive::<Int32Type, _, _>([Some(vec![Some(1)])]);
        let batch = batch_of("tags", Arc::new(tags));
        let err = select_err(&batch, &["tags.element.x"]);
        assert_eq!(
            err.message(),
            "select: field path \"tags.element.x\": \"tags.element\" holds Int32, which has no fields"
        );
    }

    #[test]
    fn two_outputs_with_one_name_fail_naming_both_paths() {
        let x = |v: i32| -> ArrayRef {
            Arc::new(
                StructArray::try_new(
                    Fields::from(vec![Field::new("x", DataType::Int32, false)]),
                    vec![Arc::new(Int32Array::from(vec![v]))],
                    None,
                )
                .unwrap(),
            )
        };
        let batch = RecordBatch::try_from_iter([("a", x(1)), ("b", x(2))]).unwrap();
        let err = select_err(&batch, &["a.x", "b.x"]);
        assert_eq!(
            err.message(),
            "select: output field \"x\" would come from both \"a.x\" and \"b.x\""
        );
        assert_eq!(err.context_value("path"), Some("a.x"));
        assert_eq!(err.context_value("other_path"), Some("b.x"));
        let err = select_err(&batch, &["a.*", "b.x"]);
        assert!(err.message().contains("both \"a.*\" and \"b.x\""), "{err}");

        let batch = fixture();
        for (paths, message) in [
            (
                ["events", "events.id"],
                "select: output field \"events\" would come from both \"events\" and \"events.id\"",
            ),
            (
                ["events.id", "events"],
                "select: output field \"events\" would come from both \"events.id\" and \"events\"",
            ),
            (
                ["events.element", "events.id"],
                "select: output field \"events\" would come from both \"events.element\" and \"events.id\"",
            ),
            (
                ["events.*", "events.id"],
                "select: output field \"id\" would come from both \"events.*\" and \"events.id\"",
            ),
        ] {
            assert_eq!(select_err(&batch, &paths).message(), message);
        }
    }

    #[test]
    fn a_run_end_encoded_leaf_cannot_take_parent_nulls() {
        let runs =
            RunArray::<Int32Type>::try_new(&Int32Array::from(vec![2]), &Int32Array::from(vec![7])).unwrap();
        let s = StructArray::try_new(
            Fields::from(vec![Field::new("r", runs.data_type().clone(), true)]),
            vec![Arc::new(runs)],
            nulls(&[true, false]),
        )
        .unwrap();
        let batch = batch_of("s", Arc::new(s));
        let fields = FieldAccessDescriptor::parse(["s.r"]).unwrap();
        let err = select_batch(&batch, &fields).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported);
        assert!(
            err.message().starts_with("column \"r\" of type RunEndEncoded"),
            "{err}"
        );
        // Without nulls above it, it is taken as is.
        assert_eq!(select_batch(&batch.slice(0, 1), &fields).unwrap().num_rows(), 1);
    }

    proptest! {
        #[test]
        fn selection_matches_the_model(all in model_rows(), a in any::<usize>(), b in any::<usize>()) {
            let (offset, len) = window(all.len(), a, b);
            let batch = model_batch(&all).slice(offset, len);
            let rows = &all[offset..offset + len];
            let out = select(&batch, &["s.t.x", "l.t.x", "s.z", "l.r"]).unwrap();

            let x = out.column(0).as_primitive::<Int32Type>();
            let z = out.column(2).as_primitive::<Int32Type>();
            for (i, row) in rows.iter().enumerate() {
                let expected = row.s_t.x.filter(|_| row.s_valid && row.s_t.valid);
                prop_assert_eq!(x.is_valid(i).then(|| x.value(i)), expected);
                let expected = row.s_z.filter(|_| row.s_valid);
                prop_assert_eq!(z.is_valid(i).then(|| z.value(i)), expected);
            }

            let (input, output) = (batch.column(1).as_list::<i32>(), out.column(1).as_list::<i32>());
            prop_assert_eq!(output.offsets(), input.offsets());
            prop_assert_eq!(output.nulls(), input.nulls());
            // The values stay whole under the sliced offsets: compare them all.
            let values = output.values().as_struct();
            let (x, r) = (values.column(0).as_primitive::<Int32Type>(), values.column(1).as_primitive::<Int32Type>());
            let elements: Vec<_> = all.iter().flat_map(|row| row.l.iter().flatten()).collect();
            prop_assert_eq!(values.len(), elements.len());
            for (j, (valid, t, id)) in elements.into_iter().enumerate() {
                prop_assert_eq!(values.is_valid(j), *valid);
                if *valid {
                    prop_assert_eq!(x.is_valid(j).then(|| x.value(j)), t.x.filter(|_| t.valid));
                    prop_assert_eq!(r.value(j), *id);
                }
            }
        }
    }
}
