//! Arrow schemas inferred from JSON objects, shared by the sources that read JSON (NDJSON
//! files, Kafka record values).
//!
//! arrow-json infers the types; this keeps the top-level columns in the order their keys
//! first appear (serde_json's maps would sort them) and reads columns that were null in
//! every object as strings, so values later in the input are kept rather than dropped.

use std::sync::Arc;

use arrow_json::reader::{ReaderBuilder, infer_json_schema_from_iterator};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};
use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};

/// Why a JSON text could not be sampled.
#[derive(Debug)]
pub enum SampleError {
    /// It is not valid JSON.
    Syntax(serde_json::Error),
    /// It is valid JSON but not an object.
    NotAnObject,
}

/// The objects seen so far, for [`JsonSample::schema`].
#[derive(Debug, Default)]
pub struct JsonSample {
    values: Vec<serde_json::Value>,
    order: Vec<String>,
}

impl JsonSample {
    /// No objects yet.
    pub fn new() -> JsonSample {
        JsonSample::default()
    }

    /// Adds one JSON object, given as its text.
    pub fn add(&mut self, text: &[u8]) -> Result<(), SampleError> {
        let value: serde_json::Value = serde_json::from_slice(text).map_err(SampleError::Syntax)?;
        if !value.is_object() {
            return Err(SampleError::NotAnObject);
        }
        let TopLevelKeys(keys) = serde_json::from_slice(text).map_err(SampleError::Syntax)?;
        for key in keys {
            if !self.order.contains(&key) {
                self.order.push(key);
            }
        }
        self.values.push(value);
        Ok(())
    }

    /// How many objects were added.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether none was.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The schema of the objects: columns in first-appearance order (nested fields in
    /// arrow-json's), always-null columns as strings.
    pub fn schema(&self) -> Result<SchemaRef, ArrowError> {
        let schema = infer_json_schema_from_iterator(self.values.iter().map(Ok))?;
        let position = |name: &str| self.order.iter().position(|k| k == name).unwrap_or(usize::MAX);
        let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.sort_by_key(|f| position(f.name()));
        Ok(Arc::new(nulls_to_strings(Schema::new(fields))))
    }
}

/// Columns of type `Null` (empty in every row sampled) as strings.
pub fn nulls_to_strings(schema: Schema) -> Schema {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::Null => f.as_ref().clone().with_data_type(DataType::Utf8),
            _ => f.as_ref().clone(),
        })
        .collect();
    Schema::new_with_metadata(fields, schema.metadata().clone())
}

/// The JSON decoder's settings for `schema`. Numbers and booleans are read into string
/// columns as text: inference makes a column a string when its values mix types, and those
/// values must then read. Under `strict`, a field the schema lacks is an error.
pub fn decoder_builder(schema: SchemaRef, batch_size: usize, strict: bool) -> ReaderBuilder {
    ReaderBuilder::new(schema)
        .with_batch_size(batch_size)
        .with_strict_mode(strict)
        .with_coerce_primitive(true)
}

/// The keys of a JSON object, in the order written; values are skipped.
struct TopLevelKeys(Vec<String>);

impl<'de> Deserialize<'de> for TopLevelKeys {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        struct Keys;
        impl<'de> Visitor<'de> for Keys {
            type Value = TopLevelKeys;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<TopLevelKeys, A::Error> {
                let mut keys = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    map.next_value::<IgnoredAny>()?;
                    keys.push(key);
                }
                Ok(TopLevelKeys(keys))
            }
        }
        deserializer.deserialize_map(Keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_come_in_first_appearance_order_and_nulls_read_as_strings() {
        let mut sample = JsonSample::new();
        sample.add(br#"{"z": 1, "a": null}"#).unwrap();
        sample.add(br#"{"a": null, "m": [1.5]}"#).unwrap();
        assert!(matches!(sample.add(b"not json"), Err(SampleError::Syntax(_))));
        assert!(matches!(sample.add(b"[1]"), Err(SampleError::NotAnObject)));
        assert_eq!(sample.len(), 2);
        let schema = sample.schema().unwrap();
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["z", "a", "m"]);
        assert_eq!(schema.field(1).data_type(), &DataType::Utf8);
    }
}
