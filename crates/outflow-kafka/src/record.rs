//! One Kafka record, as the source hands it over.

use std::sync::Arc;

use outflow_core::TopicPartition;

/// A record read from a partition, its key and value copied out of the client's buffers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The topic.
    pub topic: Arc<str>,
    /// The partition.
    pub partition: i32,
    /// Its offset in the partition.
    pub offset: i64,
    /// Its timestamp (create or log-append time), in milliseconds since the Unix epoch.
    pub timestamp_ms: Option<i64>,
    /// The key, if any.
    pub key: Option<Vec<u8>>,
    /// The value; `None` for a tombstone.
    pub value: Option<Vec<u8>>,
    /// The headers, in order (a header without a value has `None`).
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

impl Record {
    /// The partition it came from.
    pub fn topic_partition(&self) -> TopicPartition {
        TopicPartition::new(self.topic.as_ref(), self.partition)
    }
}
