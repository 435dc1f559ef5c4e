//! The `outflow` command line: job files that read local files, transform them and write
//! them through one of Outflow's sinks.
//!
//! - [`job`]: the job file model (YAML, unknown keys rejected with their line).
//! - [`env`](mod@env): `${VAR}` substitution, with substituted values kept out of messages.
//! - [`source`]: Parquet, CSV and NDJSON files as a bounded stream of Arrow batches.
//! - [`transform`]: select, flatten, rename, filter and cast, planned on the schema first.
//! - [`features`]: what this build was made with, and the command for what it lacks. The
//!   `sink:` section and opening the sink it names are `outflow-sinks`' business.
//! - [`run`]: the runner, generic over the core `Sink` and `PrepareDestination` traits;
//!   [`loads`]: what it skips on a rerun, by the destinations' load ledgers.
//! - `stream` (feature `kafka`): streaming jobs, Kafka into a sink, committed at
//!   checkpoints with the offsets they read.
//! - [`input`]: what the sink receives (the pipeline's rows, or the engine query's), and
//!   the check of the sink's options against its schema that `check`, `plan` and `run` share.
//! - [`output`]: progress, the summary table, the plan tree and `--json` documents.
//! - [`commands`]: the subcommands; [`exit`]: the exit codes.
#![deny(missing_docs)]

pub mod commands;
#[cfg(feature = "engine")]
pub mod engine;
pub mod env;
pub mod exit;
pub mod features;
pub mod input;
pub mod job;
pub mod loads;
pub mod output;
pub mod run;
pub mod source;
#[cfg(feature = "kafka")]
pub mod stream;
pub mod transform;
