//! `outflow run JOB.yaml`: the job, start to end.

use std::path::PathBuf;

use clap::Args;
use outflow_core::Result;

use super::{Reporter, error_text};
use crate::exit::ExitStatus;
use crate::input::{JobInput, Purpose};
use crate::job::{Job, JobFile};
use crate::output::progress::Progress;
use crate::output::summary::{run_document, run_summary};
use crate::output::{self, Style};
use crate::run::{Interrupt, RunOptions, RunReport, run};

/// Examples for `outflow run --help`.
pub const AFTER_HELP: &str = "\
Examples:
  outflow run examples/jobs/quickstart.yaml
  outflow run nightly.yaml --quiet                 no progress bar
  outflow run nightly.yaml --json > result.json    the WriteResult and timing as JSON
  TOKEN=... outflow run job.yaml                   ${TOKEN} in the job file is replaced

Records the sink rejects go to the job's dead_letter file (without one, the first five are
listed), and the run ends with exit code 3. A rerun skips the source files the table
already holds from an earlier run (by path, size and modification time); --reload loads
them again.";

/// Arguments of `outflow run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The job file (YAML).
    #[arg(value_name = "JOB.yaml")]
    pub job: PathBuf,
    /// Show no progress bar (it is also hidden when stderr is not a terminal).
    #[arg(long, short)]
    pub quiet: bool,
    /// Print one JSON document on stdout instead of the summary table: status, exit code,
    /// timing, what was read, what each destination's preparation did, and the sink's
    /// result with its failed records.
    #[arg(long)]
    pub json: bool,
    /// Load every source file again, even those the destination already holds (the job
    /// key `reload: true`).
    #[arg(long)]
    pub reload: bool,
}

/// Runs `outflow run`.
pub async fn execute(args: RunArgs) -> ExitStatus {
    let reporter = Reporter::new("run", &args.job, args.json);
    let file = match JobFile::load(&args.job) {
        Ok(file) => file,
        Err(err) => return reporter.fail(None, &err),
    };
    let report = match run_job(&file, args.quiet, args.reload).await {
        Ok(report) => report,
        Err(err) => return reporter.fail(Some(&file), &err),
    };
    let status = status_of(&report);
    if args.json {
        output::println(run_document(&args.job, status, &report));
    } else {
        output::print(run_summary(&report, Style::for_stdout()));
    }
    if let Some(err) = report.rejection_error() {
        output::eprintln(format_args!("error: {}", error_text(Some(&file), &err)));
    }
    status
}

/// How a finished run ends: rejected records make it [`ExitStatus::Rejected`], whether
/// they went to a dead-letter file or not.
pub fn status_of(report: &RunReport) -> ExitStatus {
    if report.rejected.count == 0 {
        ExitStatus::Ok
    } else {
        ExitStatus::Rejected
    }
}

/// The first Ctrl-C asks the run to stop (it removes what it has not committed, or
/// finishes a commit under way), a second one ends the process at once.
fn on_ctrl_c(interrupt: &Interrupt) {
    let interrupt = interrupt.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_err() {
            return;
        }
        output::eprintln(
            "outflow: interrupted: stopping the run and removing what it has not committed (Ctrl-C again to quit at once)",
        );
        interrupt.raise();
        if tokio::signal::ctrl_c().await.is_ok() {
            output::eprintln("outflow: quitting at once; a commit under way may or may not have happened");
            std::process::exit(ExitStatus::Interrupted.code().into());
        }
    });
}

async fn run_job(file: &JobFile, quiet: bool, reload: bool) -> Result<RunReport> {
    let job: Job = file.parse()?;
    let progress = Progress::on_stderr(quiet);
    if job.engine.is_some() {
        progress.stage("planning");
    }
    // Every check that needs no service comes first, as in `check` and `plan`.
    let input = JobInput::open(&job, file, Purpose::Run).await?;
    let mut built = job.sink.relative_to(file.dir()).open().await?;
    let reload = reload || job.reload;
    let pipeline = match input {
        JobInput::Pipeline(pipeline) => pipeline,
        #[cfg(feature = "engine")]
        JobInput::Query(query) => {
            let loads = crate::engine::StatementLoads::ask(&job, &query, &built, reload).await?;
            return crate::engine::run(&job, *query, loads, file, &progress).await;
        }
    };
    let options = RunOptions {
        dead_letter: job.dead_letter.as_deref().map(|p| file.resolve(p)),
        reload,
        ..RunOptions::default()
    };
    on_ctrl_c(&options.interrupt);
    run(
        pipeline,
        built.sink.as_mut(),
        built.preparer.as_ref(),
        &built.destination,
        &options,
        &progress,
    )
    .await
}
