//! A Kafka topic as a streaming job's dead-letter output: the failed records, each with
//! the topic, partition and offset it was read at, sent before the checkpoint that covers
//! them is committed.
//!
//! Sends are queued as they come; [`DeadLetterTopic::sync`] waits until the brokers have
//! acknowledged every one (`acks=all`, idempotent producer), which the job does before each
//! commit, as it syncs a dead-letter file. A job killed between the two sends the records
//! again when it reads them again, so a consumer of the topic may see a record twice (the
//! message key, `topic/partition/offset` of the source record, tells them apart). It never
//! misses one.

use std::collections::BTreeMap;
use std::time::Duration;

use outflow_core::{Error, ErrorKind, Result};
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord};

use crate::consumer::kafka_error;
use crate::options::KafkaSourceOptions;

/// How long the brokers have to acknowledge the dead letters of one checkpoint.
const SYNC_TIMEOUT: Duration = Duration::from_secs(30);

/// Settings of the source that also hold for a producer to the same brokers: security and
/// client identity. Consumer settings (`group.instance.id`, `session.timeout.ms`...) are
/// left out.
fn shared_with_source(key: &str) -> bool {
    ["security.", "sasl.", "ssl.", "client."]
        .iter()
        .any(|prefix| key.starts_with(prefix))
}

/// Sends dead letters to one topic.
pub struct DeadLetterTopic {
    producer: FutureProducer,
    topic: String,
    pending: Vec<DeliveryFuture>,
}

impl std::fmt::Debug for DeadLetterTopic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeadLetterTopic")
            .field("topic", &self.topic)
            .field("pending", &self.pending.len())
            .finish_non_exhaustive()
    }
}

impl DeadLetterTopic {
    /// A producer to `topic` on the source's brokers, with the source's security settings
    /// and then `properties` (passed to librdkafka as they are).
    pub fn connect(
        source: &KafkaSourceOptions,
        topic: &str,
        properties: &BTreeMap<String, String>,
    ) -> Result<DeadLetterTopic> {
        if topic.trim().is_empty() {
            return Err(Error::invalid_config("dead_letter.kafka.topic", "is blank"));
        }
        let mut config = ClientConfig::new();
        for (key, value) in source.properties.iter().filter(|(k, _)| shared_with_source(k)) {
            config.set(key, value);
        }
        for (key, value) in properties {
            config.set(key, value);
        }
        config
            .set("bootstrap.servers", &source.brokers)
            .set("acks", "all")
            .set("enable.idempotence", "true")
            .set("message.timeout.ms", SYNC_TIMEOUT.as_millis().to_string());
        let producer = config
            .create()
            .map_err(|e| kafka_error(e, "creating the dead-letter producer"))?;
        Ok(DeadLetterTopic {
            producer,
            topic: topic.to_string(),
            pending: Vec::new(),
        })
    }

    /// Queues `value` with `key`; when the local queue is full, waits for the records
    /// queued so far first.
    pub async fn send(&mut self, key: &str, value: &str) -> Result<()> {
        loop {
            let record = FutureRecord::to(&self.topic).key(key).payload(value);
            match self.producer.send_result(record) {
                Ok(delivery) => {
                    self.pending.push(delivery);
                    return Ok(());
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _))
                    if !self.pending.is_empty() =>
                {
                    self.sync().await?;
                }
                Err((err, _)) => {
                    return Err(kafka_error(
                        err,
                        &format!("sending a dead letter to {}", self.topic),
                    ));
                }
            }
        }
    }

    /// Waits until the brokers acknowledged every record queued (at most 30 s); fails,
    /// naming the topic, when one was refused or timed out.
    pub async fn sync(&mut self) -> Result<()> {
        let pending = std::mem::take(&mut self.pending);
        let count = pending.len();
        for delivery in pending {
            let refused = match delivery.await {
                Ok(Ok(_)) => continue,
                Ok(Err((err, _))) => err.to_string(),
                Err(_) => "the producer stopped before the brokers answered".to_string(),
            };
            return Err(Error::new(
                ErrorKind::Transient,
                format!(
                    "kafka: {count} dead letters were not all acknowledged by topic {}: {refused}; \
                     the checkpoint is not committed, so the next run reads those records again",
                    self.topic
                ),
            )
            .with_context("field", "dead_letter.kafka.topic"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_security_and_identity_settings_come_from_the_source() {
        assert!(shared_with_source("security.protocol"));
        assert!(shared_with_source("sasl.password"));
        assert!(shared_with_source("ssl.ca.location"));
        assert!(shared_with_source("client.id"));
        assert!(!shared_with_source("group.instance.id"));
        assert!(!shared_with_source("session.timeout.ms"));
    }

    #[test]
    fn a_blank_topic_is_refused() {
        let source = KafkaSourceOptions::new("127.0.0.1:9092", "g", &["t"]);
        let err = DeadLetterTopic::connect(&source, " ", &BTreeMap::new()).unwrap_err();
        assert!(err.to_string().contains("dead_letter.kafka.topic"), "{err}");
    }
}
