//! Integration tests against Google's Bigtable emulator (started by `scripts/test.sh`, or
//! `scripts/servers/bigtable.sh start`). Without `BIGTABLE_EMULATOR_HOST` they fail, they
//! never skip. Each test works on its own randomly named table; what Outflow wrote is read
//! back through the admin API and ReadRows, and independently with Google's Python client.

mod abort;
mod admin;
mod changes;
mod common;
mod deadlines;
mod faults;
mod write;
