//! outflow-datafusion's integration tests, one module per sink, in one test binary: each
//! binary links DataFusion and every sink, so one is far quicker to build than four.

mod bigquery;
mod bigtable;
mod iceberg;
mod parallel;
