//! The job file: what `outflow run` reads, writes and does in between.
//!
//! A job file is YAML. Every mapping rejects keys it does not know, and every error names
//! the key and the line, because a misspelt option silently ignored is the costliest
//! mistake a job file can hold. `${VAR}` placeholders are replaced from the environment
//! before parsing (see [`crate::env`]).
//!
//! ```yaml
//! source:
//!   path: data/*.csv            # a file, a directory or a glob, relative to this file
//!   format: csv                 # parquet | csv | ndjson; from the extension when omitted
//!   batch_size: 8192
//!   csv: { header: true, delimiter: ",", infer_rows: 1000 }
//! transforms:                   # optional, applied in order
//!   - select: [id, user.name]
//!   - flatten: { policy: concat_field_names }
//!   - rename: { user_name: name }
//!   - filter: { column: id, op: gt, value: 10 }
//!   - cast: { id: long }
//! sink:
//!   iceberg: { ... }            # exactly one sink, with that sink's options
//! dead_letter: failed.ndjson    # optional
//! reload: false                 # true: load files the table already holds again
//! engine: { sql: ..., scheduler: ... }   # optional: one SQL statement in DataFusion instead
//! ```
//!
//! The doc comments on the types below are the reference for each key. Every relative path
//! in a job file is relative to the job file's directory, so a job runs the same from
//! wherever it is started.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use outflow_core::schema::{DataType, PrimitiveType};
use outflow_core::{Error, ErrorKind, FieldAccessDescriptor, FlattenPolicy, Result};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::env::{Substituted, substitute};
use outflow_sinks::SinkSpec;

/// A parsed job file. `S` is the sink section's type: [`SinkSpec`] for a run; commands that
/// never touch the sink read it as [`serde::de::IgnoredAny`].
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Job<S = SinkSpec> {
    /// The files to read.
    pub source: SourceSpec,
    /// Transforms applied to every batch, in order.
    #[serde(default)]
    pub transforms: Vec<TransformSpec>,
    /// Where rows go: exactly one sink, keyed by its name.
    pub sink: S,
    /// An NDJSON file that receives the records the sink rejects, one
    /// `{"destination", "index", "record", "reason"}` object a line. Without it, rejected
    /// records fail the run.
    #[serde(default)]
    pub dead_letter: Option<PathBuf>,
    /// Load every source file, even those the destination already holds from an earlier
    /// run. By default a run skips them: each commit records the files it loaded (by path,
    /// size and modification time) and a rerun loads only what is new (`--reload` does the
    /// same as `reload: true`).
    #[serde(default)]
    pub reload: bool,
    /// Run the job through Apache DataFusion, on this machine or on a Ballista cluster,
    /// instead of Outflow's own runner: a SQL query over the source replaces the transforms.
    #[serde(default)]
    pub engine: Option<EngineSpec>,
}

/// The `engine` section: the job as one `INSERT INTO <sink> <sql>` statement in DataFusion.
/// Every input partition writes through a sink of its own and the statement commits once
/// (see docs/datafusion.md).
///
/// ```yaml
/// engine:
///   sql: SELECT trip_id, upper(city) AS city FROM source WHERE fare_eur > 0
///   partitions: 4
///   scheduler: df://127.0.0.1:50050   # optional: an outflow-scheduler
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineSpec {
    /// The query whose rows are written; the source's files are the table `source`
    /// (default `SELECT * FROM source`).
    #[serde(default)]
    pub sql: Option<String>,
    /// Writers working at once: DataFusion's target partitions (default: the cores here,
    /// or the cluster's configured default).
    #[serde(default)]
    pub partitions: Option<usize>,
    /// A Ballista scheduler to run the statement on, `df://host:port`; it must be an
    /// `outflow-scheduler`, and the source, the catalog and the dead-letter file must be at
    /// the same paths on every executor.
    #[serde(default)]
    pub scheduler: Option<String>,
}

impl EngineSpec {
    /// The query, `SELECT * FROM source` when none is given.
    pub fn query(&self) -> &str {
        self.sql.as_deref().unwrap_or("SELECT * FROM source")
    }
}

