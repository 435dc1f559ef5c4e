//! What a sink gives the registry: one implementation per sink, on its options type.

use std::path::Path;

use arrow_schema::Schema;
use async_trait::async_trait;
use outflow_core::{Destination, DynCommitter, DynTwoPhaseSink, Result};

use crate::{OpenedSink, SinkSpec};

/// A sink's options, as the registry drives them.
#[async_trait]
pub(crate) trait Connector: Clone + Send + Sync {
    /// The key under `sink:`.
    const NAME: &'static str;

    /// Whether the committer records the files a statement loads
    /// ([`outflow_core::Committer::commit_loaded`]).
    const STATEMENT_LEDGER: bool = false;

    /// The options inside a [`SinkSpec`].
    fn into_spec(self) -> SinkSpec;

    /// Checks the options without I/O.
    fn validate(&self) -> Result<()>;

    /// Checks the options against the schema of the rows the sink will receive, without
    /// I/O: every field an option names.
    fn check_input(&self, schema: &Schema) -> Result<()>;

    /// The options with relative paths resolved against `base` (absolute).
    fn relative_to(&self, _base: &Path) -> Self {
        self.clone()
    }

    /// Where rows go, when set.
    fn destination(&self) -> Option<&Destination>;

    /// The writer, the preparer and the destination.
    async fn open(&self) -> Result<OpenedSink>;

    /// A writer of a two-phase write.
    async fn open_two_phase(&self) -> Result<Box<dyn DynTwoPhaseSink>>;

    /// The committer of a two-phase write.
    async fn committer(&self) -> Result<Box<dyn DynCommitter>>;

    /// The options for the checkpoints of a streaming job, refused when the sink cannot
    /// write a record again without changing what readers see (unless `at_least_once`).
    fn for_checkpoints(&self, _at_least_once: bool) -> Result<Self> {
        Ok(self.clone())
    }
}

/// The sink name of an options type.
pub(crate) fn name_of<C: Connector>(_options: &C) -> &'static str {
    C::NAME
}

/// Whether an options type's committer records the files a statement loads.
pub(crate) fn statement_ledger<C: Connector>(_options: &C) -> bool {
    C::STATEMENT_LEDGER
}
