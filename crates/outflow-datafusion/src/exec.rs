//! The physical plan of a statement into a spec-built table: writers, then one commit.
//!
//! ```text
//! SinkCommitExec                 one partition: commits once, returns the count row
//!   CoalescePartitionsExec       (on Ballista: a stage boundary, the writers' reports shuffled)
//!     SinkWriterExec             one sink per input partition, each with its own batching,
//!       <the query>              retries and data files; returns one report row
//! ```
//!
//! This is the two-phase contract of [`outflow_core::commit`], for any sink of the registry:
//! each writer opens [`SinkSpec::open_two_phase`] and ends with `prepare_commit`. Its
//! report is one row holding JSON: what its sink wrote and rejected, and the committables
//! (Iceberg's data files, BigQuery's finalized pending streams; Bigtable has none). The
//! commit node reads every report and hands all committables to the sink's committer
//! ([`SinkSpec::committer`]) once: idempotent, so a rerun commit task changes nothing. It
//! adds the results up and answers with `count` (rows written) and `failed` (rows rejected).
//!
//! Both nodes hold only serde data (the [`SinkSpec`], the table schema), so
//! [`crate::codec`] sends them to other processes.

use std::any::Any;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::{Array, ArrayRef, RecordBatch, StringArray, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{Distribution, EquivalenceProperties};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, Partitioning, PlanProperties,
    execute_input_stream,
};
use futures::StreamExt;
use outflow_core::{LoadedFile, Prepared, WriteResult};
use outflow_sinks::SinkSpec;
use serde::{Deserialize, Serialize};

use crate::statement::{finish_statement, outflow_error};

/// What one writer partition did: its sink's result, and the committables it prepared.
pub type WriterReport = Prepared<serde_json::Value>;

const REPORT_COLUMN: &str = "report";

fn report_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(
        REPORT_COLUMN,
        DataType::Utf8,
        false,
    )]))
}

/// The answer to a statement: rows written and rows rejected.
pub fn count_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("count", DataType::UInt64, false),
        Field::new("failed", DataType::UInt64, false),
    ]))
}

/// Writes each input partition through a sink of its own, built from the spec; emits one
/// report row per partition. The sinks prepare their commits instead of committing.
#[derive(Debug)]
pub struct SinkWriterExec {
    input: Arc<dyn ExecutionPlan>,
    spec: Arc<SinkSpec>,
    /// The table's schema: what every batch is checked against (nulls in required columns).
    table_schema: SchemaRef,
    properties: Arc<PlanProperties>,
}

impl SinkWriterExec {
    /// Writers over `input`'s partitions for a table of `table_schema`.
    pub fn new(input: Arc<dyn ExecutionPlan>, spec: Arc<SinkSpec>, table_schema: SchemaRef) -> Self {
        let properties = PlanProperties::new(
            EquivalenceProperties::new(report_schema()),
            Partitioning::UnknownPartitioning(input.output_partitioning().partition_count()),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        SinkWriterExec {
            input,
            spec,
            table_schema,
            properties: Arc::new(properties),
        }
    }

    /// The sink each partition opens.
    pub fn spec(&self) -> &SinkSpec {
        &self.spec
    }

    /// The table's schema.
    pub fn table_schema(&self) -> &SchemaRef {
        &self.table_schema
    }
}

impl DisplayAs for SinkWriterExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SinkWriterExec: sink={}", self.spec.name())
    }
}

impl ExecutionPlan for SinkWriterExec {
    fn name(&self) -> &'static str {
        "SinkWriterExec"
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![false]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let [input] = <[_; 1]>::try_from(children)
            .map_err(|_| DataFusionError::Internal("SinkWriterExec has one input".to_string()))?;
        Ok(Arc::new(SinkWriterExec::new(
            input,
            self.spec.clone(),
            self.table_schema.clone(),
        )))
    }

    fn execute(&self, partition: usize, context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        let data = execute_input_stream(self.input.clone(), self.table_schema.clone(), partition, context)?;
        let spec = self.spec.clone();
        let stream = futures::stream::once(async move {
            let report = write_partition(&spec, data).await?;
            let json = serde_json::to_string(&report)
                .map_err(|e| DataFusionError::Internal(format!("describing a writer's report: {e}")))?;
            let column = Arc::new(StringArray::from(vec![json])) as ArrayRef;
            Ok(RecordBatch::try_new(report_schema(), vec![column])?)
        })
        .boxed();
        Ok(Box::pin(RecordBatchStreamAdapter::new(report_schema(), stream)))
    }
}

