//! One table's write stream: appends with offsets, retries, reconnection, finalize and
//! commit, behind a small [`WriteApi`] trait so the rules can be tested against a scripted
//! fake as well as run against the Storage Write API.
//!
//! The rules:
//! - Exactly-once streams (committed, pending) append at explicit offsets. A retried append
//!   that the service already holds answers ALREADY_EXISTS, which counts as written; OUT_OF_RANGE
//!   means rows before the offset were lost, which is fatal. A resumed writer attaches to its
//!   stream and continues at the offset it was given, so replaying the same requests is safe.
//! - A broken connection, a timeout or a transient status drops the connection and retries
//!   the same request (same offset) with backoff, within the retry policy's attempts and
//!   deadline. Nothing is retried forever.
//! - Rows the service rejects come back to the caller, who removes them and appends the
//!   rest; the rejected request wrote nothing.
//! - After the sink patches the table's schema, the connection is reopened so the stream
//!   sees the new schema, and a refusal that names the old schema is retried until the
//!   change has reached the Storage Write API.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use google_cloud_gax::error::rpc::Code;
use outflow_core::{Error, ErrorKind, Result, RetryClass, RetryPolicy};

use crate::client::{classify_status, no_answer};

/// The kind of stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamKind {
    /// The table's `_default` stream: no offsets, rows visible at once.
    Default,
    /// An application stream whose rows are visible once acknowledged.
    Committed,
    /// An application stream whose rows are visible once finalized and committed.
    Pending,
}

/// What a call answered, independent of the client library's types.
#[derive(Clone, Debug, PartialEq)]
pub enum Failure {
    /// The service refused these rows (index in the request, reason); nothing of the request
    /// was written.
    RowErrors(Vec<(usize, String)>),
    /// A service status.
    Status {
        /// The code.
        code: Code,
        /// The service's message.
        message: String,
    },
    /// The connection broke or the call timed out: the request may or may not have landed.
    Broken(String),
    /// A commit the service refused, with its stream errors.
    CommitRefused(String),
    /// The client library refused the call.
    Client(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::RowErrors(rows) => write!(f, "{} rows refused", rows.len()),
            Failure::Status { code, message } => write!(f, "{} ({})", message, code.name()),
            Failure::Broken(why) => write!(f, "connection lost: {why}"),
            Failure::CommitRefused(why) => write!(f, "commit refused: {why}"),
            Failure::Client(why) => f.write_str(why),
        }
    }
}

/// Opens connections to write streams.
#[async_trait]
pub trait WriteApi: Send + Sync {
    /// Where the connections go, as errors name it.
    fn endpoint(&self) -> &str;

    /// Connects to `stream` of `table_path`, or to a new stream of `kind` when `stream` is
    /// `None` (the default stream needs no name), with `schema` (an IPC schema message) as
    /// the writer schema. Returns the connection and the stream's name.
    async fn open(
        &self,
        kind: StreamKind,
        table_path: &str,
        stream: Option<&str>,
        schema: &Bytes,
    ) -> std::result::Result<(Box<dyn Connection>, String), Failure>;
}

/// One connection to a write stream.
#[async_trait]
pub trait Connection: Send + Sync {
    /// Appends one IPC record batch message, at `offset` for application streams.
    async fn append(&self, rows: Bytes, offset: Option<i64>) -> std::result::Result<(), Failure>;
    /// Finalizes the stream: no more appends.
    async fn finalize(&self) -> std::result::Result<(), Failure>;
    /// Commits a finalized pending stream.
    async fn commit(&self) -> std::result::Result<(), Failure>;
}

/// What an append ended with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Appended {
    /// The rows are written; `replayed` when the service already held them.
    Written {
        /// The offset was already acknowledged before (a retry or a resumed replay).
        replayed: bool,
    },
    /// The service refused these rows (index in the request, reason); write the others again.
    RowErrors(Vec<(usize, String)>),
}

/// What to do about a failure.
#[derive(Clone, Debug, PartialEq)]
enum Action {
    AlreadyWritten,
    RowErrors(Vec<(usize, String)>),
    Retry(RetryClass),
    Fatal(ErrorKind, String),
}

