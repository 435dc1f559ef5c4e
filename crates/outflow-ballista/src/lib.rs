//! Outflow sinks on an Apache DataFusion Ballista cluster.
//!
//! A Ballista scheduler plans statements it receives from clients, and executors run the
//! plan's tasks; both decode plans with extension codecs, so they must know Outflow's plan
//! nodes. This crate provides:
//!
//! - two binaries, `outflow-scheduler` and `outflow-executor`: Ballista's own scheduler and
//!   executor, started with Outflow's codecs, taking the Ballista flags an Outflow cluster
//!   needs (same names and defaults; `--help` lists them). Ballista's full flag parsing
//!   is left out on purpose: it pulls in the AWS SDK for S3 object stores, a minute of
//!   compiling that Outflow's local-file and catalog paths do not use;
//! - [`connect`]: a DataFusion `SessionContext` whose statements run on such a cluster.
//!
//! ```no_run
//! # async fn example() -> datafusion::error::Result<()> {
//! use std::sync::Arc;
//! use datafusion::arrow::datatypes::{DataType, Field, Schema};
//! use outflow_datafusion::{SinkSpec, SinkTable};
//!
//! let ctx = outflow_ballista::connect("df://127.0.0.1:50050").await?;
//! let spec: SinkSpec = serde_json::from_str(r#"{"iceberg": {
//!     "catalog": {"type": "sql", "uri": "/data/lake/catalog.db", "warehouse": "/data/lake/wh"},
//!     "table": "analytics.events"}}"#).unwrap();
//! let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
//! ctx.register_table("events", Arc::new(SinkTable::from_spec(schema, spec)))?;
//! ctx.register_parquet("staging", "/data/staging/", Default::default()).await?;
//! ctx.sql("INSERT INTO events SELECT id FROM staging").await?.collect().await?;
//! # Ok(()) }
//! ```
//!
//! The statement's writers run as tasks on every executor; the commit runs once, as the
//! last stage, on one of them. Paths in the spec and the sources (a SQLite catalog, Parquet
//! files) must be reachable, under the same names, from every executor.
#![deny(missing_docs)]

use std::sync::Arc;

use ballista::prelude::{SessionConfigExt, SessionContextExt};
use ballista_core::config::TaskSchedulingPolicy;
use ballista_core::serde::{BallistaLogicalExtensionCodec, BallistaPhysicalExtensionCodec};
use datafusion::error::Result;
use datafusion::execution::SessionStateBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_proto::logical_plan::LogicalExtensionCodec;
use datafusion_proto::physical_plan::PhysicalExtensionCodec;
use outflow_datafusion::{OutflowLogicalCodec, OutflowPhysicalCodec};

/// How a scheduler hands tasks to executors, as the binaries' flags spell it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SchedulingPolicy {
    /// Executors ask for tasks; the scheduler reruns a lost executor's tasks elsewhere.
    PullStaged,
    /// The scheduler offers tasks to executors (Ballista's default).
    PushStaged,
}

impl From<SchedulingPolicy> for TaskSchedulingPolicy {
    fn from(policy: SchedulingPolicy) -> Self {
        match policy {
            SchedulingPolicy::PullStaged => TaskSchedulingPolicy::PullStaged,
            SchedulingPolicy::PushStaged => TaskSchedulingPolicy::PushStaged,
        }
    }
}

/// Ballista's logical codec with Outflow's tables.
pub fn logical_codec() -> Arc<dyn LogicalExtensionCodec> {
    Arc::new(OutflowLogicalCodec::wrapping(Arc::new(
        BallistaLogicalExtensionCodec::default(),
    )))
}

/// Ballista's physical codec with Outflow's plan nodes.
pub fn physical_codec() -> Arc<dyn PhysicalExtensionCodec> {
    Arc::new(OutflowPhysicalCodec::wrapping(Arc::new(
        BallistaPhysicalExtensionCodec::default(),
    )))
}

/// A session configuration for a Ballista client that sends Outflow tables.
pub fn session_config() -> SessionConfig {
    SessionConfig::new_with_ballista()
        .with_ballista_logical_extension_codec(logical_codec())
        .with_ballista_physical_extension_codec(physical_codec())
}

/// A session whose statements run on the Ballista scheduler at `scheduler_url`
/// (`df://host:port`), which must be an `outflow-scheduler`.
pub async fn connect(scheduler_url: &str) -> Result<SessionContext> {
    let state = SessionStateBuilder::new()
        .with_config(session_config())
        .with_default_features()
        .build();
    SessionContext::remote_with_state(scheduler_url, state).await
}

/// Logs to standard output, filtered by `RUST_LOG` or else `default_level`.
pub fn init_logging(default_level: &str) {
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| default_level.to_string());
    tracing_subscriber::fmt()
        .with_ansi(false)
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .init();
}
