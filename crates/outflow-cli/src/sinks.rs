//! The `sink` section of a job file, and how a sink becomes something the runner can drive.
//!
//! The runner ([`crate::run`]) knows no sink: it takes a [`BuiltSink`], that is a
//! `Box<dyn Sink>` that writes, an `Arc<dyn PrepareDestination>` that creates or reconciles
//! tables (and says what it would do, for `outflow plan`), and the [`Destination`] rows go
//! to, so it can prepare each destination once before its first row.
//!
//! # Wiring a sink in
//!
//! A sink crate `outflow-foo` with options type `FooSinkOptions` (serde, `deny_unknown_fields`,
//! the field docs being the user docs, secrets kept out of its `Debug`) plugs in with three
//! small changes:
//!
//! 1. `Cargo.toml` of this crate and of `outflow-datafusion`: `outflow-foo.workspace = true`.
//! 2. In `outflow-datafusion`, a variant `Foo(outflow_foo::FooSinkOptions)` in [`SinkSpec`]
//!    (its serde name, `foo`, is the key under `sink:`), its name in `SinkSpec::name` and an
//!    arm in `SinkSpec::open`; here, an arm in [`build`] that builds the sink (which
//!    validates the options) and returns the writer, the preparer and the destination. For Iceberg (tried against
//!    `outflow-iceberg` as committed; `_ctx` becomes `ctx` once an arm uses it):
//!    ```ignore
//!    SinkSpec::Iceberg(options) => {
//!        let sink = outflow_iceberg::IcebergSink::connect(options.clone()).await?;
//!        Ok(BuiltSink {
//!            destination: options.table.clone(),
//!            preparer: Arc::new(sink.destinations()),
//!            sink: Box::new(sink),
//!        })
//!    }
//!    ```
//!    Relative paths in a sink's options (a SQLite catalog, a warehouse, a key file) are
//!    relative to the job file like every other path in it: the arm resolves them against
//!    [`SinkContext::base_dir`] before building.
//! 3. Optionally, sink-specific subcommands (`outflow foo ensure-table`): a module
//!    `commands/foo.rs` with a clap `Subcommand` enum and an `execute` function, and one
//!    variant `Foo(foo::FooCommand)` in [`crate::commands::Command`] (see that module).
//!
//! Nothing else changes: `run`, `plan`, progress, the summary, `--json`, dead letters and
//! exit codes all work through the traits.

use std::path::Path;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use outflow_core::{Destination, PrepareDestination, Result, Sink};

/// The `sink` section: exactly one sink, keyed by its name (`iceberg`, `bigquery`,
/// `bigtable`). Defined with the engine integration, which sends it to other processes.
pub use outflow_datafusion::SinkSpec;

/// Validates the options and builds the sink, without writing anything (`outflow plan`
/// builds the sink too). Option errors are
/// [`ErrorKind::InvalidConfig`](outflow_core::ErrorKind::InvalidConfig) naming the
/// field, which the command line reports as a bad job file.
pub async fn build(spec: &SinkSpec, ctx: &SinkContext<'_>) -> Result<BuiltSink> {
    match spec {
        SinkSpec::Iceberg(options) => {
            let mut options = options.as_ref().clone();
            options.catalog = options.catalog.relative_to(ctx.base_dir);
            let sink = outflow_iceberg::IcebergSink::connect(options.clone()).await?;
            Ok(BuiltSink {
                destination: options.table.clone(),
                preparer: Arc::new(sink.destinations()),
                sink: Box::new(sink),
            })
        }
        SinkSpec::BigQuery(options) => {
            let sink = outflow_bigquery::BigQuerySink::builder(options.as_ref().clone())
                .build()
                .await?;
            Ok(BuiltSink {
                destination: sink.destination().clone(),
                preparer: Arc::new(sink.preparer()),
                sink: Box::new(sink),
            })
        }
        SinkSpec::Bigtable(builder) => {
            // The Bigtable sink is its own preparer; a second instance prepares, so
            // that the runner can hold one to write and share the other.
            let preparer = builder.as_ref().clone().build()?;
            let sink = builder.as_ref().clone().build()?;
            Ok(BuiltSink {
                destination: sink.destination().clone(),
                preparer: Arc::new(preparer),
                sink: Box::new(sink),
            })
        }
    }
}

/// What a sink may need to know when it is built.
#[derive(Clone, Copy, Debug)]
pub struct SinkContext<'a> {
    /// The job file's directory: relative paths in sink options (a warehouse, a key file)
    /// resolve against it, as every path in a job file does.
    pub base_dir: &'a Path,
    /// The schema of the rows the sink will receive, after every transform.
    pub schema: &'a SchemaRef,
}

/// A sink ready for the runner.
pub struct BuiltSink {
    /// Writes the batches.
    pub sink: Box<dyn Sink>,
    /// Prepares (or plans) each destination before its first row.
    pub preparer: Arc<dyn PrepareDestination>,
    /// Where rows go: one table, or a table per row from a template.
    pub destination: Destination,
}

impl std::fmt::Debug for BuiltSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuiltSink")
            .field("destination", &self.destination)
            .finish_non_exhaustive()
    }
}
