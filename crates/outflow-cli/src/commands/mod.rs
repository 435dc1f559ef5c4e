//! The subcommands, one module each.
//!
//! Every subcommand is a clap `Args` struct and an `execute` function that prints its own
//! output and returns the [`ExitStatus`]. A sink's own subcommands (`outflow iceberg
//! add-files`, `outflow bigquery ensure-table`...) go in `commands/<sink>.rs` as a clap
//! `Subcommand` enum with an `execute` function, and take one variant here:
//!
//! ```ignore
//! /// Iceberg tables: register existing Parquet files, ...
//! #[command(subcommand)]
//! Iceberg(iceberg::IcebergCommand),
//! ```
//!
//! plus its arm in [`Command::execute`]. [`Reporter`] prints errors the same way for all.

#[cfg(feature = "bigquery")]
pub mod bigquery;
#[cfg(feature = "bigtable")]
pub mod bigtable;
pub mod check;
#[cfg(feature = "iceberg")]
pub mod iceberg;
pub mod plan;
pub mod run;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use outflow_core::Error;

use crate::exit::{ExitStatus, after_help};
use crate::job::JobFile;
use crate::output;
use crate::output::document::{error_document, usage_document};

const ABOUT: &str = "Load local Parquet, CSV and NDJSON files into Apache Iceberg, Google BigQuery \
                     and Cloud Bigtable, as a job file describes";

const AFTER_HELP: &str = "\
Examples:
  outflow run examples/jobs/quickstart.yaml    run a job
  outflow plan job.yaml                        what a run would do to each table
  outflow check job.yaml                       read, transform, validate; write nothing
  outflow run job.yaml --json --quiet > out.json

Logs: none unless OUTFLOW_LOG sets a filter (e.g. OUTFLOW_LOG=debug); they go to stderr.";

/// The `outflow` command line.
#[derive(Debug, Parser)]
#[command(name = "outflow", version, about = ABOUT, after_help = after_help(AFTER_HELP))]
pub struct Cli {
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a job: read the source, apply the transforms, write through the sink.
    #[command(after_help = after_help(run::AFTER_HELP))]
    Run(run::RunArgs),
    /// Show what a run would do to each destination (create, evolve, or the error it would
    /// hit), changing nothing.
    #[command(after_help = after_help(plan::AFTER_HELP))]
    Plan(plan::PlanArgs),
    /// Read the source through the transforms and validate the sink's options, reaching no
    /// service and writing nothing: the files, the schema the sink would receive, and the
    /// rows; finds bad rows and bad options before a run does.
    #[command(after_help = after_help(check::AFTER_HELP))]
    Check(check::CheckArgs),
    /// Iceberg tables: register existing Parquet files (`outflow iceberg add-files`), merge
    /// small manifests (`outflow iceberg rewrite-manifests`), expire old snapshots
    /// (`outflow iceberg expire-snapshots`), delete orphan files (`outflow iceberg
    /// remove-orphans`).
    #[cfg(feature = "iceberg")]
    #[command(subcommand)]
    Iceberg(iceberg::IcebergCommand),
    /// BigQuery tables: create or evolve one from a schema file (`outflow bigquery
    /// ensure-table`).
    #[cfg(feature = "bigquery")]
    #[command(subcommand, name = "bigquery")]
    BigQuery(bigquery::BigQueryCommand),
    /// Bigtable tables: create one with its column families, or add the families it lacks
    /// (`outflow bigtable ensure-table`).
    #[cfg(feature = "bigtable")]
    #[command(subcommand)]
    Bigtable(bigtable::BigtableCommand),
}

impl Command {
    /// Runs the subcommand and says how the process should end.
    pub async fn execute(self) -> ExitStatus {
        match self {
            Command::Run(args) => run::execute(args).await,
            Command::Plan(args) => plan::execute(args).await,
            Command::Check(args) => check::execute(args).await,
            #[cfg(feature = "iceberg")]
            Command::Iceberg(command) => command.execute().await,
            #[cfg(feature = "bigquery")]
            Command::BigQuery(command) => command.execute().await,
            #[cfg(feature = "bigtable")]
            Command::Bigtable(command) => command.execute().await,
        }
    }
}

