//! The consumer: librdkafka's consumer polled on a thread of its own, handing records and
//! rebalances to the job as [`Event`]s, in the order they happened.
//!
//! Offsets are the destinations' business, not Kafka's: the consumer never commits by
//! itself and starts every partition it is assigned where the job says. A rebalance runs
//! inside the poll, on the consumer's thread, which waits for the job:
//! - on an assignment it asks the job for the offsets the destinations hold
//!   ([`Event::Assigned`]); partitions without one start at the [`StartPosition`];
//! - before partitions are revoked, it lets the job finish a checkpoint of everything
//!   received so far ([`Event::Revoking`]), so no other process starts them from older
//!   offsets while this one still holds uncommitted rows of them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use outflow_core::{Error, ErrorKind, Offsets, Result, TopicPartition};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message, Timestamp};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use tokio::sync::{mpsc, oneshot};

use crate::options::{KafkaSourceOptions, StartPosition};
use crate::record::Record;

/// Records handed over at most this many at a time.
const CHUNK_RECORDS: usize = 8192;
/// A chunk is handed over at the latest this long after its first record.
const CHUNK_WAIT: Duration = Duration::from_millis(20);
/// How long one call to the brokers (metadata, watermarks, times) may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// What the consumer hands the job.
#[derive(Debug)]
pub enum Event {
    /// Records, in the order fetched (offset order within each partition).
    Records(Vec<Record>),
    /// The group assigned these partitions: reply with the offsets the destinations hold
    /// of them; the others start at the start position.
    Assigned {
        /// The partitions.
        partitions: Vec<TopicPartition>,
        /// Where the answer goes.
        reply: oneshot::Sender<Offsets>,
    },
    /// Reading starts: the exact next offset of every partition just assigned.
    Started(Offsets),
    /// The group takes these partitions away once the reply comes: finish a checkpoint of
    /// every record received before this event first.
    Revoking {
        /// The partitions.
        partitions: Vec<TopicPartition>,
        /// Answer when done.
        done: oneshot::Sender<()>,
    },
    /// The consumer failed and stopped.
    Failed(Error),
}

/// A Kafka source: a consumer in the job's group, read as [`Event`]s.
pub struct KafkaSource {
    consumer: Arc<BaseConsumer<Context>>,
    events: mpsc::Receiver<Event>,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    stop: AtomicBool,
    /// Set once the job stops: rebalances after that (the consumer's own close) no longer
    /// ask the job anything.
    closing: AtomicBool,
}

/// The consumer's context: runs rebalances by asking the job.
struct Context {
    events: mpsc::Sender<Event>,
    shared: Arc<Shared>,
    start: StartPosition,
    /// The first error of a rebalance, reported as the consumer's failure.
    failure: Mutex<Option<Error>>,
}

impl ClientContext for Context {}

impl ConsumerContext for Context {
    fn rebalance(&self, consumer: &BaseConsumer<Self>, err: RDKafkaRespErr, tpl: &mut TopicPartitionList) {
        let partitions = partitions_of(tpl);
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                if let Err(e) = self.assign(consumer, tpl, partitions) {
                    tracing::error!(error = %e, "assigning partitions failed");
                    self.failure
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get_or_insert(e);
                    let _ = consumer.unassign();
                }
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                if !self.shared.closing.load(Ordering::SeqCst) {
                    let (done, wait) = oneshot::channel();
                    if self
                        .events
                        .blocking_send(Event::Revoking { partitions, done })
                        .is_ok()
                    {
                        let _ = wait.blocking_recv();
                    }
                }
                let _ = consumer.unassign();
            }
            other => {
                tracing::warn!(error = ?other, "rebalance error");
                let _ = consumer.unassign();
            }
        }
    }
}

