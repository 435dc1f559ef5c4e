//! The Kafka broker `scripts/servers/kafka.sh` starts: topics and records for tests.
//!
//! Records are produced with librdkafka (the same client the job uses, but as a producer,
//! which the job never is); what a job stored is read back from the destinations by their
//! own independent readers.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};

use crate::require_env;

const TIMEOUT: Duration = Duration::from_secs(30);

/// The test broker.
#[derive(Clone, Debug)]
pub struct Broker {
    /// Its bootstrap servers (`OUTFLOW_KAFKA_BROKERS`).
    pub brokers: String,
}

impl Broker {
    /// The broker the test script started.
    pub fn from_env() -> Broker {
        Broker {
            brokers: require_env("OUTFLOW_KAFKA_BROKERS"),
        }
    }

    /// Creates `topic` with `partitions` partitions.
    pub fn create_topic(&self, topic: &str, partitions: i32) {
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", &self.brokers)
            .create()
            .expect("create the admin client");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
        let options = AdminOptions::new().operation_timeout(Some(TIMEOUT));
        let results = runtime
            .block_on(admin.create_topics([&new], &options))
            .expect("create the topic");
        for result in results {
            result.unwrap_or_else(|(name, err)| panic!("creating topic {name}: {err}"));
        }
    }

    /// A producer that sends to `partition`s as asked (acks from every replica).
    pub fn producer(&self) -> TestProducer {
        let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
            .set("bootstrap.servers", &self.brokers)
            .set("acks", "all")
            .set("enable.idempotence", "true")
            .set("linger.ms", "5")
            .set("queue.buffering.max.messages", "1000000")
            .create()
            .expect("create the producer");
        TestProducer { producer }
    }

    /// The end offset (the next offset a record would get) of every partition of `topic`,
    /// `topic/partition` → offset.
    pub fn end_offsets(&self, topic: &str) -> BTreeMap<String, i64> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.brokers)
            .create()
            .expect("create a consumer for metadata");
        let metadata = consumer
            .fetch_metadata(Some(topic), TIMEOUT)
            .expect("read the topic's metadata");
        let mut ends = BTreeMap::new();
        for t in metadata.topics() {
            for p in t.partitions() {
                let (_, high) = consumer
                    .fetch_watermarks(topic, p.id(), TIMEOUT)
                    .expect("read a partition's end");
                ends.insert(format!("{topic}/{}", p.id()), high);
            }
        }
        ends
    }
}

impl Broker {
    /// Every record of `topic`, read from the start up to its end offsets: `(key, value)`
    /// as text, in partition then offset order.
    pub fn read_all(&self, topic: &str) -> Vec<(String, String)> {
        use rdkafka::Message;
        let ends = self.end_offsets(topic);
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.brokers)
            .set("group.id", format!("outflow-testkit-read-{topic}"))
            .set("enable.auto.commit", "false")
            .create()
            .expect("create a consumer");
        let mut assignment = rdkafka::TopicPartitionList::new();
        for partition in ends.keys() {
            let (_, number) = partition.rsplit_once('/').unwrap();
            assignment
                .add_partition_offset(topic, number.parse().unwrap(), rdkafka::Offset::Beginning)
                .unwrap();
        }
        consumer.assign(&assignment).expect("assign the partitions");
        let mut read: BTreeMap<(i32, i64), (String, String)> = BTreeMap::new();
        let wanted: i64 = ends.values().sum();
        let deadline = std::time::Instant::now() + TIMEOUT;
        while (read.len() as i64) < wanted {
            assert!(
                std::time::Instant::now() < deadline,
                "read {} of {wanted} records of {topic}",
                read.len()
            );
            let Some(message) = consumer.poll(Duration::from_millis(200)) else {
                continue;
            };
            let message = message.expect("read a record");
            let text = |bytes: Option<&[u8]>| String::from_utf8_lossy(bytes.unwrap_or_default()).into_owned();
            read.insert(
                (message.partition(), message.offset()),
                (text(message.key()), text(message.payload())),
            );
        }
        read.into_values().collect()
    }
}

/// Sends records to the test broker.
pub struct TestProducer {
    producer: ThreadedProducer<DefaultProducerContext>,
}

impl TestProducer {
    /// Sends `value` with `key` to `partition` of `topic` (queued; see [`Self::flush`]).
    pub fn send(&self, topic: &str, partition: i32, key: &str, value: &str) {
        self.send_with_headers(topic, partition, key, value, &[]);
    }

    /// [`Self::send`], with `headers` (name, value) on the record.
    pub fn send_with_headers(
        &self,
        topic: &str,
        partition: i32,
        key: &str,
        value: &str,
        headers: &[(&str, &str)],
    ) {
        let mut record = BaseRecord::to(topic).partition(partition).key(key).payload(value);
        if !headers.is_empty() {
            let mut owned = rdkafka::message::OwnedHeaders::new();
            for (name, value) in headers {
                owned = owned.insert(rdkafka::message::Header {
                    key: name,
                    value: Some(*value),
                });
            }
            record = record.headers(owned);
        }
        loop {
            match self.producer.send(record) {
                Ok(()) => return,
                Err((err, back)) => {
                    // The local queue is full: wait for deliveries.
                    assert!(
                        matches!(
                            err.rdkafka_error_code(),
                            Some(rdkafka::error::RDKafkaErrorCode::QueueFull)
                        ),
                        "producing to {topic}: {err}"
                    );
                    std::thread::sleep(Duration::from_millis(10));
                    record = back;
                }
            }
        }
    }

    /// Waits until every record sent has been acknowledged.
    pub fn flush(&self) {
        self.producer
            .flush(Duration::from_secs(120))
            .expect("flush the producer");
    }
}
