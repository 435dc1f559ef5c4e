//! A job run through Apache DataFusion (the job's `engine` section): the source's files as
//! the table `source`, the job's SQL over it, and one `INSERT` into the sink as a
//! spec-built [`SinkTable`]: a writer per partition, one commit. On this machine, or on a
//! Ballista cluster when the job names a scheduler.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use datafusion::arrow::array::{Array, RecordBatch, UInt64Array};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::TableProvider;
use datafusion::dataframe::{DataFrame, DataFrameWriteOptions};
use datafusion::datasource::file_format::FileFormat;
use datafusion::datasource::file_format::csv::CsvFormat;
use datafusion::datasource::file_format::json::JsonFormat;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl};
use datafusion::error::DataFusionError;
use datafusion::prelude::{SessionConfig, SessionContext};
use futures::StreamExt;
use outflow_core::{Error, ErrorKind, FailedRecord, Result, WriteResult};
use outflow_datafusion::SinkTable;

use crate::job::{EngineSpec, Format, Job, JobFile, SourceSpec};
use crate::output::progress::Progress;
use crate::run::{DeadLetterReport, ReadStats, RejectionStream, RunReport, create_dead_letter};
use crate::source::{SourceFile, resolve};

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
    let (files, format) = resolve(&job.source.path, file.dir(), job.source.format)?;
    let ctx = if local {
        local_context(engine, job.source.batch_size)
    } else {
        context(engine, job.source.batch_size).await?
    };
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

/// Runs `job`'s planned query as one statement; see the module docs.
pub async fn run(job: &Job, planned: PlannedQuery, file: &JobFile, progress: &Progress) -> Result<RunReport> {
    let started = Instant::now();
    let PlannedQuery {
        ctx,
        query,
        files,
        schema,
        ..
    } = planned;
    let dead_letter = job.dead_letter.as_deref().map(|p| file.resolve(p));
    // Created (emptied) first, as the runner does; the commit appends to it. The stream
    // itself only counts: the statement's commit writes the file.
    if let Some(path) = &dead_letter {
        create_dead_letter(path)?;
    }
    let mut rejections = RejectionStream::open(None)?;

    // The statement's writers may run in other processes: paths go absolute.
    let mut table = SinkTable::from_spec(schema, job.sink.relative_to(file.dir()));
    if let Some(path) = &dead_letter {
        table = table.with_dead_letter(path);
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
    // DataFusion reads every file; the engine path keeps no record of them.
    let unrecorded = result.destinations.keys().cloned().collect();
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
        skipped: Vec::new(),
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
        .map(|f| {
            let path = std::path::absolute(&f.path).unwrap_or_else(|_| f.path.clone());
            ListingTableUrl::parse(path.to_string_lossy()).map_err(|e| engine_error("source.path", e))
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