/// Writes one partition; any error returns before the sink prepares its commit, so none of
/// its rows are committed.
async fn write_partition(spec: &SinkSpec, mut data: SendableRecordBatchStream) -> Result<WriterReport> {
    let mut sink = spec.open_two_phase().await.map_err(outflow_error)?;
    while let Some(batch) = data.next().await {
        sink.write(batch?).await.map_err(outflow_error)?;
    }
    sink.prepare_commit_json().await.map_err(outflow_error)
}

/// What a statement's commit does besides committing.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitSettings {
    /// Where failed records are appended, if anywhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_letter: Option<PathBuf>,
    /// The source files to record as loaded with the commit (see [`outflow_core::loads`]),
    /// when the statement loads files into a sink that keeps a ledger.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loads: Option<Vec<LoadedFile>>,
}

/// Reads every writer's report, commits every committable once through the sink's
/// committer, adds the results up; one partition, one row: `count` and `failed`.
#[derive(Debug)]
pub struct SinkCommitExec {
    input: Arc<dyn ExecutionPlan>,
    spec: Arc<SinkSpec>,
    settings: CommitSettings,
    /// Where the statement's result is left for the caller (in the process that commits).
    last: Arc<Mutex<Option<WriteResult>>>,
    properties: Arc<PlanProperties>,
}

impl SinkCommitExec {
    /// A commit of the reports `input` carries (one partition).
    pub fn new(input: Arc<dyn ExecutionPlan>, spec: Arc<SinkSpec>, settings: CommitSettings) -> Self {
        let properties = PlanProperties::new(
            EquivalenceProperties::new(count_schema()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        SinkCommitExec {
            input,
            spec,
            settings,
            last: Arc::new(Mutex::new(None)),
            properties: Arc::new(properties),
        }
    }

    /// Leaves each statement's result in `last`.
    pub(crate) fn with_last(mut self, last: Arc<Mutex<Option<WriteResult>>>) -> Self {
        self.last = last;
        self
    }

    /// The sink whose writes are committed.
    pub fn spec(&self) -> &SinkSpec {
        &self.spec
    }

    /// Where failed records go and which files the commit records.
    pub fn settings(&self) -> &CommitSettings {
        &self.settings
    }
}

impl DisplayAs for SinkCommitExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SinkCommitExec: sink={}", self.spec.name())
    }
}

impl ExecutionPlan for SinkCommitExec {
    fn name(&self) -> &'static str {
        "SinkCommitExec"
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn required_input_distribution(&self) -> Vec<Distribution> {
        vec![Distribution::SinglePartition]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let [input] = <[_; 1]>::try_from(children)
            .map_err(|_| DataFusionError::Internal("SinkCommitExec has one input".to_string()))?;
        Ok(Arc::new(
            SinkCommitExec::new(input, self.spec.clone(), self.settings.clone()).with_last(self.last.clone()),
        ))
    }

    fn execute(&self, partition: usize, context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "SinkCommitExec has one partition, not {partition}"
            )));
        }
        let mut reports = self.input.execute(0, context)?;
        let spec = self.spec.clone();
        let CommitSettings { dead_letter, loads } = self.settings.clone();
        let last = self.last.clone();
        let stream = futures::stream::once(async move {
            let mut result = WriteResult::default();
            let mut committables = Vec::new();
            while let Some(batch) = reports.next().await {
                for report in read_reports(&batch?)? {
                    result.merge(report.result);
                    committables.extend(report.committables);
                }
            }
            if !committables.is_empty() {
                let committer = spec.committer().await.map_err(outflow_error)?;
                let committed = match &loads {
                    Some(files) => committer.commit_json_loaded(committables, files).await,
                    None => committer.commit_json(committables).await,
                }
                .map_err(outflow_error)?;
                result.merge(committed);
            }
            let (written, failed) = (result.rows_written(), result.failed.len() as u64);
            finish_statement(result, dead_letter.as_deref(), &last)?;
            Ok(RecordBatch::try_new(
                count_schema(),
                vec![
                    Arc::new(UInt64Array::from(vec![written])) as ArrayRef,
                    Arc::new(UInt64Array::from(vec![failed])) as ArrayRef,
                ],
            )?)
        })
        .boxed();
        Ok(Box::pin(RecordBatchStreamAdapter::new(count_schema(), stream)))
    }
}

fn read_reports(batch: &RecordBatch) -> Result<Vec<WriterReport>> {
    let column = batch
        .column_by_name(REPORT_COLUMN)
        .and_then(|c| c.as_any().downcast_ref::<StringArray>())
        .ok_or_else(|| DataFusionError::Internal("a writer report without its report column".to_string()))?;
    (0..column.len())
        .map(|row| {
            serde_json::from_str(column.value(row))
                .map_err(|e| DataFusionError::Internal(format!("reading a writer's report: {e}")))
        })
        .collect()
}
