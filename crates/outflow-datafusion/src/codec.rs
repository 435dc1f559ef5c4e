//! Outflow's plan nodes and tables as bytes, so a statement planned in one process runs in
//! others: DataFusion's extension codecs, as Ballista's scheduler and executors use them.
//!
//! Outflow's own nodes ([`SinkWriterExec`], [`SinkCommitExec`]) and spec-built
//! [`SinkTable`]s are encoded as a short tag followed by JSON of their serde parts (the
//! [`SinkSpec`], the table schema, the dead-letter path); everything else is handed to the
//! codec being wrapped (Ballista's, or DataFusion's default), so one codec serves a whole
//! plan. Tables built from a closure ([`SinkTable::new`]) cannot travel and say so.

use std::sync::Arc;

use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::catalog::TableProvider;
use datafusion::datasource::file_format::FileFormatFactory;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{AggregateUDF, Extension, LogicalPlan, ScalarUDF, WindowUDF};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::sql::TableReference;
use datafusion_proto::logical_plan::{DefaultLogicalExtensionCodec, LogicalExtensionCodec};
use datafusion_proto::physical_plan::{DefaultPhysicalExtensionCodec, PhysicalExtensionCodec};
use serde::{Deserialize, Serialize};

use crate::exec::{CommitSettings, SinkCommitExec, SinkWriterExec};
use crate::{SinkSpec, SinkTable};

/// The first bytes of everything Outflow encodes; protobuf (what the wrapped codecs write)
/// never starts with them.
const TAG: &[u8] = b"outflow/1:";

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Encoded {
    Writer {
        spec: SinkSpec,
        table_schema: Schema,
    },
    Commit {
        spec: SinkSpec,
        #[serde(flatten)]
        settings: CommitSettings,
    },
    Table {
        spec: SinkSpec,
        #[serde(flatten)]
        settings: CommitSettings,
    },
}

fn encode(value: &Encoded, buf: &mut Vec<u8>) -> Result<()> {
    buf.extend_from_slice(TAG);
    serde_json::to_writer(buf, value)
        .map_err(|e| DataFusionError::Internal(format!("encoding an Outflow node: {e}")))
}

/// The Outflow part of `buf`, or `None` when it is another codec's.
fn decode(buf: &[u8]) -> Result<Option<Encoded>> {
    let Some(json) = buf.strip_prefix(TAG) else {
        return Ok(None);
    };
    serde_json::from_slice(json)
        .map(Some)
        .map_err(|e| DataFusionError::Internal(format!("decoding an Outflow node: {e}")))
}

fn one_input(inputs: &[Arc<dyn ExecutionPlan>], node: &str) -> Result<Arc<dyn ExecutionPlan>> {
    match inputs {
        [input] => Ok(input.clone()),
        _ => Err(DataFusionError::Internal(format!(
            "{node} has one input, the encoded plan gave {}",
            inputs.len()
        ))),
    }
}

/// User-defined functions are none of Outflow's business: both codecs hand them to `inner`.
macro_rules! functions_from_inner {
    () => {
        fn try_decode_udf(&self, name: &str, buf: &[u8]) -> Result<Arc<ScalarUDF>> {
            self.inner.try_decode_udf(name, buf)
        }

        fn try_encode_udf(&self, node: &ScalarUDF, buf: &mut Vec<u8>) -> Result<()> {
            self.inner.try_encode_udf(node, buf)
        }

        fn try_decode_udaf(&self, name: &str, buf: &[u8]) -> Result<Arc<AggregateUDF>> {
            self.inner.try_decode_udaf(name, buf)
        }

        fn try_encode_udaf(&self, node: &AggregateUDF, buf: &mut Vec<u8>) -> Result<()> {
            self.inner.try_encode_udaf(node, buf)
        }

        fn try_decode_udwf(&self, name: &str, buf: &[u8]) -> Result<Arc<WindowUDF>> {
            self.inner.try_decode_udwf(name, buf)
        }

        fn try_encode_udwf(&self, node: &WindowUDF, buf: &mut Vec<u8>) -> Result<()> {
            self.inner.try_encode_udwf(node, buf)
        }
    };
}

/// Encodes Outflow's physical nodes; hands every other node to the wrapped codec.
#[derive(Debug)]
pub struct OutflowPhysicalCodec {
    inner: Arc<dyn PhysicalExtensionCodec>,
}

impl OutflowPhysicalCodec {
    /// Outflow's nodes, and `inner`'s (Ballista's codec on a cluster).
    pub fn wrapping(inner: Arc<dyn PhysicalExtensionCodec>) -> Self {
        OutflowPhysicalCodec { inner }
    }
}

