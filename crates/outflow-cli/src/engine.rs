//! A job run through Apache DataFusion (the job's `engine` section): the source's files as
//! the table `source`, the job's SQL over it, and one `INSERT` into the sink as a
//! spec-built [`SinkTable`]: a writer per partition, one commit. On this machine, or on a
//! Ballista cluster when the job names a scheduler.
//!
//! A rerun loads each file once, as the runner's do (see [`crate::loads`]), when the job
//! writes one table through a sink whose commit records a statement's files (Iceberg,
//! BigQuery): a table holding every file runs nothing; one holding some has them left out
//! of the `source` table, when the query reads row by row (projections and filters), since
//! a query that combines rows across files (aggregates, joins, windows, limits) would give
//! other rows over the new files alone, and then the run stops and says so.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use datafusion::arrow::array::{Array, RecordBatch, UInt64Array};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::TableProvider;
use datafusion::common::tree_node::TreeNode;
use datafusion::dataframe::{DataFrame, DataFrameWriteOptions};
use datafusion::datasource::file_format::FileFormat;
use datafusion::datasource::file_format::csv::CsvFormat;
use datafusion::datasource::file_format::json::JsonFormat;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::prelude::{SessionConfig, SessionContext};
use futures::StreamExt;
use outflow_core::{Error, ErrorKind, FailedRecord, LoadedFile, PrepareDestination, Result, WriteResult};
use outflow_datafusion::SinkTable;
use outflow_sinks::OpenedSink;

use crate::job::{EngineSpec, Format, Job, JobFile, SourceSpec};
use crate::loads::{Ledgers, Skipped};
use crate::output::progress::Progress;
use crate::output::some_names;
use crate::run::{DeadLetterReport, ReadStats, RejectionStream, RunReport, create_dead_letter};
use crate::source::{Location, SourceFile, resolve};

/// The sink's name in the statement.
const SINK_TABLE: &str = "outflow_sink";

/// The job's query, planned and not run: what it reads and the rows it selects.
pub struct PlannedQuery {
    ctx: SessionContext,
    query: DataFrame,
    files: Vec<SourceFile>,
    format: Format,
    source_schema: SchemaRef,
    schema: SchemaRef,
}

impl std::fmt::Debug for PlannedQuery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlannedQuery")
            .field("files", &self.files)
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

impl PlannedQuery {
    /// The source's files.
    pub fn files(&self) -> &[SourceFile] {
        &self.files
    }

    /// The source's format.
    pub fn format(&self) -> Format {
        self.format
    }

    /// The table `source` as DataFusion reads it.
    pub fn source_schema(&self) -> &SchemaRef {
        &self.source_schema
    }

    /// The schema of the rows the query selects: what the sink receives.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Runs the query on this machine, handing each batch to `each`, and says what was
    /// read; writes nothing.
    pub async fn read(
        self,
        progress: &Progress,
        mut each: impl FnMut(&RecordBatch) -> Result<()>,
    ) -> Result<ReadStats> {
        let bytes = self.files.iter().map(|f| f.size).sum();
        progress.start("reading", bytes, self.files.len());
        let mut stream = self
            .query
            .execute_stream()
            .await
            .map_err(|e| engine_error("engine.sql", e))?;
        let mut rows = 0;
        while let Some(batch) = stream.next().await {
            let batch = batch.map_err(|e| engine_error("engine.sql", e))?;
            rows += batch.num_rows() as u64;
            progress.batch(batch.num_rows() as u64, 0);
            each(&batch)?;
        }
        progress.finish();
        Ok(ReadStats {
            files: self.files.len() as u64,
            bytes,
            rows_read: rows,
            rows_out: rows,
        })
    }
}

/// Plans `job`'s query over its source files without running it, in a session on this
/// machine (`local`, for `check` and `plan`: no service is reached) or in the one the run
/// uses (a Ballista cluster when the job names a scheduler). What the engine does not take
/// is refused first.
pub async fn plan(job: &Job, engine: &EngineSpec, file: &JobFile, local: bool) -> Result<PlannedQuery> {
    check(job)?;
    let (files, format) = resolve(
        &job.source.path,
        file.dir(),
        job.source.format,
        &job.source.storage,
    )?;
    let ctx = if local {
        local_context(engine, job.source.batch_size)
    } else {
        context(engine, job.source.batch_size).await?
    };
    PlannedQuery::over(ctx, files, format, job, engine).await
}