/// The `source` section: local files read as Arrow batches.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceSpec {
    /// A file, a directory (every file of the format in it, sorted by name, skipping names
    /// that start with `.` or `_`) or a glob (`data/**/*.csv`, matches sorted by path).
    pub path: String,
    /// The file format. When omitted it comes from the files' extensions: `.parquet`,
    /// `.csv`, `.ndjson`, `.jsonl` or `.json`.
    #[serde(default)]
    pub format: Option<Format>,
    /// Rows per batch handed to the transforms and the sink (default 8192).
    #[serde(default = "default_batch_size")]
    pub batch_size: usize,
    /// CSV options (format `csv` only).
    #[serde(default)]
    pub csv: Option<CsvOptions>,
    /// NDJSON options (format `ndjson` only).
    #[serde(default)]
    pub ndjson: Option<NdjsonOptions>,
    /// How to reach the object store of an `s3://` or `gs://` path (`s3.endpoint`,
    /// `s3.region`, `s3.path-style-access`, `gcs.service.path`, credentials through
    /// `${ENV}`); see docs/object-stores.md. Empty: the store's defaults and credential chain.
    #[serde(default)]
    pub storage: outflow_store::StorageSettings,
}

fn default_batch_size() -> usize {
    8192
}

/// A source file format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Apache Parquet.
    Parquet,
    /// Comma- (or otherwise-) separated values.
    Csv,
    /// Newline-delimited JSON: one object a line (also written `jsonl` or `json`).
    #[serde(alias = "jsonl", alias = "json")]
    Ndjson,
}

impl Format {
    /// The format's name as written in job files.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Parquet => "parquet",
            Format::Csv => "csv",
            Format::Ndjson => "ndjson",
        }
    }

    /// The format a file extension stands for.
    pub fn from_extension(extension: &str) -> Option<Format> {
        match extension.to_ascii_lowercase().as_str() {
            "parquet" | "parq" => Some(Format::Parquet),
            "csv" => Some(Format::Csv),
            "ndjson" | "jsonl" | "json" => Some(Format::Ndjson),
            _ => None,
        }
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `source.csv`: how CSV files are read.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CsvOptions {
    /// Whether the first line names the columns (default true). Without a header, columns
    /// are named `column_1`, `column_2`... unless a schema names them.
    #[serde(default = "default_true")]
    pub header: bool,
    /// The field delimiter, one ASCII character (default `,`; write `"\t"` for tabs).
    #[serde(default = "default_delimiter")]
    pub delimiter: char,
    /// The quote character, one ASCII character (default `"`).
    #[serde(default)]
    pub quote: Option<char>,
    /// The columns, in file order. When omitted, types are inferred from the first
    /// `infer_rows` rows of the first file, and every file must fit what was inferred.
    #[serde(default)]
    pub schema: Option<Vec<ColumnSpec>>,
    /// Rows read to infer the schema (default 1000).
    #[serde(default = "default_infer_rows")]
    pub infer_rows: usize,
}

impl Default for CsvOptions {
    fn default() -> Self {
        CsvOptions {
            header: true,
            delimiter: default_delimiter(),
            quote: None,
            schema: None,
            infer_rows: default_infer_rows(),
        }
    }
}

/// `source.ndjson`: how NDJSON files are read.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NdjsonOptions {
    /// The columns. Fields of the objects that the schema does not name are ignored. When
    /// omitted, the schema is inferred from the first `infer_rows` objects of the first
    /// file, and a field that is not in it is an error.
    #[serde(default)]
    pub schema: Option<Vec<ColumnSpec>>,
    /// Objects read to infer the schema (default 1000).
    #[serde(default = "default_infer_rows")]
    pub infer_rows: usize,
}

impl Default for NdjsonOptions {
    fn default() -> Self {
        NdjsonOptions {
            schema: None,
            infer_rows: default_infer_rows(),
        }
    }
}

fn default_true() -> bool {
    true
}

fn default_delimiter() -> char {
    ','
}

fn default_infer_rows() -> usize {
    1000
}

/// One column of an explicit source schema.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ColumnSpec {
    /// The column name.
    pub name: String,
    /// The type, as Iceberg, Spark or DuckDB write it (docs/jobs.md lists them): `long`,
    /// `bigint`, `varchar`, `timestamptz`, `decimal(10,2)`..., and for nested NDJSON values
    /// `list<string>`, `map<string, long>`, `struct<a: int, b: string>` (or the structured
    /// form, `{struct: [...]}`, `{list: {...}}`).
    #[serde(rename = "type")]
    pub data_type: DataType,
    /// Whether the column never holds nulls (default false).
    #[serde(default)]
    pub required: bool,
}

