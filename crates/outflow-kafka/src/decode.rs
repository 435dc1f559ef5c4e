//! JSON record values as Arrow rows, through arrow-json's push decoder.
//!
//! All the values of a poll go through one decoder. When that fails (a syntax error, a
//! value that does not fit its column, a field the schema lacks), the values are decoded
//! again one at a time, so that each bad record is named and the others are kept. That
//! costs nothing until something fails.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, StringArray, TimestampMillisecondArray};
use arrow_json::reader::Decoder;
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef, TimeUnit};
use outflow_core::schema::json::{JsonSample, decoder_builder};
use outflow_core::{Error, Result};

use crate::record::Record;

/// Turns record values into batches of a fixed schema.
#[derive(Debug)]
pub struct JsonDecoder {
    /// What the values decode into.
    values: SchemaRef,
    /// The batches: the values' columns, then the key and timestamp columns if any.
    output: SchemaRef,
    key_column: bool,
    headers_column: bool,
    timestamp_column: bool,
    strict: bool,
}

/// The columns a record's key and Kafka timestamp go to, if any.
#[derive(Clone, Copy, Debug, Default)]
pub struct RecordColumns<'a> {
    /// The key, as a string.
    pub key: Option<&'a str>,
    /// The headers, as the text of a JSON object.
    pub headers: Option<&'a str>,
    /// The Kafka timestamp, as a UTC timestamp in milliseconds.
    pub timestamp: Option<&'a str>,
}

/// One poll's records as rows: the batch (in record order), and the records that could not
/// be decoded, each with why.
#[derive(Debug)]
pub struct Decoded {
    /// The rows of the records that decoded.
    pub batch: RecordBatch,
    /// The index in the input of each row of `batch`.
    pub rows: Vec<usize>,
    /// The records that did not decode: their index in the input and the reason.
    pub failed: Vec<(usize, String)>,
}

impl JsonDecoder {
    /// A decoder into `values`, plus the columns of `record` for each record's key and
    /// timestamp. Under `strict`, a field the schema does not name fails its record (an
    /// inferred schema); otherwise it is ignored (a given one).
    pub fn new(values: SchemaRef, record: RecordColumns<'_>, strict: bool) -> Result<JsonDecoder> {
        let mut fields: Vec<Arc<Field>> = values.fields().iter().cloned().collect();
        let extra = [
            ("kafka.key_column", record.key, DataType::Utf8),
            ("kafka.headers_column", record.headers, DataType::Utf8),
            ("kafka.timestamp_column", record.timestamp, timestamp_type()),
        ];
        for (option, name, data_type) in extra {
            let Some(name) = name else { continue };
            if values.field_with_name(name).is_ok() {
                return Err(Error::invalid_config(
                    option,
                    format!("{name:?} is also a field of the record values"),
                ));
            }
            fields.push(Arc::new(Field::new(name, data_type, true)));
        }
        Ok(JsonDecoder {
            values,
            output: Arc::new(Schema::new(fields)),
            key_column: record.key.is_some(),
            headers_column: record.headers.is_some(),
            timestamp_column: record.timestamp.is_some(),
            strict,
        })
    }

    /// The schema the record values decode into.
    pub fn values(&self) -> &SchemaRef {
        &self.values
    }

    /// The schema of the batches.
    pub fn schema(&self) -> &SchemaRef {
        &self.output
    }

    fn decoder(&self, rows: usize) -> Result<Decoder> {
        // One more row than asked for: a value holding two objects then shows as a count
        // that does not match, instead of a decoder that stops taking bytes.
        decoder_builder(self.values.clone(), rows + 1, self.strict)
            .build_decoder()
            .map_err(|e| Error::internal(format!("building the JSON decoder: {e}")))
    }

    /// Decodes `records` (a tombstone, with no value, fails).
    pub fn decode(&self, records: &[Record]) -> Result<Decoded> {
        let present: Vec<usize> = (0..records.len())
            .filter(|&i| records[i].value.is_some())
            .collect();
        let mut failed: Vec<(usize, String)> = (0..records.len())
            .filter(|&i| records[i].value.is_none())
            .map(|i| (i, "the record has no value (a tombstone)".to_string()))
            .collect();
        let (batch, rows) = match self.decode_all(records, &present) {
            Ok(batch) => (batch, present),
            Err(_) => {
                // Find the bad ones: one value at a time.
                let mut good = Vec::new();
                let mut parts = Vec::new();
                for &i in &present {
                    match self.decode_all(records, &[i]) {
                        Ok(batch) => {
                            good.push(i);
                            parts.push(batch);
                        }
                        Err(e) => failed.push((i, e)),
                    }
                }
                failed.sort_by_key(|(i, _)| *i);
                let batch = arrow_select::concat::concat_batches(&self.output, &parts)
                    .map_err(|e| Error::internal(format!("joining decoded records: {e}")))?;
                (batch, good)
            }
        };
        Ok(Decoded { batch, rows, failed })
    }

