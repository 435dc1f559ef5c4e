//! Streaming jobs: Kafka records into a sink, committed at checkpoints, exactly once.
//!
//! A streaming job reads its topics in a consumer group and writes through the sink's
//! two-phase writer ([`outflow_core::commit`]). At each checkpoint (every `interval`, every
//! `rows` records, before the group takes partitions away, and when the job stops) the
//! writer prepares what it wrote and the committer commits it in one commit with the
//! checkpoint's offsets ([`outflow_core::checkpoint`]). The destination is the only record
//! of where the job is: each assigned partition starts at the offset the table holds, and
//! Kafka's committed offsets are updated after each checkpoint for lag monitoring only.
//!
//! So a job killed at any moment loses nothing and doubles nothing: rows of an uncommitted
//! checkpoint are not visible (their data files are left unreferenced), and the restarted
//! job reads them again from the offsets the table holds.
//!
//! Records that do not decode, and those the sink rejects, go to the dead-letter file with
//! their topic, partition and offset, appended before the checkpoint that covers them is
//! committed; without a dead-letter file, such a record stops the job before that commit.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use arrow::datatypes::SchemaRef;
use outflow_core::{
    Checkpoint, DynCommitter, DynTwoPhaseSink, Error, ErrorKind, FailedRecord, OffsetRange, Offsets,
    PlannedAction, PrepareDestination, RecordSource, Result, SourcePosition, TopicPartition,
};
use outflow_kafka::{DeadLetterTopic, Decoded, Event, JsonDecoder, KafkaSource, Record};
use outflow_sinks::SinkSpec;
use serde::Serialize;
use tokio::time::Instant as Deadline;

use crate::input::{StreamInput, stream_output_schema};
use crate::job::{JobFile, StreamDeadLetter, StreamJob};
use crate::run::Interrupt;
use crate::source::{RowOrigins, SinkRowOrigins, Unit};
use crate::transform::Transforms;

/// How long a job waits for the group to assign it its first partitions.
const ASSIGNMENT_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// How `outflow run` runs a streaming job.
#[derive(Clone, Debug, Default)]
pub struct StreamOptions {
    /// Stop once every assigned partition has reached the end offset it had when it was
    /// first assigned (a backfill).
    pub until_caught_up: bool,
    /// Print one JSON line per checkpoint on stdout.
    pub json: bool,
    /// No progress lines on stderr.
    pub quiet: bool,
    /// Raised by the first signal: the job commits a last checkpoint and stops.
    pub interrupt: Interrupt,
}

/// What one checkpoint committed.
#[derive(Clone, Debug, Serialize)]
pub struct CheckpointReport {
    /// Its number in this run, from 1.
    pub checkpoint: u64,
    /// Records read.
    pub records: u64,
    /// Rows written (after transforms and rejections).
    pub rows: u64,
    /// Records sent to the dead-letter file.
    pub rejected: u64,
    /// Commits made (0 when an earlier attempt had made it).
    pub commits: u64,
    /// The next offset of each partition it read, `topic/partition`.
    pub offsets: BTreeMap<String, i64>,
    /// How long the prepare and the commit took.
    pub commit_ms: u64,
    /// Records read per second since the previous checkpoint.
    pub records_per_second: f64,
    /// How many records each assigned partition is behind its end offset after the
    /// checkpoint, `topic/partition` (empty when the brokers did not say in time).
    pub lag: BTreeMap<String, i64>,
}

/// What a streaming run did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct StreamReport {
    /// The job's id.
    pub job: String,
    /// The table written.
    pub table: String,
    /// Checkpoints committed.
    pub checkpoints: u64,
    /// Records read.
    pub records: u64,
    /// Rows written.
    pub rows: u64,
    /// Records sent to the dead-letter file.
    pub rejected: u64,
    /// The next offset of every partition the table holds for this job at the end.
    pub offsets: BTreeMap<String, i64>,
    /// Seconds from start to end.
    pub seconds: f64,
}

/// One assigned partition.
#[derive(Clone, Copy, Debug)]
struct Partition {
    /// The offset the destination held when the current checkpoint began.
    held: Option<i64>,
    /// The next offset to take (records before it are stale copies).
    taken: i64,
    /// The next offset after the records written (or rejected): where a checkpoint now
    /// would end.
    position: i64,
    /// Whether the current checkpoint wrote any record of it.
    read: bool,
}

impl Partition {
    fn at(offset: Option<i64>) -> Partition {
        let next = offset.unwrap_or(0);
        Partition {
            held: offset,
            taken: next,
            position: next,
            read: false,
        }
    }
}