impl Default for OutflowPhysicalCodec {
    fn default() -> Self {
        OutflowPhysicalCodec::wrapping(Arc::new(DefaultPhysicalExtensionCodec {}))
    }
}

impl PhysicalExtensionCodec for OutflowPhysicalCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        match decode(buf)? {
            None => self.inner.try_decode(buf, inputs, ctx),
            Some(Encoded::Writer { spec, table_schema }) => Ok(Arc::new(SinkWriterExec::new(
                one_input(inputs, "SinkWriterExec")?,
                Arc::new(spec),
                Arc::new(table_schema),
            ))),
            Some(Encoded::Commit { spec, settings }) => Ok(Arc::new(SinkCommitExec::new(
                one_input(inputs, "SinkCommitExec")?,
                Arc::new(spec),
                settings,
            ))),
            Some(Encoded::Table { .. }) => Err(DataFusionError::Internal(
                "an Outflow table where a plan node was expected".to_string(),
            )),
        }
    }

    fn try_encode(&self, node: Arc<dyn ExecutionPlan>, buf: &mut Vec<u8>) -> Result<()> {
        if let Some(writer) = node.as_any().downcast_ref::<SinkWriterExec>() {
            let value = Encoded::Writer {
                spec: writer.spec().clone(),
                table_schema: writer.table_schema().as_ref().clone(),
            };
            return encode(&value, buf);
        }
        if let Some(commit) = node.as_any().downcast_ref::<SinkCommitExec>() {
            let value = Encoded::Commit {
                spec: commit.spec().clone(),
                settings: commit.settings().clone(),
            };
            return encode(&value, buf);
        }
        self.inner.try_encode(node, buf)
    }

    functions_from_inner!();
}

/// Encodes spec-built [`SinkTable`]s (the target of an `INSERT` planned elsewhere); hands
/// everything else to the wrapped codec.
#[derive(Debug)]
pub struct OutflowLogicalCodec {
    inner: Arc<dyn LogicalExtensionCodec>,
}

impl OutflowLogicalCodec {
    /// Outflow's tables, and `inner`'s (Ballista's codec on a cluster).
    pub fn wrapping(inner: Arc<dyn LogicalExtensionCodec>) -> Self {
        OutflowLogicalCodec { inner }
    }
}

impl Default for OutflowLogicalCodec {
    fn default() -> Self {
        OutflowLogicalCodec::wrapping(Arc::new(DefaultLogicalExtensionCodec {}))
    }
}

impl LogicalExtensionCodec for OutflowLogicalCodec {
    fn try_decode(&self, buf: &[u8], inputs: &[LogicalPlan], ctx: &TaskContext) -> Result<Extension> {
        self.inner.try_decode(buf, inputs, ctx)
    }

    fn try_encode(&self, node: &Extension, buf: &mut Vec<u8>) -> Result<()> {
        self.inner.try_encode(node, buf)
    }

    fn try_decode_table_provider(
        &self,
        buf: &[u8],
        table_ref: &TableReference,
        schema: SchemaRef,
        ctx: &TaskContext,
    ) -> Result<Arc<dyn TableProvider>> {
        match decode(buf)? {
            None => self.inner.try_decode_table_provider(buf, table_ref, schema, ctx),
            Some(Encoded::Table { spec, settings }) => Ok(Arc::new(
                SinkTable::from_spec(schema, spec).with_settings(settings),
            )),
            Some(_) => Err(DataFusionError::Internal(format!(
                "an Outflow plan node where table {table_ref} was expected"
            ))),
        }
    }

    fn try_encode_table_provider(
        &self,
        table_ref: &TableReference,
        node: Arc<dyn TableProvider>,
        buf: &mut Vec<u8>,
    ) -> Result<()> {
        let Some(table) = node.as_any().downcast_ref::<SinkTable>() else {
            return self.inner.try_encode_table_provider(table_ref, node, buf);
        };
        let Some(spec) = table.spec() else {
            return Err(DataFusionError::NotImplemented(format!(
                "table {table_ref} writes through a sink built by a closure, which cannot be sent \
                 to another process; build it with SinkTable::from_spec"
            )));
        };
        let value = Encoded::Table {
            spec: spec.clone(),
            settings: table.settings().clone(),
        };
        encode(&value, buf)
    }

    fn try_decode_file_format(&self, buf: &[u8], ctx: &TaskContext) -> Result<Arc<dyn FileFormatFactory>> {
        self.inner.try_decode_file_format(buf, ctx)
    }

    fn try_encode_file_format(&self, buf: &mut Vec<u8>, node: Arc<dyn FileFormatFactory>) -> Result<()> {
        self.inner.try_encode_file_format(buf, node)
    }

    functions_from_inner!();
}