/// One entry of `transforms`, keyed by its name.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransformSpec {
    /// Keeps the fields these dotted paths name, in this order (`user`, `user.name`,
    /// `events.location.latitude`, `user.*`), as the core crate's field access descriptor.
    Select(FieldAccessDescriptor),
    /// Replaces nested structs by their leaves.
    Flatten(FlattenSpec),
    /// Renames top-level columns, `old: new`; all at once, so `{a: b, b: a}` swaps.
    Rename(BTreeMap<String, String>),
    /// Keeps the rows where one column compares true with a value.
    Filter(FilterSpec),
    /// Converts top-level columns to other (primitive) types, `column: type`. A value that
    /// does not convert fails the run, naming the column and the row.
    Cast(BTreeMap<String, PrimitiveType>),
    /// Unwraps Debezium change events (`before`, `after`, `op`, under `payload` or not)
    /// into rows of the changed table with their operation in a column, for a sink's
    /// `changes` option.
    Debezium(DebeziumSpec),
}

/// `debezium`: where the operation goes.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DebeziumSpec {
    /// The column the event's `op` goes to (default `op`).
    #[serde(default = "default_operation_column")]
    pub operation_column: String,
}

impl Default for DebeziumSpec {
    fn default() -> Self {
        DebeziumSpec {
            operation_column: default_operation_column(),
        }
    }
}

fn default_operation_column() -> String {
    "op".to_string()
}

impl TransformSpec {
    /// The transform's name as written in job files.
    pub fn name(&self) -> &'static str {
        match self {
            TransformSpec::Select(_) => "select",
            TransformSpec::Flatten(_) => "flatten",
            TransformSpec::Rename(_) => "rename",
            TransformSpec::Filter(_) => "filter",
            TransformSpec::Cast(_) => "cast",
            TransformSpec::Debezium(_) => "debezium",
        }
    }
}

/// `flatten`: how nested columns are named.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlattenSpec {
    /// `concat_field_names` (default: `user.name` becomes `user_name`) or
    /// `keep_nested_name` (`name`; two leaves of the same name are an error).
    #[serde(default)]
    pub policy: FlattenPolicy,
}

/// `filter`: one column compared with a value.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilterSpec {
    /// The top-level column compared.
    pub column: String,
    /// The comparison.
    pub op: FilterOp,
    /// The value compared with; required except for `is_null` and `is_not_null`. A string
    /// for string, date and timestamp columns, a number for numeric columns, `true` or
    /// `false` for boolean columns.
    #[serde(default)]
    pub value: Option<Literal>,
}

/// A `filter` comparison. Rows where the column is null never match a comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FilterOp {
    /// Equal.
    Eq,
    /// Not equal.
    Ne,
    /// Less than.
    Lt,
    /// Less than or equal.
    Le,
    /// Greater than.
    Gt,
    /// Greater than or equal.
    Ge,
    /// The column is null.
    IsNull,
    /// The column is not null.
    IsNotNull,
}

impl FilterOp {
    /// The comparison's name as written in job files.
    pub fn as_str(self) -> &'static str {
        match self {
            FilterOp::Eq => "eq",
            FilterOp::Ne => "ne",
            FilterOp::Lt => "lt",
            FilterOp::Le => "le",
            FilterOp::Gt => "gt",
            FilterOp::Ge => "ge",
            FilterOp::IsNull => "is_null",
            FilterOp::IsNotNull => "is_not_null",
        }
    }
}

/// A literal value in a job file.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Literal {
    /// `true` or `false`.
    Bool(bool),
    /// A whole number.
    Int(i64),
    /// A number with a fraction or exponent.
    Float(f64),
    /// Text.
    String(String),
}

impl std::fmt::Display for Literal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Literal::Bool(b) => write!(f, "{b}"),
            Literal::Int(i) => write!(f, "{i}"),
            Literal::Float(x) => write!(f, "{x}"),
            Literal::String(s) => write!(f, "{s:?}"),
        }
    }
}

