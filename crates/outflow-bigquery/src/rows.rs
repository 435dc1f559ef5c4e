//! What the sink does to one table's rows, step by step, without the service:
//!
//! 1. [`TableRows::new`]: names aligned with the table's (without case, as BigQuery
//!    compares them; unknown columns dropped under `ignore_unknown_values`), and rows with a
//!    NULL array element set aside (BigQuery arrays cannot hold one).
//! 2. [`TableRows::plan`]: the shared planner decides. A schema change it allows is returned
//!    for the sink to make before sending; rows whose only problem is a null where the table
//!    requires a value fail alone; anything else fails every row, with the planner's reasons.
//! 3. [`TableRows::encode`]: rows converted to the exact Arrow types BigQuery is sent (a row
//!    that does not convert fails alone), cut into requests under the size limit (a row too
//!    big for any request fails up front) and encoded.
//! 4. [`TableRows::append`]: each request appended; rows the service refuses fail and the
//!    others are sent again.
//!
//! [`encode_rows`] runs steps 1 to 3 for tools and benchmarks.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use bytes::Bytes;
use outflow_core::evolution::{ChangeKind, EvolutionPlan, SchemaEvolutionConfig};
use outflow_core::schema::{InputSchema, Schema, conform_batch};
use outflow_core::sink::{DestinationStats, row_to_json};
use outflow_core::{Error, ErrorKind, FailedRecord, IncompatibleSchemaHandling, Result};

use crate::admin::plan_evolution;
use crate::request::{
    EncodedRequest, NullMap, Rows, align_names, encode_requests, finalize_batch, ipc_batch, ipc_schema,
};
use crate::schema::TableSchema;
use crate::schema::types::{ListNulls, target_schema, to_core};
use crate::stream::{Appended, StreamWriter};

/// Rows set aside, by position in the rows being written, with the reason.
type Refused = Vec<(usize, String)>;

/// Requests ready to send, with their writer schema.
#[derive(Clone, Debug)]
pub struct Encoded {
    /// The IPC schema message of the writer.
    pub schema: Bytes,
    /// The requests, in row order.
    pub requests: Vec<EncodedRequest>,
}

/// One table's rows on their way to it.
#[derive(Debug)]
pub struct TableRows {
    name: String,
    /// The rows as given (names aligned), for failed records.
    original: Rows,
    /// The rows still to be written.
    rows: Rows,
    failed: Vec<FailedRecord>,
}

impl TableRows {
    /// Aligns names with `table`'s and sets aside rows with NULL array elements.
    pub fn new(name: &str, table: &TableSchema, rows: Rows, drop_unknown: bool) -> Result<TableRows> {
        let original = rows.with_batch(align_names(&rows.batch, table, drop_unknown)?);
        let mut out = TableRows {
            name: name.to_string(),
            rows: original.clone(),
            original,
            failed: Vec::new(),
        };
        let null_elements: Refused = NullMap::of(&out.rows.batch)
            .null_elements()
            .into_iter()
            .map(|(row, path)| {
                (
                    row,
                    format!("column {path}: a REPEATED column cannot hold a NULL element"),
                )
            })
            .collect();
        out.refuse(null_elements)?;
        Ok(out)
    }

    /// The rows not written and why, so far.
    pub fn failed(&self) -> &[FailedRecord] {
        &self.failed
    }

    /// The rows not written and why.
    pub fn into_failed(self) -> Vec<FailedRecord> {
        self.failed
    }

    /// Fails the rows at `refused` (positions in the rows still to be written).
    fn refuse(&mut self, refused: Refused) -> Result<()> {
        if refused.is_empty() {
            return Ok(());
        }
        let kept = keep_others(&self.rows, &refused)?;
        fail_rows(&self.name, &self.original, &self.rows, refused, &mut self.failed);
        self.rows = kept;
        Ok(())
    }