/// Decides what a failed append means.
fn decide(failure: &Failure, with_offset: bool, schema_changed: bool) -> Action {
    match failure {
        Failure::RowErrors(rows) if schema_changed && rows.iter().all(|(_, m)| names_old_schema(m)) => {
            Action::Retry(RetryClass::Transient)
        }
        Failure::RowErrors(rows) => Action::RowErrors(rows.clone()),
        Failure::Broken(_) => Action::Retry(RetryClass::Transient),
        Failure::Status {
            code: Code::AlreadyExists,
            ..
        } if with_offset => Action::AlreadyWritten,
        Failure::Status {
            code: Code::OutOfRange,
            message,
        } if with_offset => Action::Fatal(
            ErrorKind::Internal,
            format!(
                "the stream ends before this request's offset, so rows acknowledged earlier are missing: {message}"
            ),
        ),
        Failure::Status { code, message } if schema_changed && names_old_schema(message) => {
            let _ = code;
            Action::Retry(RetryClass::Transient)
        }
        Failure::Status { code, message } => match classify_status(*code, message) {
            RetryClass::Permanent(kind) => Action::Fatal(kind, failure.to_string()),
            class => Action::Retry(class),
        },
        Failure::CommitRefused(_) => Action::Fatal(ErrorKind::Conflict, failure.to_string()),
        Failure::Client(_) => Action::Fatal(ErrorKind::Internal, failure.to_string()),
    }
}

/// Whether a refusal says the stream's schema lacks a field: what the service answers while
/// a schema change has not reached the stream yet.
fn names_old_schema(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("no such field")
        || m.contains("more fields than")
        || m.contains("extra fields")
        || m.contains("schema mismatch")
        || m.contains("schema_mismatch")
        || m.contains("missing in the proto")
}

/// A call that ends a pending stream.
#[derive(Clone, Copy, Debug)]
enum StreamCall {
    Finalize,
    Commit,
}

impl StreamCall {
    fn doing(self) -> &'static str {
        match self {
            StreamCall::Finalize => "finalizing",
            StreamCall::Commit => "committing",
        }
    }

    /// Whether a retried call's failure says an earlier attempt did it: the service says
    /// the stream is finalized or committed already (after a commit, the emulator says the
    /// stream is not finalized: it is gone).
    fn done_already(self, failure: &Failure) -> bool {
        let message = match failure {
            Failure::CommitRefused(m) | Failure::Status { message: m, .. } => m.to_ascii_lowercase(),
            _ => return false,
        };
        match self {
            StreamCall::Finalize => message.contains("already finalized"),
            StreamCall::Commit => message.contains("already committed") || message.contains("not finalized"),
        }
    }
}

struct Live {
    schema: Bytes,
    connection: Box<dyn Connection>,
}

/// A table's write stream, as the sink uses it.
pub struct StreamWriter {
    api: std::sync::Arc<dyn WriteApi>,
    kind: StreamKind,
    table_path: String,
    stream: Option<String>,
    next_offset: i64,
    live: Option<Live>,
    last_schema: Option<Bytes>,
    policy: RetryPolicy,
    timeout: Duration,
    schema_changed: bool,
}

impl std::fmt::Debug for StreamWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamWriter")
            .field("kind", &self.kind)
            .field("table", &self.table_path)
            .field("stream", &self.stream)
            .field("next_offset", &self.next_offset)
            .finish_non_exhaustive()
    }
}

impl StreamWriter {
    /// A writer for `table_path` (`projects/P/datasets/D/tables/T`); nothing is opened yet.
    pub fn new(
        api: std::sync::Arc<dyn WriteApi>,
        kind: StreamKind,
        table_path: String,
        policy: RetryPolicy,
        timeout: Duration,
    ) -> Self {
        StreamWriter {
            api,
            kind,
            table_path,
            stream: None,
            next_offset: 0,
            live: None,
            last_schema: None,
            policy,
            timeout,
            schema_changed: false,
        }
    }

    /// Continues an application stream at `next_offset`, where a previous writer stopped.
    pub fn resume(mut self, stream: String, next_offset: i64) -> Self {
        self.stream = Some(stream);
        self.next_offset = next_offset;
        self
    }

    /// The stream's name and the offset of the next append, for application streams that
    /// have been created.
    pub fn position(&self) -> Option<(String, i64)> {
        self.stream.clone().map(|s| (s, self.next_offset))
    }

    /// The kind of stream.
    pub fn kind(&self) -> StreamKind {
        self.kind
    }