/// The writer of the current checkpoint, opened at its first row.
struct OpenWriter {
    sink: Box<dyn DynTwoPhaseSink>,
    origins: SinkRowOrigins,
}

/// Runs streaming job `job` (read from `file`) until it is stopped or, under
/// `until_caught_up`, has caught up.
pub async fn run_stream(job: &StreamJob, file: &JobFile, options: &StreamOptions) -> Result<StreamReport> {
    let started = Instant::now();
    let StreamInput {
        spec, table, values, ..
    } = StreamInput::open(job, file)?;
    let opened = spec.open().await?;
    let job_id = job.job_id().to_string();
    // Asking for no partition settles nothing: this only asks whether the sink keeps offsets.
    if opened
        .preparer
        .stored_offsets(&table, &job_id, Some(&[]))
        .await?
        .is_none()
    {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "the {} sink cannot keep the offsets of a streaming job yet",
                spec.name()
            ),
        )
        .with_context("field", "sink"));
    }
    let committer = spec.committer().await?;
    let source = KafkaSource::subscribe(&job.source.kafka)?;
    if job.source.kafka.topic_pattern.is_none() {
        source.check_topics(&job.source.kafka.topics).await?;
    }
    let dead_letter = match &job.dead_letter {
        Some(StreamDeadLetter::File(path)) => Some(DeadLetters::open(&file.resolve(path))?),
        Some(StreamDeadLetter::Topic { kafka }) => {
            source
                .check_topics(std::slice::from_ref(&kafka.topic))
                .await
                .map_err(|e| {
                    let message = format!("the dead-letter topic (dead_letter.kafka.topic): {}", e.message());
                    e.with_message(message)
                        .with_context("field", "dead_letter.kafka.topic")
                })?;
            Some(DeadLetters::Topic(DeadLetterTopic::connect(
                &job.source.kafka,
                &kafka.topic,
                &kafka.properties,
            )?))
        }
        None => None,
    };
    let mut stream = Stream {
        job,
        job_id,
        table,
        spec,
        preparer: opened.preparer,
        committer,
        source,
        schema: Schema::new(values, job.source.json.infer_rows),
        partitions: BTreeMap::new(),
        ends: Offsets::new(),
        open: None,
        dead_letter,
        checkpoint_records: 0,
        last_checkpoint: Instant::now(),
        report: StreamReport::default(),
        options,
    };
    let result = stream.run().await;
    stream.source.close();
    let mut report = result?;
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// The record schema: given, or inferred from the first records.
enum Schema {
    Known {
        decoder: JsonDecoder,
        transforms: Box<Transforms>,
        /// Inferred: a field the schema lacks fails its record, or evolves the table.
        strict: bool,
        /// New fields the table's schema evolution refused to add.
        refused: BTreeSet<String>,
    },
    Given(SchemaRef),
    Inferring {
        sample: Vec<Record>,
        rows: usize,
    },
}

impl Schema {
    fn new(given: Option<SchemaRef>, infer_rows: usize) -> Schema {
        match given {
            Some(schema) => Schema::Given(schema),
            None => Schema::Inferring {
                sample: Vec::new(),
                rows: infer_rows,
            },
        }
    }
}

struct Stream<'a> {
    job: &'a StreamJob,
    job_id: String,
    table: String,
    spec: SinkSpec,
    preparer: Arc<dyn PrepareDestination>,
    committer: Box<dyn DynCommitter>,
    source: KafkaSource,
    schema: Schema,
    partitions: BTreeMap<TopicPartition, Partition>,
    /// Under `until_caught_up`: each partition's end offset when it was first assigned.
    ends: Offsets,
    open: Option<OpenWriter>,
    dead_letter: Option<DeadLetters>,
    checkpoint_records: u64,
    /// When the last checkpoint ended (or the job started).
    last_checkpoint: Instant,
    report: StreamReport,
    options: &'a StreamOptions,
}

