//! Ballista's executor, with Outflow's codecs: takes the same flags as `ballista-executor`.

use std::sync::Arc;

use ballista_executor::config::Config;
use ballista_executor::executor_process::{ExecutorProcessConfig, start_executor_process};
use clap::Parser;

#[tokio::main]
async fn main() -> ballista_core::error::Result<()> {
    let opt = Config::parse();
    let mut config: ExecutorProcessConfig = opt.try_into()?;
    outflow_ballista::init_logging(&config.special_mod_log_level);
    config.override_logical_codec = Some(outflow_ballista::logical_codec());
    config.override_physical_codec = Some(outflow_ballista::physical_codec());
    start_executor_process(Arc::new(config)).await
}
