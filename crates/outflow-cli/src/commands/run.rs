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
    /// A streaming job stops once it has read every partition up to the end offset it had
    /// when the job was assigned it (for backfills), instead of running until stopped.
    #[arg(long)]
    pub until_caught_up: bool,
}

/// Runs `outflow run`.
pub async fn execute(args: RunArgs) -> ExitStatus {
    let reporter = Reporter::new("run", &args.job, args.json);
    let file = match JobFile::load(&args.job) {
        Ok(file) => file,
        Err(err) => return reporter.fail(None, &err),
    };
    if file.is_stream() {
        return stream_command(&file, &args, &reporter).await;
    }
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

/// A streaming job: runs until a signal (SIGTERM or Ctrl-C) asks it to stop, then commits a
/// last checkpoint; a second signal ends the process at once, committing nothing more.
#[cfg(feature = "kafka")]
async fn stream_command(file: &JobFile, args: &RunArgs, reporter: &Reporter) -> ExitStatus {
    let job: crate::job::StreamJob = match file.parse_stream() {
        Ok(job) => job,
        Err(err) => return reporter.fail(Some(file), &err),
    };
    let options = crate::stream::StreamOptions {
        until_caught_up: args.until_caught_up,
        json: args.json,
        quiet: args.quiet,
        ..Default::default()
    };
    on_stop_signal(&options.interrupt);
    let report = match crate::stream::run_stream(&job, file, &options).await {
        Ok(report) => report,
        Err(err) => return reporter.fail(Some(file), &err),
    };
    if args.json {
        output::println(serde_json::json!({ "status": "ok", "stream": report }));
    } else {
        output::print(format_args!(
            "{}: {} checkpoints, {} records read, {} rows written to {}, {} rejected ({:.1} s)\n",
            report.job,
            report.checkpoints,
            report.records,
            report.rows,
            report.table,
            report.rejected,
            report.seconds
        ));
    }
    if report.rejected > 0 {
        ExitStatus::Rejected
    } else {
        ExitStatus::Ok
    }
}

/// A streaming job in a build without the `kafka` feature: checked, then refused with the
/// command that builds it.
#[cfg(not(feature = "kafka"))]
async fn stream_command(file: &JobFile, _args: &RunArgs, reporter: &Reporter) -> ExitStatus {
    let err = match file.parse_stream::<outflow_sinks::SinkSpec>() {
        Ok(_) => crate::features::missing("kafka", "source.kafka"),
        Err(err) => err,
    };
    reporter.fail(Some(file), &err)
}

/// The first SIGTERM or Ctrl-C asks a streaming job to commit its checkpoint and stop; a
/// second one ends the process at once.
#[cfg(feature = "kafka")]
fn on_stop_signal(interrupt: &Interrupt) {
    let interrupt = interrupt.clone();
    tokio::spawn(async move {
        let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) else {
            return;
        };
        let mut signals = 0;
        loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            signals += 1;
            if signals == 1 {
                output::eprintln(
                    "outflow: stopping: committing the last checkpoint (signal again to quit at once, committing nothing more)",
                );
                interrupt.raise();
            } else {
                output::eprintln(
                    "outflow: quitting at once; the last checkpoint may or may not be committed",
                );
                std::process::exit(ExitStatus::Interrupted.code().into());
            }
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
