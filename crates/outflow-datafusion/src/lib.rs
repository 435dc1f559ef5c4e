//! Outflow sinks as Apache DataFusion tables.
//!
//! [`SinkTable`] registers an Outflow destination with a DataFusion `SessionContext`, so
//! that `INSERT INTO <table> SELECT ...` (SQL) or `DataFrame::write_table` writes through an
//! Outflow sink, with all of its dispositions, evolution config and options:
//!
//! ```no_run
//! # async fn example() -> datafusion::error::Result<()> {
//! use std::sync::Arc;
//! use datafusion::arrow::datatypes::{DataType, Field, Schema};
//! use datafusion::prelude::SessionContext;
//! use outflow_core::Sink;
//! use outflow_datafusion::SinkTable;
//!
//! let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
//! let table = SinkTable::new(schema, || async {
//!     // Build any Outflow sink here (Iceberg, BigQuery, Bigtable): one per statement.
//!     # let sink: Box<dyn Sink> = unimplemented!();
//!     Ok(sink)
//! });
//! let ctx = SessionContext::new();
//! ctx.register_table("events", Arc::new(table.clone()))?;
//! ctx.sql("INSERT INTO events SELECT value FROM generate_series(1, 100)").await?
//!     .collect().await?;                       // one row: the count written
//! let result = table.last_result();             // rows per destination, failed records
//! # Ok(()) }
//! ```
//!
//! # What a statement does
//!
//! Each statement opens a fresh sink from the table's factory, writes every batch of the
//! query's output to it, and closes it: for Iceberg that is exactly one commit per
//! statement, carrying the sink's deterministic commit id. When the query fails midway, or
//! the sink refuses a batch, the sink is dropped without being closed, so nothing is
//! committed (Iceberg data files already written stay unreferenced, as after any failed
//! Iceberg write) and the statement returns the error.
//!
//! The statement's result is DataFusion's usual single `count` row: the rows the sink
//! wrote. Records the sink rejected are not lost in a log line: the statement's
//! [`WriteResult`] (rows, bytes and files per destination, and every failed record with its
//! reason) is kept and read with [`SinkTable::last_result`], and is appended, one JSON line
//! per failed record, to the table's dead-letter file when one is set
//! ([`SinkTable::with_dead_letter`]).
//!
//! DataFusion hands a sink table one stream of batches (its `DataSinkExec` requires a single
//! input partition); the Outflow sinks parallelize encoding and requests themselves
//! (the Iceberg sink's `writers_per_table`, the service sinks' requests in flight).

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::Session;
use datafusion::datasource::TableProvider;
use datafusion::datasource::sink::{DataSink, DataSinkExec};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{Expr, TableType};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan};
use futures::StreamExt;
use outflow_core::{Sink, WriteResult};

/// A future that opens a sink for one statement.
pub type OpenSink = Pin<Box<dyn Future<Output = outflow_core::Result<Box<dyn Sink>>> + Send>>;

/// Opens a fresh sink for each statement.
type SinkFactory = Arc<dyn Fn() -> OpenSink + Send + Sync>;

/// An Outflow destination as a DataFusion table: write-only, one sink per statement.
///
/// Cloning is cheap and clones share the factory and the last result, so keep a clone to
/// read [`SinkTable::last_result`] after registering one with a `SessionContext`.
#[derive(Clone)]
pub struct SinkTable {
    schema: SchemaRef,
    open: SinkFactory,
    dead_letter: Option<PathBuf>,
    last: Arc<Mutex<Option<WriteResult>>>,
}

impl SinkTable {
    /// A table whose rows have `schema` (what `INSERT` statements must produce) and whose
    /// statements each write through a sink `open` returns.
    pub fn new<F, Fut>(schema: SchemaRef, open: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = outflow_core::Result<Box<dyn Sink>>> + Send + 'static,
    {
        SinkTable {
            schema,
            open: Arc::new(move || Box::pin(open()) as OpenSink),
            dead_letter: None,
            last: Arc::new(Mutex::new(None)),
        }
    }

    /// Appends each statement's failed records to `path` as NDJSON (the record, the
    /// destination, the reason), the same form as `outflow run`'s dead-letter file.
    pub fn with_dead_letter(mut self, path: impl Into<PathBuf>) -> Self {
        self.dead_letter = Some(path.into());
        self
    }

    /// What the last successful statement wrote, and the records its sink rejected.
    pub fn last_result(&self) -> Option<WriteResult> {
        self.last.lock().map(|last| last.clone()).unwrap_or(None)
    }
}

impl fmt::Debug for SinkTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SinkTable")
            .field("schema", &self.schema)
            .field("dead_letter", &self.dead_letter)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl TableProvider for SinkTable {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        _projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Err(DataFusionError::NotImplemented(
            "an Outflow sink table is write-only: read the destination with its own reader".to_string(),
        ))
    }

    async fn insert_into(
        &self,
        _state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if insert_op != InsertOp::Append {
            // The sink's own write disposition decides what happens to existing rows;
            // SQL's OVERWRITE and REPLACE would silently disagree with it.
            return Err(DataFusionError::NotImplemented(format!(
                "{insert_op} into an Outflow sink table: use INSERT INTO, and the sink's \
                 write_disposition (append, truncate, empty) for existing rows"
            )));
        }
        let sink = StatementSink {
            schema: self.schema.clone(),
            open: self.open.clone(),
            dead_letter: self.dead_letter.clone(),
            last: self.last.clone(),
        };
        Ok(Arc::new(DataSinkExec::new(input, Arc::new(sink), None)))
    }
}

/// The DataFusion side of one statement: opens the sink, writes, closes (commits).
struct StatementSink {
    schema: SchemaRef,
    open: SinkFactory,
    dead_letter: Option<PathBuf>,
    last: Arc<Mutex<Option<WriteResult>>>,
}

impl fmt::Debug for StatementSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StatementSink").finish_non_exhaustive()
    }
}

impl DisplayAs for StatementSink {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OutflowSink")
    }
}

#[async_trait]
impl DataSink for StatementSink {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    async fn write_all(
        &self,
        mut data: SendableRecordBatchStream,
        _context: &Arc<TaskContext>,
    ) -> Result<u64> {
        let mut sink = (self.open)().await.map_err(outflow_error)?;
        // Any error returns before `close`: the sink is dropped uncommitted.
        while let Some(batch) = data.next().await {
            sink.write(batch?).await.map_err(outflow_error)?;
        }
        let result = sink.close().await.map_err(outflow_error)?;
        if let Some(path) = &self.dead_letter {
            append_dead_letter(path, &result).map_err(|e| {
                DataFusionError::Execution(format!(
                    "the statement committed, but its failed records could not be written \
                     to {}: {e}",
                    path.display()
                ))
            })?;
        }
        let rows = result.rows_written();
        if let Ok(mut last) = self.last.lock() {
            *last = Some(result);
        }
        Ok(rows)
    }
}

fn outflow_error(e: outflow_core::Error) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// One JSON line per failed record, as `outflow run` writes them.
fn append_dead_letter(path: &Path, result: &WriteResult) -> std::io::Result<()> {
    if result.failed.is_empty() {
        return Ok(());
    }
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    let mut out = String::new();
    for failed in &result.failed {
        out.push_str(&failed.dead_letter_line());
        out.push('\n');
    }
    file.write_all(out.as_bytes())
}