    /// Plans the rows against the table's schema (in the planner's model) with the shared
    /// planner. Returns the plan when the table's schema must change before the rows are
    /// sent; rows that cannot be written under `config` are failed, or, with
    /// `on_incompatible: fail`, fail the call.
    pub fn plan(&mut self, table: &Schema, config: &SchemaEvolutionConfig) -> Result<Option<EvolutionPlan>> {
        let routed = config.on_incompatible_or(IncompatibleSchemaHandling::RouteToErrors)
            == IncompatibleSchemaHandling::RouteToErrors;
        // Two rounds: the second plans what is left once rows with nulls in required
        // columns are set aside, which then fits or does not.
        for _ in 0..2 {
            if self.rows.is_empty() {
                return Ok(None);
            }
            let nulls = NullMap::of(&self.rows.batch);
            let mut input = InputSchema::from_batch(&self.rows.batch)?;
            nulls.tighten(&mut input);
            let plan = plan_evolution(Some(table), &input, config)?;
            if plan.all_compatible() {
                return Ok(plan.changes_schema().then_some(plan));
            }
            if !routed {
                return Err(plan
                    .rejection_error(&format!("rows for {} do not fit the table", self.name))
                    .with_context("table", self.name.clone()));
            }
            match null_rows(&plan, &nulls) {
                Some(refused) if refused.len() < self.rows.len() => self.refuse(refused)?,
                _ => {
                    let reasons = plan.rejection_message();
                    let all = (0..self.rows.len()).map(|p| (p, reasons.clone())).collect();
                    self.refuse(all)?;
                    return Ok(None);
                }
            }
        }
        Ok(None)
    }

    /// Converts the rows to the Arrow types `table` takes (a row that does not convert
    /// fails alone); `None` when no row is left to send.
    pub fn conform(&mut self, table: &TableSchema) -> Result<Option<Rows>> {
        if self.rows.is_empty() {
            return Ok(None);
        }
        let input_schema = self.rows.batch.schema();
        let conform_target = Arc::new(target_schema(table, &input_schema, ListNulls::Allowed)?);
        let final_target: SchemaRef = Arc::new(target_schema(table, &input_schema, ListNulls::Forbidden)?);
        let (conformed, refused) = conform_rows(&self.rows, &conform_target)?;
        let refused = refused
            .into_iter()
            .map(|(index, reason)| (position_of(&self.rows, index), reason))
            .collect();
        self.refuse(refused)?;
        if self.rows.is_empty() {
            return Ok(None);
        }
        Ok(Some(
            conformed.with_batch(finalize_batch(&conformed.batch, &final_target)?),
        ))
    }

    /// Fails the rows at `failed` (their indexes in the sink's input), with the reasons.
    pub fn fail(&mut self, failed: Vec<(u64, String)>) -> Result<()> {
        let refused = failed
            .into_iter()
            .map(|(index, reason)| (position_of(&self.rows, index), reason))
            .collect();
        self.refuse(refused)
    }

    /// Converts the rows to the Arrow types `table` takes and cuts them into requests of at
    /// most `max_request_bytes`; `None` when no row is left to send.
    pub fn encode(&mut self, table: &TableSchema, max_request_bytes: usize) -> Result<Option<Encoded>> {
        if self.rows.is_empty() {
            return Ok(None);
        }
        let final_target = target_schema(table, &self.rows.batch.schema(), ListNulls::Forbidden)?;
        let Some(rows) = self.conform(table)? else {
            return Ok(None);
        };
        let schema = ipc_schema(&final_target);
        let (requests, oversize) = encode_requests(&rows, max_request_bytes, schema.len())?;
        let oversize: Refused = oversize
            .into_iter()
            .map(|(p, size)| {
                (
                    position_of(&self.rows, rows.indices[p]),
                    format!(
                        "the row is {size} bytes encoded, over the request limit of {max_request_bytes} bytes \
                         (max_request_bytes)"
                    ),
                )
            })
            .collect();
        self.refuse(oversize)?;
        Ok(Some(Encoded { schema, requests }))
    }