impl Context {
    /// Asks the job where each partition starts, resolves the rest from the start
    /// position, assigns, and says where each one starts.
    fn assign(
        &self,
        consumer: &BaseConsumer<Self>,
        tpl: &mut TopicPartitionList,
        partitions: Vec<TopicPartition>,
    ) -> Result<()> {
        if self.shared.closing.load(Ordering::SeqCst) {
            return Ok(());
        }
        let (reply, answer) = oneshot::channel();
        if self
            .events
            .blocking_send(Event::Assigned {
                partitions: partitions.clone(),
                reply,
            })
            .is_err()
        {
            return Ok(());
        }
        let held = answer
            .blocking_recv()
            .map_err(|_| Error::internal("the job stopped while partitions were assigned"))?;
        let mut started = Offsets::new();
        for partition in partitions {
            let next = match held.get(&partition) {
                Some(next) => next,
                None => start_offset(consumer, &partition, self.start)?,
            };
            tpl.set_partition_offset(&partition.topic, partition.partition, Offset::Offset(next))
                .map_err(|e| kafka_error(e, "setting a start offset"))?;
            started.set(partition, next);
        }
        consumer
            .assign(tpl)
            .map_err(|e| kafka_error(e, "assigning partitions"))?;
        let _ = self.events.blocking_send(Event::Started(started));
        Ok(())
    }
}

/// The exact offset `start` means for `partition`.
fn start_offset(
    consumer: &BaseConsumer<Context>,
    partition: &TopicPartition,
    start: StartPosition,
) -> Result<i64> {
    let (low, high) = consumer
        .fetch_watermarks(&partition.topic, partition.partition, CALL_TIMEOUT)
        .map_err(|e| kafka_error(e, &format!("reading the offsets of {partition}")))?;
    match start {
        StartPosition::Earliest => Ok(low),
        StartPosition::Latest => Ok(high),
        StartPosition::Timestamp(ms) => {
            let mut times = TopicPartitionList::new();
            times
                .add_partition_offset(&partition.topic, partition.partition, Offset::Offset(ms))
                .map_err(|e| kafka_error(e, "asking for offsets by time"))?;
            let found = consumer
                .offsets_for_times(times, CALL_TIMEOUT)
                .map_err(|e| kafka_error(e, &format!("finding the offset of {partition} at time {ms}")))?;
            let offset = found
                .find_partition(&partition.topic, partition.partition)
                .map(|e| e.offset());
            Ok(match offset {
                Some(Offset::Offset(n)) => n,
                // No record at or after that time: start after the last one.
                _ => high,
            })
        }
    }
}

/// Every partition of `topics`, by the brokers' metadata; a topic that does not exist is
/// an error naming it.
fn partitions_of_topics(consumer: &BaseConsumer<Context>, topics: &[String]) -> Result<Vec<TopicPartition>> {
    let mut partitions = Vec::new();
    for topic in topics {
        let metadata = consumer
            .fetch_metadata(Some(topic), CALL_TIMEOUT)
            .map_err(|e| kafka_error(e, &format!("reading the partitions of topic {topic}")))?;
        for t in metadata.topics() {
            if t.error().is_some() || t.partitions().is_empty() {
                return Err(Error::not_found("topic", topic.clone())
                    .with_context("field", "kafka.topics")
                    .with_retryable(false));
            }
            partitions.extend(
                t.partitions()
                    .iter()
                    .map(|p| TopicPartition::new(topic.as_str(), p.id())),
            );
        }
    }
    Ok(partitions)
}

fn partitions_of(tpl: &TopicPartitionList) -> Vec<TopicPartition> {
    tpl.elements()
        .iter()
        .map(|e| TopicPartition::new(e.topic(), e.partition()))
        .collect()
}

/// A client error as Outflow's, saying what was being done.
pub(crate) fn kafka_error(err: KafkaError, doing: &str) -> Error {
    let retryable = matches!(
        err.rdkafka_error_code(),
        Some(rdkafka::error::RDKafkaErrorCode::OperationTimedOut)
            | Some(rdkafka::error::RDKafkaErrorCode::BrokerTransportFailure)
            | Some(rdkafka::error::RDKafkaErrorCode::AllBrokersDown)
    );
    let kind = if retryable {
        ErrorKind::Transient
    } else {
        ErrorKind::Internal
    };
    Error::new(kind, format!("kafka: {doing}: {err}")).with_retryable(retryable)
}