/// What a statement loads into a table that records its files, as its ledger says.
#[derive(Debug)]
pub struct StatementLoads {
    /// The table.
    pub table: String,
    /// Per source file, whether the table holds it (all false under `reload`).
    pub held: Vec<bool>,
    /// What the statement's commit records.
    pub record: Vec<LoadedFile>,
    paths: Vec<String>,
}

impl StatementLoads {
    /// For the `planned` query into `sink`: `None` when nothing is recorded (a table
    /// template, or a sink whose statements keep no ledger). Fails when the table holds
    /// some of the files and the query combines rows across files.
    pub async fn ask(
        job: &Job,
        planned: &PlannedQuery,
        sink: &OpenedSink,
        reload: bool,
    ) -> Result<Option<StatementLoads>> {
        let Some(table) = sink.destination.fixed() else {
            return Ok(None);
        };
        if !job.sink.records_statement_loads() {
            return Ok(None);
        }
        let preparer: &dyn PrepareDestination = sink.preparer.as_ref();
        let mut ledgers = Ledgers::new(&planned.files, reload);
        ledgers.ask(preparer, table).await?;
        let held: Vec<bool> = (0..planned.files.len())
            .map(|f| ledgers.holds(table, f))
            .collect();
        let loads = StatementLoads {
            table: table.to_string(),
            record: ledgers.loaded(),
            paths: planned.files.iter().map(|f| f.display().to_string()).collect(),
            held,
        };
        let count = loads.held_paths().len();
        if count > 0
            && count < loads.held.len()
            && let Some(why) = combines_rows(planned.query.logical_plan())?
        {
            let held = loads.held_paths();
            return Err(Error::new(
                    ErrorKind::Conflict,
                    format!(
                        "{table} holds {count} of the {} files the query reads ({}), and the query                          combines rows across files ({why}), so it would give other rows over the                          new files alone: run with --reload (or reload: true) to load every file                          again, or point source.path at the new files",
                        loads.held.len(),
                        some_names(&held),
                    ),
                )
                .with_context("table", table.to_string())
                .with_retryable(false));
        }
        Ok(Some(loads))
    }

    /// The paths of the files the table holds.
    pub fn held_paths(&self) -> Vec<&str> {
        self.paths
            .iter()
            .zip(&self.held)
            .filter(|(_, h)| **h)
            .map(|(p, _)| p.as_str())
            .collect()
    }

    /// Whether the table holds every file: nothing to run.
    pub fn holds_all(&self) -> bool {
        !self.held.is_empty() && self.held.iter().all(|h| *h)
    }

    fn skipped(&self) -> Vec<Skipped> {
        self.held_paths()
            .into_iter()
            .map(|file| Skipped {
                file: file.to_string(),
                destination: self.table.clone(),
            })
            .collect()
    }
}

/// Why `plan` combines rows across its input (an aggregate, a join...), or `None` when it
/// reads row by row: projections and filters over one scan, whose rows over some files
/// are exactly its rows over all of them from those files.
fn combines_rows(plan: &LogicalPlan) -> Result<Option<String>> {
    let mut why = None;
    plan.apply(|node| {
        let row_by_row = match node {
            LogicalPlan::Projection(_) | LogicalPlan::Filter(_) | LogicalPlan::SubqueryAlias(_) => {
                !node.expressions().iter().any(has_subquery)
            }
            LogicalPlan::TableScan(_) => true,
            _ => false,
        };
        if row_by_row {
            return Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue);
        }
        why = Some(match node {
            LogicalPlan::Aggregate(_) => "an aggregate".to_string(),
            LogicalPlan::Join(_) => "a join".to_string(),
            LogicalPlan::Window(_) => "a window function".to_string(),
            LogicalPlan::Limit(_) => "a limit".to_string(),
            LogicalPlan::Sort(_) => "a sort".to_string(),
            LogicalPlan::Distinct(_) => "DISTINCT".to_string(),
            LogicalPlan::Union(_) => "a union".to_string(),
            _ if node.expressions().iter().any(has_subquery) => "a subquery".to_string(),
            other => format!(
                "a {} step",
                other.display().to_string().split(':').next().unwrap_or("query")
            ),
        });
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Stop)
    })
    .map_err(|e| engine_error("engine.sql", e))?;
    Ok(why)
}