/// A streaming job file: a Kafka source read until stopped, committed at checkpoints
/// together with the offsets it read (see docs/streaming.md).
///
/// ```yaml
/// id: orders-to-lake            # the job's id: destinations keep offsets per id
/// source:
///   kafka: { brokers: 127.0.0.1:9092, topics: [orders], group: orders-to-lake }
///   json: { infer_rows: 1000 }  # or { schema: [...] }
/// checkpoint: { interval: 10s, rows: 1000000 }
/// transforms: [...]
/// sink: { iceberg: { ... } }
/// dead_letter: failed.ndjson
/// ```
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamJob<S = SinkSpec> {
    /// The job's id (letters, digits, `-_.`): each destination keeps the offsets of the rows
    /// it holds under it. Two processes of one job share it. Default: the consumer group.
    #[serde(default)]
    pub id: Option<String>,
    /// The stream to read.
    pub source: StreamSourceSpec,
    /// When to commit.
    #[serde(default)]
    pub checkpoint: CheckpointSpec,
    /// Transforms applied to every batch, in order.
    #[serde(default)]
    pub transforms: Vec<TransformSpec>,
    /// Where rows go: exactly one sink, keyed by its name, writing one fixed table.
    pub sink: S,
    /// Where the records that do not decode or that the sink rejects go, each with its
    /// topic, partition and offset: an NDJSON file, or `{kafka: {topic: ...}}`. Without
    /// it, such a record stops the job before the checkpoint that would hold it.
    #[serde(default)]
    pub dead_letter: Option<StreamDeadLetter>,
}

/// The dead-letter output of a streaming job.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum StreamDeadLetter {
    /// An NDJSON file, appended to across runs.
    File(PathBuf),
    /// A Kafka topic on the source's brokers.
    Topic {
        /// The topic.
        kafka: DeadLetterTopicSpec,
    },
}

/// `dead_letter: { kafka: { topic: orders-failed, properties: {...} } }`: a topic on the
/// source's brokers, reached with the source's security settings and then `properties`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadLetterTopicSpec {
    /// The topic, which must exist.
    pub topic: String,
    /// librdkafka producer settings, passed through.
    #[serde(default)]
    pub properties: std::collections::BTreeMap<String, String>,
}

impl<S> StreamJob<S> {
    /// The job's id: `id`, or the consumer group.
    pub fn job_id(&self) -> &str {
        self.id.as_deref().unwrap_or(&self.source.kafka.group)
    }
}

/// The `source` section of a streaming job.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamSourceSpec {
    /// The Kafka topics, group and client settings.
    pub kafka: outflow_kafka::KafkaSourceOptions,
    /// How record values are read: JSON objects, with these columns or a schema inferred
    /// from the first `infer_rows` records (then a field not in it fails its record).
    #[serde(default)]
    pub json: NdjsonOptions,
}

/// The `checkpoint` section of a streaming job: a checkpoint commits what was read when
/// either limit is reached.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointSpec {
    /// At the latest this long after the last one (default 10s).
    #[serde(default = "default_checkpoint_interval", with = "outflow_core::duration")]
    pub interval: std::time::Duration,
    /// At the latest after this many records (default 1,000,000).
    #[serde(default = "default_checkpoint_rows")]
    pub rows: u64,
    /// `exactly_once` (the default) or `at_least_once`: whether a sink that applies rows as
    /// they arrive (Bigtable) may write a record again in a way readers can see (new cell
    /// versions, aggregates counted twice) when the job restarts.
    #[serde(default)]
    pub delivery: Delivery,
}

/// What a streaming job promises about records read again after a restart.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// Each record is visible once in every sink.
    #[default]
    ExactlyOnce,
    /// A record may be visible again (Bigtable: a new cell version, an aggregate counted
    /// twice); Iceberg commits are exactly once either way.
    AtLeastOnce,
}

impl Default for CheckpointSpec {
    fn default() -> Self {
        CheckpointSpec {
            interval: default_checkpoint_interval(),
            rows: default_checkpoint_rows(),
            delivery: Delivery::default(),
        }
    }
}

fn default_checkpoint_interval() -> std::time::Duration {
    std::time::Duration::from_secs(10)
}

fn default_checkpoint_rows() -> u64 {
    1_000_000
}

/// Only what tells a streaming job file from a batch one: a `source.kafka` key.
#[derive(Deserialize)]
struct Peek {
    #[serde(default)]
    source: Option<PeekSource>,
}

