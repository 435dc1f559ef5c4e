//! Ballista's scheduler, with Outflow's codecs. Its flags are those of `ballista-scheduler`
//! that an Outflow cluster needs, with the same names and defaults.

use std::sync::Arc;

use ballista_scheduler::cluster::BallistaCluster;
use ballista_scheduler::config::SchedulerConfig;
use ballista_scheduler::scheduler_process::start_server;
use clap::Parser;
use outflow_ballista::SchedulingPolicy;

/// The scheduler's flags.
#[derive(Debug, Parser)]
#[command(
    name = "outflow-scheduler",
    version,
    about = "Ballista's scheduler, with Outflow's codecs"
)]
struct Flags {
    /// Local host name or IP address to bind to.
    #[arg(long, default_value = "0.0.0.0")]
    bind_host: String,
    /// Host name or IP address executors connect to.
    #[arg(long, default_value = "localhost")]
    external_host: String,
    /// Port to bind to.
    #[arg(long, default_value_t = 50050)]
    bind_port: u16,
    /// How tasks reach executors; pull-staged survives the loss of an executor (see
    /// docs/datafusion.md).
    #[arg(long, value_enum, default_value_t = SchedulingPolicy::PushStaged)]
    scheduler_policy: SchedulingPolicy,
    /// An executor missing heartbeats this long is dead.
    #[arg(long, default_value_t = 180)]
    executor_timeout_seconds: u64,
    /// How often dead executors are looked for.
    #[arg(long, default_value_t = 15)]
    expire_dead_executor_interval_seconds: u64,
    /// The log filter (RUST_LOG wins when set).
    #[arg(long, default_value = "INFO,datafusion=INFO")]
    log_level_setting: String,
}

fn main() -> ballista_core::error::Result<()> {
    let flags = Flags::parse();
    outflow_ballista::init_logging(&flags.log_level_setting);
    // Planning recurses over deep plans: Ballista's own binary runs with 32 MiB stacks too.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(32 * 1024 * 1024)
        .build()?;
    runtime.block_on(async {
        let addr = format!("{}:{}", flags.bind_host, flags.bind_port)
            .parse()
            .map_err(|e: std::net::AddrParseError| {
                ballista_core::error::BallistaError::Configuration(e.to_string())
            })?;
        let config = SchedulerConfig {
            namespace: "ballista".into(),
            external_host: flags.external_host,
            bind_host: flags.bind_host,
            bind_port: flags.bind_port,
            scheduling_policy: flags.scheduler_policy.into(),
            executor_timeout_seconds: flags.executor_timeout_seconds,
            expire_dead_executor_interval_seconds: flags.expire_dead_executor_interval_seconds,
            override_logical_codec: Some(outflow_ballista::logical_codec()),
            override_physical_codec: Some(outflow_ballista::physical_codec()),
            ..SchedulerConfig::default()
        };
        let cluster = BallistaCluster::new_from_config(&config).await?;
        start_server(cluster, addr, Arc::new(config)).await
    })
}