impl Stream<'_> {
    async fn run(&mut self) -> Result<StreamReport> {
        self.report.job = self.job_id.clone();
        self.report.table = self.table.clone();
        // With the columns given, the table is prepared before anything is read, so a bad
        // table or mapping fails at once.
        if matches!(self.schema, Schema::Given(_)) {
            self.know_schema().await?;
        }
        let interval = self.job.checkpoint.interval;
        let mut deadline = Deadline::now() + interval;
        let interrupt = self.options.interrupt.clone();
        let assign_by = Deadline::now() + ASSIGNMENT_WAIT;
        let mut assigned = false;
        loop {
            assigned |= !self.partitions.is_empty();
            if self.options.until_caught_up && self.caught_up() {
                self.checkpoint().await?;
                break;
            }
            tokio::select! {
                biased;
                () = interrupt.raised() => {
                    self.checkpoint().await?;
                    break;
                }
                event = self.source.next_event() => match event {
                    Some(event) => self.handle(event).await?,
                    None => return Err(Error::internal("the Kafka consumer stopped")),
                },
                () = tokio::time::sleep_until(deadline) => {
                    self.checkpoint().await?;
                    deadline = Deadline::now() + interval;
                }
                () = tokio::time::sleep_until(assign_by), if !assigned => {
                    let kafka = &self.job.source.kafka;
                    return Err(Error::new(
                        ErrorKind::Transient,
                        format!(
                            "no partition was assigned to this job within {} s: are the brokers \
                             at {} reachable, and is group {} free of members that take every \
                             partition?",
                            ASSIGNMENT_WAIT.as_secs(),
                            kafka.brokers,
                            kafka.group
                        ),
                    )
                    .with_context("field", "source.kafka.brokers"));
                }
            }
            if self.checkpoint_records >= self.job.checkpoint.rows {
                self.checkpoint().await?;
                deadline = Deadline::now() + interval;
            }
        }
        let owned: Vec<TopicPartition> = self.partitions.keys().cloned().collect();
        let stored = self
            .preparer
            .stored_offsets(&self.table, &self.job_id, Some(&owned))
            .await?
            .unwrap_or_default();
        self.report.offsets = named(&stored);
        Ok(std::mem::take(&mut self.report))
    }

    /// Whether every assigned partition is at its end offset of when it was assigned.
    fn caught_up(&self) -> bool {
        !self.partitions.is_empty()
            && self
                .partitions
                .iter()
                .all(|(p, state)| self.ends.get(p).is_some_and(|end| state.position >= end))
    }

    async fn handle(&mut self, event: Event) -> Result<()> {
        match event {
            Event::Records(records) => self.take(records).await,
            Event::Assigned { partitions, reply } => {
                let stored = self
                    .preparer
                    .stored_offsets(&self.table, &self.job_id, Some(&partitions))
                    .await?
                    .unwrap_or_default();
                let mut held = Offsets::new();
                for partition in partitions {
                    let offset = stored.get(&partition);
                    if let Some(offset) = offset {
                        held.set(partition.clone(), offset);
                    }
                    self.partitions.insert(partition, Partition::at(offset));
                }
                tracing::info!(partitions = self.partitions.len(), "assigned");
                let _ = reply.send(held);
                Ok(())
            }
            Event::Started(starts) => {
                for (partition, next) in starts.iter() {
                    if let Some(state) = self.partitions.get_mut(partition) {
                        state.taken = next;
                        state.position = next;
                    }
                }
                if self.options.until_caught_up {
                    let unknown: Vec<String> = starts
                        .iter()
                        .filter(|(p, _)| self.ends.get(p).is_none())
                        .map(|(p, _)| p.topic.clone())
                        .collect();
                    if !unknown.is_empty() {
                        let mut topics = unknown;
                        topics.dedup();
                        let ends = self.source.end_offsets(&topics).await?;
                        for (partition, end) in ends.iter() {
                            if self.ends.get(partition).is_none() {
                                self.ends.set(partition.clone(), end);
                            }
                        }
                    }
                }
                Ok(())
            }
            Event::Revoking { partitions, done } => {
                self.checkpoint().await?;
                for partition in &partitions {
                    self.partitions.remove(partition);
                }
                tracing::info!(revoked = partitions.len(), "revoked");
                let _ = done.send(());
                Ok(())
            }
            Event::Failed(err) => Err(err),
        }
    }

    /// Takes the records of assigned partitions at or past their position.
    async fn take(&mut self, records: Vec<Record>) -> Result<()> {
        let mut fresh = Vec::with_capacity(records.len());
        for record in records {
            let Some(state) = self.partitions.get_mut(&record.topic_partition()) else {
                continue;
            };
            if record.offset < state.taken {
                continue;
            }
            state.taken = record.offset + 1;
            fresh.push(record);
        }
        self.checkpoint_records += fresh.len() as u64;
        self.report.records += fresh.len() as u64;
        match &mut self.schema {
            Schema::Inferring { sample, rows } => {
                sample.extend(fresh);
                if sample.len() >= *rows {
                    self.know_schema().await?;
                }
                Ok(())
            }
            _ => self.write(fresh).await,
        }
    }

    /// Settles the schema (given, or inferred from the sample), prepares the table for it
    /// and writes the sample.
    async fn know_schema(&mut self) -> Result<()> {
        let (values, strict, sample) = match std::mem::replace(
            &mut self.schema,
            Schema::Inferring {
                sample: Vec::new(),
                rows: 0,
            },
        ) {
            Schema::Given(schema) => (schema, false, Vec::new()),
            Schema::Inferring { sample, .. } => (outflow_kafka::infer_schema(&sample)?, true, sample),
            known @ Schema::Known { .. } => {
                self.schema = known;
                return Ok(());
            }
        };
        let (values, refused) = if strict {
            self.fit_inferred(values).await?
        } else {
            (values, BTreeSet::new())
        };
        self.use_schema(values, strict, refused).await?;
        self.write(sample).await
    }

    /// An inferred schema the table takes: `values`, or, when the table exists and its
    /// schema evolution refuses fields of `values` it lacks (a restart after the stream
    /// grew a field), `values` without them. Those are remembered as refused, so the
    /// records holding them go to the dead-letter file.
    async fn fit_inferred(&self, values: SchemaRef) -> Result<(SchemaRef, BTreeSet<String>)> {
        let (_, schema, _) = stream_output_schema(self.job, values.clone(), true)?;
        let plan = self.preparer.plan(&self.table, &schema).await?;
        let current = plan
            .evolution
            .as_ref()
            .and_then(|e| e.current.as_ref())
            .filter(|_| plan.action == PlannedAction::Fail);
        let Some(current) = current else {
            return Ok((values, BTreeSet::new()));
        };
        let (kept, lacking): (Vec<_>, Vec<_>) = values
            .fields()
            .iter()
            .cloned()
            .partition(|f| current.field(f.name()).is_some());
        let refused: BTreeSet<String> = lacking.iter().map(|f| f.name().clone()).collect();
        if !refused.is_empty() {
            tracing::info!(table = %self.table, ?refused, "the table does not take these fields of the records");
        }
        Ok((Arc::new(arrow::datatypes::Schema::new(kept)), refused))
    }

    /// Prepares the table for record values of schema `values` (creating or evolving it as
    /// the sink's options say) and decodes the next records into it.
    async fn use_schema(&mut self, values: SchemaRef, strict: bool, refused: BTreeSet<String>) -> Result<()> {
        let (decoder, schema, transforms) = stream_output_schema(self.job, values, strict)?;
        self.spec.check_input(&schema)?;
        let plan = self.preparer.prepare(&self.table, &schema).await?;
        if plan.action == PlannedAction::Fail {
            let why = plan.error.as_deref().unwrap_or("no reason given");
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("preparing {} failed: {why}", self.table),
            )
            .with_context("table", self.table.clone()));
        }
        self.schema = Schema::Known {
            decoder,
            transforms: Box::new(transforms),
            strict,
            refused,
        };
        Ok(())
    }

    /// Decodes, transforms and writes `records`, one run of a partition at a time.
    async fn write(&mut self, records: Vec<Record>) -> Result<()> {
        let mut start = 0;
        while start < records.len() {
            let partition = (records[start].topic.clone(), records[start].partition);
            let end = records[start..]
                .iter()
                .position(|r| (r.topic.as_ref(), r.partition) != (partition.0.as_ref(), partition.1))
                .map_or(records.len(), |n| start + n);
            let mut run = &records[start..end];
            start = end;
            while !run.is_empty() {
                let done = self.write_run(run).await?;
                run = &run[done..];
            }
        }
        Ok(())
    }

    /// Writes `run` (records of one partition, in offset order) and returns how many it
    /// handled: all of them, or those before the first record with fields the schema lacks
    /// when the table may add them. Then the records before it are committed in a
    /// checkpoint, the table evolves, and the caller goes on from that record.
    async fn write_run(&mut self, run: &[Record]) -> Result<usize> {
        let Schema::Known {
            decoder,
            strict,
            refused,
            ..
        } = &mut self.schema
        else {
            return Err(Error::internal("records written before the schema was known"));
        };
        let mut decoded = decoder.decode(run)?;
        if *strict && !decoded.failed.is_empty() {
            // The fields each failed record has that the schema lacks, parsed once.
            let values = decoder.values();
            let lacking: Vec<(usize, Vec<String>)> = decoded
                .failed
                .iter()
                .map(|(i, _)| (*i, new_fields(&run[*i], values)))
                .collect();
            let widening = widening(run, &lacking, values, refused);
            if let Some((first, widened)) = widening
                && self.table_takes(&widened).await?
            {
                if first > 0 {
                    self.write_decoded(&run[..first], None).await?;
                }
                self.commit_written().await?;
                tracing::info!(table = %self.table, "the records have new fields: evolving the table");
                self.use_schema(widened, true, self.refused()).await?;
                return Ok(first);
            }
            if let Schema::Known { refused, .. } = &self.schema {
                note_refused(&mut decoded.failed, &lacking, refused);
            }
        }
        self.write_decoded(run, Some(decoded)).await?;
        Ok(run.len())
    }

    /// The fields the table's schema evolution refused so far.
    fn refused(&self) -> BTreeSet<String> {
        match &self.schema {
            Schema::Known { refused, .. } => refused.clone(),
            _ => BTreeSet::new(),
        }
    }

    /// Whether the table can take record values of schema `widened` (its schema evolution
    /// allows the new fields, as `plan` says); the new fields are remembered as refused
    /// when it cannot.
    async fn table_takes(&mut self, widened: &SchemaRef) -> Result<bool> {
        let (_, schema, _) = stream_output_schema(self.job, widened.clone(), true)?;
        let plan = self.preparer.plan(&self.table, &schema).await?;
        if plan.action != PlannedAction::Fail {
            return Ok(true);
        }
        if let Schema::Known { decoder, refused, .. } = &mut self.schema {
            let known = decoder.values().clone();
            for field in widened.fields() {
                if known.field_with_name(field.name()).is_err() {
                    refused.insert(field.name().clone());
                }
            }
        }
        tracing::info!(table = %self.table, why = ?plan.error, "the table does not take the records' new fields");
        Ok(false)
    }

    /// Writes the records of `run` (decoded already, or decoded now) and moves the
    /// partition's position past them: failed records go to the dead-letter file.
    async fn write_decoded(&mut self, run: &[Record], decoded: Option<Decoded>) -> Result<()> {
        let Schema::Known {
            decoder, transforms, ..
        } = &mut self.schema
        else {
            return Err(Error::internal("records written before the schema was known"));
        };
        let Some(last) = run.last() else {
            return Ok(());
        };
        let decoded = match decoded {
            Some(decoded) => decoded,
            None => decoder.decode(run)?,
        };
        let name = format!("{}/{}", last.topic, last.partition);
        let failed: Vec<FailedRecord> = decoded
            .failed
            .iter()
            .map(|(i, reason)| undecoded(&self.table, &name, &run[*i], reason))
            .collect();
        reject(&mut self.dead_letter, &mut self.report, failed).await?;
        let mut origins = RowOrigins::new(Unit::Offset);
        for &i in &decoded.rows {
            origins.push(run[i].offset as u64);
        }
        let batch = if decoded.batch.num_rows() == 0 {
            decoded.batch
        } else {
            transforms.apply_with_origins(decoded.batch, &mut origins)?
        };
        if batch.num_rows() > 0 {
            if self.open.is_none() {
                self.open = Some(OpenWriter {
                    sink: self.spec.open_two_phase().await?,
                    origins: SinkRowOrigins::new(Vec::new()),
                });
            }
            if let Some(open) = self.open.as_mut() {
                let file = open.origins.file_index(&name);
                open.origins.given(file, &origins);
                open.sink.write(batch).await?;
                let failed = with_sources(open.sink.take_failed(), &open.origins);
                reject(&mut self.dead_letter, &mut self.report, failed).await?;
            }
        }
        if let Some(state) = self.partitions.get_mut(&last.topic_partition()) {
            state.position = state.position.max(last.offset + 1);
            state.read = true;
        }
        Ok(())
    }

    /// Commits what the checkpoint read and wrote, with its offsets.
    async fn checkpoint(&mut self) -> Result<()> {
        if let Schema::Inferring { sample, .. } = &self.schema
            && !sample.is_empty()
        {
            self.know_schema().await?;
        }
        self.commit_written().await
    }

    /// Commits what the checkpoint wrote, with its offsets (the schema being known).
    async fn commit_written(&mut self) -> Result<()> {
        let ranges: BTreeMap<TopicPartition, OffsetRange> = self
            .partitions
            .iter()
            .filter(|(_, state)| state.read)
            .map(|(p, state)| {
                (
                    p.clone(),
                    OffsetRange {
                        from: state.held,
                        to: state.position,
                    },
                )
            })
            .collect();
        if ranges.is_empty() && self.open.is_none() {
            return Ok(());
        }
        let began = Instant::now();
        let rejected_before = self.report.rejected;
        let (committables, rows) = match self.open.take() {
            Some(mut open) => {
                let prepared = open.sink.prepare_commit_json().await?;
                let failed = with_sources(prepared.result.failed.clone(), &open.origins);
                reject(&mut self.dead_letter, &mut self.report, failed).await?;
                (prepared.committables, prepared.result.rows_written())
            }
            None => (Vec::new(), 0),
        };
        if let Some(dead_letter) = &mut self.dead_letter {
            dead_letter.sync().await?;
        }
        let checkpoint = Checkpoint {
            job: self.job_id.clone(),
            ranges,
        };
        let result = self
            .committer
            .commit_json_checkpoint(committables, &self.table, &checkpoint)
            .await
            .map_err(|e| {
                let message = format!("{}\n  {}", e.message(), uncommitted_hint(self.spec.name()));
                e.with_message(message)
            })?;
        for (partition, range) in &checkpoint.ranges {
            if let Some(state) = self.partitions.get_mut(partition) {
                state.held = Some(range.to);
                state.read = false;
            }
        }
        if let Err(err) = self.source.commit_for_monitoring(&checkpoint.ends()) {
            tracing::warn!(error = %err, "committing offsets to the group for monitoring");
        }
        self.report.checkpoints += 1;
        self.report.rows += rows;
        let commit_ms = began.elapsed().as_millis() as u64;
        let since = self.last_checkpoint.elapsed().as_secs_f64();
        self.last_checkpoint = Instant::now();
        let report = CheckpointReport {
            checkpoint: self.report.checkpoints,
            records: self.checkpoint_records,
            rows,
            rejected: self.report.rejected - rejected_before,
            commits: result.destinations.values().map(|d| d.commits).sum(),
            offsets: named(&checkpoint.ends()),
            commit_ms,
            records_per_second: if since > 0.0 {
                self.checkpoint_records as f64 / since
            } else {
                0.0
            },
            lag: self.lag().await,
        };
        self.checkpoint_records = 0;
        self.tell(&report);
        Ok(())
    }

    /// How far each assigned partition is behind its end now (when progress is shown):
    /// monitoring only, so brokers that do not answer leave it empty.
    async fn lag(&self) -> BTreeMap<String, i64> {
        if self.options.quiet && !self.options.json {
            return BTreeMap::new();
        }
        let assigned: Vec<TopicPartition> = self.partitions.keys().cloned().collect();
        match self.source.latest_offsets(assigned).await {
            Ok(latest) => self
                .partitions
                .iter()
                .filter_map(|(p, state)| {
                    latest
                        .get(p)
                        .map(|end| (p.to_string(), (end - state.position).max(0)))
                })
                .collect(),
            Err(err) => {
                tracing::warn!(error = %err, "reading the end offsets for the lag");
                BTreeMap::new()
            }
        }
    }

    /// Prints a checkpoint: a JSON line on stdout, or a line on stderr.
    fn tell(&self, report: &CheckpointReport) {
        if self.options.json {
            crate::output::println(serde_json::to_string(report).unwrap_or_default());
        }
        if self.options.quiet {
            return;
        }
        crate::output::eprintln(format_args!(
            "checkpoint {}: {} records ({:.0}/s), {} rows, {} rejected, committed in {} ms{}",
            report.checkpoint,
            report.records,
            report.records_per_second,
            report.rows,
            report.rejected,
            report.commit_ms,
            lag_text(&report.lag)
        ));
    }
}