#[derive(Deserialize)]
struct PeekSource {
    #[serde(default)]
    kafka: Option<serde::de::IgnoredAny>,
}

/// A job file read from disk, its variables substituted, ready to parse.
#[derive(Debug)]
pub struct JobFile {
    path: PathBuf,
    dir: PathBuf,
    text: Substituted,
}

impl JobFile {
    /// Reads the job file at `path` and substitutes `${VAR}` from the process environment.
    pub fn load(path: &Path) -> Result<JobFile> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::new(
                ErrorKind::InvalidConfig,
                format!("cannot read job file {}: {e}", path.display()),
            )
            .with_context("file", path.display().to_string())
        })?;
        JobFile::from_text(path, &text, |name| std::env::var(name).ok())
    }

    /// A job file from its text, as if read from `path`, with variables from `lookup`.
    pub fn from_text(path: &Path, text: &str, lookup: impl Fn(&str) -> Option<String>) -> Result<JobFile> {
        let text = substitute(text, lookup).map_err(|e| in_file(path, e))?;
        let dir = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
            _ => PathBuf::from("."),
        };
        Ok(JobFile {
            path: path.to_path_buf(),
            dir,
            text,
        })
    }

    /// The job file's path, as given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory relative paths in the job file are resolved against.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Resolves a path written in the job file against its directory.
    pub fn resolve(&self, path: &Path) -> PathBuf {
        if path.is_absolute() || self.dir == Path::new(".") {
            path.to_path_buf()
        } else {
            self.dir.join(path)
        }
    }

    /// Parses the job, with the sink section read as `S`.
    ///
    /// Errors name the file, the line and column, and the key path (`source.csv: unknown
    /// field ...`); substituted values in them are shown as their `${VAR}` text.
    pub fn parse<S: DeserializeOwned>(&self) -> Result<Job<S>> {
        let job: Job<S> = from_yaml(self.text.text()).map_err(|e| self.yaml_error(&e))?;
        if job.source.batch_size == 0 {
            return Err(self.key_error("source.batch_size", "must be at least 1"));
        }
        Ok(job)
    }

    /// Whether this is a streaming job (its source is `kafka`). A file that does not parse
    /// at all is not: parsing it as a batch job then says why.
    pub fn is_stream(&self) -> bool {
        from_yaml::<Peek>(self.text.text())
            .ok()
            .and_then(|p| p.source)
            .is_some_and(|s| s.kafka.is_some())
    }

    /// Parses a streaming job, with the sink section read as `S`; errors as
    /// [`JobFile::parse`].
    pub fn parse_stream<S: DeserializeOwned>(&self) -> Result<StreamJob<S>> {
        let job: StreamJob<S> = from_yaml(self.text.text()).map_err(|e| self.yaml_error(&e))?;
        if job.checkpoint.rows == 0 {
            return Err(self.key_error("checkpoint.rows", "must be at least 1"));
        }
        if job.checkpoint.interval.is_zero() {
            return Err(self.key_error("checkpoint.interval", "must be longer than 0s"));
        }
        if job.source.json.infer_rows == 0 && job.source.json.schema.is_none() {
            return Err(self.key_error("source.json.infer_rows", "must be at least 1"));
        }
        outflow_core::checkpoint::validate_job_id(job.job_id())
            .map_err(|e| self.key_error("id", e.message()))?;
        job.source
            .kafka
            .validate()
            .map_err(|e| self.key_error("source", e.message()))?;
        Ok(job)
    }

    /// `message` with every substituted value shown as its `${VAR}` text; for any message
    /// that may quote the job's values.
    pub fn redact(&self, message: &str) -> String {
        self.text.redact(message)
    }

    fn yaml_error(&self, err: &serde_yaml_ng::Error) -> Error {
        let mut text = crate::output::shorten_quoted(&self.redact(&err.to_string()));
        // A file that is not a mapping at all (a CSV file, a script) is the wrong file.
        if text.contains("expected struct Job") {
            text.push_str("; a job file is a YAML mapping with `source` and `sink` (see docs/jobs.md)");
        }
        match err.location() {
            Some(location) => {
                // serde_yaml_ng ends the message with " at line L column C"; the location
                // goes up front instead, where editors and people look for it.
                let suffix = format!(" at line {} column {}", location.line(), location.column());
                let message = text.strip_suffix(&suffix).unwrap_or(&text);
                Error::new(
                    ErrorKind::InvalidConfig,
                    format!(
                        "{}: line {}, column {}: {message}",
                        self.path.display(),
                        location.line(),
                        location.column()
                    ),
                )
                .with_context("file", self.path.display().to_string())
                .with_context("line", location.line().to_string())
            }
            None => Error::new(
                ErrorKind::InvalidConfig,
                format!("{}: {text}", self.path.display()),
            )
            .with_context("file", self.path.display().to_string()),
        }
    }

    fn key_error(&self, key: &str, message: &str) -> Error {
        Error::new(
            ErrorKind::InvalidConfig,
            format!("{}: {key}: {message}", self.path.display()),
        )
        .with_context("file", self.path.display().to_string())
        .with_context("key", key.to_string())
    }
}