    /// The table this writer writes to.
    pub fn table_path(&self) -> &str {
        &self.table_path
    }

    /// Reopens the connection before the next append: the table's schema changed.
    pub fn schema_changed(&mut self) {
        self.live = None;
        self.schema_changed = true;
    }

    /// The live connection for `schema`, opened within `limit` when there is none.
    async fn connection(
        &mut self,
        schema: &Bytes,
        limit: Duration,
    ) -> std::result::Result<&dyn Connection, Failure> {
        if self.live.as_ref().is_some_and(|l| l.schema != *schema) {
            self.live = None;
        }
        if self.live.is_none() {
            let stream = match self.kind {
                StreamKind::Default => None,
                _ => self.stream.as_deref(),
            };
            let opened =
                tokio::time::timeout(limit, self.api.open(self.kind, &self.table_path, stream, schema))
                    .await
                    .map_err(|_| {
                        Failure::Broken(format!(
                            "opening the stream: {}",
                            no_answer(self.api.endpoint(), limit)
                        ))
                    })?;
            let (connection, name) = opened?;
            if self.kind != StreamKind::Default && self.stream.is_none() {
                tracing::debug!(table = %self.table_path, stream = %name, "created write stream");
                self.stream = Some(name);
                self.next_offset = 0;
            }
            self.live = Some(Live {
                schema: schema.clone(),
                connection,
            });
            self.last_schema = Some(schema.clone());
        }
        Ok(self.live.as_ref().expect("just opened").connection.as_ref())
    }

    /// One attempt of an append, opening the connection if needed, all within `limit`.
    async fn try_append(
        &mut self,
        schema: &Bytes,
        rows: &Bytes,
        limit: Duration,
    ) -> std::result::Result<(), Failure> {
        let offset = (self.kind != StreamKind::Default).then_some(self.next_offset);
        let api = self.api.clone();
        let attempt = async {
            let connection = self.connection(schema, limit).await?;
            connection.append(rows.clone(), offset).await
        };
        match tokio::time::timeout(limit, attempt).await {
            Ok(result) => result,
            Err(_) => Err(Failure::Broken(no_answer(api.endpoint(), limit))),
        }
    }

    /// Appends one request of `row_count` rows (IPC record batch `rows` in writer schema
    /// `schema`), retrying as the rules above say.
    pub async fn append(&mut self, schema: &Bytes, rows: &Bytes, row_count: usize) -> Result<Appended> {
        let what = format!("AppendRows to {} at {}", self.table_path, self.api.endpoint());
        let policy = self.policy.clone();
        let mut retrying = policy.start(what.clone());
        loop {
            let limit = retrying.attempt_limit(self.timeout);
            let failure = match self.try_append(schema, rows, limit).await {
                Ok(()) => {
                    self.advance(row_count);
                    return Ok(Appended::Written { replayed: false });
                }
                Err(f) => f,
            };
            let with_offset = self.kind != StreamKind::Default;
            match decide(&failure, with_offset, self.schema_changed) {
                Action::AlreadyWritten => {
                    tracing::debug!(table = %self.table_path, offset = self.next_offset, "append already acknowledged");
                    self.advance(row_count);
                    return Ok(Appended::Written { replayed: true });
                }
                Action::RowErrors(rows) => return Ok(Appended::RowErrors(rows)),
                Action::Fatal(kind, message) => {
                    self.live = None;
                    return Err(Error::new(kind, format!("{what}: {message}"))
                        .with_context("table", self.table_path.clone())
                        .with_context("endpoint", self.api.endpoint().to_string())
                        .with_retryable(false));
                }
                Action::Retry(class) => {
                    self.live = None;
                    if let Err(exhausted) = retrying.backoff(&failure).await {
                        return Err(exhausted.error(self.failed(class, &failure)));
                    }
                }
            }
        }
    }

    /// A failure as Outflow's error, naming the table and the endpoint.
    fn failed(&self, class: RetryClass, failure: &Failure) -> Error {
        class
            .error(failure.to_string())
            .with_context("table", self.table_path.clone())
            .with_context("endpoint", self.api.endpoint().to_string())
    }

    fn advance(&mut self, row_count: usize) {
        self.schema_changed = false;
        if self.kind != StreamKind::Default {
            self.next_offset += row_count as i64;
        }
    }

