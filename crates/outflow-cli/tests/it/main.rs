//! The `outflow` binary's integration tests, one module per area, in one test binary: each
//! binary links the whole command line, so one is far quicker to build than five.
//! (`features.rs` stays apart: it checks a binary built with fewer features.)

mod bigquery;
mod bigtable;
mod cli;
mod iceberg;
mod iceberg_add_files;
mod pipes;
mod reruns;
mod strict;
mod types;

/// `outflow` as a script runs it: no log filter from the environment, no colours.
fn outflow() -> assert_cmd::Command {
    let mut cmd = assert_cmd::cargo::cargo_bin_cmd!("outflow");
    cmd.env_remove("OUTFLOW_LOG").env("NO_COLOR", "1");
    cmd
}
