//! `outflow check JOB.yaml`: the source and transforms of a job, without its sink.
//!
//! The sink section is parsed, its options validated (an unknown key or a value the sink's
//! builder refuses is a bad job file) and checked against the schema the sink would
//! receive (every field an option names: partition and sort fields, row-key fields, a
//! table template's fields...; for an engine job, the schema of its query, planned without
//! running it). No sink is built and no service is reached, so a job can be checked before
//! the sink's credentials or service exist; `outflow plan` is the check against the
//! destinations themselves.

use std::path::PathBuf;

use clap::Args;
use indicatif::HumanBytes;
use outflow_core::Result;
use serde_json::json;

use super::Reporter;
use crate::exit::ExitStatus;
use crate::input::{JobInput, Purpose};
use crate::job::{Job, JobFile};
use crate::output::document::document;
use crate::output::progress::Progress;
use crate::output::summary::read_line;
use crate::output::{self, Paint, Style, columns};
use crate::run::ReadStats;
use outflow_sinks::SinkSpec;

/// Examples for `outflow check --help`.
pub const AFTER_HELP: &str = "\
Examples:
  outflow check job.yaml                  every file read, every transform applied
  outflow check job.yaml --schema-only    the files and the schemas, reading no data
  outflow check job.yaml --json

An error names the file and the line or row.";

/// How many file names the text output lists.
const LISTED_FILES: usize = 10;

/// Arguments of `outflow check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The job file (YAML).
    #[arg(value_name = "JOB.yaml")]
    pub job: PathBuf,
    /// Stop after settling the schemas; read no rows.
    #[arg(long)]
    pub schema_only: bool,
    /// Print one JSON document: the files, both schemas and what was read.
    #[arg(long)]
    pub json: bool,
    /// Show no progress bar.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Runs `outflow check`.
pub async fn execute(args: CheckArgs) -> ExitStatus {
    let reporter = Reporter::new("check", &args.job, args.json);
    let file = match JobFile::load(&args.job) {
        Ok(file) => file,
        Err(err) => return reporter.fail(None, &err),
    };
    match check(&file, &args, &reporter).await {
        Ok(()) => ExitStatus::Ok,
        Err(err) => reporter.fail(Some(&file), &err),
    }
}

async fn check(file: &JobFile, args: &CheckArgs, reporter: &Reporter) -> Result<()> {
    if file.is_stream() {
        return check_stream(file, reporter);
    }
    let job: Job<SinkSpec> = file.parse()?;
    let opened = JobInput::open(&job, file, Purpose::Inspect).await?;
    let files: Vec<String> = opened.files().iter().map(|f| f.display().to_string()).collect();
    let format = opened.format();
    let bytes = opened.files().iter().map(|f| f.size).sum::<u64>();
    let input = columns(opened.source_schema());
    let output = columns(opened.schema());
    let style = Style::for_stdout();

    if !reporter.json() {
        let mut out = format!(
            "{} {} {format} file{}, {}\n",
            style.paint(Paint::Bold, "Source:"),
            files.len(),
            if files.len() == 1 { "" } else { "s" },
            HumanBytes(bytes)
        );
        for name in files.iter().take(LISTED_FILES) {
            out.push_str(&format!("  {name}\n"));
        }
        if files.len() > LISTED_FILES {
            out.push_str(&format!("  ... and {} more\n", files.len() - LISTED_FILES));
        }
        for (title, schema) in [("Source schema:", &input), ("Schema after transforms:", &output)] {
            out.push_str(&format!("{}\n", style.paint(Paint::Bold, title)));
            for column in schema {
                let required = if column.nullable { "" } else { " not null" };
                out.push_str(&format!("  {}: {}{required}\n", column.name, column.data_type));
            }
        }
        output::print(out);
    }

    let read: Option<ReadStats> = if args.schema_only {
        None
    } else {
        Some(opened.read_through(&Progress::on_stderr(args.quiet)).await?)
    };

    if reporter.json() {
        let doc = document(
            "check",
            ExitStatus::Ok,
            json!({
                "job": args.job,
                "source": { "format": format.as_str(), "files": files, "bytes": bytes },
                "source_schema": input,
                "schema": output,
                "read": read,
            }),
        );
        output::println(doc);
    } else if let Some(read) = read {
        let line = read_line(&read);
        let mut chars = line.chars();
        let line: String = chars
            .next()
            .map(|c| c.to_ascii_uppercase())
            .into_iter()
            .chain(chars)
            .collect();
        output::println(line);
    }
    Ok(())
}

/// `check` of a streaming job: the job file, the sink's options and, when the job gives its
/// columns, the sink's options against them. No stream is read, no service reached.
fn check_stream(file: &JobFile, reporter: &Reporter) -> Result<()> {
    let job: crate::job::StreamJob = file.parse_stream()?;
    let input = crate::input::StreamInput::open(&job, file)?;
    let kafka = &job.source.kafka;
    let topics = match &kafka.topic_pattern {
        Some(pattern) => format!("topics matching {pattern:?}"),
        None => kafka.topics.join(", "),
    };
    let schema = input.schema.as_ref().map(columns);
    if reporter.json() {
        let doc = document(
            "check",
            ExitStatus::Ok,
            json!({
                "job": file.path(),
                "stream": {
                    "id": job.job_id(),
                    "topics": topics,
                    "group": kafka.group,
                    "table": input.table,
                    "sink": input.spec.name(),
                    "schema": schema,
                },
            }),
        );
        output::println(file.redact(&doc.to_string()));
        return Ok(());
    }
    let described = match &schema {
        Some(columns) => format!("{} columns given", columns.len()),
        None => format!(
            "inferred from the first {} records when the job runs",
            job.source.json.infer_rows
        ),
    };
    output::print(file.redact(&format!(
        "Streaming job {}: {topics} (group {}) into {} table {}; schema: {described}. \
         No record was read.\n",
        job.job_id(),
        kafka.group,
        input.spec.name(),
        input.table,
    )));
    Ok(())
}
