//! Writes N rows of 5 columns into an existing Bigtable table through Outflow's
//! `BigtableSink`, for the benchmark in `scripts/bench/bigtable.sh`.
//!
//! ```text
//! BIGTABLE_EMULATOR_HOST=127.0.0.1:8086 bigtable_bench --table T [--rows N] [--batch-rows R]
//!     [--max-entries E] [--outstanding O]
//! ```
//!
//! The data matches the Python and Go writers: row keys `user%08d`, family `cf`, columns
//! `c0`..`c4` holding `v<col>-<row %012d>`, all at one explicit timestamp. The Arrow batches
//! are made inside the timed loop, as the other writers make their mutations. Prints one
//! JSON line: `{"writer":"outflow","rows":N,"seconds":S}`.

use std::sync::Arc;
use std::time::Instant;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use outflow_bigtable::{Batching, BigtableSink, BigtableSinkOptions, CellTimestamp, ColumnMapping, RowKey};
use outflow_core::{CreateDisposition, Sink};

struct Args {
    project: String,
    instance: String,
    table: String,
    rows: usize,
    batch_rows: usize,
    batching: Batching,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        project: "bench".into(),
        instance: "bench".into(),
        table: String::new(),
        rows: 1_000_000,
        batch_rows: 10_000,
        batching: Batching::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = || value.parse::<usize>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--project" => args.project = value.clone(),
            "--instance" => args.instance = value.clone(),
            "--table" => args.table = value.clone(),
            "--rows" => args.rows = number()?,
            "--batch-rows" => args.batch_rows = number()?,
            "--max-entries" => args.batching = args.batching.with_max_entries(number()?),
            "--outstanding" => args.batching = args.batching.with_max_outstanding_requests(number()?),
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if args.table.is_empty() {
        return Err("--table is required".into());
    }
    Ok(args)
}

fn batch(schema: &Arc<Schema>, first: usize, n: usize) -> RecordBatch {
    let keys: Vec<String> = (first..first + n).map(|i| format!("user{i:08}")).collect();
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(keys)),
        Arc::new(Int64Array::from(vec![1_700_000_000_000_000; n])),
    ];
    for c in 0..5 {
        let values: Vec<String> = (first..first + n).map(|i| format!("v{c}-{i:012}")).collect();
        columns.push(Arc::new(StringArray::from(values)));
    }
    RecordBatch::try_new(schema.clone(), columns).expect("a valid batch")
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let args = match parse() {
        Ok(args) => args,
        Err(why) => {
            eprintln!("bigtable_bench: {why}");
            std::process::exit(2);
        }
    };
    let mut fields = vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("ts", DataType::Int64, false),
    ];
    fields.extend((0..5).map(|c| Field::new(format!("c{c}"), DataType::Utf8, false)));
    let schema = Arc::new(Schema::new(fields));
    let options = BigtableSinkOptions::builder()
        .project(&args.project)
        .instance(&args.instance)
        .table(&args.table)
        .create_disposition(CreateDisposition::CreateNever)
        .row_key(RowKey::field("id"))
        .columns(ColumnMapping::family("cf"))
        .timestamp(CellTimestamp::Field("ts".into()))
        .batching(args.batching.clone())
        .build()
        .expect("valid sink options");
    let mut sink = BigtableSink::connect(options).await.expect("a sink");

    let started = Instant::now();
    let mut first = 0;
    while first < args.rows {
        let n = args.batch_rows.min(args.rows - first);
        sink.write(batch(&schema, first, n)).await.expect("write");
        first += n;
    }
    let result = sink.close().await.expect("close");
    let seconds = started.elapsed().as_secs_f64();
    assert!(result.failed.is_empty(), "{} rows failed", result.failed.len());
    assert_eq!(result.rows_written(), args.rows as u64);
    println!(
        r#"{{"writer":"outflow","rows":{},"seconds":{seconds:.3}}}"#,
        args.rows
    );
}
