//! `outflow plan JOB.yaml`: what a run would do to each destination, changing nothing.

use std::path::PathBuf;

use clap::Args;
use outflow_core::{DestinationPlan, PlannedAction, Result};
use serde_json::json;

use super::Reporter;
use crate::exit::ExitStatus;
use crate::input::{JobInput, Purpose};
use crate::job::{Job, JobFile};
use crate::loads::Ledgers;
use crate::output::document::document;
use crate::output::plan::render_plan;
use crate::output::progress::Progress;
use crate::output::{self, Paint, Style, columns, some_names};

/// Examples for `outflow plan --help`.
pub const AFTER_HELP: &str = "\
Examples:
  outflow plan job.yaml           the schema the sink receives, then each destination's plan
  outflow plan job.yaml --json    the same as JSON, for review bots
  NO_COLOR=1 outflow plan job.yaml

Each destination shows its action (create, update, unchanged, fail) and, for sinks that
evolve schemas, the changes as a tree: + added, ~ relaxed to optional, ^ promoted to a
wider type, ! conflict, x not allowed by the evolution options. A fixed table is planned
from the schema alone; a table template reads the source to find the tables.
Exit code 1 when a destination would fail (or the plan could not be made).";

/// Arguments of `outflow plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The job file (YAML).
    #[arg(value_name = "JOB.yaml")]
    pub job: PathBuf,
    /// Print one JSON document: the output schema and each destination's plan.
    #[arg(long)]
    pub json: bool,
    /// Show no progress bar while a table template reads the source.
    #[arg(long, short)]
    pub quiet: bool,
    /// Plan a run that loads every source file again (`run --reload`).
    #[arg(long)]
    pub reload: bool,
}

/// Runs `outflow plan`.
pub async fn execute(args: PlanArgs) -> ExitStatus {
    let reporter = Reporter::new("plan", &args.job, args.json);
    let file = match JobFile::load(&args.job) {
        Ok(file) => file,
        Err(err) => return reporter.fail(None, &err),
    };
    let (schema, plans) = match plan_job(&file, args.quiet, args.reload).await {
        Ok(planned) => planned,
        Err(err) => return reporter.fail(Some(&file), &err),
    };
    let status = if plans.iter().any(|p| p.action == PlannedAction::Fail) {
        ExitStatus::Failed
    } else {
        ExitStatus::Ok
    };
    if args.json {
        let doc = document(
            "plan",
            status,
            json!({
                "job": args.job,
                "schema": schema,
                "destinations": plans,
            }),
        );
        output::println(file.redact(&doc.to_string()));
    } else {
        let style = Style::for_stdout();
        let mut out = format!("{}\n", style.paint(Paint::Bold, "Schema the sink receives:"));
        for column in &schema {
            let required = if column.nullable { "" } else { " not null" };
            out.push_str(&format!("  {}: {}{required}\n", column.name, column.data_type));
        }
        for plan in &plans {
            out.push('\n');
            out.push_str(&render_plan(plan, style));
        }
        output::print(file.redact(&out));
    }
    status
}

/// `plan` of a streaming job with given columns: what preparing its table would do. The
/// offsets it would start from are the table's (docs/streaming.md).
async fn plan_stream(file: &JobFile) -> Result<(Vec<crate::output::Column>, Vec<DestinationPlan>)> {
    let job: crate::job::StreamJob = file.parse_stream()?;
    let input = crate::input::StreamInput::open(&job, file)?;
    let schema = input.schema.ok_or_else(|| {
        outflow_core::Error::invalid_config(
            "source.json.schema",
            "plan needs the columns of a streaming job: without them the schema is inferred from \
             the first records once the job runs",
        )
    })?;
    let built = input.spec.open().await?;
    let plan = built.preparer.plan(&input.table, &schema).await?;
    Ok((crate::output::columns(&schema), vec![plan]))
}

async fn plan_job(
    file: &JobFile,
    quiet: bool,
    reload: bool,
) -> Result<(Vec<crate::output::Column>, Vec<DestinationPlan>)> {
    if file.is_stream() {
        return plan_stream(file).await;
    }
    let job: Job = file.parse()?;
    let input = JobInput::open(&job, file, Purpose::Inspect).await?;
    let schema = input.schema().clone();
    let reload = reload || job.reload;
    let files = input.files().to_vec();
    let built = job.sink.relative_to(file.dir()).open().await?;
    // An engine statement skips files as a whole run (see the engine module), when it
    // records them at all; the answer, or the error the run would stop with, goes into the
    // table's plan.
    #[cfg(feature = "engine")]
    let statement = match &input {
        JobInput::Query(query) => Some(crate::engine::StatementLoads::ask(&job, query, &built, reload).await),
        JobInput::Pipeline(_) => None,
    };
    #[cfg(not(feature = "engine"))]
    let statement: Option<Result<Option<()>>> = None;
    let skips = !reload && !matches!(statement, Some(Ok(None)));
    let progress = Progress::on_stderr(quiet);
    let names = input.destinations(&built.destination, &progress).await?;
    // What the run would skip, asked of each destination's ledger as the run asks it.
    let mut ledgers = Ledgers::new(&files, !skips);
    let mut plans = Vec::with_capacity(names.len());
    for name in names {
        let mut plan = built.preparer.plan(&name, &schema).await?;
        if let Some(Err(e)) = &statement {
            plan = DestinationPlan::failed(&name, e);
        }
        if plan.action != PlannedAction::Fail {
            ledgers.ask(built.preparer.as_ref(), &name).await?;
            let held = ledgers.held_paths(&name);
            if !held.is_empty() {
                plan = plan.with_detail(skip_detail(
                    &held,
                    files.len(),
                    built.destination.fixed().is_some(),
                ));
            }
        }
        plans.push(plan);
    }
    Ok((columns(&schema), plans))
}

/// "skip 2 of 3 source files ...": what the run leaves out of a destination that holds
/// `held` of the `total` source files.
fn skip_detail(held: &[&str], total: usize, fixed: bool) -> String {
    let what = if fixed { "skip" } else { "skip the rows for it of" };
    format!(
        "{what} {} of {total} source file{}, loaded by an earlier run: {} (--reload loads them again)",
        held.len(),
        if total == 1 { "" } else { "s" },
        some_names(held)
    )
}
