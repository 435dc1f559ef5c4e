//! The `outflow` binary's integration tests, one module per area, in one test binary: each
//! binary links the whole command line, so one is far quicker to build than five.
//! (`features.rs` stays apart: it checks a binary built with fewer features.)

mod bigquery;
mod bigtable;
mod cli;
mod iceberg;
mod iceberg_add_files;
