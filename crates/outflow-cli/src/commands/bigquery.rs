//! `outflow bigquery ...`: BigQuery's own subcommands. `ensure-table` creates a table from
//! a schema file, or evolves an existing one as allowed, and says what it did (see
//! `docs/bigquery.md`).

use clap::{Args, Subcommand};
use outflow_bigquery::{ConnectionOptions, EnsureTable, TableSchema, TimePartitioning, ensure_table};
use outflow_core::{CreateDisposition, Error, Result, SchemaEvolutionConfig, SchemaEvolutionOption};

use crate::exit::{ExitStatus, after_help};
use crate::output::document::document;
use crate::output::plan::{Outcome, render_outcome};
use crate::output::{self, Style};

/// Examples for `outflow bigquery ensure-table --help`.
pub const ENSURE_TABLE_HELP: &str = "\
Examples:
  outflow bigquery ensure-table --project my-project --table analytics.events --schema events.json
  outflow bigquery ensure-table --table my-project.analytics.events --schema events.yaml \\
      --allow allow_field_addition,allow_field_relaxation --time-partitioning DAY:ts --clustering region
  outflow bigquery ensure-table ... --emulator-host 127.0.0.1:9050 --dry-run
  outflow bigquery ensure-table ... --rest-endpoint http://127.0.0.1:9050 \\
      --grpc-endpoint http://127.0.0.1:9060

The schema file is BigQuery's JSON schema (a list of {name, type, mode, fields}), as JSON
or YAML. Credentials come from the environment (Application Default Credentials) unless
an emulator is named (--emulator-host, --rest-endpoint with --grpc-endpoint, or
BIGQUERY_EMULATOR_HOST). Flags are named after the job file's keys (docs/cli.md).
Exit code 1 when a change is not allowed (nothing is changed) or the service failed.";

/// BigQuery subcommands.
#[derive(Debug, Subcommand)]
pub enum BigQueryCommand {
    /// Create a table from a schema file, or evolve an existing one as allowed, printing
    /// what was done.
    #[command(name = "ensure-table", after_help = after_help(ENSURE_TABLE_HELP))]
    EnsureTable(Box<EnsureTableArgs>),
}

impl BigQueryCommand {
    /// Runs the subcommand.
    pub async fn execute(self) -> ExitStatus {
        match self {
            BigQueryCommand::EnsureTable(args) => execute_ensure_table(*args).await,
        }
    }
}

/// Arguments of `outflow bigquery ensure-table`.
#[derive(Debug, Args)]
pub struct EnsureTableArgs {
    /// The table: `project.dataset.table`, `project:dataset.table`, `dataset.table` (with
    /// --project) or `table` (with --project and --dataset).
    #[arg(long, value_name = "TABLE")]
    pub table: String,
    /// The schema file: BigQuery's JSON schema, as JSON or YAML.
    #[arg(long, value_name = "FILE")]
    pub schema: String,
    /// The project, when the table name has none.
    #[arg(long, value_name = "PROJECT")]
    pub project: Option<String>,
    /// The dataset, when the table name has none.
    #[arg(long, value_name = "DATASET")]
    pub dataset: Option<String>,
    /// Changes allowed on an existing table (`schema_evolution.options`), comma-separated,
    /// spelled as in job files or short: allow_field_addition (field-addition),
    /// allow_field_relaxation (field-relaxation). None: the table must already fit.
    #[arg(long, value_name = "CHANGES", value_delimiter = ',')]
    pub allow: Vec<String>,
    /// Whether a missing table may be created.
    #[arg(
        long,
        value_name = "create_if_needed|create_never",
        default_value = "create_if_needed"
    )]
    pub create_disposition: String,
    /// Time partitioning of a table created: DAY, HOUR, MONTH or YEAR, optionally
    /// `:COLUMN` (default: ingestion time).
    #[arg(long, value_name = "TYPE[:COLUMN]")]
    pub time_partitioning: Option<String>,
    /// Clustering columns of a table created, comma-separated.
    #[arg(long, value_name = "COLUMNS", value_delimiter = ',')]
    pub clustering: Vec<String>,
    /// An emulator's REST `host:port` (`connection.emulator_host`; anonymous credentials;
    /// gRPC on port 9060 unless --emulator-grpc-host).
    #[arg(long, value_name = "HOST:PORT")]
    pub emulator_host: Option<String>,
    /// The emulator's gRPC `host:port` (`connection.emulator_grpc_host`).
    #[arg(long, value_name = "HOST:PORT")]
    pub emulator_grpc_host: Option<String>,
    /// The REST endpoint for tables, as a URL (`connection.rest_endpoint`); `http://` is
    /// reached without credentials.
    #[arg(long, value_name = "URL", requires = "grpc_endpoint")]
    pub rest_endpoint: Option<String>,
    /// The Storage Write API's gRPC endpoint, as a URL (`connection.grpc_endpoint`).
    #[arg(long, value_name = "URL", requires = "rest_endpoint")]
    pub grpc_endpoint: Option<String>,
    /// Say what would be done, change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

