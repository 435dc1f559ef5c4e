//! Ballista's executor, with Outflow's codecs. Its flags are those of `ballista-executor`
//! that an Outflow cluster needs, with the same names and defaults.

use std::sync::Arc;

use ballista_executor::executor_process::{ExecutorProcessConfig, start_executor_process};
use clap::Parser;
use outflow_ballista::SchedulingPolicy;

/// The executor's flags.
#[derive(Debug, Parser)]
#[command(
    name = "outflow-executor",
    version,
    about = "Ballista's executor, with Outflow's codecs"
)]
struct Flags {
    /// The scheduler's host.
    #[arg(long, default_value = "localhost")]
    scheduler_host: String,
    /// The scheduler's port.
    #[arg(long, default_value_t = 50050)]
    scheduler_port: u16,
    /// Local IP address to bind to.
    #[arg(long, default_value = "0.0.0.0")]
    bind_host: String,
    /// Host name or IP address the scheduler and other executors reach this one at
    /// (the bind address when unset).
    #[arg(long)]
    external_host: Option<String>,
    /// Flight port.
    #[arg(long, short = 'p', default_value_t = 50051)]
    bind_port: u16,
    /// gRPC port.
    #[arg(long, default_value_t = 50052)]
    bind_grpc_port: u16,
    /// Tasks run at once (default: the cores here).
    #[arg(long)]
    concurrent_tasks: Option<usize>,
    /// Must match the scheduler's `--scheduler-policy`.
    #[arg(long, short = 's', value_enum, default_value_t = SchedulingPolicy::PushStaged)]
    task_scheduling_policy: SchedulingPolicy,
    /// Seconds between heartbeats to the scheduler.
    #[arg(long, default_value_t = 60)]
    executor_heartbeat_interval_seconds: u64,
    /// Where shuffle files go (a temporary directory when unset).
    #[arg(long)]
    work_dir: Option<String>,
    /// The log filter (RUST_LOG wins when set).
    #[arg(long, default_value = "INFO,datafusion=INFO")]
    log_level_setting: String,
}

#[tokio::main]
async fn main() -> ballista_core::error::Result<()> {
    let flags = Flags::parse();
    outflow_ballista::init_logging(&flags.log_level_setting);
    let defaults = ExecutorProcessConfig::default();
    let config = ExecutorProcessConfig {
        special_mod_log_level: flags.log_level_setting,
        bind_host: flags.bind_host,
        external_host: flags.external_host,
        port: flags.bind_port,
        grpc_port: flags.bind_grpc_port,
        scheduler_host: flags.scheduler_host,
        scheduler_port: flags.scheduler_port,
        concurrent_tasks: flags.concurrent_tasks.unwrap_or(defaults.concurrent_tasks),
        task_scheduling_policy: flags.task_scheduling_policy.into(),
        executor_heartbeat_interval_seconds: flags.executor_heartbeat_interval_seconds,
        work_dir: flags.work_dir,
        override_logical_codec: Some(outflow_ballista::logical_codec()),
        override_physical_codec: Some(outflow_ballista::physical_codec()),
        ..defaults
    };
    start_executor_process(Arc::new(config)).await
}