impl KafkaSource {
    /// Connects to the brokers of `options` and subscribes to its topics in its group.
    /// Nothing is read until the group assigns partitions, which the first
    /// [`KafkaSource::next_event`] calls wait for.
    pub fn subscribe(options: &KafkaSourceOptions) -> Result<KafkaSource> {
        options.validate()?;
        let mut config = ClientConfig::new();
        for (key, value) in &options.properties {
            config.set(key, value);
        }
        config
            .set("bootstrap.servers", &options.brokers)
            .set("group.id", &options.group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            // Only reached when a held offset is no longer in the log (retention deleted it).
            .set("auto.offset.reset", "earliest")
            .set("enable.partition.eof", "false")
            .set("isolation.level", "read_committed");
        let (sender, events) = mpsc::channel(4);
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            closing: AtomicBool::new(false),
        });
        let context = Context {
            events: sender.clone(),
            shared: shared.clone(),
            start: options.start,
            failure: Mutex::new(None),
        };
        let consumer: BaseConsumer<Context> = config
            .create_with_context(context)
            .map_err(|e| kafka_error(e, "creating the consumer").with_context("field", "kafka.properties"))?;
        let topics = options.subscription();
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        consumer
            .subscribe(&names)
            .map_err(|e| kafka_error(e, &format!("subscribing to {}", topics.join(", "))))?;
        let consumer = Arc::new(consumer);
        let thread = {
            let consumer = consumer.clone();
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("outflow-kafka".into())
                .spawn(move || poll_loop(&consumer, &shared, &sender))
                .map_err(|e| Error::internal(format!("starting the consumer thread: {e}")))?
        };
        Ok(KafkaSource {
            consumer,
            events,
            shared,
            thread: Some(thread),
        })
    }

    /// The next event, or `None` once the consumer has stopped.
    pub async fn next_event(&mut self) -> Option<Event> {
        self.events.recv().await
    }

    /// The end offsets now (the next offset a new record would get) of every partition of
    /// `topics`.
    pub async fn end_offsets(&self, topics: &[String]) -> Result<Offsets> {
        let consumer = self.consumer.clone();
        let topics = topics.to_vec();
        tokio::task::spawn_blocking(move || {
            let mut ends = Offsets::new();
            for partition in partitions_of_topics(&consumer, &topics)? {
                let (_, high) = consumer
                    .fetch_watermarks(&partition.topic, partition.partition, CALL_TIMEOUT)
                    .map_err(|e| kafka_error(e, &format!("reading the end of {partition}")))?;
                ends.set(partition, high);
            }
            Ok(ends)
        })
        .await
        .map_err(|e| Error::internal(format!("reading end offsets: {e}")))?
    }

    /// The end offsets now of `partitions`, in one ListOffsets request per broker (for
    /// the lag a checkpoint reports): partitions the brokers do not answer for are left
    /// out.
    pub async fn latest_offsets(&self, partitions: Vec<TopicPartition>) -> Result<Offsets> {
        let consumer = self.consumer.clone();
        tokio::task::spawn_blocking(move || {
            let mut latest = TopicPartitionList::new();
            for p in &partitions {
                latest
                    .add_partition_offset(&p.topic, p.partition, Offset::End)
                    .map_err(|e| kafka_error(e, "asking for the end offsets"))?;
            }
            let found = consumer
                .offsets_for_times(latest, CALL_TIMEOUT)
                .map_err(|e| kafka_error(e, "reading the end offsets"))?;
            Ok(found
                .elements()
                .iter()
                .filter_map(|e| match e.offset() {
                    Offset::Offset(n) => Some((TopicPartition::new(e.topic(), e.partition()), n)),
                    _ => None,
                })
                .collect())
        })
        .await
        .map_err(|e| Error::internal(format!("reading end offsets: {e}")))?
    }

    /// Fails, naming the topic, when one of `topics` does not exist (or the brokers do not
    /// answer within the call deadline).
    pub async fn check_topics(&self, topics: &[String]) -> Result<()> {
        let consumer = self.consumer.clone();
        let topics = topics.to_vec();
        tokio::task::spawn_blocking(move || partitions_of_topics(&consumer, &topics).map(|_| ()))
            .await
            .map_err(|e| Error::internal(format!("checking the topics: {e}")))?
    }

    /// Tells the group where the job is (for lag monitoring: the destinations, not these
    /// offsets, say where a restart begins). Does not wait for the brokers.
    pub fn commit_for_monitoring(&self, offsets: &Offsets) -> Result<()> {
        if offsets.is_empty() {
            return Ok(());
        }
        let mut tpl = TopicPartitionList::new();
        for (partition, next) in offsets.iter() {
            tpl.add_partition_offset(&partition.topic, partition.partition, Offset::Offset(next))
                .map_err(|e| kafka_error(e, "listing offsets to commit"))?;
        }
        self.consumer
            .commit(&tpl, CommitMode::Async)
            .map_err(|e| kafka_error(e, "committing offsets to the group"))
    }

    /// Stops polling and leaves the group; later rebalances ask the job nothing.
    pub fn close(&mut self) {
        self.shared.closing.store(true, Ordering::SeqCst);
        self.shared.stop.store(true, Ordering::SeqCst);
        self.events.close();
        // Let the thread out of a blocked send, then wait for it.
        while self.events.try_recv().is_ok() {}
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for KafkaSource {
    fn drop(&mut self) {
        self.close();
    }
}

/// The consumer thread: polls, gathers records into chunks, hands them over.
fn poll_loop(consumer: &BaseConsumer<Context>, shared: &Shared, events: &mpsc::Sender<Event>) {
    let mut chunk: Vec<Record> = Vec::new();
    let mut first_at = Instant::now();
    let mut topics: HashMap<String, Arc<str>> = HashMap::new();
    while !shared.stop.load(Ordering::SeqCst) {
        let wait = if chunk.is_empty() {
            Duration::from_millis(100)
        } else {
            CHUNK_WAIT.saturating_sub(first_at.elapsed())
        };
        match consumer.poll(wait) {
            Some(Ok(message)) => {
                if chunk.is_empty() {
                    first_at = Instant::now();
                }
                let topic = match topics.get(message.topic()) {
                    Some(topic) => topic.clone(),
                    None => {
                        let topic: Arc<str> = message.topic().into();
                        topics.insert(message.topic().to_string(), topic.clone());
                        topic
                    }
                };
                chunk.push(Record {
                    topic,
                    partition: message.partition(),
                    offset: message.offset(),
                    timestamp_ms: match message.timestamp() {
                        Timestamp::CreateTime(ms) | Timestamp::LogAppendTime(ms) => Some(ms),
                        Timestamp::NotAvailable => None,
                    },
                    key: message.key().map(<[u8]>::to_vec),
                    value: message.payload().map(<[u8]>::to_vec),
                    headers: message
                        .headers()
                        .map(|headers| {
                            headers
                                .iter()
                                .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                                .collect()
                        })
                        .unwrap_or_default(),
                });
            }
            Some(Err(err)) => {
                // Transport errors are retried by librdkafka itself; they are logged only.
                tracing::warn!(error = %err, "kafka consumer");
            }
            None => {}
        }
        let failure = consumer
            .context()
            .failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(err) = failure {
            let _ = events.blocking_send(Event::Failed(err));
            return;
        }
        let full = chunk.len() >= CHUNK_RECORDS || (!chunk.is_empty() && first_at.elapsed() >= CHUNK_WAIT);
        if full
            && events
                .blocking_send(Event::Records(std::mem::take(&mut chunk)))
                .is_err()
        {
            return;
        }
    }
}
