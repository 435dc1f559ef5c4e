//! Change data into BigQuery (BigQuery's change data capture).
//!
//! The emulator cannot apply change data: it has no change data capture and refuses
//! `_CHANGE_TYPE` as a column the table lacks. So the requests Outflow sends are checked
//! against Google's documented behaviour instead: decoded by Google's protobuf runtime (the
//! reader the service's clients use) and applied as BigQuery documents it. On the emulator
//! the tests show what it does support: a table created with its primary key, the refusal of
//! a table without one, and the protobuf rows reaching it (it decodes them, then refuses the
//! pseudo-column).

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use gcloud_sdk::prost::Message;
use outflow_bigquery::changes::{self, ChangeType, SequenceNumbers};
use outflow_bigquery::request::Rows;
use outflow_bigquery::{FieldType, TableField, TableSchema, WriteMethod};
use outflow_core::changes::{ChangeConfig, OperationColumn};
use outflow_core::{ErrorKind, PlannedAction, PrepareDestination, Sink};
use serde_json::Value;

use crate::common::*;

/// `id`, `op` and `value` columns for `changes` (key, operation word, value).
fn change_batch(changes: &[(Option<i64>, Option<&str>, i64)]) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("op", DataType::Utf8, true),
        Field::new("value", DataType::Int64, true),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(changes.iter().map(|c| c.0).collect::<Vec<_>>())),
            Arc::new(StringArray::from(changes.iter().map(|c| c.1).collect::<Vec<_>>())),
            Arc::new(Int64Array::from(changes.iter().map(|c| c.2).collect::<Vec<_>>())),
        ],
    )
    .unwrap()
}

fn config() -> ChangeConfig {
    ChangeConfig::new(["id"], OperationColumn::new("op"))
}

/// `id INT64 REQUIRED, value INT64`.
fn id_value_schema() -> TableSchema {
    TableSchema::new(vec![
        TableField::new("id", FieldType::Int64).required(),
        TableField::new("value", FieldType::Int64),
    ])
}

/// A `_CHANGE_SEQUENCE_NUMBER` as BigQuery compares it: hexadecimal sections, in order.
fn sections(number: &str) -> Vec<u64> {
    number
        .split('/')
        .map(|s| u64::from_str_radix(s, 16).expect("a hexadecimal section"))
        .collect()
}

/// Decoded change rows applied as BigQuery documents change data capture: for each primary
/// key the change with the greatest sequence number wins, whatever order rows come in; an
/// UPSERT leaves its row, a DELETE none.
fn apply_as_documented(rows: &[Value], table: &mut BTreeMap<i64, (Vec<u64>, Option<i64>)>) {
    for row in rows {
        let key: i64 = row["id"].as_str().expect("int64 as text").parse().unwrap();
        let number = sections(row["_CHANGE_SEQUENCE_NUMBER"].as_str().unwrap());
        let value = match row["_CHANGE_TYPE"].as_str().unwrap() {
            "UPSERT" => Some(row["value"].as_str().expect("a value").parse().unwrap()),
            "DELETE" => {
                let fields: Vec<&String> = row.as_object().unwrap().keys().collect();
                assert_eq!(
                    fields,
                    ["_CHANGE_SEQUENCE_NUMBER", "_CHANGE_TYPE", "id"],
                    "a delete names its key alone"
                );
                None
            }
            other => panic!("_CHANGE_TYPE {other} is neither UPSERT nor DELETE"),
        };
        let newer = table.get(&key).is_none_or(|(held, _)| number > *held);
        if newer {
            table.insert(key, (number, value));
        }
    }
}

/// The requests of one batch, decoded by Google's protobuf runtime.
fn decoded_requests(ctx: &Ctx, batch: &Rows, sequence: &SequenceNumbers) -> Vec<Value> {
    let reduced = changes::batch_changes(batch, &config(), &["id".to_string()]).unwrap();
    assert!(reduced.failed.is_empty(), "{:?}", reduced.failed);
    let mut decoded = Vec::new();
    for (change, rows) in [
        (ChangeType::Delete, &reduced.deletes),
        (ChangeType::Upsert, &reduced.upserts),
    ] {
        let encoded = changes::encode(rows, change, sequence).unwrap();
        let descriptor = encoded.row_type.descriptor.encode_to_vec();
        decoded.extend(ctx.env.decode_rows(&descriptor, &encoded.rows));
    }
    decoded
}

#[tokio::test]
async fn change_requests_decoded_by_googles_protobuf_runtime_and_applied_as_documented_leave_the_exact_state()
{
    let ctx = Ctx::new().await;
    let (stream, held) = outflow_testkit::changes::change_stream(0xb19, 10_000, 100_000);
    let batches: Vec<Rows> = stream
        .chunks(5_000)
        .enumerate()
        .map(|(i, part)| {
            let changes: Vec<_> = part
                .iter()
                .map(|c| (Some(c.key as i64), Some(c.op), c.value as i64))
                .collect();
            Rows::numbered(change_batch(&changes), (i * 5_000) as u64)
        })
        .collect();
    // Two runs, the second starting later: its changes win over the first's. Then a batch
    // of the first run arrives again (a retried request): its numbers are lower, so it
    // changes nothing.
    let first_run = SequenceNumbers::of_run(1_733_000_000_000_000);
    let second_run = SequenceNumbers::of_run(1_733_000_600_000_000);
    let mut table = BTreeMap::new();
    let mut sent = 0;
    for (i, batch) in batches.iter().enumerate() {
        let run = if i < 10 { &first_run } else { &second_run };
        let rows = decoded_requests(&ctx, batch, run);
        sent += rows.len();
        apply_as_documented(&rows, &mut table);
    }
    apply_as_documented(&decoded_requests(&ctx, &batches[3], &first_run), &mut table);

    let state: BTreeMap<i64, i64> = table
        .into_iter()
        .filter_map(|(key, (_, value))| value.map(|v| (key, v)))
        .collect();
    let expected: BTreeMap<i64, i64> = held.into_iter().map(|(k, v)| (k as i64, v as i64)).collect();
    assert_eq!(state.len(), expected.len());
    assert_eq!(state, expected);
    // Each batch sends each of its keys at most twice (a delete, then the row that
    // followed it), far fewer rows than changes.
    assert!(sent < 100_000, "{sent} change rows sent for 100,000 changes");
}