/// Reads YAML as job files are read: enums (the sink, each transform) written as one-key
/// maps, `select: [...]`, rather than as YAML tags (`!select [...]`), the only form
/// serde_yaml_ng reads by itself.
pub fn from_yaml<T: DeserializeOwned>(text: &str) -> std::result::Result<T, serde_yaml_ng::Error> {
    serde_yaml_ng::with::singleton_map_recursive::deserialize(serde_yaml_ng::Deserializer::from_str(text))
}

fn in_file(path: &Path, err: Error) -> Error {
    let message = format!("{}: {}", path.display(), err.message());
    err.with_message(message)
        .with_context("file", path.display().to_string())
}

#[cfg(test)]
mod tests {
    use serde::de::IgnoredAny;

    use super::*;

    /// A stand-in for the real sink section, so parsing is tested apart from any sink.
    #[derive(Clone, Debug, PartialEq, Deserialize)]
    #[serde(rename_all = "snake_case", deny_unknown_fields)]
    enum TestSink {
        Recording { table: String, token: Option<String> },
    }

    fn parse(text: &str) -> Result<Job<TestSink>> {
        parse_with(text, &[])
    }

    fn parse_with(text: &str, vars: &[(&str, &str)]) -> Result<Job<TestSink>> {
        let vars: Vec<(String, String)> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        JobFile::from_text(Path::new("jobs/test.yaml"), text, |name| {
            vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
        })?
        .parse()
    }

