//! The runner: source, transforms, then the sink.
//!
//! [`run`] knows sinks only through the core traits. It prepares each destination once,
//! before the first row for it (a fixed table before any row, so an empty input still
//! gets its table and a bad table fails before a long read), writes every batch, flushes
//! once at the end and closes the sink to collect the [`WriteResult`]. Records the sink
//! rejects go to the dead-letter file when the job names one, after each batch as the sink
//! hands them over ([`Sink::take_failed`]), so a run holds none of them but the first few.
//!
//! When anything fails part way, or the run is interrupted before its commit, the sink is
//! aborted instead of flushed ([`Sink::abort`]): a sink that commits on flush (Iceberg,
//! BigQuery's pending streams) commits nothing, deletes the data files it wrote and removes
//! a table it created; a sink whose rows are visible as they are written (Bigtable,
//! BigQuery's committed and default streams) keeps them, and removes a table it created
//! only when none reached it. The error says what was removed and what is left.

use std::collections::{BTreeMap, HashSet};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use outflow_core::{
    Destination, DestinationPlan, Error, ErrorKind, FailedRecord, PlannedAction, PrepareDestination, Result,
    Sink, WriteResult,
};
use serde::Serialize;

use crate::job::{SourceSpec, TransformSpec};
use crate::loads::{Ledgers, Skipped};
use crate::output::progress::Progress;
use crate::source::{RowOrigins, SinkRowOrigins, Source, SourceEvent, SourceFile, SourceStream};
use crate::transform::Transforms;

/// Batches read ahead of the sink; with the batch being transformed and the one being
/// written, this bounds the batches in memory.
pub const READ_AHEAD: usize = 2;

/// How many rejected records an error lists when there is no dead-letter file.
pub const LISTED_REJECTIONS: usize = 5;

/// The source and the transforms, opened and planned: the job minus its sink.
#[derive(Debug)]
pub struct Pipeline {
    source: Source,
    transforms: Transforms,
}

impl Pipeline {
    /// Opens the source (paths relative to `base`) and plans the transforms against its
    /// schema. Nothing but schemas is read.
    pub fn open(source: &SourceSpec, transforms: &[TransformSpec], base: &Path) -> Result<Pipeline> {
        let source = Source::open(source, base)?;
        let transforms = Transforms::new(transforms, source.schema().clone())?;
        Ok(Pipeline { source, transforms })
    }

    /// The source.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// The source, to leave files out before reading.
    pub(crate) fn source_mut(&mut self) -> &mut Source {
        &mut self.source
    }

    /// The schema of the rows the sink receives.
    pub fn output_schema(&self) -> &SchemaRef {
        self.transforms.output_schema()
    }

    /// Starts reading: transformed batches, one at a time, with progress counted.
    pub fn batches(self, progress: &Progress) -> Batches<'_> {
        progress.start("reading", self.source.total_bytes(), self.source.files().len());
        let files = self.source.files().to_vec();
        Batches {
            stream: self.source.stream(READ_AHEAD),
            transforms: self.transforms,
            files,
            progress,
            current_file: None,
            stats: ReadStats::default(),
        }
    }
}

/// What was read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ReadStats {
    /// Files read to the end.
    pub files: u64,
    /// Bytes of those files.
    pub bytes: u64,
    /// Rows read.
    pub rows_read: u64,
    /// Rows left after the transforms (what the sink was given).
    pub rows_out: u64,
}

/// Transformed batches of a [`Pipeline`]; see [`Pipeline::batches`].
pub struct Batches<'p> {
    stream: SourceStream,
    transforms: Transforms,
    files: Vec<SourceFile>,
    progress: &'p Progress,
    current_file: Option<usize>,
    stats: ReadStats,
}

impl Batches<'_> {
    /// The next non-empty transformed batch, or `None` at the end. Errors name the file.
    pub async fn next(&mut self) -> Result<Option<RecordBatch>> {
        Ok(self.next_with_origins().await?.map(|(batch, _, _)| batch))
    }

    /// The same, with the index of the file the batch was read from (in the source's
    /// files) and where in it each of its rows was.
    pub async fn next_with_origins(&mut self) -> Result<Option<(RecordBatch, usize, RowOrigins)>> {
        while let Some(event) = self.stream.next().await {
            match event? {
                SourceEvent::Batch {
                    file,
                    batch,
                    bytes,
                    mut origins,
                } => {
                    if self.current_file != Some(file) {
                        self.transforms.start_file();
                        self.current_file = Some(file);
                    }
                    let rows = batch.num_rows() as u64;
                    self.stats.rows_read += rows;
                    self.stats.bytes += bytes;
                    self.progress.batch(rows, bytes);
                    let path = &self.files[file];
                    let batch = self
                        .transforms
                        .apply_with_origins(batch, &mut origins)
                        .map_err(|e| {
                            let message = format!("{}: {}", path.display(), e.message());
                            e.with_message(message)
                        })?;
                    if batch.num_rows() > 0 {
                        self.stats.rows_out += batch.num_rows() as u64;
                        return Ok(Some((batch, file, origins)));
                    }
                }
                SourceEvent::FileDone { bytes, .. } => {
                    self.stats.files += 1;
                    self.stats.bytes += bytes;
                    self.progress.file_done(bytes);
                }
            }
        }
        Ok(None)
    }

    /// What has been read so far.
    pub fn stats(&self) -> &ReadStats {
        &self.stats
    }
}