/// The `outflow` binary: parses the arguments (usage errors exit with 2, with a JSON
/// document on stdout too when `--json` was asked for), runs the subcommand on a Tokio
/// runtime and exits with its status.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let usage = !matches!(
                err.kind(),
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
            );
            if usage && std::env::args().any(|arg| arg == "--json") {
                let message = err.render().to_string();
                output::println(usage_document(message.trim_end()));
            }
            err.exit();
        }
    };
    init_logging();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            output::eprintln(format_args!("error: cannot start the async runtime: {err}"));
            return ExitStatus::Failed.into();
        }
    };
    runtime.block_on(cli.command.execute()).into()
}

/// Logs go to stderr only when `OUTFLOW_LOG` sets a filter (`debug`, `warn,outflow_core=debug`):
/// what a user must know is in the output and the errors, so nothing is logged otherwise.
/// They are coloured only when stderr is a terminal and `NO_COLOR` is unset.
fn init_logging() {
    let Some(directives) = std::env::var("OUTFLOW_LOG").ok().filter(|v| !v.trim().is_empty()) else {
        return;
    };
    let filter = match tracing_subscriber::EnvFilter::try_new(&directives) {
        Ok(filter) => filter,
        Err(err) => {
            output::eprintln(format_args!(
                "warning: OUTFLOW_LOG={directives:?} is not a log filter ({err}); logging nothing"
            ));
            return;
        }
    };
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let layer = tracing_subscriber::fmt::layer()
        .with_ansi(output::Style::for_stderr().is_colored())
        .with_writer(std::io::stderr)
        .with_filter(filter)
        .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
            !shows_credentials(meta)
        }));
    let _ = tracing_subscriber::registry().with(layer).try_init();
}

/// Whether a log event may show a credential, whatever the filter asks for: the request
/// signer of the object stores (reqsign) logs the credentials it loads, secret included,
/// at debug level. Its warnings and errors are kept.
fn shows_credentials(meta: &tracing::Metadata<'_>) -> bool {
    meta.target().starts_with("reqsign") && *meta.level() > tracing::Level::WARN
}

/// Prints a command's errors: a line on stderr always, and with `--json` the error document
/// on stdout, so a script reading stdout always gets one JSON document.
#[derive(Debug)]
pub struct Reporter {
    command: &'static str,
    job: PathBuf,
    json: bool,
}

impl Reporter {
    /// A reporter for `command` (its name in JSON documents) on the job at `job`.
    pub fn new(command: &'static str, job: &Path, json: bool) -> Reporter {
        Reporter {
            command,
            job: job.to_path_buf(),
            json,
        }
    }

    /// Whether output is JSON.
    pub fn json(&self) -> bool {
        self.json
    }

    /// Prints `err`, with substituted values shown as their `${VAR}` text when the job file
    /// was read, and returns the exit status it means.
    pub fn fail(&self, file: Option<&JobFile>, err: &Error) -> ExitStatus {
        let status = ExitStatus::of(err);
        let message = error_text(file, err);
        output::eprintln(format_args!("error: {message}"));
        if self.json {
            let mut body = serde_json::Map::new();
            body.insert("job".into(), serde_json::json!(self.job));
            let redact = |text: &str| file.map_or_else(|| text.to_string(), |f| f.redact(text));
            output::println(error_document(self.command, body, err, &message, redact));
        }
        status
    }
}

/// Prints the error of a subcommand that reads no job file as [`Reporter`] does: the line on
/// stderr always, and with `--json` the error document of `command` on stdout. Returns the
/// exit status the error means.
pub fn fail_command(command: &str, err: &Error, json: bool) -> ExitStatus {
    let status = ExitStatus::of(err);
    let message = err.to_string();
    output::eprintln(format_args!("error: {message}"));
    if json {
        let doc = error_document(command, serde_json::Map::new(), err, &message, str::to_string);
        output::println(doc);
    }
    status
}

/// The error as printed: its message, its kind, and the chain of sources, redacted; for a
/// job that needs a feature this build lacks, the command that builds it.
pub fn error_text(file: Option<&JobFile>, err: &Error) -> String {
    let mut text = err.to_string();
    if let Some(feature) = crate::features::missing_feature(err) {
        let args: Vec<String> = std::env::args().skip(1).collect();
        text.push_str(&format!(
            "\nbuild and run an outflow with it: {}",
            crate::features::build_command(&feature, &args)
        ));
    }
    match file {
        Some(file) => file.redact(&text),
        None => text,
    }
}