fn has_subquery(expr: &Expr) -> bool {
    expr.exists(|e| {
        Ok(matches!(
            e,
            Expr::ScalarSubquery(_) | Expr::Exists(_) | Expr::InSubquery(_)
        ))
    })
    .unwrap_or(true)
}

impl PlannedQuery {
    /// The job's query in `ctx`, over `files` registered as the table `source`.
    async fn over(
        ctx: SessionContext,
        files: Vec<SourceFile>,
        format: Format,
        job: &Job,
        engine: &EngineSpec,
    ) -> Result<PlannedQuery> {
        let source_schema = register_source(&ctx, &files, format, &job.source).await?;
        let query = ctx
            .sql(engine.query())
            .await
            .map_err(|e| engine_error("engine.sql", e))?;
        let schema = query.schema().inner().clone();
        Ok(PlannedQuery {
            ctx,
            query,
            files,
            format,
            source_schema,
            schema,
        })
    }

    /// The same query over the source files not `held`.
    async fn without(self, held: &[bool], job: &Job, engine: &EngineSpec) -> Result<PlannedQuery> {
        let files: Vec<SourceFile> = self
            .files
            .into_iter()
            .zip(held)
            .filter(|(_, h)| !**h)
            .map(|(f, _)| f)
            .collect();
        self.ctx
            .deregister_table("source")
            .map_err(|e| engine_error("source", e))?;
        PlannedQuery::over(self.ctx, files, self.format, job, engine).await
    }
}

/// Runs `job`'s planned query as one statement, recording and skipping files as `loads`
/// says; see the module docs.
pub async fn run(
    job: &Job,
    planned: PlannedQuery,
    loads: Option<StatementLoads>,
    file: &JobFile,
    progress: &Progress,
) -> Result<RunReport> {
    let started = Instant::now();
    let dead_letter = job.dead_letter.as_deref().map(|p| file.resolve(p));
    // Created (emptied) first, as the runner does; the commit appends to it. The stream
    // itself only counts: the statement's commit writes the file.
    if let Some(path) = &dead_letter {
        create_dead_letter(path)?;
    }
    if let Some(loads) = &loads
        && loads.holds_all()
    {
        return Ok(RunReport {
            read: ReadStats::default(),
            prepared: Vec::new(),
            result: WriteResult::default(),
            rejected: Default::default(),
            elapsed: started.elapsed(),
            dead_letter: dead_letter.map(|path| DeadLetterReport { path, records: 0 }),
            skipped: loads.skipped(),
            skipped_rows: 0,
            unrecorded: Vec::new(),
        });
    }
    let planned = match (&loads, &job.engine) {
        (Some(loads), Some(engine)) if loads.held.iter().any(|h| *h) => {
            planned.without(&loads.held, job, engine).await?
        }
        _ => planned,
    };
    let PlannedQuery {
        ctx,
        query,
        files,
        schema,
        ..
    } = planned;
    let mut rejections = RejectionStream::open(None)?;

    // The statement's writers may run in other processes: paths go absolute.
    let mut table = SinkTable::from_spec(schema, job.sink.relative_to(file.dir()));
    if let Some(path) = &dead_letter {
        table = table.with_dead_letter(path);
    }
    if let Some(loads) = &loads {
        table = table.with_loads(loads.record.clone());
    }
    ctx.register_table(SINK_TABLE, Arc::new(table.clone()))
        .map_err(|e| engine_error("sink", e))?;

    progress.stage("writing");
    let answer = query
        .write_table(SINK_TABLE, DataFrameWriteOptions::new())
        .await
        .map_err(|e| engine_error("sink", e))?;
    progress.finish();
    let (written, rejected) = counts(&answer)?;

    // In this process the commit left its result; on a cluster only the counts come back,
    // and the rejected records are in the dead-letter file the commit wrote.
    let mut result = match table.last_result() {
        Some(result) => result,
        None => cluster_result(job, written, rejected, dead_letter.as_deref(), &mut rejections)?,
    };
    rejections.take(std::mem::take(&mut result.failed))?;
    let (rejected_records, first, _) = rejections.finish();
    result.failed = first;
    let (skipped, unrecorded) = match &loads {
        Some(loads) => (loads.skipped(), Vec::new()),
        None => (Vec::new(), result.destinations.keys().cloned().collect()),
    };
    Ok(RunReport {
        read: ReadStats {
            files: files.len() as u64,
            bytes: files.iter().map(|f| f.size).sum(),
            rows_read: written + rejected,
            rows_out: written + rejected,
        },
        prepared: Vec::new(),
        elapsed: started.elapsed(),
        dead_letter: dead_letter.map(|path| DeadLetterReport {
            path,
            records: rejected,
        }),
        result,
        rejected: rejected_records,
        skipped,
        skipped_rows: 0,
        unrecorded,
    })
}