    /// Appends one request. Rows the service refuses fail (the service wrote none of the
    /// request) and the others are sent again at the same offset; each round removes at
    /// least one row, so this ends.
    pub async fn append(
        &mut self,
        stream: &mut StreamWriter,
        schema: &Bytes,
        request: EncodedRequest,
    ) -> Result<DestinationStats> {
        let EncodedRequest { mut bytes, mut rows } = request;
        loop {
            match stream.append(schema, &bytes, rows.len()).await? {
                Appended::Written { replayed } => {
                    tracing::trace!(table = %self.name, rows = rows.len(), replayed, "appended");
                    return Ok(DestinationStats {
                        rows: rows.len() as u64,
                        bytes: bytes.len() as u64,
                        files: 0,
                        commits: 1,
                    });
                }
                Appended::RowErrors(errors) => {
                    if errors.is_empty() || errors.iter().any(|(i, _)| *i >= rows.len()) {
                        return Err(Error::internal(format!(
                            "AppendRows to {}: the service refused rows outside the request: {errors:?}",
                            self.name
                        )));
                    }
                    let mut refused: Refused = Vec::new();
                    for (i, message) in errors {
                        if !refused.iter().any(|(r, _)| *r == i) {
                            refused.push((i, message));
                        }
                    }
                    let kept = keep_others(&rows, &refused)?;
                    fail_rows(&self.name, &self.original, &rows, refused, &mut self.failed);
                    if kept.is_empty() {
                        return Ok(DestinationStats::default());
                    }
                    // Fewer rows encode smaller: the request stays under the limit.
                    bytes = ipc_batch(&kept.batch)?;
                    rows = kept;
                }
            }
        }
    }
}

/// Everything the sink does to `batch` before sending it to a table of `table`'s schema,
/// without the service: for tools, tests and benchmarks. The requests come back with the
/// rows that failed; rows that would need a schema change are an error.
pub fn encode_rows(
    name: &str,
    table: &TableSchema,
    batch: &RecordBatch,
    config: &SchemaEvolutionConfig,
    drop_unknown: bool,
    max_request_bytes: usize,
) -> Result<(Option<Encoded>, Vec<FailedRecord>)> {
    let shaped = crate::request::shape_input(batch)?;
    let mut rows = TableRows::new(name, table, Rows::numbered(shaped, 0), drop_unknown)?;
    if let Some(plan) = rows.plan(&to_core(table), config)? {
        return Err(Error::new(
            ErrorKind::SchemaIncompatible,
            format!("the rows need a schema change first:\n{}", plan.render(None)),
        ));
    }
    let encoded = rows.encode(table, max_request_bytes)?;
    Ok((encoded, rows.into_failed()))
}

/// Records the refused rows (positions in `rows`) as failed, with their values from
/// `original` (the rows as given, before conversion).
fn fail_rows(name: &str, original: &Rows, rows: &Rows, refused: Refused, out: &mut Vec<FailedRecord>) {
    for (position, reason) in refused {
        let index = rows.indices[position];
        out.push(FailedRecord {
            source: None,
            destination: name.to_string(),
            index: Some(index),
            record: row_to_json(&original.batch, position_of(original, index)),
            reason,
        });
    }
}

/// The position in `rows` of input row `index` (indices are increasing).
fn position_of(rows: &Rows, index: u64) -> usize {
    rows.indices.binary_search(&index).unwrap_or(0)
}

/// `rows` without the refused positions.
fn keep_others(rows: &Rows, refused: &Refused) -> Result<Rows> {
    let out: std::collections::BTreeSet<usize> = refused.iter().map(|(p, _)| *p).collect();
    let keep: Vec<usize> = (0..rows.len()).filter(|p| !out.contains(p)).collect();
    rows.take(&keep)
}

/// When the plan refuses only relaxations of columns that some rows hold nulls in, those
/// rows, each with the planner's reason for its column.
fn null_rows(plan: &EvolutionPlan, nulls: &NullMap) -> Option<Refused> {
    let refused: Vec<_> = plan.changes.iter().filter(|c| !c.applied).collect();
    if refused.is_empty() || refused.iter().any(|c| c.kind != ChangeKind::Relaxation) {
        return None;
    }
    let reasons = &plan.verdicts.first()?.reasons;
    let mut out: BTreeMap<usize, String> = BTreeMap::new();
    for change in refused {
        let rows = nulls.rows_with_null(&change.path)?;
        let reason = reasons
            .iter()
            .find(|r| r.path == change.path)
            .map(ToString::to_string)
            .unwrap_or_else(|| format!("{}: required in the table, but the row has no value", change.path));
        for (row, _) in rows.iter().enumerate().filter(|(_, null)| **null) {
            out.entry(row).or_insert_with(|| reason.clone());
        }
    }
    Some(out.into_iter().collect())
}

