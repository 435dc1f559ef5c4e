//! Google Cloud Bigtable in the registry.

use std::sync::Arc;

use arrow_schema::Schema;
use async_trait::async_trait;
use outflow_bigtable::{BigtableCommitter, BigtableSink, BigtableSinkOptions};
use outflow_core::{Destination, DynCommitter, DynTwoPhaseSink, Result};

use crate::connector::Connector;
use crate::{OpenedSink, SinkSpec};

#[async_trait]
impl Connector for BigtableSinkOptions {
    const NAME: &'static str = "bigtable";

    fn into_spec(self) -> SinkSpec {
        SinkSpec::Bigtable(Box::new(self))
    }

    fn validate(&self) -> Result<()> {
        BigtableSinkOptions::validate(self)
    }

    fn check_input(&self, schema: &Schema) -> Result<()> {
        BigtableSinkOptions::check_input(self, schema)
    }

    fn destination(&self) -> Option<&Destination> {
        BigtableSinkOptions::destination(self)
    }

    async fn open(&self) -> Result<OpenedSink> {
        let sink = BigtableSink::connect(self.clone()).await?;
        Ok(OpenedSink {
            destination: sink.destination().clone(),
            preparer: Arc::new(sink.preparer()),
            sink: Box::new(sink),
        })
    }

    async fn open_two_phase(&self) -> Result<Box<dyn DynTwoPhaseSink>> {
        Ok(Box::new(BigtableSink::connect(self.clone()).await?))
    }

    async fn committer(&self) -> Result<Box<dyn DynCommitter>> {
        Ok(Box::new(BigtableCommitter::new(self.clone())?))
    }

    fn for_checkpoints(&self, at_least_once: bool) -> Result<Self> {
        BigtableSinkOptions::for_checkpoints(self, at_least_once)
    }
}
