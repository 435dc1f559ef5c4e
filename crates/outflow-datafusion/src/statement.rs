//! One statement through one sink: the plan for tables built from a factory, which
//! DataFusion runs as its `DataSinkExec` over a single stream.

use std::any::Any;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::datasource::sink::DataSink;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType};
use futures::StreamExt;
use outflow_core::WriteResult;

use crate::table::SinkFactory;

/// The DataFusion side of one statement: opens the sink, writes, closes (commits).
pub(crate) struct StatementSink {
    pub(crate) schema: SchemaRef,
    pub(crate) open: SinkFactory,
    pub(crate) dead_letter: Option<PathBuf>,
    pub(crate) last: Arc<Mutex<Option<WriteResult>>>,
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
        let rows = result.rows_written();
        finish_statement(result, self.dead_letter.as_deref(), &self.last)?;
        Ok(rows)
    }
}

/// After a statement committed: appends its failed records to the dead-letter file, if any,
/// and leaves the result for [`crate::SinkTable::last_result`].
pub(crate) fn finish_statement(
    result: WriteResult,
    dead_letter: Option<&Path>,
    last: &Mutex<Option<WriteResult>>,
) -> Result<()> {
    if let Some(path) = dead_letter {
        append_dead_letter(path, &result).map_err(|e| {
            DataFusionError::Execution(format!(
                "the statement committed, but its failed records could not be written to {}: {e}",
                path.display()
            ))
        })?;
    }
    if let Ok(mut last) = last.lock() {
        *last = Some(result);
    }
    Ok(())
}

pub(crate) fn outflow_error(e: outflow_core::Error) -> DataFusionError {
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