/// What the engine does not take: transforms (write them in SQL) and typed CSV/NDJSON
/// schemas (DataFusion infers types; cast in SQL). `check`, `plan` and `run` refuse them
/// alike, through [`plan`].
fn check(job: &Job) -> Result<()> {
    if !job.transforms.is_empty() {
        return Err(Error::invalid_config(
            "transforms",
            "a job with an engine section writes what engine.sql selects: express the transforms in SQL",
        ));
    }
    let typed = job.source.csv.as_ref().is_some_and(|c| c.schema.is_some())
        || job.source.ndjson.as_ref().is_some_and(|n| n.schema.is_some());
    if typed {
        return Err(Error::invalid_config(
            "source",
            "with an engine section column types are inferred: leave out the schema and CAST in engine.sql",
        ));
    }
    Ok(())
}

/// A session on this machine with the job's batch size and partitions.
fn local_context(engine: &EngineSpec, batch_size: usize) -> SessionContext {
    let mut config = SessionConfig::new().with_batch_size(batch_size);
    if let Some(partitions) = engine.partitions {
        config = config.with_target_partitions(partitions);
    }
    SessionContext::new_with_config(config)
}

/// The session the run uses: on this machine, or on the job's Ballista cluster.
async fn context(engine: &EngineSpec, batch_size: usize) -> Result<SessionContext> {
    let Some(url) = &engine.scheduler else {
        return Ok(local_context(engine, batch_size));
    };
    let ctx = cluster(url).await?;
    let mut settings = vec![format!("SET datafusion.execution.batch_size = {batch_size}")];
    if let Some(partitions) = engine.partitions {
        settings.push(format!(
            "SET datafusion.execution.target_partitions = {partitions}"
        ));
    }
    for sql in settings {
        ctx.sql(&sql)
            .await
            .map_err(|e| engine_error("engine.scheduler", e))?;
    }
    Ok(ctx)
}

/// A session on the Ballista cluster whose scheduler is at `url`.
#[cfg(feature = "ballista")]
async fn cluster(url: &str) -> Result<SessionContext> {
    outflow_ballista::connect(url)
        .await
        .map_err(|e| engine_error("engine.scheduler", e))
}

/// Without the Ballista client, a job that names a scheduler says how to get one.
#[cfg(not(feature = "ballista"))]
async fn cluster(url: &str) -> Result<SessionContext> {
    Err(crate::features::missing("ballista", "engine.scheduler").with_context("scheduler", url.to_string()))
}