/// The subcommand's name in JSON documents.
const COMMAND: &str = "bigquery ensure-table";

/// Runs `outflow bigquery ensure-table`.
pub async fn execute_ensure_table(args: EnsureTableArgs) -> ExitStatus {
    let json = args.json;
    let dry_run = args.dry_run;
    match ensure(args).await {
        Ok(report) => {
            let status = if report.succeeded() {
                ExitStatus::Ok
            } else {
                ExitStatus::Failed
            };
            if json {
                let report = serde_json::to_value(&report).expect("reports serialize");
                output::println(document(COMMAND, status, report));
            } else {
                let outcome = if dry_run { Outcome::DryRun } else { Outcome::Done };
                output::print(render_outcome(&report.plan, outcome, Style::for_stdout()));
            }
            status
        }
        Err(err) => super::fail_command(COMMAND, &err, json),
    }
}

async fn ensure(args: EnsureTableArgs) -> Result<outflow_bigquery::EnsureTableReport> {
    let schema = TableSchema::from_file(&args.schema)?;
    let mut request = EnsureTable::new(args.table, schema);
    request.project = args.project;
    request.dataset = args.dataset;
    request.dry_run = args.dry_run;
    request.clustering = args.clustering;
    request.create_disposition = args
        .create_disposition
        .parse::<CreateDisposition>()
        .map_err(|e| Error::invalid_config("--create-disposition", e.message()))?;
    let mut evolution = SchemaEvolutionConfig::builder();
    for option in &args.allow {
        let parsed: SchemaEvolutionOption = option
            .parse()
            .map_err(|e: Error| Error::invalid_config("--allow", e.message()))?;
        evolution = evolution.allow(parsed);
    }
    request.schema_evolution = evolution.build()?;
    if let Some(text) = &args.time_partitioning {
        request.time_partitioning = Some(time_partitioning(text)?);
    }
    request.connection = ConnectionOptions {
        rest_endpoint: args.rest_endpoint,
        grpc_endpoint: args.grpc_endpoint,
        emulator_host: args.emulator_host,
        emulator_grpc_host: args.emulator_grpc_host,
        ..ConnectionOptions::default()
    };
    request.validate()?;
    ensure_table(&request).await
}

/// `DAY` or `DAY:column` as the options' time partitioning.
fn time_partitioning(text: &str) -> Result<TimePartitioning> {
    let (kind, field) = match text.split_once(':') {
        Some((kind, field)) => (kind, Some(field)),
        None => (text, None),
    };
    let mut yaml = format!("type: {kind}\n");
    if let Some(field) = field {
        yaml.push_str(&format!("field: {field}\n"));
    }
    serde_yaml_ng::from_str(&yaml).map_err(|e| Error::invalid_config("--time-partitioning", e.to_string()))
}