    /// The rows of `records[which]`, or why they did not decode.
    fn decode_all(&self, records: &[Record], which: &[usize]) -> std::result::Result<RecordBatch, String> {
        let mut decoder = self.decoder(which.len()).map_err(|e| e.message().to_string())?;
        for &i in which {
            let value = records[i].value.as_deref().unwrap_or_default();
            feed(&mut decoder, value).map_err(|e| json_reason(&e))?;
            if decoder.has_partial_record() {
                return Err("the value is not one complete JSON object".into());
            }
        }
        let values = match decoder.flush().map_err(|e| json_reason(&e))? {
            Some(batch) => batch,
            None => RecordBatch::new_empty(self.values.clone()),
        };
        if values.num_rows() != which.len() {
            return Err(format!(
                "the value holds {} JSON objects, not one",
                values.num_rows()
            ));
        }
        if !self.key_column && !self.headers_column && !self.timestamp_column {
            return Ok(values);
        }
        let mut columns: Vec<ArrayRef> = values.columns().to_vec();
        if self.key_column {
            let keys: StringArray = which
                .iter()
                .map(|&i| records[i].key.as_deref().map(String::from_utf8_lossy))
                .collect();
            columns.push(Arc::new(keys));
        }
        if self.headers_column {
            let headers: StringArray = which.iter().map(|&i| headers_text(&records[i])).collect();
            columns.push(Arc::new(headers));
        }
        if self.timestamp_column {
            let times: TimestampMillisecondArray = which.iter().map(|&i| records[i].timestamp_ms).collect();
            columns.push(Arc::new(times.with_timezone("UTC")));
        }
        RecordBatch::try_new(self.output.clone(), columns).map_err(|e| e.to_string())
    }
}

/// A record's headers as the text of a JSON object, values as UTF-8 text (null for a
/// header without one; of a name given twice, the last); `None` without headers.
fn headers_text(record: &Record) -> Option<String> {
    if record.headers.is_empty() {
        return None;
    }
    let object: serde_json::Map<String, serde_json::Value> = record
        .headers
        .iter()
        .map(|(name, value)| {
            let value = value.as_deref().map_or(serde_json::Value::Null, |v| {
                serde_json::Value::String(String::from_utf8_lossy(v).into_owned())
            });
            (name.clone(), value)
        })
        .collect();
    Some(serde_json::Value::Object(object).to_string())
}

/// The type of the timestamp column: milliseconds, UTC.
fn timestamp_type() -> DataType {
    DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into()))
}

/// Feeds one value to `decoder`, then a newline so that the next value starts afresh.
fn feed(decoder: &mut Decoder, value: &[u8]) -> std::result::Result<(), ArrowError> {
    let mut rest = value;
    while !rest.is_empty() {
        let read = decoder.decode(rest)?;
        if read == 0 {
            return Err(ArrowError::JsonError(
                "the value holds more than one JSON object".into(),
            ));
        }
        rest = &rest[read..];
    }
    decoder.decode(b"\n")?;
    Ok(())
}

fn json_reason(err: &ArrowError) -> String {
    let text = err.to_string();
    let text = text.strip_prefix("Json error: ").unwrap_or(&text);
    format!("not a valid record: {text}")
}

/// A schema inferred from the values of `records` that are JSON objects (the others are
/// left to fail when decoded): top-level columns in the order their keys first appear,
/// always-null columns as strings.
pub fn infer_schema(records: &[Record]) -> Result<SchemaRef> {
    let mut sample = JsonSample::new();
    for value in records.iter().filter_map(|r| r.value.as_deref()) {
        let _ = sample.add(value);
    }
    if sample.is_empty() {
        return Err(Error::invalid_input(
            "no record to infer the schema from: the sampled records hold no JSON object \
             (give the columns in `json.schema`)",
        ));
    }
    sample
        .schema()
        .map_err(|e| Error::invalid_input(format!("inferring the schema of the records: {e}")))
}

#[cfg(test)]
mod tests {
    use arrow_array::Array;
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;

    use super::*;