/// The source's files, exactly those the job names, as the table `source`; returns its
/// schema.
async fn register_source(
    ctx: &SessionContext,
    files: &[SourceFile],
    format: Format,
    spec: &SourceSpec,
) -> Result<SchemaRef> {
    let file_format: Arc<dyn FileFormat> = match format {
        Format::Parquet => Arc::new(ParquetFormat::default()),
        Format::Csv => {
            let csv = spec.csv.clone().unwrap_or_default();
            let mut csv_format = CsvFormat::default()
                .with_has_header(csv.header)
                .with_delimiter(csv.delimiter as u8)
                .with_schema_infer_max_rec(csv.infer_rows);
            if let Some(quote) = csv.quote {
                csv_format = csv_format.with_quote(quote as u8);
            }
            Arc::new(csv_format)
        }
        Format::Ndjson => Arc::new(JsonFormat::default()),
    };
    let urls = files
        .iter()
        .map(|f| match &f.location {
            Location::Local(path) => {
                let path = std::path::absolute(path).unwrap_or_else(|_| path.clone());
                ListingTableUrl::parse(path.to_string_lossy()).map_err(|e| engine_error("source.path", e))
            }
            Location::Object(url, store) => {
                let listing =
                    ListingTableUrl::parse(url.to_string()).map_err(|e| engine_error("source.path", e))?;
                // DataFusion finds a URL's store by its scheme and bucket.
                ctx.register_object_store(listing.object_store().as_ref(), store.object_store());
                Ok(listing)
            }
        })
        .collect::<Result<Vec<_>>>()?;
    let options = ListingOptions::new(file_format).with_file_extension("");
    let config = ListingTableConfig::new_with_multi_paths(urls)
        .with_listing_options(options)
        .infer_schema(&ctx.state())
        .await
        .map_err(|e| engine_error("source", e))?;
    let table = ListingTable::try_new(config).map_err(|e| engine_error("source", e))?;
    let schema = table.schema();
    ctx.register_table("source", Arc::new(table))
        .map_err(|e| engine_error("source", e))?;
    Ok(schema)
}

/// `count` and `failed` from the statement's answer.
fn counts(answer: &[RecordBatch]) -> Result<(u64, u64)> {
    let column = |name: &str| -> Result<u64> {
        answer
            .iter()
            .filter_map(|b| b.column_by_name(name))
            .filter_map(|c| {
                c.as_any()
                    .downcast_ref::<UInt64Array>()
                    .map(|a| a.iter().flatten().sum::<u64>())
            })
            .reduce(|a, b| a + b)
            .ok_or_else(|| Error::internal(format!("the statement's answer has no {name}")))
    };
    Ok((column("count")?, column("failed")?))
}

/// The result of a statement committed on a cluster: its counts, and the rejected records
/// read back from the dead-letter file into `rejections` one line at a time (without a
/// file, rejected records fail the run).
fn cluster_result(
    job: &Job,
    written: u64,
    rejected: u64,
    dead_letter: Option<&Path>,
    rejections: &mut RejectionStream,
) -> Result<WriteResult> {
    let mut result = WriteResult::default();
    // Named after the table when it is fixed, else after the sink.
    let destination = job
        .sink
        .fixed_destination()
        .unwrap_or_else(|| job.sink.name().to_string());
    result.record(
        &destination,
        outflow_core::sink::DestinationStats {
            rows: written,
            ..Default::default()
        },
    );
    if rejected == 0 {
        return Ok(result);
    }
    let Some(path) = dead_letter else {
        return Err(Error::new(
            ErrorKind::RejectedRecords,
            format!(
                "the sink rejected {rejected} records on the cluster and the job names no dead_letter file"
            ),
        ));
    };
    let unreadable = |e: std::io::Error| {
        Error::invalid_input(format!(
            "cannot read the dead-letter file {}: {e}",
            path.display()
        ))
    };
    let lines = BufReader::new(std::fs::File::open(path).map_err(unreadable)?).lines();
    for line in lines {
        let line = line.map_err(unreadable)?;
        if line.trim().is_empty() {
            continue;
        }
        let record: FailedRecord = serde_json::from_str(&line)
            .map_err(|e| Error::invalid_input(format!("a dead-letter line in {}: {e}", path.display())))?;
        rejections.take(vec![record])?;
    }
    Ok(result)
}

/// A DataFusion error as Outflow's, naming the part of the job it concerns. Planning errors
/// (a bad query, a missing column) are the job's; execution errors are the run's.
fn engine_error(key: &str, e: DataFusionError) -> Error {
    match e {
        DataFusionError::Diagnostic(_, inner) | DataFusionError::Context(_, inner) => {
            engine_error(key, *inner)
        }
        DataFusionError::External(inner) => match inner.downcast::<Error>() {
            Ok(outflow) => *outflow,
            Err(other) => Error::new(ErrorKind::Internal, other.to_string()),
        },
        e @ (DataFusionError::SQL(..) | DataFusionError::Plan(_) | DataFusionError::SchemaError(..)) => {
            Error::invalid_config(key, e.to_string())
        }
        e => Error::new(ErrorKind::Internal, format!("{key}: {e}")),
    }
}