/// The lag of each partition for the progress line: `; lag 1200 (orders/0 1200, orders/1
/// 0)`, the partitions most behind first, at most eight of them.
fn lag_text(lag: &BTreeMap<String, i64>) -> String {
    if lag.is_empty() {
        return String::new();
    }
    let total: i64 = lag.values().sum();
    let mut most: Vec<(&String, &i64)> = lag.iter().collect();
    most.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let shown: Vec<String> = most.iter().take(8).map(|(p, n)| format!("{p} {n}")).collect();
    let more = if lag.len() > 8 {
        format!(", {} more", lag.len() - 8)
    } else {
        String::new()
    };
    format!("; lag {total} ({}{more})", shown.join(", "))
}

/// The field names of a record's value (a JSON object) that `values` lacks.
fn new_fields(record: &Record, values: &SchemaRef) -> Vec<String> {
    let Some(Ok(serde_json::Value::Object(fields))) = record
        .value
        .as_deref()
        .map(serde_json::from_slice::<serde_json::Value>)
    else {
        return Vec::new();
    };
    fields
        .keys()
        .filter(|name| values.field_with_name(name).is_err())
        .cloned()
        .collect()
}

/// Where `run`'s first failed record with fields the schema lacks (other than `refused`
/// ones) is, and the schema `values` widened by the new fields of that record and of the
/// failed records after it (optional columns, typed as the records have them). `lacking`
/// holds each failed record's index and the fields it has that `values` lacks.
fn widening(
    run: &[Record],
    lacking: &[(usize, Vec<String>)],
    values: &SchemaRef,
    refused: &BTreeSet<String>,
) -> Option<(usize, SchemaRef)> {
    let fresh: Vec<usize> = lacking
        .iter()
        .filter(|(_, names)| names.iter().any(|name| !refused.contains(name)))
        .map(|(i, _)| *i)
        .collect();
    let first = *fresh.first()?;
    let sample: Vec<Record> = fresh.iter().map(|&i| run[i].clone()).collect();
    let inferred = outflow_kafka::infer_schema(&sample).ok()?;
    let mut fields: Vec<arrow::datatypes::FieldRef> = values.fields().iter().cloned().collect();
    for field in inferred.fields() {
        if values.field_with_name(field.name()).is_err() && !refused.contains(field.name()) {
            fields.push(Arc::new(field.as_ref().clone().with_nullable(true)));
        }
    }
    Some((first, Arc::new(arrow::datatypes::Schema::new(fields))))
}

