//! [`SinkTable`]: an Outflow destination as a write-only DataFusion table.

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::Session;
use datafusion::datasource::TableProvider;
use datafusion::datasource::sink::DataSinkExec;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{Expr, TableType};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use outflow_core::{LoadedFile, Sink, WriteResult};

use crate::SinkSpec;
use crate::exec::{CommitSettings, SinkCommitExec, SinkWriterExec};
use crate::statement::StatementSink;

/// A future that opens a sink for one statement.
pub type OpenSink = Pin<Box<dyn Future<Output = outflow_core::Result<Box<dyn Sink>>> + Send>>;

/// Opens a fresh sink for each statement.
pub(crate) type SinkFactory = Arc<dyn Fn() -> OpenSink + Send + Sync>;

/// How a table's statements write.
#[derive(Clone)]
enum Writers {
    /// One sink per statement from a factory, over one stream: any sink, this process only.
    Factory(SinkFactory),
    /// A sink per input partition from a spec, then one commit: parallel, and serializable.
    Spec(Arc<SinkSpec>),
}

/// An Outflow destination as a DataFusion table: write-only, one commit per statement.
///
/// Cloning is cheap and clones share the last result, so keep a clone to read
/// [`SinkTable::last_result`] after registering one with a `SessionContext`.
#[derive(Clone)]
pub struct SinkTable {
    schema: SchemaRef,
    writers: Writers,
    settings: CommitSettings,
    last: Arc<Mutex<Option<WriteResult>>>,
}

impl SinkTable {
    /// A table whose rows have `schema` (what `INSERT` statements must produce) and whose
    /// statements each write through one sink `open` returns, over one stream. For sinks
    /// of your own; runs in this process only.
    pub fn new<F, Fut>(schema: SchemaRef, open: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = outflow_core::Result<Box<dyn Sink>>> + Send + 'static,
    {
        SinkTable {
            schema,
            writers: Writers::Factory(Arc::new(move || Box::pin(open()) as OpenSink)),
            settings: CommitSettings::default(),
            last: Arc::new(Mutex::new(None)),
        }
    }

    /// A table whose statements write each input partition through a sink of its own,
    /// built from `spec`, and commit once at the end (for Iceberg, one snapshot of every
    /// writer's files). The plan serializes ([`crate::codec`]), so it also runs on Ballista.
    pub fn from_spec(schema: SchemaRef, spec: SinkSpec) -> Self {
        SinkTable {
            schema,
            writers: Writers::Spec(Arc::new(spec)),
            settings: CommitSettings::default(),
            last: Arc::new(Mutex::new(None)),
        }
    }

    /// Appends each statement's failed records to `path` as NDJSON (the record, the
    /// destination, the reason), the same form as `outflow run`'s dead-letter file. On
    /// Ballista the file is written by the executor that commits.
    pub fn with_dead_letter(mut self, path: impl Into<PathBuf>) -> Self {
        self.settings.dead_letter = Some(path.into());
        self
    }

    /// Records `files` as the source files each statement loads, with its commit (see
    /// [`outflow_core::loads`]). Only for tables built from a spec, and only for sinks
    /// whose committer keeps a ledger ([`SinkSpec::records_statement_loads`]); others fail
    /// the statement's commit rather than leave the files unrecorded.
    pub fn with_loads(mut self, files: Vec<LoadedFile>) -> Self {
        self.settings.loads = Some(files);
        self
    }

    pub(crate) fn with_settings(mut self, settings: CommitSettings) -> Self {
        self.settings = settings;
        self
    }

    pub(crate) fn settings(&self) -> &CommitSettings {
        &self.settings
    }

    /// What the last successful statement wrote, and the records its sinks rejected (when
    /// the statement committed in this process).
    pub fn last_result(&self) -> Option<WriteResult> {
        self.last.lock().map(|last| last.clone()).unwrap_or(None)
    }

    /// The spec the table was built from, if it was.
    pub fn spec(&self) -> Option<&SinkSpec> {
        match &self.writers {
            Writers::Spec(spec) => Some(spec),
            Writers::Factory(_) => None,
        }
    }

    /// The dead-letter file, if one is set.
    pub fn dead_letter(&self) -> Option<&PathBuf> {
        self.settings.dead_letter.as_ref()
    }
}

impl fmt::Debug for SinkTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SinkTable")
            .field("schema", &self.schema)
            .field("spec", &self.spec())
            .field("settings", &self.settings)
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
        match &self.writers {
            Writers::Factory(open) => {
                let sink = StatementSink {
                    schema: self.schema.clone(),
                    open: open.clone(),
                    dead_letter: self.settings.dead_letter.clone(),
                    last: self.last.clone(),
                };
                Ok(Arc::new(DataSinkExec::new(input, Arc::new(sink), None)))
            }
            Writers::Spec(spec) => {
                let writers = Arc::new(SinkWriterExec::new(input, spec.clone(), self.schema.clone()));
                let reports = Arc::new(CoalescePartitionsExec::new(writers));
                let commit = SinkCommitExec::new(reports, spec.clone(), self.settings.clone())
                    .with_last(self.last.clone());
                Ok(Arc::new(commit))
            }
        }
    }
}