    const FULL: &str = "\
source:
  path: data/*.csv
  format: csv
  batch_size: 100
  csv: { header: false, delimiter: ';', schema: [{name: id, type: long, required: true}, {name: amount, type: 'decimal(10,2)'}] }
transforms:
  - select: [id, user.name]
  - flatten: { policy: keep_nested_name }
  - flatten: {}
  - rename: { old: new }
  - filter: { column: amount, op: gt, value: 10.5 }
  - filter: { column: name, op: is_null }
  - cast: { amount: double, ts: timestamptz }
sink:
  recording: { table: db.t }
dead_letter: failed.ndjson
";

    #[test]
    fn a_full_job_parses() {
        let job = parse(FULL).unwrap();
        assert_eq!(job.source.path, "data/*.csv");
        assert_eq!(job.source.format, Some(Format::Csv));
        assert_eq!(job.source.batch_size, 100);
        let csv = job.source.csv.unwrap();
        assert!(!csv.header);
        assert_eq!(csv.delimiter, ';');
        let schema = csv.schema.unwrap();
        assert_eq!(schema[0].name, "id");
        assert!(schema[0].required);
        assert_eq!(
            schema[1].data_type,
            DataType::Primitive(PrimitiveType::Decimal {
                precision: 10,
                scale: 2
            })
        );
        let names: Vec<&str> = job.transforms.iter().map(TransformSpec::name).collect();
        assert_eq!(
            names,
            [
                "select", "flatten", "flatten", "rename", "filter", "filter", "cast"
            ]
        );
        assert_eq!(
            job.transforms[1],
            TransformSpec::Flatten(FlattenSpec {
                policy: FlattenPolicy::KeepNestedName
            })
        );
        assert_eq!(job.transforms[2], TransformSpec::Flatten(FlattenSpec::default()));
        assert_eq!(
            job.transforms[4],
            TransformSpec::Filter(FilterSpec {
                column: "amount".into(),
                op: FilterOp::Gt,
                value: Some(Literal::Float(10.5))
            })
        );
        let TransformSpec::Cast(casts) = &job.transforms[6] else {
            panic!("not a cast")
        };
        assert_eq!(casts["ts"], PrimitiveType::TimestampTz);
        assert_eq!(
            job.sink,
            TestSink::Recording {
                table: "db.t".into(),
                token: None
            }
        );
        assert_eq!(job.dead_letter, Some(PathBuf::from("failed.ndjson")));
    }

    #[test]
    fn a_streaming_job_sends_dead_letters_to_a_file_or_a_topic() {
        let stream = |dead_letter: &str| {
            let text = format!(
                "source: {{ kafka: {{ brokers: b, topics: [t], group: g }} }}\n\
                 sink: {{ recording: {{ table: t }} }}\n{dead_letter}"
            );
            JobFile::from_text(Path::new("jobs/s.yaml"), &text, |_| None)
                .unwrap()
                .parse_stream::<TestSink>()
        };
        let file = stream("dead_letter: failed.ndjson\n").unwrap();
        assert_eq!(
            file.dead_letter,
            Some(StreamDeadLetter::File(PathBuf::from("failed.ndjson")))
        );
        let topic =
            stream("dead_letter: { kafka: { topic: failed, properties: { linger.ms: '5' } } }\n").unwrap();
        let Some(StreamDeadLetter::Topic { kafka }) = topic.dead_letter else {
            panic!("not a topic: {:?}", topic.dead_letter)
        };
        assert_eq!(kafka.topic, "failed");
        assert_eq!(kafka.properties["linger.ms"], "5");
        assert!(stream("dead_letter: { kafka: { topik: failed } }\n").is_err());
    }

    #[test]
    fn defaults_apply() {
        let job = parse("source: { path: x.parquet }\nsink: { recording: { table: t } }\n").unwrap();
        assert_eq!(job.source.batch_size, 8192);
        assert_eq!(job.source.format, None);
        assert!(job.transforms.is_empty());
        assert_eq!(job.dead_letter, None);
        let csv: CsvOptions = from_yaml("{}").unwrap();
        assert_eq!(csv, CsvOptions::default());
    }

    #[test]
    fn an_unknown_key_is_named_with_its_line() {
        let err =
            parse("source:\n  path: x.csv\n  fromat: csv\nsink: { recording: { table: t } }\n").unwrap_err();
        let message = err.to_string();
        assert!(message.contains("jobs/test.yaml: line 3"), "{message}");
        assert!(message.contains("unknown field `fromat`"), "{message}");
        assert!(message.contains("source"), "{message}");
        assert_eq!(err.context_value("line"), Some("3"));

        let err =
            parse("source: { path: x.csv, csv: { delimter: ';' } }\nsink: { recording: { table: t } }\n")
                .unwrap_err();
        assert!(err.to_string().contains("unknown field `delimter`"), "{err}");
        assert!(err.to_string().contains("line 1"), "{err}");

        let err =
            parse("source: { path: x.csv }\nsink: { recording: { table: t } }\nextra: 1\n").unwrap_err();
        assert!(err.to_string().contains("unknown field `extra`"), "{err}");
    }

    #[test]
    fn an_unknown_transform_or_op_is_named() {
        let err = parse(
            "source: { path: x.csv }\ntransforms:\n  - select: [a]\n  - sort: [a]\nsink: { recording: { table: t } }\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("unknown variant `sort`"), "{err}");
        assert!(err.to_string().contains("line 4"), "{err}");

        let err = parse(
            "source: { path: x.csv }\ntransforms:\n  - filter: { column: a, op: like, value: x }\nsink: { recording: { table: t } }\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("unknown variant `like`"), "{err}");
        assert!(err.to_string().contains("line 3"), "{err}");
    }

    #[test]
    fn a_wrong_type_is_named_with_its_line() {
        let err = parse("source:\n  path: x.csv\n  batch_size: lots\nsink: { recording: { table: t } }\n")
            .unwrap_err();
        let message = err.to_string();
        assert!(message.contains("line 3"), "{message}");
        assert!(message.contains("source.batch_size"), "{message}");
        assert!(message.contains("invalid type"), "{message}");

        let err = parse("source: { path: x.csv }\ntransforms:\n  - cast: { a: integerish }\nsink: { recording: { table: t } }\n")
            .unwrap_err();
        assert!(err.to_string().contains("unknown type \"integerish\""), "{err}");
        assert!(err.to_string().contains("line 3"), "{err}");

        let err =
            parse("source: { path: x.csv, batch_size: 0 }\nsink: { recording: { table: t } }\n").unwrap_err();
        assert!(
            err.to_string().contains("source.batch_size: must be at least 1"),
            "{err}"
        );
    }

    #[test]
    fn a_missing_sink_or_source_is_an_error() {
        let err = parse("source: { path: x.csv }\n").unwrap_err();
        assert!(err.to_string().contains("missing field `sink`"), "{err}");
        assert!(err.to_string().contains("line 1"), "{err}");
        let err = parse("sink: { recording: { table: t } }\n").unwrap_err();
        assert!(err.to_string().contains("missing field `source`"), "{err}");
    }

    #[test]
    fn the_real_sink_section_names_an_unknown_sink() {
        let file = JobFile::from_text(
            Path::new("job.yaml"),
            "source: { path: x.csv }\nsink:\n  nosuchsink: { table: t }\n",
            |_| None,
        )
        .unwrap();
        let err = file.parse::<SinkSpec>().unwrap_err();
        assert!(err.to_string().contains("unknown sink `nosuchsink`"), "{err}");
        assert!(err.to_string().contains("line 3"), "{err}");
        // Commands that never touch the sink read the rest of the job all the same.
        let job = file.parse::<IgnoredAny>().unwrap();
        assert_eq!(job.source.path, "x.csv");
    }

    #[test]
    fn variables_are_substituted() {
        let job = parse_with(
            "source: { path: '${DATA_DIR}/x.csv', batch_size: ${BATCH:-64} }\nsink: { recording: { table: '${TABLE}' } }\n",
            &[("DATA_DIR", "/srv/data"), ("TABLE", "db.events")],
        )
        .unwrap();
        assert_eq!(job.source.path, "/srv/data/x.csv");
        assert_eq!(job.source.batch_size, 64);
        assert_eq!(
            job.sink,
            TestSink::Recording {
                table: "db.events".into(),
                token: None
            }
        );
        let err = parse_with(
            "source: { path: x.csv }\nsink: { recording: { table: ${TABLE} } }\n",
            &[],
        )
        .unwrap_err();
        assert!(err.to_string().contains("jobs/test.yaml: line 2"), "{err}");
        assert!(err.to_string().contains("TABLE is not set"), "{err}");
    }

    #[test]
    fn secrets_are_not_echoed() {
        // The secret lands where a number belongs, so the parser's message would quote it.
        let err = parse_with(
            "source: { path: x.csv, batch_size: '${TOKEN}' }\nsink: { recording: { table: t, token: '${TOKEN}' } }\n",
            &[("TOKEN", "s3cr3t-value-123")],
        )
        .unwrap_err();
        let message = err.to_string();
        assert!(!message.contains("s3cr3t"), "{message}");
        assert!(message.contains("${TOKEN}"), "{message}");
        assert!(!format!("{err:?}").contains("s3cr3t"));

        let file = JobFile::from_text(
            Path::new("job.yaml"),
            "source: { path: x.csv }\nsink: { recording: { table: t, token: '${TOKEN}' } }\n",
            |_| Some("s3cr3t-value-123".to_string()),
        )
        .unwrap();
        assert!(!format!("{file:?}").contains("s3cr3t"));
        assert_eq!(
            file.redact("connect failed: bad token s3cr3t-value-123"),
            "connect failed: bad token ${TOKEN}"
        );
    }

    #[test]
    fn paths_resolve_against_the_job_directory() {
        let file = JobFile::from_text(Path::new("jobs/nightly.yaml"), "", |_| None).unwrap();
        assert_eq!(
            file.resolve(Path::new("failed.ndjson")),
            Path::new("jobs/failed.ndjson")
        );
        assert_eq!(file.resolve(Path::new("/tmp/x")), Path::new("/tmp/x"));
        let file = JobFile::from_text(Path::new("job.yaml"), "", |_| None).unwrap();
        assert_eq!(file.dir(), Path::new("."));
        assert_eq!(
            file.resolve(Path::new("failed.ndjson")),
            Path::new("failed.ndjson")
        );
    }
}
