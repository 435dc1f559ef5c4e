//! What a job's sink receives: the source's rows through the transforms or, for a job with
//! an `engine` section, the rows of its SQL query. `check`, `plan` and `run` all open it
//! here, so the sink's options are checked against the same schema in all three, before
//! any service is reached.

use arrow::datatypes::SchemaRef;
use outflow_core::{Destination, Result};

use crate::job::{Format, Job, JobFile, StreamJob};
use crate::output::progress::Progress;
use crate::run::{Pipeline, ReadStats, destinations, read_through};
use crate::source::SourceFile;

/// Whether the input is opened for a run (in the session the run uses: a Ballista cluster
/// when the job names a scheduler) or only to be looked at, on this machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// `outflow check` and `outflow plan`: nothing but local files is read.
    Inspect,
    /// `outflow run`.
    Run,
}

/// The rows a job's sink receives; see the module docs.
#[derive(Debug)]
pub enum JobInput {
    /// Outflow's own reader and the job's transforms.
    Pipeline(Pipeline),
    /// The job's SQL query, planned by DataFusion and not yet run.
    #[cfg(feature = "engine")]
    Query(Box<crate::engine::PlannedQuery>),
}

impl JobInput {
    /// Validates the sink's options, opens the input of `job` (reading schemas, not rows)
    /// and checks the sink's options against the schema the sink will receive: every field
    /// an option names, with the option and the column named when one is missing or of the
    /// wrong type. A job with an `engine` section needs the `engine` feature, in every
    /// command alike.
    pub async fn open(job: &Job, file: &JobFile, purpose: Purpose) -> Result<JobInput> {
        job.sink.validate()?;
        let input = match &job.engine {
            None => JobInput::Pipeline(Pipeline::open(&job.source, &job.transforms, file.dir())?),
            #[cfg(feature = "engine")]
            Some(engine) => JobInput::Query(Box::new(
                crate::engine::plan(job, engine, file, purpose == Purpose::Inspect).await?,
            )),
            #[cfg(not(feature = "engine"))]
            Some(engine) => {
                let _ = purpose;
                return Err(crate::features::missing("engine", "engine").with_context("sql", engine.query()));
            }
        };
        job.sink.check_input(input.schema())?;
        Ok(input)
    }

    /// The schema of the rows the sink receives.
    pub fn schema(&self) -> &SchemaRef {
        match self {
            JobInput::Pipeline(pipeline) => pipeline.output_schema(),
            #[cfg(feature = "engine")]
            JobInput::Query(query) => query.schema(),
        }
    }

    /// The source's schema, before the transforms or the query.
    pub fn source_schema(&self) -> &SchemaRef {
        match self {
            JobInput::Pipeline(pipeline) => pipeline.source().schema(),
            #[cfg(feature = "engine")]
            JobInput::Query(query) => query.source_schema(),
        }
    }

    /// The source's files.
    pub fn files(&self) -> &[SourceFile] {
        match self {
            JobInput::Pipeline(pipeline) => pipeline.source().files(),
            #[cfg(feature = "engine")]
            JobInput::Query(query) => query.files(),
        }
    }

    /// The source's format.
    pub fn format(&self) -> Format {
        match self {
            JobInput::Pipeline(pipeline) => pipeline.source().format(),
            #[cfg(feature = "engine")]
            JobInput::Query(query) => query.format(),
        }
    }

    /// Reads every row the sink would receive, writing nothing; what `outflow check` does.
    pub async fn read_through(self, progress: &Progress) -> Result<ReadStats> {
        match self {
            JobInput::Pipeline(pipeline) => read_through(pipeline, progress).await,
            #[cfg(feature = "engine")]
            JobInput::Query(query) => query.read(progress, |_| Ok(())).await,
        }
    }

    /// The destinations the rows go to, in order of first appearance: a fixed table without
    /// reading, a template's tables by reading every row.
    pub async fn destinations(self, destination: &Destination, progress: &Progress) -> Result<Vec<String>> {
        match self {
            JobInput::Pipeline(pipeline) => destinations(pipeline, destination, progress).await,
            #[cfg(feature = "engine")]
            JobInput::Query(query) => {
                if let Some(table) = destination.fixed() {
                    return Ok(vec![table.to_string()]);
                }
                let mut names = crate::run::DestinationNames::default();
                query
                    .read(progress, |batch| names.add(destination, batch).map(|_| ()))
                    .await?;
                Ok(names.into_names())
            }
        }
    }
}

/// What a streaming job writes, as `check`, `plan` and `run` all see it: the sink's spec
/// (paths resolved, options validated), its one fixed table, and the schema the sink
/// receives when the job gives its columns (`None`: it is inferred from the first records
/// once the job runs). The sink's options are checked against a given schema here.
pub struct StreamInput {
    /// The sink.
    pub spec: outflow_sinks::SinkSpec,
    /// The table every row goes to.
    pub table: String,
    /// The record values' schema, when the columns are given.
    pub values: Option<SchemaRef>,
    /// The schema after the key column and the transforms, when the columns are given.
    pub schema: Option<SchemaRef>,
}

impl StreamInput {
    /// Opens what `job` (read from `file`) writes; see [`StreamInput`].
    pub fn open(job: &StreamJob, file: &JobFile) -> Result<StreamInput> {
        let spec = job.sink.relative_to(file.dir());
        spec.validate()?;
        let at_least_once = job.checkpoint.delivery == crate::job::Delivery::AtLeastOnce;
        let spec = spec.for_checkpoints(at_least_once)?;
        let table = spec.fixed_destination().ok_or_else(|| {
            outflow_core::Error::invalid_config(
                "sink",
                "a streaming job writes one fixed table; a table template is not supported yet",
            )
        })?;
        let values = match &job.source.json.schema {
            Some(columns) => Some(crate::source::explicit_schema(columns, Format::Ndjson)?),
            None => None,
        };
        let schema = match &values {
            Some(values) => Some(stream_output_schema(job, values.clone(), false)?.1),
            None => None,
        };
        if let Some(schema) = &schema {
            spec.check_input(schema)?;
        }
        Ok(StreamInput {
            spec,
            table,
            values,
            schema,
        })
    }
}

/// The decoder of a streaming job's record values of schema `values` (`strict` when the
/// schema was inferred) and the schema the sink then receives, after the transforms.
pub fn stream_output_schema(
    job: &StreamJob,
    values: SchemaRef,
    strict: bool,
) -> Result<(
    outflow_kafka::JsonDecoder,
    SchemaRef,
    crate::transform::Transforms,
)> {
    let kafka = &job.source.kafka;
    let columns = outflow_kafka::RecordColumns {
        key: kafka.key_column.as_deref(),
        headers: kafka.headers_column.as_deref(),
        timestamp: kafka.timestamp_column.as_deref(),
    };
    let decoder = outflow_kafka::JsonDecoder::new(values, columns, strict)?;
    let transforms = crate::transform::Transforms::new(&job.transforms, decoder.schema().clone())?;
    let schema = transforms.output_schema().clone();
    Ok((decoder, schema, transforms))
}