    /// For a pending stream with rows: finalizes it (no more appends) and hands its name
    /// over for a committer; the next append opens a new stream.
    pub async fn finalize(&mut self) -> Result<Option<String>> {
        let Some(schema) = self.pending_schema() else {
            return Ok(None);
        };
        self.stream_call(&schema, StreamCall::Finalize).await?;
        self.live = None;
        self.next_offset = 0;
        Ok(self.stream.take())
    }

    /// For a pending stream with rows: finalizes and commits it, making its rows visible at
    /// once; the next append opens a new stream. Returns whether a stream was committed.
    pub async fn commit(&mut self) -> Result<bool> {
        let Some(schema) = self.pending_schema() else {
            return Ok(false);
        };
        self.stream_call(&schema, StreamCall::Finalize).await?;
        self.stream_call(&schema, StreamCall::Commit).await?;
        self.stream = None;
        self.next_offset = 0;
        self.live = None;
        Ok(true)
    }

    /// The writer schema of a pending stream that holds rows.
    fn pending_schema(&self) -> Option<Bytes> {
        if self.kind != StreamKind::Pending || self.stream.is_none() {
            return None;
        }
        self.last_schema.clone()
    }

    /// Finalizes or commits the stream, retrying transient failures under the policy.
    async fn stream_call(&mut self, schema: &Bytes, call: StreamCall) -> Result<()> {
        let what = format!(
            "{} stream of {} at {}",
            call.doing(),
            self.table_path,
            self.api.endpoint()
        );
        let policy = self.policy.clone();
        let mut retrying = policy.start(what.clone());
        let api = self.api.clone();
        loop {
            let limit = retrying.attempt_limit(self.timeout);
            let step = async {
                let connection = self.connection(schema, limit).await?;
                match call {
                    StreamCall::Finalize => connection.finalize().await,
                    StreamCall::Commit => connection.commit().await,
                }
            };
            let failure = match tokio::time::timeout(limit, step).await {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(f)) => f,
                Err(_) => Failure::Broken(no_answer(api.endpoint(), limit)),
            };
            // A call retried after its answer was lost finds it done.
            if retrying.attempt() > 1 && call.done_already(&failure) {
                return Ok(());
            }
            let class = match &failure {
                Failure::Broken(_) => RetryClass::Transient,
                Failure::Status { code, message } => classify_status(*code, message),
                _ => RetryClass::Permanent(ErrorKind::Conflict),
            };
            if !class.is_retryable() {
                return Err(Error::new(
                    ErrorKind::Conflict,
                    format!("{what}: {failure}; none of the stream's rows were committed"),
                )
                .with_context("table", self.table_path.clone())
                .with_retryable(false));
            }
            self.live = None;
            if let Err(exhausted) = retrying.backoff(&failure).await {
                return Err(exhausted.error(self.failed(class, &failure)));
            }
        }
    }

    /// Finalizes a committed stream so the service can release it; best effort, the rows
    /// are already visible.
    pub async fn finish(&mut self) {
        if self.kind == StreamKind::Committed
            && let Some(schema) = self.last_schema.clone()
            && self.stream.is_some()
        {
            let timeout = self.timeout;
            let result = async {
                let connection = self.connection(&schema, timeout).await?;
                match tokio::time::timeout(timeout, connection.finalize()).await {
                    Ok(r) => r,
                    Err(_) => Err(Failure::Broken("finalize timed out".into())),
                }
            }
            .await;
            if let Err(e) = result {
                tracing::warn!(table = %self.table_path, error = %e, "finalizing the write stream failed");
            }
        }
        self.live = None;
    }
}