/// Says, in the reason of each failed record with fields the table refused to add, that
/// its schema evolution does not allow them. `lacking` is in the order of `failed`.
fn note_refused(
    failed: &mut [(usize, String)],
    lacking: &[(usize, Vec<String>)],
    refused: &BTreeSet<String>,
) {
    for ((_, reason), (_, lacks)) in failed.iter_mut().zip(lacking) {
        let names: Vec<&str> = lacks
            .iter()
            .filter(|n| refused.contains(*n))
            .map(String::as_str)
            .collect();
        if !names.is_empty() {
            reason.push_str(&format!(
                " (the table lacks {}, and its sink's schema_evolution does not allow adding fields)",
                names.join(", ")
            ));
        }
    }
}

/// What a checkpoint whose commit failed leaves behind, for the sink named `sink`: never
/// visible rows, and a restart reads its records again (or completes its commit).
fn uncommitted_hint(sink: &str) -> &'static str {
    match sink {
        "iceberg" => {
            "the checkpoint's rows were not committed; its data files, if any, are left \
             unreferenced (`outflow iceberg remove-orphans` deletes such files)"
        }
        "bigquery" => {
            "the checkpoint's pending streams were not committed, unless its intent was recorded: \
             the next run then commits them, and otherwise reads their records again"
        }
        _ => "the checkpoint's offsets were not recorded: the next run writes its records again",
    }
}

