//! Ballista's scheduler, with Outflow's codecs: takes the same flags as `ballista-scheduler`.

use std::sync::Arc;

use ballista_scheduler::cluster::BallistaCluster;
use ballista_scheduler::config::{Config, SchedulerConfig};
use ballista_scheduler::scheduler_process::start_server;
use clap::Parser;

fn main() -> ballista_core::error::Result<()> {
    // Planning recurses over deep plans: Ballista's own binary runs with 32 MiB stacks too.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(32 * 1024 * 1024)
        .build()?;
    runtime.block_on(async {
        let opt = Config::parse();
        outflow_ballista::init_logging(&opt.log_level_setting);
        let addr = format!("{}:{}", opt.bind_host, opt.bind_port).parse().map_err(
            |e: std::net::AddrParseError| ballista_core::error::BallistaError::Configuration(e.to_string()),
        )?;
        let mut config: SchedulerConfig = opt.try_into()?;
        config.override_logical_codec = Some(outflow_ballista::logical_codec());
        config.override_physical_codec = Some(outflow_ballista::physical_codec());
        let cluster = BallistaCluster::new_from_config(&config).await?;
        start_server(cluster, addr, Arc::new(config)).await
    })
}
