//! Integration tests against the real `local-bigquery` emulator that `scripts/test.sh`
//! starts (`scripts/servers/bigquery.sh`). Every test makes its own dataset; what Outflow
//! writes is read back through tables.get and Google's Python client. A missing emulator
//! fails the tests, never skips them.
//!
//! Where the emulator deviates from the documented service, the service's behaviour is
//! tested by unit tests on recorded responses in the crate (see the comments there).

mod abort;
mod changes;
mod checkpoints;
mod common;
mod create;
mod deadlines;
mod dispositions;
mod evolution;
mod failed_rows;
mod methods;
mod resume;