/// Options of a run besides the sink.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Where rejected records go, as NDJSON; `None` makes them fail the run.
    pub dead_letter: Option<PathBuf>,
    /// Raised to stop the run before its commit (Ctrl-C).
    pub interrupt: Interrupt,
    /// Load every file again, even those the destination's load ledger says it holds.
    pub reload: bool,
}

/// A request to stop a run, raised from elsewhere (a Ctrl-C handler). A run stops at once
/// while reading and writing; once it is committing, it finishes the commit.
#[derive(Clone, Debug)]
pub struct Interrupt(Arc<tokio::sync::watch::Sender<bool>>);

impl Default for Interrupt {
    fn default() -> Self {
        Interrupt(Arc::new(tokio::sync::watch::Sender::new(false)))
    }
}

impl Interrupt {
    /// Asks the run to stop.
    pub fn raise(&self) {
        self.0.send_replace(true);
    }

    /// Returns once the run has been asked to stop.
    pub(crate) async fn raised(&self) {
        let mut raised = self.0.subscribe();
        // The sender lives in `self`, so waiting cannot fail.
        let _ = raised.wait_for(|&raised| raised).await;
    }

    /// `work`'s output, or the interrupted error when the run is asked to stop first (then
    /// `work` is dropped where it stood).
    async fn unless_raised<T>(&self, work: impl std::future::Future<Output = T>) -> Result<T> {
        tokio::select! {
            biased;
            () = self.raised() => Err(Self::error()),
            done = work => Ok(done),
        }
    }

    /// The interrupted error if the run has been asked to stop.
    pub(crate) fn check(&self) -> Result<()> {
        if *self.0.borrow() {
            return Err(Self::error());
        }
        Ok(())
    }

    fn error() -> Error {
        Error::new(ErrorKind::Interrupted, "interrupted (Ctrl-C) before the commit")
    }
}

/// What a run did.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunReport {
    /// What was read.
    pub read: ReadStats,
    /// What preparing each destination did, in the order they were prepared.
    pub prepared: Vec<DestinationPlan>,
    /// What the sink wrote; its `failed` are the first few records it rejected
    /// ([`LISTED_REJECTIONS`]), every one of them being in the dead-letter file.
    pub result: WriteResult,
    /// How many records the sink rejected.
    pub rejected: Rejections,
    /// Wall-clock time of the run.
    #[serde(serialize_with = "seconds")]
    pub elapsed: Duration,
    /// The dead-letter file, when the job names one.
    pub dead_letter: Option<DeadLetterReport>,
    /// Source files not loaded into a destination because it already held them.
    pub skipped: Vec<Skipped>,
    /// Rows left out of files that were read for other destinations, because their
    /// destination already held the file (template destinations).
    pub skipped_rows: u64,
    /// Destinations whose sink keeps no record of the files it loaded, so that running the
    /// job again loads every file into them again.
    pub unrecorded: Vec<String>,
}

/// The dead-letter file after a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DeadLetterReport {
    /// Its path.
    pub path: PathBuf,
    /// The records written to it.
    pub records: u64,
}

/// How many records a run's sink rejected, in all and per destination.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Rejections {
    /// In all.
    pub count: u64,
    /// Per destination.
    pub by_destination: BTreeMap<String, u64>,
}

/// Rejected records on their way out of a run: each is written to the dead-letter file (if
/// any) as it comes and counted, and only the first few are kept, so memory stays bounded
/// whatever their number.
pub(crate) struct RejectionStream {
    file: Option<(PathBuf, BufWriter<File>)>,
    rejected: Rejections,
    first: Vec<FailedRecord>,
    /// Where the rows given to the sink came from, when this side read them.
    origins: Option<SinkRowOrigins>,
}

impl RejectionStream {
    /// Creates (empties) the dead-letter file at `path`, or counts only.
    pub(crate) fn open(path: Option<&Path>) -> Result<RejectionStream> {
        let file = match path {
            Some(path) => Some((path.to_path_buf(), BufWriter::new(create_dead_letter(path)?))),
            None => None,
        };
        Ok(RejectionStream {
            file,
            rejected: Rejections::default(),
            first: Vec::new(),
            origins: None,
        })
    }