/// `topic/partition` → next offset.
fn named(offsets: &Offsets) -> BTreeMap<String, i64> {
    offsets.iter().map(|(p, n)| (p.to_string(), n)).collect()
}

/// A record that did not decode, as a failed record naming its partition and offset.
fn undecoded(table: &str, partition: &str, record: &Record, reason: &str) -> FailedRecord {
    let value = record.value.as_deref().map(|v| {
        serde_json::from_slice(v)
            .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(v).into_owned()))
    });
    FailedRecord {
        destination: table.to_string(),
        index: None,
        record: value,
        reason: reason.to_string(),
        source: Some(RecordSource {
            file: partition.to_string(),
            at: SourcePosition::Offset(record.offset),
        }),
    }
}

/// The sink's failed records, each with the partition and offset it was read at.
fn with_sources(mut failed: Vec<FailedRecord>, origins: &SinkRowOrigins) -> Vec<FailedRecord> {
    for record in failed.iter_mut().filter(|r| r.source.is_none()) {
        record.source = record.index.and_then(|index| origins.source_of(index));
    }
    failed
}

/// Sends `failed` to the dead-letter output, or fails with the first of them.
async fn reject(
    dead_letter: &mut Option<DeadLetters>,
    report: &mut StreamReport,
    failed: Vec<FailedRecord>,
) -> Result<()> {
    if failed.is_empty() {
        return Ok(());
    }
    let Some(out) = dead_letter else {
        let first = &failed[0];
        let at = first
            .source
            .as_ref()
            .map(|s| match s.at {
                SourcePosition::Offset(o) => format!("{} offset {o}", s.file),
                _ => s.file.clone(),
            })
            .unwrap_or_default();
        return Err(Error::new(
            ErrorKind::RejectedRecords,
            format!(
                "record {at} failed: {} ({} failed records; the job names no dead_letter output, \
                 so it stops before committing them)",
                first.reason,
                failed.len()
            ),
        ));
    };
    report.rejected += failed.len() as u64;
    out.append(&failed).await
}

