//! outflow-iceberg's integration tests in one test binary (each binary links iceberg-rust,
//! the catalogs and the readers' harness, so one is quicker to build than three), against
//! real catalogs, with every table read back by independent readers.

mod add_files;
mod checkpoints;
mod common;
mod compact;
mod evolution_property;
mod object_store;
mod rest_auth;
mod rest_deadlines;
mod sink;
mod upsert;
mod vended_credentials;