/// Conforms rows to `target`; when the batch as a whole does not convert, each row is tried
/// alone and the ones that fail are returned (input index, reason).
fn conform_rows(rows: &Rows, target: &SchemaRef) -> Result<(Rows, Vec<(u64, String)>)> {
    match conform_batch(&rows.batch, target) {
        Ok(batch) => Ok((rows.with_batch(batch), Vec::new())),
        Err(whole) if whole.kind() == ErrorKind::InvalidInput => {
            let mut keep = Vec::new();
            let mut refused = Vec::new();
            for p in 0..rows.len() {
                match conform_batch(&rows.batch.slice(p, 1), target) {
                    Ok(_) => keep.push(p),
                    Err(e) => refused.push((rows.indices[p], e.message().to_string())),
                }
            }
            if refused.is_empty() {
                return Err(whole);
            }
            let kept = rows.take(&keep)?;
            let batch = conform_batch(&kept.batch, target)?;
            Ok((kept.with_batch(batch), refused))
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Array, ArrayRef, Decimal128Array, Int64Array, StringArray, TimestampSecondArray};
    use arrow_schema::{DataType, Field, Schema as ArrowSchema};
    use outflow_core::SchemaEvolutionOption;

    use super::*;
    use crate::schema::{FieldType, TableField};
    use crate::stream::StreamKind;

    fn table() -> TableSchema {
        TableSchema::new(vec![
            TableField::new("id", FieldType::Int64).required(),
            TableField::new("must", FieldType::String).required(),
            TableField::new("n", FieldType::Numeric),
        ])
    }

    fn batch(must: Vec<Option<&str>>) -> RecordBatch {
        let n = must.len() as i64;
        RecordBatch::try_new(
            Arc::new(ArrowSchema::new(vec![
                Field::new("ID", DataType::Int64, false),
                Field::new("must", DataType::Utf8, true),
            ])),
            vec![
                Arc::new(Int64Array::from_iter_values(0..n)) as ArrayRef,
                Arc::new(StringArray::from(must)),
            ],
        )
        .unwrap()
    }

    fn config(options: &[SchemaEvolutionOption]) -> SchemaEvolutionConfig {
        SchemaEvolutionConfig::builder()
            .allow_all(options.iter().copied())
            .build()
            .unwrap()
    }

    #[test]
    fn rows_that_fit_encode_into_requests() {
        let (encoded, failed) = encode_rows(
            "p.d.t",
            &table(),
            &batch(vec![Some("a"), Some("b")]),
            &config(&[]),
            false,
            1 << 20,
        )
        .unwrap();
        assert!(failed.is_empty());
        let encoded = encoded.unwrap();
        assert_eq!(encoded.requests.len(), 1);
        assert_eq!(
            encoded.requests[0].rows.batch.schema().field(0).name(),
            "id",
            "aligned with the table"
        );
    }

    #[test]
    fn nulls_in_required_columns_fail_alone_without_relaxation() {
        let (encoded, failed) = encode_rows(
            "p.d.t",
            &table(),
            &batch(vec![Some("a"), None, Some("c")]),
            &config(&[]),
            false,
            1 << 20,
        )
        .unwrap();
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0].index, Some(1));
        assert_eq!(
            failed[0].reason,
            "must: required in the table, but the input holds 1 null in it; field relaxation is not allowed"
        );
        assert_eq!(failed[0].record.as_ref().unwrap()["id"], 1);
        assert_eq!(encoded.unwrap().requests[0].rows.indices, [0, 2]);
        // With relaxation the table must change first.
        let err = encode_rows(
            "p.d.t",
            &table(),
            &batch(vec![None]),
            &config(&[SchemaEvolutionOption::AllowFieldRelaxation]),
            false,
            1 << 20,
        )
        .unwrap_err();
        assert!(err.to_string().contains("~ must: required -> optional"), "{err}");
    }

    #[test]
    fn a_type_conflict_fails_every_row() {
        let big = Decimal128Array::from(vec![1i128, 2, 3])
            .with_precision_and_scale(38, 0)
            .unwrap();
        let input = RecordBatch::try_new(
            Arc::new(ArrowSchema::new(vec![
                Field::new("id", DataType::Int64, false),
                Field::new("must", DataType::Utf8, false),
                Field::new("n", big.data_type().clone(), true),
            ])),
            vec![
                Arc::new(Int64Array::from(vec![0, 1, 2])) as ArrayRef,
                Arc::new(StringArray::from(vec!["a", "b", "c"])),
                Arc::new(big),
            ],
        )
        .unwrap();
        // decimal(38,0) does not fit NUMERIC's 29 integer digits: a conflict for the planner.
        let (encoded, failed) = encode_rows("p.d.t", &table(), &input, &config(&[]), false, 1 << 20).unwrap();
        assert!(encoded.is_none());
        assert_eq!(failed.len(), 3);
        assert!(
            failed[0]
                .reason
                .contains("n: the table has decimal(38,9), the input decimal(38,0)"),
            "{}",
            failed[0].reason
        );
    }

    #[test]
    fn rows_that_do_not_convert_fail_alone() {
        // Seconds fit DATETIME's type, but one value overflows in microseconds.
        let table = TableSchema::new(vec![TableField::new("ts", FieldType::Datetime)]);
        let seconds = TimestampSecondArray::from(vec![0, i64::MAX / 10, 5]);
        let input = RecordBatch::try_new(
            Arc::new(ArrowSchema::new(vec![Field::new(
                "ts",
                seconds.data_type().clone(),
                true,
            )])),
            vec![Arc::new(seconds) as ArrayRef],
        )
        .unwrap();
        let (encoded, failed) = encode_rows("p.d.t", &table, &input, &config(&[]), false, 1 << 20).unwrap();
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0].index, Some(1));
        assert!(
            failed[0].reason.starts_with("column ts: cannot convert"),
            "{}",
            failed[0].reason
        );
        assert_eq!(encoded.unwrap().requests[0].rows.indices, [0, 2]);
    }

    #[tokio::test]
    async fn a_request_is_sent_again_without_the_rows_the_service_refused() {
        use crate::stream::fake::{Call, FakeApi};
        // The service rejects a whole AppendRows request when some of its rows are bad and
        // names them (documented; the Storage Write client says "No rows in the batch were
        // appended"). The emulator differs for errors it finds while inserting (malformed
        // JSON): it writes the other rows of the request anyway, so this answer is tested
        // here, and on the emulator only with errors it finds before inserting.
        let refused = vec![
            (1, "Invalid JSON: {not json".to_string()),
            (3, "Invalid JSON: nope".to_string()),
        ];
        // open, append (rows refused), append (ok).
        let api = FakeApi::answering(vec![Ok(()), Err(crate::stream::Failure::RowErrors(refused))]);
        let mut stream = StreamWriter::new(
            Arc::new(api.clone()),
            StreamKind::Committed,
            "projects/p/datasets/d/tables/t".into(),
            outflow_core::RetryPolicy::none(),
            std::time::Duration::from_secs(5),
        );
        let input = Rows::numbered(batch(vec![Some("a"), Some("b"), Some("c"), Some("d")]), 10);
        let mut rows = TableRows::new("p.d.t", &table(), input, false).unwrap();
        assert!(rows.plan(&to_core(&table()), &config(&[])).unwrap().is_none());
        let encoded = rows.encode(&table(), 1 << 20).unwrap().unwrap();
        let request = encoded.requests.into_iter().next().unwrap();
        let stats = rows.append(&mut stream, &encoded.schema, request).await.unwrap();
        assert_eq!((stats.rows, stats.commits), (2, 1));
        let failed: Vec<_> = rows
            .failed()
            .iter()
            .map(|f| (f.index.unwrap(), f.reason.as_str()))
            .collect();
        assert_eq!(
            failed,
            [(11, "Invalid JSON: {not json"), (13, "Invalid JSON: nope")]
        );
        assert_eq!(rows.failed()[0].record.as_ref().unwrap()["must"], "b");
        let offsets: Vec<_> = api
            .calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Append { offset, .. } => Some(offset),
                _ => None,
            })
            .collect();
        assert_eq!(offsets, [Some(0), Some(0)], "sent again at the same offset");
        assert_eq!(stream.position().unwrap().1, 2);
    }
}