    fn record(offset: i64, value: Option<&str>, key: Option<&str>) -> Record {
        Record {
            topic: "t".into(),
            partition: 0,
            offset,
            timestamp_ms: (offset == 0).then_some(1_700_000_000_000),
            key: key.map(|k| k.as_bytes().to_vec()),
            value: value.map(|v| v.as_bytes().to_vec()),
            headers: Vec::new(),
        }
    }

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]))
    }

    #[test]
    fn values_and_keys_become_rows_in_order() {
        let columns = RecordColumns {
            key: Some("key"),
            timestamp: Some("at"),
            ..RecordColumns::default()
        };
        let decoder = JsonDecoder::new(schema(), columns, false).unwrap();
        let records = [
            record(0, Some(r#"{"id": 1, "name": "a"}"#), Some("k1")),
            record(1, Some(r#"{"id": 2, "extra": true}"#), None),
        ];
        let decoded = decoder.decode(&records).unwrap();
        assert!(decoded.failed.is_empty());
        assert_eq!(decoded.rows, [0, 1]);
        let batch = decoded.batch;
        assert_eq!(batch.num_columns(), 4);
        let ids = batch.column(0).as_primitive::<Int64Type>();
        assert_eq!(ids.values(), &[1, 2]);
        let keys = batch.column(2).as_string::<i32>();
        assert_eq!(keys.value(0), "k1");
        assert!(keys.is_null(1));
        let times = batch
            .column(3)
            .as_primitive::<arrow_array::types::TimestampMillisecondType>();
        assert_eq!(times.value(0), 1_700_000_000_000);
        assert!(times.is_null(1));
    }

    #[test]
    fn bad_records_are_named_and_the_rest_kept() {
        let decoder = JsonDecoder::new(schema(), RecordColumns::default(), true).unwrap();
        let records = [
            record(0, Some(r#"{"id": 1}"#), None),
            record(1, Some(r#"{"id": "x"}"#), None),
            record(2, None, None),
            record(3, Some(r#"{"id": 4"#), None),
            record(4, Some(r#"{"id": 5, "new_field": 1}"#), None),
            record(5, Some(r#"{"id": 6} {"id": 7}"#), None),
            record(6, Some(r#"{"id": 8}"#), None),
        ];
        let decoded = decoder.decode(&records).unwrap();
        assert_eq!(decoded.rows, [0, 6]);
        let ids = decoded.batch.column(0).as_primitive::<Int64Type>();
        assert_eq!(ids.values(), &[1, 8]);
        let failed: Vec<usize> = decoded.failed.iter().map(|(i, _)| *i).collect();
        assert_eq!(failed, [1, 2, 3, 4, 5]);
        let reason = |i: usize| &decoded.failed.iter().find(|(j, _)| *j == i).unwrap().1;
        assert!(reason(2).contains("tombstone"), "{}", reason(2));
        assert!(reason(4).contains("new_field"), "{}", reason(4));
        assert!(reason(5).contains("not one"), "{}", reason(5));
    }

    #[test]
    fn headers_become_a_json_object_column() {
        let columns = RecordColumns {
            headers: Some("headers"),
            ..RecordColumns::default()
        };
        let decoder = JsonDecoder::new(schema(), columns, false).unwrap();
        let mut with = record(0, Some(r#"{"id": 1}"#), None);
        with.headers = vec![
            ("trace".into(), Some(b"abc".to_vec())),
            ("empty".into(), None),
            ("trace".into(), Some(b"def".to_vec())),
        ];
        let without = record(1, Some(r#"{"id": 2}"#), None);
        let batch = decoder.decode(&[with, without]).unwrap().batch;
        let headers = batch.column(2).as_string::<i32>();
        let first: serde_json::Value = serde_json::from_str(headers.value(0)).unwrap();
        assert_eq!(first, serde_json::json!({"trace": "def", "empty": null}));
        assert!(headers.is_null(1));
    }

    #[test]
    fn a_key_column_may_not_shadow_a_field() {
        let key = RecordColumns {
            key: Some("id"),
            ..RecordColumns::default()
        };
        let err = JsonDecoder::new(schema(), key, false).unwrap_err();
        assert_eq!(err.context_value("field"), Some("kafka.key_column"));
        let time = RecordColumns {
            timestamp: Some("name"),
            ..RecordColumns::default()
        };
        let err = JsonDecoder::new(schema(), time, false).unwrap_err();
        assert_eq!(err.context_value("field"), Some("kafka.timestamp_column"));
    }

    #[test]
    fn only_objects_count_for_the_inferred_schema() {
        let records = [
            record(0, Some(r#"{"z": 1, "a": "x"}"#), None),
            record(1, Some("not json"), None),
            record(2, Some("[1, 2]"), None),
        ];
        let schema = infer_schema(&records).unwrap();
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["z", "a"]);
        let err = infer_schema(&[record(0, None, None), record(1, Some("3"), None)]).unwrap_err();
        assert!(err.message().contains("json.schema"), "{err}");
    }
}
