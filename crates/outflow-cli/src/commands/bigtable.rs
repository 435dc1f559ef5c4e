//! `outflow bigtable ...`: Bigtable's own subcommands. `ensure-table` creates a table with
//! its column families, or adds the declared families an existing table lacks, and says
//! what it did (see `docs/bigtable.md`).

use clap::{Args, Subcommand};
use outflow_bigtable::{BigtableConnection, TableCreateOptions};
use outflow_core::{CreateDisposition, DestinationPlan, Error, PlannedAction, Result};

use crate::exit::{ExitStatus, after_help};
use crate::output::document::document;
use crate::output::plan::{Outcome, render_outcome};
use crate::output::{self, Style};

/// Examples for `outflow bigtable ensure-table --help`.
pub const ENSURE_TABLE_HELP: &str = "\
Examples:
  outflow bigtable ensure-table --project my-project --instance my-instance --table events \\
      --options families.yaml
  BIGTABLE_EMULATOR_HOST=127.0.0.1:8086 outflow bigtable ensure-table --project p \\
      --instance i --table events --options families.yaml --dry-run

The options file (YAML or JSON) declares the column families, in order:
  column_families:
    - {name: cf, gc_rule: {max_versions: 3}}
    - {name: recent, gc_rule: {union: [{max_age: 7d}, {max_versions: 1}]}}
    - {name: clicks, type: {aggregate: sum}}
A missing table is created with them; an existing table gets the families it lacks, and
nothing is ever dropped or modified. Credentials come from the environment (Application
Default Credentials) unless an emulator is named (--endpoint or BIGTABLE_EMULATOR_HOST).
Exit code 1 when a declared family conflicts with the table (another value type) or the
service failed.";

/// Bigtable subcommands.
#[derive(Debug, Subcommand)]
pub enum BigtableCommand {
    /// Create a table with its column families, or add the declared families it lacks,
    /// printing what was done.
    #[command(name = "ensure-table", after_help = after_help(ENSURE_TABLE_HELP))]
    EnsureTable(Box<EnsureTableArgs>),
}

impl BigtableCommand {
    /// Runs the subcommand.
    pub async fn execute(self) -> ExitStatus {
        match self {
            BigtableCommand::EnsureTable(args) => execute_ensure_table(*args).await,
        }
    }
}

/// Arguments of `outflow bigtable ensure-table`.
#[derive(Debug, Args)]
pub struct EnsureTableArgs {
    /// The Google Cloud project.
    #[arg(long, value_name = "PROJECT")]
    pub project: String,
    /// The Bigtable instance.
    #[arg(long, value_name = "INSTANCE")]
    pub instance: String,
    /// The table.
    #[arg(long, value_name = "TABLE")]
    pub table: String,
    /// The table options file: the column families with their GC rules and value types.
    #[arg(long, value_name = "FILE")]
    pub options: String,
    /// Whether a missing table may be created.
    #[arg(
        long,
        value_name = "create_if_needed|create_never",
        default_value = "create_if_needed"
    )]
    pub create_disposition: String,
    /// An emulator or endpoint `host:port` (`endpoint`), reached without credentials.
    #[arg(long, alias = "emulator-host", value_name = "HOST:PORT")]
    pub endpoint: Option<String>,
    /// The app profile to use (`app_profile_id`).
    #[arg(long, alias = "app-profile", value_name = "ID")]
    pub app_profile_id: Option<String>,
    /// Say what would be done, change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

/// The subcommand's name in JSON documents.
const COMMAND: &str = "bigtable ensure-table";

/// Runs `outflow bigtable ensure-table`.
pub async fn execute_ensure_table(args: EnsureTableArgs) -> ExitStatus {
    let json = args.json;
    let dry_run = args.dry_run;
    match ensure(args).await {
        Ok(plan) => {
            let status = if plan.action == PlannedAction::Fail {
                ExitStatus::Failed
            } else {
                ExitStatus::Ok
            };
            if json {
                let plan = serde_json::to_value(&plan).expect("plans serialize");
                output::println(document(COMMAND, status, plan));
            } else {
                let outcome = if dry_run { Outcome::DryRun } else { Outcome::Done };
                output::print(render_outcome(&plan, outcome, Style::for_stdout()));
            }
            status
        }
        Err(err) => super::fail_command(COMMAND, &err, json),
    }
}

async fn ensure(args: EnsureTableArgs) -> Result<DestinationPlan> {
    let options = TableCreateOptions::from_file(&args.options)?;
    let disposition = args
        .create_disposition
        .parse::<CreateDisposition>()
        .map_err(|e| Error::invalid_config("--create-disposition", e.message()))?;
    let mut connection = BigtableConnection::new(args.project, args.instance);
    if let Some(endpoint) = args.endpoint {
        connection = connection.with_endpoint(endpoint);
    }
    if let Some(profile) = args.app_profile_id {
        connection = connection.with_app_profile_id(profile);
    }
    let client = connection.connect().await?;
    if args.dry_run {
        return client.plan_table(&args.table, disposition, Some(&options)).await;
    }
    match client
        .ensure_table(&args.table, disposition, Some(&options))
        .await
    {
        Ok(plan) => Ok(plan),
        // A conflict with the table is the answer, not a crash: show it as a plan.
        Err(e) if e.kind() != outflow_core::ErrorKind::Transient => {
            Ok(DestinationPlan::failed(&args.table, &e))
        }
        Err(e) => Err(e),
    }
}