#[cfg(test)]
pub(crate) mod fake {
    //! A scripted [`WriteApi`]: each call takes the next answer from a script (success when
    //! the script is empty) and every call is logged.

    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};

    use super::*;

    /// One logged call.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub enum Call {
        Open { stream: Option<String> },
        Append { offset: Option<i64>, bytes: usize },
        Finalize,
        Commit,
    }

    #[derive(Default)]
    pub struct Script {
        pub answers: VecDeque<std::result::Result<(), Failure>>,
        pub calls: Vec<Call>,
        pub streams: u32,
    }

    #[derive(Clone, Default)]
    pub struct FakeApi(pub Arc<Mutex<Script>>);

    impl FakeApi {
        pub fn answering(answers: Vec<std::result::Result<(), Failure>>) -> Self {
            let api = FakeApi::default();
            api.0.lock().unwrap().answers = answers.into();
            api
        }

        pub fn calls(&self) -> Vec<Call> {
            self.0.lock().unwrap().calls.clone()
        }

        fn next(&self, call: Call) -> std::result::Result<(), Failure> {
            let mut s = self.0.lock().unwrap();
            s.calls.push(call);
            s.answers.pop_front().unwrap_or(Ok(()))
        }
    }

    struct FakeConnection(FakeApi);

    #[async_trait]
    impl WriteApi for FakeApi {
        fn endpoint(&self) -> &str {
            "fake://storage-write"
        }

        async fn open(
            &self,
            _kind: StreamKind,
            _table_path: &str,
            stream: Option<&str>,
            _schema: &Bytes,
        ) -> std::result::Result<(Box<dyn Connection>, String), Failure> {
            self.next(Call::Open {
                stream: stream.map(str::to_string),
            })?;
            let name = match stream {
                Some(s) => s.to_string(),
                None => {
                    let mut s = self.0.lock().unwrap();
                    s.streams += 1;
                    format!("stream-{}", s.streams)
                }
            };
            Ok((Box::new(FakeConnection(self.clone())), name))
        }
    }

    #[async_trait]
    impl Connection for FakeConnection {
        async fn append(&self, rows: Bytes, offset: Option<i64>) -> std::result::Result<(), Failure> {
            self.0.next(Call::Append {
                offset,
                bytes: rows.len(),
            })
        }

        async fn finalize(&self) -> std::result::Result<(), Failure> {
            self.0.next(Call::Finalize)
        }

        async fn commit(&self) -> std::result::Result<(), Failure> {
            self.0.next(Call::Commit)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::fake::{Call, FakeApi};
    use super::*;

    fn fast() -> RetryPolicy {
        RetryPolicy::builder()
            .initial_backoff(Duration::from_millis(1))
            .max_backoff(Duration::from_millis(2))
            .max_attempts(4)
            .deadline(Duration::from_secs(5))
            .build()
            .unwrap()
    }

    fn writer(api: &FakeApi, kind: StreamKind) -> StreamWriter {
        StreamWriter::new(
            Arc::new(api.clone()),
            kind,
            "projects/p/datasets/d/tables/t".into(),
            fast(),
            Duration::from_secs(5),
        )
    }

    fn status(code: Code, message: &str) -> std::result::Result<(), Failure> {
        Err(Failure::Status {
            code,
            message: message.into(),
        })
    }

    fn appends(calls: &[Call]) -> Vec<Option<i64>> {
        calls
            .iter()
            .filter_map(|c| match c {
                Call::Append { offset, .. } => Some(*offset),
                _ => None,
            })
            .collect()
    }

    const SCHEMA: Bytes = Bytes::from_static(b"schema");
    const ROWS: Bytes = Bytes::from_static(b"rows");

    #[tokio::test]
    async fn offsets_advance_by_rows_acknowledged() {
        let api = FakeApi::default();
        let mut w = writer(&api, StreamKind::Committed);
        assert_eq!(
            w.append(&SCHEMA, &ROWS, 3).await.unwrap(),
            Appended::Written { replayed: false }
        );
        assert_eq!(
            w.append(&SCHEMA, &ROWS, 2).await.unwrap(),
            Appended::Written { replayed: false }
        );
        assert_eq!(w.position(), Some(("stream-1".into(), 5)));
        assert_eq!(appends(&api.calls()), [Some(0), Some(3)]);
        // One connection for both appends.
        assert_eq!(
            api.calls()
                .iter()
                .filter(|c| matches!(c, Call::Open { .. }))
                .count(),
            1
        );
    }

    #[tokio::test]
    async fn transient_failures_reconnect_and_retry_the_same_offset() {
        // Answers in call order: open, append (broken), open, append (UNAVAILABLE), open,
        // append (ok).
        let api = FakeApi::answering(vec![
            Ok(()),
            Err(Failure::Broken("reset".into())),
            Ok(()),
            status(Code::Unavailable, "try again"),
        ]);
        let mut w = writer(&api, StreamKind::Committed);
        assert_eq!(
            w.append(&SCHEMA, &ROWS, 4).await.unwrap(),
            Appended::Written { replayed: false }
        );
        assert_eq!(appends(&api.calls()), [Some(0), Some(0), Some(0)]);
        let opens: Vec<_> = api
            .calls()
            .into_iter()
            .filter(|c| matches!(c, Call::Open { .. }))
            .collect();
        // The first open creates the stream, the reconnects attach to it by name.
        assert_eq!(
            opens,
            [
                Call::Open { stream: None },
                Call::Open {
                    stream: Some("stream-1".into())
                },
                Call::Open {
                    stream: Some("stream-1".into())
                }
            ]
        );
        assert_eq!(w.position(), Some(("stream-1".into(), 4)));
    }

    #[tokio::test]
    async fn already_exists_on_a_replayed_offset_is_success() {
        // A resumed writer replays the request whose answer it never saw.
        let api = FakeApi::answering(vec![
            Ok(()),
            status(Code::AlreadyExists, "Offset 10 already exists"),
        ]);
        let mut w = writer(&api, StreamKind::Committed).resume("stream-9".into(), 10);
        assert_eq!(
            w.append(&SCHEMA, &ROWS, 5).await.unwrap(),
            Appended::Written { replayed: true }
        );
        assert_eq!(w.position(), Some(("stream-9".into(), 15)));
        assert_eq!(
            api.calls()[0],
            Call::Open {
                stream: Some("stream-9".into())
            }
        );
        assert_eq!(appends(&api.calls()), [Some(10)]);
    }

    #[tokio::test]
    async fn out_of_range_and_permanent_errors_fail_without_retrying() {
        let api = FakeApi::answering(vec![Ok(()), status(Code::OutOfRange, "offset beyond end")]);
        let err = writer(&api, StreamKind::Committed)
            .append(&SCHEMA, &ROWS, 1)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Internal);
        assert!(err.to_string().contains("missing"), "{err}");
        let api = FakeApi::answering(vec![Ok(()), status(Code::NotFound, "Not found: table")]);
        let err = writer(&api, StreamKind::Default)
            .append(&SCHEMA, &ROWS, 1)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotFound);
        assert_eq!(appends(&api.calls()).len(), 1);
        // An append to a finalized stream: the service answers FAILED_PRECONDITION, the
        // emulator INVALID_ARGUMENT; neither is retried.
        for code in [Code::FailedPrecondition, Code::InvalidArgument] {
            let api = FakeApi::answering(vec![Ok(()), status(code, "Stream is finalized")]);
            let err = writer(&api, StreamKind::Committed)
                .append(&SCHEMA, &ROWS, 1)
                .await
                .unwrap_err();
            assert!(
                !err.is_retryable() && err.to_string().contains("finalized"),
                "{err}"
            );
            assert_eq!(appends(&api.calls()).len(), 1);
        }
        // ALREADY_EXISTS without an offset means something else entirely.
        let api = FakeApi::answering(vec![Ok(()), status(Code::AlreadyExists, "?")]);
        assert!(
            writer(&api, StreamKind::Default)
                .append(&SCHEMA, &ROWS, 1)
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn retries_stop_at_the_policy_bound() {
        // INTERNAL forever (what the emulator answers for sub-microsecond values): bounded.
        let answers = (0..20)
            .flat_map(|_| [Ok(()), status(Code::Internal, "boom")])
            .collect();
        let api = FakeApi::answering(answers);
        let err = writer(&api, StreamKind::Default)
            .append(&SCHEMA, &ROWS, 1)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Transient);
        assert!(!err.is_retryable());
        assert!(err.to_string().contains("after 4 attempts"), "{err}");
        assert_eq!(appends(&api.calls()).len(), 4);
        let answers = (0..20)
            .flat_map(|_| [Ok(()), status(Code::ResourceExhausted, "quota")])
            .collect();
        let err = writer(&FakeApi::answering(answers), StreamKind::Default)
            .append(&SCHEMA, &ROWS, 1)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Throttled);
    }

    #[tokio::test]
    async fn row_errors_come_back_without_advancing() {
        let rows = vec![(1, "Missing required field: id.".to_string())];
        let api = FakeApi::answering(vec![Ok(()), Err(Failure::RowErrors(rows.clone()))]);
        let mut w = writer(&api, StreamKind::Committed);
        assert_eq!(
            w.append(&SCHEMA, &ROWS, 3).await.unwrap(),
            Appended::RowErrors(rows)
        );
        assert_eq!(w.position(), Some(("stream-1".into(), 0)));
    }

    #[tokio::test]
    async fn an_old_stream_schema_is_retried_after_a_schema_change() {
        // The service pins a stream's schema; right after tables.patch the new column can be
        // refused for a while (recorded answer: "Input schema has more fields than BigQuery
        // schema, extra fields: 'extra'"). The emulator never does this: it re-reads the table
        // on every request, so this path is covered here.
        let refusal = "Input schema has more fields than BigQuery schema, extra fields: 'extra'";
        let api = FakeApi::answering(vec![Ok(()), status(Code::InvalidArgument, refusal)]);
        let mut w = writer(&api, StreamKind::Committed);
        w.schema_changed();
        assert_eq!(
            w.append(&SCHEMA, &ROWS, 1).await.unwrap(),
            Appended::Written { replayed: false }
        );
        assert_eq!(appends(&api.calls()), [Some(0), Some(0)]);
        // The same refusal without a schema change is the caller's problem, not retried.
        let api = FakeApi::answering(vec![Ok(()), status(Code::InvalidArgument, refusal)]);
        let err = writer(&api, StreamKind::Committed)
            .append(&SCHEMA, &ROWS, 1)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        // Row errors naming an unknown field, right after the change, likewise.
        let rows = vec![(0, "no such field: extra.".to_string())];
        let api = FakeApi::answering(vec![Ok(()), Err(Failure::RowErrors(rows))]);
        let mut w = writer(&api, StreamKind::Default);
        w.schema_changed();
        assert_eq!(
            w.append(&SCHEMA, &ROWS, 1).await.unwrap(),
            Appended::Written { replayed: false }
        );
    }

    #[tokio::test]
    async fn a_new_writer_schema_opens_a_new_connection_on_the_same_stream() {
        let api = FakeApi::default();
        let mut w = writer(&api, StreamKind::Pending);
        w.append(&SCHEMA, &ROWS, 1).await.unwrap();
        w.append(&Bytes::from_static(b"other"), &ROWS, 1).await.unwrap();
        assert_eq!(
            api.calls()[2],
            Call::Open {
                stream: Some("stream-1".into())
            }
        );
        assert_eq!(appends(&api.calls()), [Some(0), Some(1)]);
    }

    #[tokio::test]
    async fn pending_commit_finalizes_commits_and_starts_over() {
        let api = FakeApi::default();
        let mut w = writer(&api, StreamKind::Pending);
        assert!(!w.commit().await.unwrap(), "nothing written, nothing to commit");
        w.append(&SCHEMA, &ROWS, 2).await.unwrap();
        assert!(w.commit().await.unwrap());
        assert_eq!(&api.calls()[2..], [Call::Finalize, Call::Commit]);
        assert_eq!(w.position(), None);
        w.append(&SCHEMA, &ROWS, 1).await.unwrap();
        assert_eq!(w.position(), Some(("stream-2".into(), 1)));
    }

    #[tokio::test]
    async fn a_commit_whose_answer_was_lost_is_recognized() {
        // open, append, finalize, commit (lost), open, commit (refused: not finalized, which is
        // what the emulator says about a committed stream).
        let api = FakeApi::answering(vec![
            Ok(()),
            Ok(()),
            Ok(()),
            Err(Failure::Broken("reset".into())),
            Ok(()),
            Err(Failure::CommitRefused("Stream is not finalized".into())),
        ]);
        let mut w = writer(&api, StreamKind::Pending);
        w.append(&SCHEMA, &ROWS, 2).await.unwrap();
        assert!(w.commit().await.unwrap());
        // A refusal on the first try is real: nothing was committed.
        let api = FakeApi::answering(vec![
            Ok(()),
            Ok(()),
            Ok(()),
            Err(Failure::CommitRefused("Stream is not finalized".into())),
        ]);
        let mut w = writer(&api, StreamKind::Pending);
        w.append(&SCHEMA, &ROWS, 2).await.unwrap();
        let err = w.commit().await.unwrap_err();
        assert!(err.to_string().contains("none of the stream's rows"), "{err}");
    }
}