/// The dead-letter output of a streaming job: a file appended to across restarts, or a
/// Kafka topic.
enum DeadLetters {
    File { path: PathBuf, out: BufWriter<File> },
    Topic(DeadLetterTopic),
}

impl DeadLetters {
    fn open(path: &Path) -> Result<DeadLetters> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| Self::io_error(path, e))?;
        Ok(DeadLetters::File {
            path: path.to_path_buf(),
            out: BufWriter::new(file),
        })
    }

    async fn append(&mut self, records: &[FailedRecord]) -> Result<()> {
        match self {
            DeadLetters::File { path, out } => {
                for record in records {
                    writeln!(out, "{}", record.dead_letter_line()).map_err(|e| Self::io_error(path, e))?;
                }
            }
            DeadLetters::Topic(topic) => {
                for record in records {
                    // The source record's place: a consumer of the topic can tell a record
                    // sent again after a restart.
                    let key = record
                        .source
                        .as_ref()
                        .map(|s| match s.at {
                            SourcePosition::Offset(o) => format!("{}/{o}", s.file),
                            _ => s.file.clone(),
                        })
                        .unwrap_or_default();
                    topic.send(&key, &record.dead_letter_line()).await?;
                }
            }
        }
        Ok(())
    }

    /// Makes what was appended durable: done before each commit, so a committed record is
    /// never missing from the output (a record may be in it twice if the job stopped
    /// between this and the commit, and read it again).
    async fn sync(&mut self) -> Result<()> {
        match self {
            DeadLetters::File { path, out } => {
                out.flush().map_err(|e| Self::io_error(path, e))?;
                out.get_ref().sync_data().map_err(|e| Self::io_error(path, e))
            }
            DeadLetters::Topic(topic) => topic.sync().await,
        }
    }

    fn io_error(path: &Path, e: std::io::Error) -> Error {
        Error::invalid_input(format!(
            "cannot write the dead-letter file {}: {e}",
            path.display()
        ))
        .with_context("file", path.display().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(offset: i64, value: &str) -> Record {
        Record {
            topic: "orders".into(),
            partition: 2,
            offset,
            timestamp_ms: None,
            key: None,
            value: Some(value.as_bytes().to_vec()),
            headers: Vec::new(),
        }
    }

    #[test]
    fn the_progress_line_shows_the_partitions_most_behind_first() {
        assert_eq!(lag_text(&BTreeMap::new()), "");
        let lag: BTreeMap<String, i64> = (0..10).map(|p| (format!("t/{p}"), p * 10)).collect();
        assert_eq!(
            lag_text(&lag),
            "; lag 450 (t/9 90, t/8 80, t/7 70, t/6 60, t/5 50, t/4 40, t/3 30, t/2 20, 2 more)"
        );
    }

    #[test]
    fn an_undecoded_record_names_its_partition_and_offset() {
        let failed = undecoded("db.t", "orders/2", &record(41, "{oops"), "not a valid record");
        assert_eq!(failed.record, Some(serde_json::Value::String("{oops".into())));
        let line: serde_json::Value = serde_json::from_str(&failed.dead_letter_line()).unwrap();
        assert_eq!(line["source"]["file"], "orders/2");
        assert_eq!(line["source"]["offset"], 41);
        assert_eq!(line["destination"], "db.t");
    }

    #[tokio::test]
    async fn without_a_dead_letter_file_a_failed_record_stops_the_job() {
        let failed = vec![undecoded("db.t", "orders/2", &record(7, "1"), "not an object")];
        let mut report = StreamReport::default();
        let err = reject(&mut None, &mut report, failed).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::RejectedRecords);
        assert!(err.message().contains("orders/2 offset 7"), "{err}");
        assert_eq!(report.rejected, 0);
    }

    #[tokio::test]
    async fn dead_letters_are_appended_across_runs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dead.ndjson");
        for offset in [1, 2] {
            let mut out = Some(DeadLetters::open(&path).unwrap());
            let mut report = StreamReport::default();
            let failed = vec![undecoded("db.t", "orders/2", &record(offset, "x"), "bad")];
            reject(&mut out, &mut report, failed).await.unwrap();
            out.as_mut().unwrap().sync().await.unwrap();
            assert_eq!(report.rejected, 1);
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let offsets: Vec<i64> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["source"]["offset"]
                    .as_i64()
                    .unwrap()
            })
            .collect();
        assert_eq!(offsets, [1, 2]);
    }
}
