//! The `outflow` command line: job files that read local files, transform them and write
//! them through one of Outflow's sinks.
//!
//! - [`job`]: the job file model (YAML, unknown keys rejected with their line).
//! - [`env`](mod@env): `${VAR}` substitution, with substituted values kept out of messages.
//! - [`source`]: Parquet, CSV and NDJSON files as a bounded stream of Arrow batches.
//! - [`transform`]: select, flatten, rename, filter and cast, planned on the schema first.
//! - [`sinks`]: the `sink` section and how a sink crate plugs in.
//! - [`run`]: the runner, generic over the core `Sink` and `PrepareDestination` traits.
//! - [`output`]: progress, the summary table, the plan tree and `--json` documents.
//! - [`commands`]: the subcommands; [`exit`]: the exit codes.
#![deny(missing_docs)]

pub mod commands;
pub mod engine;
pub mod env;
pub mod exit;
pub mod job;
pub mod output;
pub mod run;
pub mod sinks;
pub mod source;
pub mod transform;

use outflow_core::Error;

/// `err` with a new message, keeping its kind, context and retryability; the source is kept
/// as text (the core error does not hand its source over).
pub(crate) fn reword(err: &Error, message: String) -> Error {
    let mut out = Error::new(err.kind(), message).with_retryable(err.is_retryable());
    for (key, value) in err.context() {
        out = out.with_context(key, value.clone());
    }
    match std::error::Error::source(err) {
        Some(source) => out.with_source(source.to_string()),
        None => out,
    }
}
