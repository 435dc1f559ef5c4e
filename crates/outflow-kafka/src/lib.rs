//! A Kafka source for Outflow's streaming jobs.
//!
//! [`KafkaSource`] reads topics in a consumer group and hands the job [`Event`]s: records,
//! and the group's rebalances, which the job answers (where each assigned partition starts;
//! when a checkpoint of revoked partitions is done). [`JsonDecoder`] turns record values into
//! Arrow batches, naming each record that does not decode. [`DeadLetterTopic`] sends a
//! job's failed records to a topic.
//!
//! Where a job starts is never Kafka's committed offsets: each destination keeps the offsets
//! of the rows it holds, committed with them ([`outflow_core::checkpoint`]), and the job
//! answers assignments from there. The group's offsets are updated after each checkpoint for
//! lag monitoring only ([`KafkaSource::commit_for_monitoring`]).
//!
//! The client is librdkafka (through `rdkafka`), bundled and built from source, under the
//! `client` feature (on by default); without it the crate has the options and the decoder.
#![deny(missing_docs)]

#[cfg(feature = "client")]
pub mod consumer;
pub mod decode;
pub mod options;
#[cfg(feature = "client")]
pub mod producer;
pub mod record;

#[cfg(feature = "client")]
pub use consumer::{Event, KafkaSource};
pub use decode::{Decoded, JsonDecoder, RecordColumns, infer_schema};
pub use options::{KafkaSourceOptions, StartPosition};
#[cfg(feature = "client")]
pub use producer::DeadLetterTopic;
pub use record::Record;