#[tokio::test]
async fn a_table_made_for_change_data_gets_the_key_as_primary_key_and_the_emulator_refuses_the_pseudo_columns()
 {
    let ctx = Ctx::new().await;
    let options = ctx
        .options("t")
        .schema(id_value_schema())
        .write_method(WriteMethod::AtLeastOnce)
        .changes(config())
        .build()
        .unwrap();
    let mut sink = sink(options).await;
    let plan = sink
        .preparer()
        .plan("t", &change_batch(&[]).schema())
        .await
        .unwrap();
    assert_eq!(plan.action, PlannedAction::Create, "{plan:?}");
    let details = plan.details.join("\n");
    assert!(details.contains("primary key (id) NOT ENFORCED"), "{details}");
    assert!(
        details.contains("upsert by key [id], operations from column \"op\""),
        "{details}"
    );
    assert!(
        !plan.evolution.as_ref().is_some_and(|e| e.changes_schema()),
        "the operation column is not a column of the table: {plan:?}"
    );

    sink.write(change_batch(&[
        (Some(1), Some("c"), 10),
        (Some(2), Some("c"), 20),
        (Some(1), Some("d"), 10),
        (None, Some("u"), 30),
    ]))
    .await
    .unwrap();
    let result = sink.close().await.unwrap();
    assert_eq!(ctx.env.primary_key(&ctx.dataset, "t"), ["id"]);
    // The emulator decoded the rows with the row type sent (its refusal names the first
    // field its table lacks), then refused them: each is a failed record naming why, with
    // its input row; the null key fails on its own, before any request.
    let failed: Vec<(Option<u64>, String)> = result
        .failed
        .iter()
        .map(|f| (f.index, f.reason.clone()))
        .collect();
    assert_eq!(failed.len(), 3, "{failed:?}");
    assert!(
        failed.contains(&(Some(3), "id: the key column is null".to_string())),
        "{failed:?}"
    );
    for (index, reason) in &failed {
        if *index != Some(3) {
            assert!(reason.contains("_CHANGE_TYPE"), "{index:?}: {reason}");
        }
    }
    let mut refused: Vec<u64> = failed.iter().filter_map(|f| f.0).filter(|&i| i != 3).collect();
    refused.sort_unstable();
    // Key 1's delete (row 2) and key 2's upsert (row 1): each key's last change.
    assert_eq!(refused, [1, 2]);
    assert!(ctx.rows("t").is_empty());
}

#[tokio::test]
async fn a_table_without_the_primary_key_is_refused_by_name_and_nothing_is_written() {
    let ctx = Ctx::new().await;
    ctx.create("plain", &id_value_schema()).await;
    let options = ctx
        .options("plain")
        .create_disposition(outflow_core::CreateDisposition::CreateNever)
        .write_method(WriteMethod::AtLeastOnce)
        .changes(config())
        .build()
        .unwrap();
    let mut plain = sink(options).await;
    let plan = plain
        .preparer()
        .plan("plain", &change_batch(&[]).schema())
        .await
        .unwrap();
    assert_eq!(plan.action, PlannedAction::Fail, "{plan:?}");
    let err = plain
        .write(change_batch(&[(Some(1), Some("c"), 10)]))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(
        err.message().contains(&ctx.full("plain")) && err.message().contains("no primary key"),
        "{err}"
    );
    assert_eq!(err.context_value("field"), Some("changes.key"), "{err}");
    let _ = plain.abort().await;
    assert!(ctx.rows("plain").is_empty());

    // A table whose primary key is another column: refused naming both.
    let options = ctx
        .options("keyed")
        .schema(id_value_schema())
        .write_method(WriteMethod::AtLeastOnce)
        .changes(ChangeConfig::new(["value"], OperationColumn::new("op")))
        .build()
        .unwrap();
    let mut first = sink(options.clone()).await;
    first
        .preparer()
        .prepare("keyed", &change_batch(&[]).schema())
        .await
        .unwrap();
    let _ = first.close().await;
    assert_eq!(ctx.env.primary_key(&ctx.dataset, "keyed"), ["value"]);
    let mut other = sink(options.to_builder().changes(config()).build().unwrap()).await;
    let err = other
        .write(change_batch(&[(Some(1), Some("c"), 10)]))
        .await
        .unwrap_err();
    assert!(
        err.message().contains("primary key is (value)") && err.message().contains("changes.key is (id)"),
        "{err}"
    );
    let _ = other.abort().await;
}