    /// Names each record's source file and line in the dead-letter file, from `origins`,
    /// which the caller keeps up with the rows it gives the sink ([`Self::given`]).
    pub(crate) fn with_origins(mut self, origins: SinkRowOrigins) -> RejectionStream {
        self.origins = Some(origins);
        self
    }

    /// Counts a batch given to the sink, read from `file` with rows at `origins`.
    pub(crate) fn given(&mut self, file: usize, origins: &RowOrigins) {
        if let Some(known) = &mut self.origins {
            known.given(file, origins);
        }
    }

    /// Writes `records` out (flushed, so the file is current after each batch), counts them
    /// and keeps the first few, each saying where it was read when this side knows.
    pub(crate) fn take(&mut self, mut records: Vec<FailedRecord>) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        if let Some(origins) = &self.origins {
            for record in records.iter_mut().filter(|r| r.source.is_none()) {
                record.source = record.index.and_then(|index| origins.source_of(index));
            }
        }
        if let Some((path, out)) = &mut self.file {
            let io = |e: std::io::Error| {
                Error::invalid_input(format!(
                    "cannot write the dead-letter file {}: {e}",
                    path.display()
                ))
                .with_context("file", path.display().to_string())
            };
            for record in &records {
                writeln!(out, "{}", record.dead_letter_line()).map_err(io)?;
            }
            out.flush().map_err(io)?;
        }
        for record in records {
            self.rejected.count += 1;
            *self
                .rejected
                .by_destination
                .entry(record.destination.clone())
                .or_default() += 1;
            if self.first.len() < LISTED_REJECTIONS {
                self.first.push(record);
            }
        }
        Ok(())
    }

    /// The counts, the first few records and the dead-letter file's report.
    pub(crate) fn finish(self) -> (Rejections, Vec<FailedRecord>, Option<DeadLetterReport>) {
        let dead_letter = self.file.map(|(path, _)| DeadLetterReport {
            path,
            records: self.rejected.count,
        });
        (self.rejected, self.first, dead_letter)
    }
}

