//! Google BigQuery in the registry.

use std::path::Path;
use std::sync::Arc;

use arrow_schema::Schema;
use async_trait::async_trait;
use outflow_bigquery::{BigQueryCommitter, BigQuerySink, BigQuerySinkOptions};
use outflow_core::{Destination, DynCommitter, DynTwoPhaseSink, Result};

use crate::connector::Connector;
use crate::{OpenedSink, SinkSpec};

#[async_trait]
impl Connector for BigQuerySinkOptions {
    const NAME: &'static str = "bigquery";
    const STATEMENT_LEDGER: bool = true;

    fn into_spec(self) -> SinkSpec {
        SinkSpec::BigQuery(Box::new(self))
    }

    fn validate(&self) -> Result<()> {
        BigQuerySinkOptions::validate(self)
    }

    fn check_input(&self, schema: &Schema) -> Result<()> {
        BigQuerySinkOptions::check_input(self, schema)
    }

    fn relative_to(&self, base: &Path) -> Self {
        BigQuerySinkOptions::relative_to(self, base)
    }

    fn destination(&self) -> Option<&Destination> {
        Some(BigQuerySinkOptions::destination(self))
    }

    async fn open(&self) -> Result<OpenedSink> {
        let sink = BigQuerySink::connect(self.clone().for_batch_load()).await?;
        Ok(OpenedSink {
            destination: sink.destination().clone(),
            preparer: Arc::new(sink.preparer()),
            sink: Box::new(sink),
        })
    }

    async fn open_two_phase(&self) -> Result<Box<dyn DynTwoPhaseSink>> {
        Ok(Box::new(BigQuerySink::connect_two_phase(self.clone()).await?))
    }

    async fn committer(&self) -> Result<Box<dyn DynCommitter>> {
        Ok(Box::new(BigQueryCommitter::connect(self).await?))
    }

    fn for_checkpoints(&self, at_least_once: bool) -> Result<Self> {
        BigQuerySinkOptions::for_checkpoints(self, at_least_once)
    }
}
