//! Apache Iceberg in the registry.

use std::path::Path;
use std::sync::Arc;

use arrow_schema::Schema;
use async_trait::async_trait;
use outflow_core::{Destination, DynCommitter, DynTwoPhaseSink, Result};
use outflow_iceberg::{IcebergCommitter, IcebergSink, IcebergSinkOptions};

use crate::connector::Connector;
use crate::{OpenedSink, SinkSpec};

#[async_trait]
impl Connector for IcebergSinkOptions {
    const NAME: &'static str = "iceberg";
    const STATEMENT_LEDGER: bool = true;

    fn into_spec(self) -> SinkSpec {
        SinkSpec::Iceberg(Box::new(self))
    }

    fn validate(&self) -> Result<()> {
        IcebergSinkOptions::validate(self)
    }

    fn check_input(&self, schema: &Schema) -> Result<()> {
        IcebergSinkOptions::check_input(self, schema)
    }

    fn relative_to(&self, base: &Path) -> Self {
        IcebergSinkOptions::relative_to(self, base)
    }

    fn destination(&self) -> Option<&Destination> {
        Some(IcebergSinkOptions::destination(self))
    }

    async fn open(&self) -> Result<OpenedSink> {
        let sink = IcebergSink::connect(self.clone()).await?;
        Ok(OpenedSink {
            destination: IcebergSinkOptions::destination(self).clone(),
            preparer: Arc::new(sink.preparer()),
            sink: Box::new(sink),
        })
    }

    async fn open_two_phase(&self) -> Result<Box<dyn DynTwoPhaseSink>> {
        Ok(Box::new(IcebergSink::connect(self.clone()).await?))
    }

    async fn committer(&self) -> Result<Box<dyn DynCommitter>> {
        Ok(Box::new(IcebergCommitter::connect(self).await?))
    }
}