fn seconds<S: serde::Serializer>(d: &Duration, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

impl RunReport {
    /// The error a run with rejected records and no dead-letter file ends with
    /// ([`ErrorKind::RejectedRecords`]), listing the first few; `None` otherwise.
    pub fn rejection_error(&self) -> Option<Error> {
        let count = self.rejected.count;
        if count == 0 || self.dead_letter.is_some() {
            return None;
        }
        let mut message = format!(
            "the sink rejected {count} record{} and the job names no dead_letter file:",
            if count == 1 { "" } else { "s" }
        );
        let listed = &self.result.failed[..self.result.failed.len().min(LISTED_REJECTIONS)];
        for record in listed {
            message.push_str("\n  ");
            message.push_str(&describe(record));
        }
        let more = count.saturating_sub(listed.len() as u64);
        if more > 0 {
            message.push_str(&format!("\n  ... and {more} more"));
        }
        Some(Error::new(ErrorKind::RejectedRecords, message))
    }
}

fn describe(record: &FailedRecord) -> String {
    match record.index {
        Some(index) => format!("{} row {index}: {}", record.destination, record.reason),
        None => format!("{}: {}", record.destination, record.reason),
    }
}

/// Runs `pipeline` into `sink`: see the module docs for the order of things.
pub async fn run(
    mut pipeline: Pipeline,
    sink: &mut dyn Sink,
    preparer: &dyn PrepareDestination,
    destination: &Destination,
    options: &RunOptions,
    progress: &Progress,
) -> Result<RunReport> {
    let started = Instant::now();
    let schema = pipeline.output_schema().clone();
    destination.validate(&schema)?;
    let mut ledgers = Ledgers::new(pipeline.source().files(), options.reload);
    if let Some(table) = destination.fixed() {
        ledgers
            .leave_out_held(preparer, table, pipeline.source_mut())
            .await?;
    }
    // Created before reading, so an unwritable path fails before any work.
    let files = pipeline
        .source()
        .files()
        .iter()
        .map(|f| f.display().to_string())
        .collect();
    let rejections =
        RejectionStream::open(options.dead_letter.as_deref())?.with_origins(SinkRowOrigins::new(files));

    // Before any row: a sink whose rows are visible as they go records its intent first.
    sink.record_loads(ledgers.loaded());
    let mut tally = Tally {
        prepared: Vec::new(),
        rejections,
        ledgers,
    };
    let written = write_all(
        pipeline,
        sink,
        preparer,
        destination,
        &mut tally,
        &options.interrupt,
        progress,
    )
    .await;
    let read = match written {
        Ok(read) => read,
        Err(err) => {
            progress.finish();
            return Err(aborted(err, sink).await);
        }
    };

    let Tally {
        prepared,
        mut rejections,
        ledgers,
    } = tally;
    progress.stage("flushing");
    if let Err(err) = sink.flush().await {
        return Err(aborted(err, sink).await);
    }
    rejections.take(sink.take_failed())?;
    progress.stage("closing");
    let mut result = sink.close().await?;
    progress.finish();

    rejections.take(std::mem::take(&mut result.failed))?;
    let (rejected, first, dead_letter) = rejections.finish();
    result.failed = first;
    let (skipped, skipped_rows, unrecorded) = ledgers.finish();
    Ok(RunReport {
        read,
        prepared,
        result,
        rejected,
        elapsed: started.elapsed(),
        dead_letter,
        skipped,
        skipped_rows,
        unrecorded,
    })
}

/// What a run keeps count of while it writes.
struct Tally {
    /// What preparing each destination did.
    prepared: Vec<DestinationPlan>,
    /// The rejected records, on their way out.
    rejections: RejectionStream,
    /// What the destinations already hold.
    ledgers: Ledgers,
}

/// Prepares the destinations and writes every batch, with rejected records streamed out;
/// what was read.
async fn write_all(
    pipeline: Pipeline,
    sink: &mut dyn Sink,
    preparer: &dyn PrepareDestination,
    destination: &Destination,
    tally: &mut Tally,
    interrupt: &Interrupt,
    progress: &Progress,
) -> Result<ReadStats> {
    let Tally {
        prepared,
        rejections,
        ledgers,
    } = tally;
    let schema = pipeline.output_schema().clone();
    // An interrupt stops reading and writing at once, but never cuts a preparation short:
    // a table whose creation was under way is then known to the sink, which removes it.
    if let Some(table) = destination.fixed() {
        interrupt.check()?;
        prepared.push(prepare(preparer, table, &schema).await?);
    }
    let mut seen = DestinationNames::default();
    let mut batches = pipeline.batches(progress);
    while let Some((batch, file, origins)) = interrupt.unless_raised(batches.next_with_origins()).await?? {
        let (batch, origins) = if destination.fixed().is_none() {
            for name in seen.add(destination, &batch)? {
                interrupt.check()?;
                ledgers.ask(preparer, &name).await?;
                prepared.push(prepare(preparer, &name, &schema).await?);
            }
            ledgers.drop_held(destination, batch, origins, file)?
        } else {
            (batch, origins)
        };
        if batch.num_rows() == 0 {
            continue;
        }
        // Counted before writing: the sink may reject rows of this batch at once.
        rejections.given(file, &origins);
        interrupt.unless_raised(sink.write(batch)).await??;
        rejections.take(sink.take_failed())?;
    }
    interrupt.check()?;
    Ok(batches.stats().clone())
}

/// `err`, after aborting the sink, saying what the abort removed and what it left.
async fn aborted(err: Error, sink: &mut dyn Sink) -> Error {
    match sink.abort().await.describe() {
        Some(cleanup) => {
            let message = format!("{}\n  {cleanup}", err.message());
            err.with_message(message)
        }
        None => err,
    }
}

/// Reads `pipeline` to the end without a sink; what `outflow check` does.
pub async fn read_through(pipeline: Pipeline, progress: &Progress) -> Result<ReadStats> {
    let mut batches = pipeline.batches(progress);
    while batches.next().await?.is_some() {}
    let stats = batches.stats().clone();
    progress.finish();
    Ok(stats)
}

/// The destinations `pipeline`'s rows go to, in order of first appearance. A fixed table
/// needs no reading; a template reads the whole source.
pub async fn destinations(
    pipeline: Pipeline,
    destination: &Destination,
    progress: &Progress,
) -> Result<Vec<String>> {
    if let Some(table) = destination.fixed() {
        return Ok(vec![table.to_string()]);
    }
    destination.validate(pipeline.output_schema())?;
    let mut names = DestinationNames::default();
    let mut batches = pipeline.batches(progress);
    while let Some(batch) = batches.next().await? {
        names.add(destination, &batch)?;
    }
    progress.finish();
    Ok(names.into_names())
}

async fn prepare(
    preparer: &dyn PrepareDestination,
    name: &str,
    schema: &SchemaRef,
) -> Result<DestinationPlan> {
    let plan = preparer.prepare(name, schema).await?;
    if plan.action == PlannedAction::Fail {
        let why = plan.error.as_deref().unwrap_or("no reason given");
        return Err(
            Error::new(ErrorKind::InvalidInput, format!("preparing {name} failed: {why}"))
                .with_context("table", name.to_string()),
        );
    }
    Ok(plan)
}

/// The distinct destinations of a stream of batches, in order of first appearance. Rows
/// that name no table are left out: the sink reports them as failed records.
#[derive(Debug, Default)]
pub(crate) struct DestinationNames {
    seen: HashSet<String>,
    names: Vec<String>,
}

impl DestinationNames {
    /// The destinations of `batch`'s rows not seen in earlier batches, now seen too.
    pub(crate) fn add(&mut self, destination: &Destination, batch: &RecordBatch) -> Result<Vec<String>> {
        let new: Vec<String> = destination
            .assign(batch)?
            .tables
            .into_iter()
            .map(|(name, _)| name)
            .filter(|name| self.seen.insert(name.clone()))
            .collect();
        self.names.extend(new.iter().cloned());
        Ok(new)
    }

    /// Every destination seen, in order of first appearance.
    pub(crate) fn into_names(self) -> Vec<String> {
        self.names
    }
}

/// Creates (empties) the dead-letter file at `path`, so an unwritable path fails before
/// any work.
pub(crate) fn create_dead_letter(path: &Path) -> Result<File> {
    File::create(path).map_err(|e| {
        Error::invalid_config("dead_letter", format!("cannot create {}: {e}", path.display()))
            .with_context("file", path.display().to_string())
    })
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use arrow::array::AsArray;
    use arrow::datatypes::Int64Type;
    use async_trait::async_trait;
    use outflow_core::Aborted;
    use outflow_core::sink::{DestinationStats, row_to_json};
    use outflow_core::{PlannedAction, TableTemplate};

    use super::*;
    use crate::exit::ExitStatus;
    use crate::source::testing::{spec, write};

    /// A sink that keeps what it is given in memory and rejects rows whose `id` a rule
    /// picks; a test double for the runner, not a sink.
    #[derive(Default)]
    struct RecordingSink {
        log: Arc<Mutex<Vec<String>>>,
        rows: Vec<i64>,
        reject: Option<fn(i64) -> bool>,
        failed: Vec<FailedRecord>,
        seen: u64,
        /// Hands rejected records over after each write instead of at close.
        streams: bool,
        /// A file whose line count each write logs (the dead-letter file).
        watch: Option<PathBuf>,
    }

    #[async_trait]
    impl Sink for RecordingSink {
        async fn write(&mut self, batch: RecordBatch) -> Result<()> {
            if let Some(path) = &self.watch {
                let lines = std::fs::read_to_string(path).unwrap().lines().count();
                self.log.lock().unwrap().push(format!("dead letter has {lines}"));
            }
            let ids = batch.column(0).as_primitive::<Int64Type>();
            for (row, id) in ids.values().iter().enumerate() {
                if self.reject.is_some_and(|reject| reject(*id)) {
                    self.failed.push(FailedRecord {
                        source: None,
                        destination: "db.t".into(),
                        index: Some(self.seen),
                        record: row_to_json(&batch, row),
                        reason: format!("id {id} is odd"),
                    });
                } else {
                    self.rows.push(*id);
                }
                self.seen += 1;
            }
            self.log
                .lock()
                .unwrap()
                .push(format!("write {}", batch.num_rows()));
            Ok(())
        }

        async fn flush(&mut self) -> Result<()> {
            self.log.lock().unwrap().push("flush".into());
            Ok(())
        }

        async fn close(&mut self) -> Result<WriteResult> {
            self.log.lock().unwrap().push("close".into());
            let mut result = WriteResult::default();
            result.record(
                "db.t",
                DestinationStats {
                    rows: self.rows.len() as u64,
                    bytes: 8 * self.rows.len() as u64,
                    files: 1,
                    commits: 1,
                },
            );
            result.failed = std::mem::take(&mut self.failed);
            Ok(result)
        }

        fn take_failed(&mut self) -> Vec<FailedRecord> {
            if self.streams {
                std::mem::take(&mut self.failed)
            } else {
                Vec::new()
            }
        }

        async fn abort(&mut self) -> Aborted {
            self.log.lock().unwrap().push("abort".into());
            Aborted {
                deleted_files: self.rows.len() as u64,
                ..Aborted::default()
            }
        }
    }

    struct RecordingPreparer {
        log: Arc<Mutex<Vec<String>>>,
    }

    #[async_trait]
    impl PrepareDestination for RecordingPreparer {
        async fn plan(&self, destination: &str, _schema: &SchemaRef) -> Result<DestinationPlan> {
            Ok(DestinationPlan::new(destination, PlannedAction::Create))
        }

        async fn prepare(&self, destination: &str, schema: &SchemaRef) -> Result<DestinationPlan> {
            let columns: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
            self.log
                .lock()
                .unwrap()
                .push(format!("prepare {destination} ({})", columns.join(", ")));
            Ok(DestinationPlan::new(destination, PlannedAction::Create))
        }
    }

    struct Fixture {
        dir: tempfile::TempDir,
        log: Arc<Mutex<Vec<String>>>,
    }

    impl Fixture {
        fn new(csv: &str) -> Fixture {
            let dir = tempfile::tempdir().unwrap();
            write(dir.path(), "in.csv", csv);
            Fixture {
                dir,
                log: Arc::default(),
            }
        }

        fn pipeline(&self, transforms: &str) -> Pipeline {
            let mut spec = spec("in.csv");
            spec.batch_size = 2;
            // Types come from the first rows, so a bad value later is found while running.
            spec.csv = Some(crate::job::CsvOptions {
                infer_rows: 2,
                ..Default::default()
            });
            let transforms: Vec<TransformSpec> = crate::job::from_yaml(transforms).unwrap();
            Pipeline::open(&spec, &transforms, self.dir.path()).unwrap()
        }

        async fn run(
            &self,
            transforms: &str,
            sink: &mut RecordingSink,
            destination: &Destination,
            options: &RunOptions,
        ) -> Result<RunReport> {
            sink.log = self.log.clone();
            let preparer = RecordingPreparer {
                log: self.log.clone(),
            };
            run(
                self.pipeline(transforms),
                sink,
                &preparer,
                destination,
                options,
                &Progress::hidden(),
            )
            .await
        }

        fn log(&self) -> Vec<String> {
            self.log.lock().unwrap().clone()
        }
    }

    const CSV: &str = "id,region\n1,eu\n2,us\n3,eu\n4,us\n5,ap\n";

    #[tokio::test]
    async fn prepares_writes_flushes_and_closes_in_order() {
        let fixture = Fixture::new(CSV);
        let mut sink = RecordingSink::default();
        let report = fixture
            .run(
                "[{filter: {column: id, op: ne, value: 3}}, {rename: {region: area}}]",
                &mut sink,
                &Destination::Table("db.t".into()),
                &RunOptions::default(),
            )
            .await
            .unwrap();
        assert_eq!(sink.rows, [1, 2, 4, 5]);
        assert_eq!(
            fixture.log(),
            [
                "prepare db.t (id, area)",
                "write 2",
                "write 1",
                "write 1",
                "flush",
                "close"
            ]
        );
        assert_eq!(report.read.files, 1);
        assert_eq!(report.read.rows_read, 5);
        assert_eq!(report.read.rows_out, 4);
        assert_eq!(report.read.bytes, CSV.len() as u64);
        assert_eq!(report.result.rows_written(), 4);
        assert_eq!(report.prepared.len(), 1);
        assert!(report.rejection_error().is_none());
        assert!(report.dead_letter.is_none());
    }

    #[tokio::test]
    async fn a_template_prepares_each_destination_once_before_its_rows() {
        let fixture = Fixture::new(CSV);
        let mut sink = RecordingSink::default();
        let destination = Destination::Template(TableTemplate::parse("db.events_{region}").unwrap());
        let report = fixture
            .run("[]", &mut sink, &destination, &RunOptions::default())
            .await
            .unwrap();
        assert_eq!(
            fixture.log(),
            [
                "prepare db.events_eu (id, region)",
                "prepare db.events_us (id, region)",
                "write 2",
                "write 2",
                "prepare db.events_ap (id, region)",
                "write 1",
                "flush",
                "close"
            ]
        );
        let names: Vec<&str> = report.prepared.iter().map(|p| p.destination.as_str()).collect();
        assert_eq!(names, ["db.events_eu", "db.events_us", "db.events_ap"]);

        let found = destinations(fixture.pipeline("[]"), &destination, &Progress::hidden())
            .await
            .unwrap();
        assert_eq!(found, ["db.events_eu", "db.events_us", "db.events_ap"]);
    }

    /// The same file whether the sink hands rejects over after each batch or at close; a
    /// sink that streams them has them in the file before its next batch.
    #[tokio::test]
    async fn rejected_records_go_to_the_dead_letter_file_as_the_sink_hands_them_over() {
        for streams in [false, true] {
            let fixture = Fixture::new(CSV);
            let path = fixture.dir.path().join("failed.ndjson");
            std::fs::write(&path, "stale content from an earlier run\n").unwrap();
            let mut sink = RecordingSink {
                reject: Some(|id| id % 2 == 1),
                streams,
                watch: Some(path.clone()),
                ..RecordingSink::default()
            };
            let options = RunOptions {
                dead_letter: Some(path.clone()),
                ..RunOptions::default()
            };
            let report = fixture
                .run("[]", &mut sink, &Destination::Table("db.t".into()), &options)
                .await
                .unwrap();
            assert_eq!(sink.rows, [2, 4]);
            assert_eq!(
                report.dead_letter,
                Some(DeadLetterReport {
                    path: path.clone(),
                    records: 3
                })
            );
            let lines: Vec<serde_json::Value> = std::fs::read_to_string(&path)
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            let file = fixture.dir.path().join("in.csv").display().to_string();
            assert_eq!(
                lines,
                [
                    serde_json::json!({"destination": "db.t", "index": 0, "record": {"id": 1, "region": "eu"}, "reason": "id 1 is odd",
                        "source": {"file": file, "line": 2}}),
                    serde_json::json!({"destination": "db.t", "index": 2, "record": {"id": 3, "region": "eu"}, "reason": "id 3 is odd",
                        "source": {"file": file, "line": 4}}),
                    serde_json::json!({"destination": "db.t", "index": 4, "record": {"id": 5, "region": "ap"}, "reason": "id 5 is odd",
                        "source": {"file": file, "line": 6}}),
                ]
            );
            // Batches of two rows: a streaming sink's rejects of ids 1 and 3 are in the file
            // before the next batch is written.
            let watched: Vec<String> = fixture
                .log()
                .into_iter()
                .filter(|l| l.starts_with("dead letter"))
                .collect();
            let expected = if streams { [0, 1, 2] } else { [0, 0, 0] };
            assert_eq!(
                watched,
                expected.map(|n| format!("dead letter has {n}")),
                "streams: {streams}"
            );
            assert_eq!(report.rejected.count, 3);
            assert_eq!(report.rejected.by_destination["db.t"], 3);
            let indexes: Vec<Option<u64>> = report.result.failed.iter().map(|f| f.index).collect();
            assert_eq!(indexes, [Some(0), Some(2), Some(4)]);
            // The run finished with rejections: exit code 3, though nothing is listed as an
            // error.
            assert!(report.rejection_error().is_none());
            assert_eq!(crate::commands::run::status_of(&report), ExitStatus::Rejected);
        }
    }

    /// The sink counts only the rows it is given; after a filter, and across files, each
    /// rejected record still names the file and line it was read from.
    #[tokio::test]
    async fn dead_letter_lines_name_the_source_line_after_a_filter_and_across_files() {
        for (name, a, b) in [
            ("csv", "id\n1\n2\n3\n", "id\n4\n5\n6\n7\n"),
            (
                "ndjson",
                "{\"id\": 1}\n\n{\"id\": 2}\n{\"id\": 3}\n",
                "{\"id\": 4}\n{\"id\": 5}\n\n\n{\"id\": 6}\n{\"id\": 7}\n",
            ),
            ("parquet", "", ""),
        ] {
            let dir = tempfile::tempdir().unwrap();
            if name == "parquet" {
                let rows = |ids: &[i64]| ids.iter().map(|&id| (id, None)).collect::<Vec<_>>();
                crate::source::testing::write_parquet(dir.path(), "a.parquet", &rows(&[1, 2, 3]));
                crate::source::testing::write_parquet(dir.path(), "b.parquet", &rows(&[4, 5, 6, 7]));
            } else {
                write(dir.path(), &format!("a.{name}"), a);
                write(dir.path(), &format!("b.{name}"), b);
            }
            let fixture = Fixture {
                dir,
                log: Arc::default(),
            };
            let mut spec = spec(&format!("*.{name}"));
            spec.batch_size = 2;
            // Drops 2 and 6: the sink is given 1, 3, 4, 5, 7 and rejects the odd ones.
            let transforms: Vec<TransformSpec> = crate::job::from_yaml(
                "[{filter: {column: id, op: ne, value: 2}}, {filter: {column: id, op: ne, value: 6}}]",
            )
            .unwrap();
            let pipeline = Pipeline::open(&spec, &transforms, fixture.dir.path()).unwrap();
            let path = fixture.dir.path().join("failed.ndjson");
            let mut sink = RecordingSink {
                reject: Some(|id| id % 2 == 1),
                streams: true,
                log: fixture.log.clone(),
                ..RecordingSink::default()
            };
            let preparer = RecordingPreparer {
                log: fixture.log.clone(),
            };
            let options = RunOptions {
                dead_letter: Some(path.clone()),
                ..RunOptions::default()
            };
            let report = run(
                pipeline,
                &mut sink,
                &preparer,
                &Destination::Table("db.t".into()),
                &options,
                &Progress::hidden(),
            )
            .await
            .unwrap();
            // The records the report lists carry the same sources as the file's lines.
            let listed: Vec<String> = report
                .result
                .failed
                .iter()
                .map(|r| r.dead_letter_line())
                .collect();
            let written = std::fs::read_to_string(&path).unwrap();
            assert_eq!(listed, written.lines().collect::<Vec<_>>(), "{name}");
            let unit = if name == "parquet" { "row" } else { "line" };
            let found: Vec<(u64, String, u64)> = std::fs::read_to_string(&path)
                .unwrap()
                .lines()
                .map(|l| {
                    let line: serde_json::Value = serde_json::from_str(l).unwrap();
                    let file = line["source"]["file"].as_str().unwrap();
                    let file = Path::new(file).file_name().unwrap().to_str().unwrap().to_string();
                    (
                        line["index"].as_u64().unwrap(),
                        file,
                        line["source"][unit].as_u64().unwrap(),
                    )
                })
                .collect();
            let (a, b) = (format!("a.{name}"), format!("b.{name}"));
            let places = match name {
                // Lines count the header.
                "csv" => [2, 4, 3, 5],
                // Blank lines count too.
                "ndjson" => [1, 4, 2, 6],
                // Row offsets from 0.
                _ => [0, 2, 1, 3],
            };
            let expected = vec![
                (0, a.clone(), places[0]),
                (1, a, places[1]),
                (3, b.clone(), places[2]),
                (4, b, places[3]),
            ];
            assert_eq!(found, expected, "{name}");
        }
    }

    #[tokio::test]
    async fn without_a_dead_letter_file_rejections_fail_the_run_listing_five() {
        let dir = tempfile::tempdir().unwrap();
        let csv: String = std::iter::once("id\n".to_string())
            .chain((1..=8).map(|i| format!("{i}\n")))
            .collect();
        write(dir.path(), "in.csv", &csv);
        let fixture = Fixture {
            dir,
            log: Arc::default(),
        };
        let mut sink = RecordingSink {
            reject: Some(|_| true),
            streams: true,
            ..RecordingSink::default()
        };
        let report = fixture
            .run(
                "[]",
                &mut sink,
                &Destination::Table("db.t".into()),
                &RunOptions::default(),
            )
            .await
            .unwrap();
        // Counted, and only the first few kept.
        assert_eq!(report.rejected.count, 8);
        assert_eq!(report.result.failed.len(), LISTED_REJECTIONS);
        let err = report.rejection_error().unwrap();
        assert_eq!(err.kind(), ErrorKind::RejectedRecords);
        assert_eq!(ExitStatus::of(&err), ExitStatus::Rejected);
        let message = err.message();
        assert!(message.starts_with("the sink rejected 8 records and the job names no dead_letter file:"));
        assert!(message.contains("db.t row 0: id 1 is odd"), "{message}");
        assert!(message.contains("db.t row 4: id 5 is odd"), "{message}");
        assert!(!message.contains("row 5:"), "{message}");
        assert!(message.ends_with("... and 3 more"), "{message}");
    }

    #[tokio::test]
    async fn a_failure_part_way_neither_flushes_nor_closes() {
        let fixture = Fixture::new("id\n1\n2\n3\nx\n");
        let mut sink = RecordingSink::default();
        let err = fixture
            .run(
                "[]",
                &mut sink,
                &Destination::Table("db.t".into()),
                &RunOptions::default(),
            )
            .await
            .unwrap_err();
        assert!(err.to_string().contains("in.csv, line 5"), "{err}");
        assert_eq!(ExitStatus::of(&err), ExitStatus::Failed);
        assert_eq!(fixture.log(), ["prepare db.t (id)", "write 2", "abort"]);
        // What the abort cleaned up is said after the error.
        assert!(
            err.message().ends_with("\n  deleted 2 uncommitted data files"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn an_interrupt_before_the_commit_aborts_and_says_so() {
        let fixture = Fixture::new(CSV);
        let mut sink = RecordingSink::default();
        let options = RunOptions::default();
        options.interrupt.raise();
        let err = fixture
            .run("[]", &mut sink, &Destination::Table("db.t".into()), &options)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Interrupted);
        assert_eq!(ExitStatus::of(&err), ExitStatus::Interrupted);
        assert_eq!(ExitStatus::of(&err).code(), 130);
        assert!(
            err.message()
                .starts_with("interrupted (Ctrl-C) before the commit"),
            "{err}"
        );
        assert_eq!(fixture.log(), ["abort"], "neither prepared, written nor flushed");
    }

    #[tokio::test]
    async fn transform_errors_name_the_file() {
        let fixture = Fixture::new("id,amount\n1,2\n2,lots\n");
        let mut spec = spec("in.csv");
        spec.csv = Some(crate::job::CsvOptions {
            schema: Some(
                crate::job::from_yaml("[{name: id, type: long}, {name: amount, type: string}]").unwrap(),
            ),
            ..Default::default()
        });
        let transforms: Vec<TransformSpec> = crate::job::from_yaml("[{cast: {amount: long}}]").unwrap();
        let pipeline = Pipeline::open(&spec, &transforms, fixture.dir.path()).unwrap();
        let err = read_through(pipeline, &Progress::hidden()).await.unwrap_err();
        assert!(
            err.to_string().contains(
                "in.csv: transforms[0].cast: column \"amount\", row 2: cannot cast \"lots\" to Int64"
            ),
            "{err}"
        );
        assert_eq!(ExitStatus::of(&err), ExitStatus::Failed);
    }

    #[tokio::test]
    async fn an_unwritable_dead_letter_path_fails_before_reading() {
        let fixture = Fixture::new(CSV);
        let mut sink = RecordingSink::default();
        let options = RunOptions {
            dead_letter: Some(fixture.dir.path().join("no/such/dir/failed.ndjson")),
            ..RunOptions::default()
        };
        let err = fixture
            .run("[]", &mut sink, &Destination::Table("db.t".into()), &options)
            .await
            .unwrap_err();
        assert_eq!(ExitStatus::of(&err), ExitStatus::Usage);
        assert!(err.to_string().contains("dead_letter: cannot create"), "{err}");
        assert!(fixture.log().is_empty());
    }
}
