//! Service clients and the classification of what they answer.
//!
//! Endpoints: explicit REST and gRPC URLs win; otherwise an emulator host
//! (`connection.emulator_host`, else `BIGQUERY_EMULATOR_HOST`) with its gRPC port
//! (`connection.emulator_grpc_host`, else `BIGQUERY_EMULATOR_GRPC_HOST`, else port 9060 on
//! the same host); otherwise the service. Credentials: anonymous for an emulator or `http://`
//! endpoints unless set, Application Default Credentials otherwise.
//!
//! The client libraries' own retries are switched off: every call goes through the sink's
//! [`RetryPolicy`](outflow_core::RetryPolicy), so one bounded policy (attempts and a
//! deadline) governs everything. Each attempt of a call is bounded by `request_timeout`, or
//! by the time left before the policy's deadline when that is shorter, so an endpoint that
//! never answers fails the call by the deadline; errors name the endpoint. The Storage Write library's default writer would otherwise
//! retry for 300 s, and the emulator answers some bad input with INTERNAL, which that
//! policy retries.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use gcloud_sdk::google::cloud::bigquery::storage::v1::append_rows_request::{
    ProtoData, Rows as AppendedRows,
};
use gcloud_sdk::google::cloud::bigquery::storage::v1::append_rows_response::Response as AppendAnswer;
use gcloud_sdk::google::cloud::bigquery::storage::v1::big_query_write_client::BigQueryWriteClient;
use gcloud_sdk::google::cloud::bigquery::storage::v1::{
    AppendRowsRequest, BatchCommitWriteStreamsRequest, GetWriteStreamRequest, ProtoRows, ProtoSchema,
};
use gcloud_sdk::prost_types::DescriptorProto;
use gcloud_sdk::{GoogleApi, GoogleAuthMiddleware, tonic};
use google_cloud_auth::credentials::Credentials as AuthCredentials;
use google_cloud_bigquery::client::Write;
use google_cloud_bigquery::error::{AppendError, CommitError, WriterBuilderError};
use google_cloud_bigquery::model::{ArrowRecordBatch, ArrowSchema};
use google_cloud_bigquery::write::format::Arrow;
use google_cloud_bigquery::write::stream_type::{CommittedStream, PendingStream};
use google_cloud_bigquery::write::{CommittedWriter, DefaultWriter, PendingWriter};
use google_cloud_bigquery_v2::client::{DatasetService, JobService, TableService};
use google_cloud_gax::error::rpc::Code;
use google_cloud_gax::retry_policy::NeverRetry;
use outflow_core::{Error, ErrorKind, Result, RetryClass};

use crate::options::{ConnectionOptions, Credentials};
use crate::stream::{Connection, Failure, StreamKind, WriteApi};

/// The environment variable naming an emulator's REST `host:port`.
pub const EMULATOR_HOST_ENV: &str = "BIGQUERY_EMULATOR_HOST";
/// The environment variable naming an emulator's gRPC `host:port`.
pub const EMULATOR_GRPC_HOST_ENV: &str = "BIGQUERY_EMULATOR_GRPC_HOST";
/// The gRPC port emulators listen on when only the REST host is given.
pub const EMULATOR_DEFAULT_GRPC_PORT: u16 = 9060;

/// Where the clients connect and how they authenticate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedConnection {
    /// The REST endpoint, or `None` for the service's.
    pub rest: Option<String>,
    /// The gRPC endpoint, or `None` for the service's.
    pub grpc: Option<String>,
    /// The credentials to use.
    pub credentials: Credentials,
}

impl ResolvedConnection {
    /// Resolves `options` against environment variables given by `env` (a lookup, so tests
    /// pass their own).
    pub fn resolve(options: &ConnectionOptions, env: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let url = |host: &str| {
            if host.starts_with("http://") || host.starts_with("https://") {
                host.trim_end_matches('/').to_string()
            } else {
                format!("http://{}", host.trim_end_matches('/'))
            }
        };
        let emulator_host = options
            .emulator_host
            .clone()
            .or_else(|| env(EMULATOR_HOST_ENV).filter(|v| !v.trim().is_empty()));
        let explicit = options.rest_endpoint.is_some() || options.grpc_endpoint.is_some();
        let (rest, grpc, emulated) = if explicit {
            let plain = [&options.rest_endpoint, &options.grpc_endpoint]
                .iter()
                .any(|e| e.as_deref().is_some_and(|e| e.starts_with("http://")));
            (
                options.rest_endpoint.clone(),
                options.grpc_endpoint.clone(),
                plain,
            )
        } else if let Some(host) = emulator_host {
            let grpc_host = options
                .emulator_grpc_host
                .clone()
                .or_else(|| env(EMULATOR_GRPC_HOST_ENV).filter(|v| !v.trim().is_empty()))
                .map(|g| Ok(url(&g)))
                .unwrap_or_else(|| default_grpc(&host))?;
            (Some(url(&host)), Some(grpc_host), true)
        } else {
            (None, None, false)
        };
        let credentials = match &options.credentials {
            Credentials::Auto if emulated => Credentials::Anonymous,
            Credentials::Auto => Credentials::ApplicationDefault,
            other => other.clone(),
        };
        Ok(ResolvedConnection {
            rest,
            grpc,
            credentials,
        })
    }
}

/// The emulator's gRPC URL from its REST host: the same host, port 9060.
fn default_grpc(rest_host: &str) -> Result<String> {
    let bare = rest_host
        .trim_start_matches("http://")
        .trim_start_matches("https://")
        .trim_end_matches('/');
    let host = match bare.rsplit_once(':') {
        Some((host, port)) if port.parse::<u16>().is_ok() => host,
        _ => bare,
    };
    if host.is_empty() {
        return Err(Error::invalid_config(
            "connection.emulator_host",
            format!("{rest_host:?} names no host"),
        ));
    }
    Ok(format!("http://{host}:{EMULATOR_DEFAULT_GRPC_PORT}"))
}

/// The REST API's service endpoint, as errors name it when no other is set.
const REST_SERVICE: &str = "https://bigquery.googleapis.com";

/// The clients a sink uses.
#[derive(Clone, Debug)]
pub struct Clients {
    /// datasets.get.
    pub datasets: DatasetService,
    /// tables.insert/get/patch/delete.
    pub tables: TableService,
    /// jobs.query, jobs.insert, jobs.get.
    pub jobs: JobService,
    /// The Storage Write API.
    pub write: Arc<Write>,
    /// Where `tables` and `jobs` connect.
    pub rest_endpoint: String,
    /// Where `write` connects.
    pub grpc_endpoint: String,
}

impl Clients {
    /// Builds the clients for a resolved connection; no request is made.
    pub async fn connect(connection: &ResolvedConnection) -> Result<Clients> {
        let credentials = credentials(&connection.credentials).await?;
        let client_error = |what: &str, e: google_cloud_gax::client_builder::Error| {
            Error::new(
                ErrorKind::InvalidConfig,
                format!("cannot build the BigQuery {what} client: {e}"),
            )
            .with_source(e)
        };
        let mut datasets = DatasetService::builder().with_retry_policy(NeverRetry);
        let mut tables = TableService::builder().with_retry_policy(NeverRetry);
        let mut jobs = JobService::builder().with_retry_policy(NeverRetry);
        let mut write = Write::builder();
        if let Some(rest) = &connection.rest {
            datasets = datasets.with_endpoint(rest);
            tables = tables.with_endpoint(rest);
            jobs = jobs.with_endpoint(rest);
        }
        if let Some(grpc) = &connection.grpc {
            write = write.with_endpoint(grpc);
        }
        datasets = datasets.with_credentials(credentials.clone());
        tables = tables.with_credentials(credentials.clone());
        jobs = jobs.with_credentials(credentials.clone());
        write = write.with_credentials(credentials);
        Ok(Clients {
            datasets: datasets.build().await.map_err(|e| client_error("datasets", e))?,
            tables: tables.build().await.map_err(|e| client_error("tables", e))?,
            jobs: jobs.build().await.map_err(|e| client_error("jobs", e))?,
            write: Arc::new(
                write
                    .build()
                    .await
                    .map_err(|e| client_error("Storage Write", e))?,
            ),
            rest_endpoint: connection
                .rest
                .clone()
                .unwrap_or_else(|| REST_SERVICE.to_string()),
            grpc_endpoint: connection
                .grpc
                .clone()
                .unwrap_or_else(|| STORAGE_WRITE_SERVICE.to_string()),
        })
    }
}

/// The credentials every client of a connection uses.
async fn credentials(source: &Credentials) -> Result<AuthCredentials> {
    match source {
        Credentials::Auto | Credentials::ApplicationDefault => application_default().await,
        Credentials::Anonymous => Ok(google_cloud_auth::credentials::anonymous::Builder::new().build()),
        Credentials::ServiceAccountKey(path) => {
            let bad = |why: String| Error::invalid_config("connection.credentials", format!("{path}: {why}"));
            let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
            let key: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| bad(format!("not JSON: {e}")))?;
            google_cloud_auth::credentials::service_account::Builder::new(key)
                .build()
                .map_err(|e| bad(e.to_string()))
        }
    }
}

/// How long the metadata server may take to hand out a token before there is taken to be
/// none: it answers in milliseconds where there is one.
const METADATA_SERVER_WAIT: Duration = Duration::from_secs(3);

/// What to do when there are no credentials, as the error says it.
pub const NO_CREDENTIALS: &str = "no Application Default Credentials found (no GOOGLE_APPLICATION_CREDENTIALS, \
    no gcloud credentials file, no metadata server); run `gcloud auth application-default login`, \
    or set BIGQUERY_EMULATOR_HOST, or give an endpoint (connection.rest_endpoint and \
    connection.grpc_endpoint) or a key (connection.credentials: {service_account_key: PATH})";

/// Application Default Credentials as the client libraries find them: the file
/// `GOOGLE_APPLICATION_CREDENTIALS` names, else gcloud's file, else the metadata server of
/// a Google Cloud machine. With no file, the metadata server is asked for a token here,
/// once: elsewhere there is none, and every call would fail (after its retries) for want of
/// one, so that fails now, saying what to do.
async fn application_default() -> Result<AuthCredentials> {
    let credentials = google_cloud_auth::credentials::Builder::default()
        .build()
        .map_err(|e| {
            Error::invalid_config(
                "connection.credentials",
                format!("cannot load Application Default Credentials: {e}"),
            )
            .with_source(e)
        })?;
    if adc_file_exists() {
        return Ok(credentials);
    }
    match tokio::time::timeout(METADATA_SERVER_WAIT, credentials.headers(Default::default())).await {
        Ok(Ok(_)) => Ok(credentials),
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "no token from the metadata server");
            Err(Error::invalid_config("connection.credentials", NO_CREDENTIALS))
        }
        Err(_) => Err(Error::invalid_config("connection.credentials", NO_CREDENTIALS)),
    }
}

/// Whether Application Default Credentials come from a file (AIP-4113): one
/// `GOOGLE_APPLICATION_CREDENTIALS` names (the libraries report a missing one themselves),
/// or gcloud's `application_default_credentials.json` under `~/.config/gcloud` (under
/// `%APPDATA%\gcloud` on Windows).
fn adc_file_exists() -> bool {
    if std::env::var_os("GOOGLE_APPLICATION_CREDENTIALS").is_some() {
        return true;
    }
    let gcloud = if cfg!(windows) {
        std::env::var_os("APPDATA").map(|root| std::path::PathBuf::from(root).join("gcloud"))
    } else {
        std::env::var_os("HOME").map(|root| std::path::PathBuf::from(root).join(".config/gcloud"))
    };
    gcloud.is_some_and(|dir| dir.join("application_default_credentials.json").is_file())
}

/// The Storage Write API's service endpoint, for the committer's client.
const STORAGE_WRITE_SERVICE: &str = "https://bigquerystorage.googleapis.com";

type WriteClient = BigQueryWriteClient<GoogleAuthMiddleware>;

/// BatchCommitWriteStreams of several streams at once, GetWriteStream, and AppendRows of
/// protobuf rows (change data), which the official crate does not expose: gcloud-sdk's
/// generated client of the same API, with the same endpoint and credentials as the sink's.
#[derive(Clone)]
pub struct StreamCommits {
    api: GoogleApi<WriteClient>,
    timeout: Duration,
    endpoint: String,
}

impl std::fmt::Debug for StreamCommits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamCommits").finish_non_exhaustive()
    }
}

/// What one BatchCommitWriteStreams answered: nothing (all committed), or why each refused
/// stream was refused (and then none was committed).
pub type StreamErrors = Vec<(String, String)>;

/// Whether BigQuery answered that it does not know a stream. Committed streams stay
/// known; uncommitted ones are garbage-collected. The service says NOT_FOUND; the emulator
/// says INVALID_ARGUMENT ("Invalid stream name").
pub(crate) fn is_unknown_stream(e: &Error) -> bool {
    e.kind() == ErrorKind::NotFound
        || (e.kind() == ErrorKind::InvalidInput && e.message().contains("Invalid stream name"))
}

impl StreamCommits {
    /// Connects to the connection's gRPC endpoint; `timeout` bounds each call.
    pub async fn connect(connection: &ResolvedConnection, timeout: Duration) -> Result<StreamCommits> {
        let url = connection.grpc.as_deref().unwrap_or(STORAGE_WRITE_SERVICE);
        let credentials = credentials(&connection.credentials).await?;
        let api = GoogleApi::from_function_with_credentials(WriteClient::new, url, None, credentials)
            .await
            .map_err(|e| {
                RetryClass::Transient
                    .error(format!("cannot connect to the Storage Write API at {url}"))
                    .with_source(e)
            })?;
        Ok(StreamCommits {
            api,
            timeout,
            endpoint: url.to_string(),
        })
    }

    /// The longest one call may take.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Commits `streams` of table `parent` together, giving up after `limit`; see
    /// [`StreamErrors`].
    pub async fn batch_commit(
        &self,
        parent: &str,
        streams: &[String],
        limit: Duration,
    ) -> Result<StreamErrors> {
        let what = format!("BatchCommitWriteStreams of {parent}");
        let request = BatchCommitWriteStreamsRequest {
            parent: parent.to_string(),
            write_streams: streams.to_vec(),
        };
        let answer = self
            .call(&what, limit, self.api.get().batch_commit_write_streams(request))
            .await?;
        Ok(answer
            .stream_errors
            .into_iter()
            .map(|e| (e.entity, e.error_message))
            .collect())
    }

    /// Whether `stream` has been committed, giving up after `limit`.
    pub async fn is_committed(&self, stream: &str, limit: Duration) -> Result<bool> {
        let what = format!("GetWriteStream {stream}");
        let request = GetWriteStreamRequest {
            name: stream.to_string(),
            ..Default::default()
        };
        let answer = self
            .call(&what, limit, self.api.get().get_write_stream(request))
            .await?;
        Ok(answer.commit_time.is_some())
    }

    /// Appends protobuf `rows` of type `descriptor` to `stream` in one AppendRows request,
    /// giving up after `limit`: the rows the service refused, by position in `rows`, with
    /// its reasons (when any is refused, none is written).
    pub async fn append_proto(
        &self,
        stream: &str,
        descriptor: &DescriptorProto,
        rows: Vec<Vec<u8>>,
        limit: Duration,
    ) -> Result<Vec<(usize, String)>> {
        let what = format!("AppendRows of {} rows to {stream}", rows.len());
        let request = AppendRowsRequest {
            write_stream: stream.to_string(),
            rows: Some(AppendedRows::ProtoRows(ProtoData {
                writer_schema: Some(ProtoSchema {
                    proto_descriptor: Some(descriptor.clone()),
                }),
                rows: Some(ProtoRows {
                    serialized_rows: rows,
                }),
            })),
            ..Default::default()
        };
        let requests = tonic::codegen::tokio_stream::iter([request]);
        // The deadline covers opening the stream and its one answer.
        let answer = async {
            let mut answers = self.api.get().append_rows(requests).await?.into_inner();
            answers
                .message()
                .await?
                .ok_or_else(|| tonic::Status::unavailable("the stream ended without an answer"))
                .map(tonic::Response::new)
        };
        let answer = self.call(&what, limit, answer).await?;
        if !answer.row_errors.is_empty() {
            return Ok(answer
                .row_errors
                .into_iter()
                .map(|e| (usize::try_from(e.index).unwrap_or(usize::MAX), e.message))
                .collect());
        }
        match answer.response {
            Some(AppendAnswer::Error(status)) => {
                let endpoint = &self.endpoint;
                Err(classify_status(Code::from(status.code), &status.message)
                    .error(format!("{what} at {endpoint}: {}", status.message))
                    .with_context("endpoint", endpoint.clone()))
            }
            _ => Ok(Vec::new()),
        }
    }

    async fn call<T>(
        &self,
        what: &str,
        limit: Duration,
        call: impl std::future::Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T> {
        let endpoint = &self.endpoint;
        let failed = match tokio::time::timeout(limit, call).await {
            Ok(Ok(answer)) => return Ok(answer.into_inner()),
            Ok(Err(status)) => classify_status(Code::from(status.code() as i32), status.message())
                .error(format!("{what} at {endpoint}: {}", status.message()))
                .with_source(status),
            Err(_) => RetryClass::Transient.error(format!("{what}: {}", no_answer(endpoint, limit))),
        };
        Err(failed.with_context("endpoint", endpoint.clone()))
    }
}

/// What a call cut at `limit` says: `http://host:port did not answer within 700 ms`.
pub fn no_answer(endpoint: &str, limit: Duration) -> String {
    format!("{endpoint} did not answer within {} ms", limit.as_millis())
}

/// The Storage Write API as the sink's streams use it.
#[derive(Clone, Debug)]
pub struct StorageWrite {
    write: Arc<Write>,
    timeout: Duration,
    endpoint: String,
}

impl StorageWrite {
    /// Streams through the Storage Write client of `clients`; `timeout` bounds each attempt
    /// of the default writer.
    pub fn new(clients: &Clients, timeout: Duration) -> Self {
        StorageWrite {
            write: clients.write.clone(),
            timeout,
            endpoint: clients.grpc_endpoint.clone(),
        }
    }
}

enum Writer {
    Default(DefaultWriter<Arrow>),
    Committed(CommittedWriter<Arrow>),
    Pending(PendingWriter<Arrow>),
}

fn gax_failure(e: google_cloud_gax::error::Error) -> Failure {
    match e.status() {
        Some(status) => Failure::Status {
            code: status.code,
            message: status.message.clone(),
        },
        None => match classify(&e) {
            RetryClass::Transient | RetryClass::Throttled => Failure::Broken(e.to_string()),
            RetryClass::Permanent(_) => Failure::Client(e.to_string()),
        },
    }
}

fn builder_failure(e: WriterBuilderError) -> Failure {
    match e {
        WriterBuilderError::Rpc { source, .. } => gax_failure(source),
        other => Failure::Client(other.to_string()),
    }
}

fn append_failure(e: AppendError) -> Failure {
    match e {
        AppendError::Rpc { source, .. } => gax_failure(source),
        AppendError::RowErrors { row_errors, .. } => Failure::RowErrors(
            row_errors
                .into_iter()
                .map(|r| (usize::try_from(r.index).unwrap_or(usize::MAX), r.message))
                .collect(),
        ),
        other => Failure::Broken(other.to_string()),
    }
}

#[async_trait]
impl WriteApi for StorageWrite {
    fn endpoint(&self) -> &str {
        &self.endpoint
    }

    async fn open(
        &self,
        kind: StreamKind,
        table_path: &str,
        stream: Option<&str>,
        schema: &Bytes,
    ) -> std::result::Result<(Box<dyn Connection>, String), Failure> {
        let schema = ArrowSchema::new().set_serialized_schema(schema.clone());
        let w = &self.write;
        let writer = match (kind, stream) {
            (StreamKind::Default, _) => Writer::Default(
                w.open_default_stream(table_path)
                    .with_retry_policy(NeverRetry)
                    .with_attempt_timeout(self.timeout)
                    .build_arrow(schema)
                    .await
                    .map_err(builder_failure)?,
            ),
            (StreamKind::Committed, None) => Writer::Committed(
                w.create_stream::<CommittedStream>(table_path)
                    .build_arrow(schema)
                    .await
                    .map_err(builder_failure)?,
            ),
            (StreamKind::Committed, Some(name)) => Writer::Committed(
                w.attach_to_stream::<CommittedStream>(name)
                    .build_arrow(schema)
                    .await
                    .map_err(builder_failure)?,
            ),
            (StreamKind::Pending, None) => Writer::Pending(
                w.create_stream::<PendingStream>(table_path)
                    .build_arrow(schema)
                    .await
                    .map_err(builder_failure)?,
            ),
            (StreamKind::Pending, Some(name)) => Writer::Pending(
                w.attach_to_stream::<PendingStream>(name)
                    .build_arrow(schema)
                    .await
                    .map_err(builder_failure)?,
            ),
        };
        let name = match &writer {
            Writer::Default(_) => format!("{table_path}/streams/_default"),
            Writer::Committed(c) => c.write_stream().to_string(),
            Writer::Pending(p) => p.write_stream().to_string(),
        };
        Ok((Box::new(writer), name))
    }
}

#[async_trait]
impl Connection for Writer {
    async fn append(&self, rows: Bytes, offset: Option<i64>) -> std::result::Result<(), Failure> {
        let rows = ArrowRecordBatch::new().set_serialized_record_batch(rows);
        let answer = match (self, offset) {
            (Writer::Default(w), _) => w.append(rows).send().await,
            (Writer::Committed(w), Some(o)) => w.append(rows).set_offset(o).send().await,
            (Writer::Committed(w), None) => w.append(rows).send().await,
            (Writer::Pending(w), Some(o)) => w.append(rows).set_offset(o).send().await,
            (Writer::Pending(w), None) => w.append(rows).send().await,
        };
        answer.map(|_| ()).map_err(append_failure)
    }

    async fn finalize(&self) -> std::result::Result<(), Failure> {
        let answer = match self {
            Writer::Default(_) => return Ok(()),
            Writer::Committed(w) => w.finalize().await,
            Writer::Pending(w) => w.finalize().await,
        };
        answer.map(|_| ()).map_err(gax_failure)
    }

    async fn commit(&self) -> std::result::Result<(), Failure> {
        let Writer::Pending(w) = self else {
            return Ok(());
        };
        match w.commit().await {
            Ok(_) => Ok(()),
            Err(CommitError::Rpc { source, .. }) => Err(gax_failure(source)),
            Err(CommitError::FailedTransaction { stream_errors, .. }) => Err(Failure::CommitRefused(
                stream_errors
                    .iter()
                    .map(|e| e.error_message.clone())
                    .collect::<Vec<_>>()
                    .join("; "),
            )),
            Err(other) => Err(Failure::Client(other.to_string())),
        }
    }
}

/// Classifies a service status (code and message) from either API: BigQuery's classifier
/// for the shared retry loop.
pub fn classify_status(code: Code, message: &str) -> RetryClass {
    let lower = message.to_ascii_lowercase();
    match code {
        Code::Unavailable
        | Code::Aborted
        | Code::Internal
        | Code::DeadlineExceeded
        | Code::Cancelled
        | Code::Unknown => RetryClass::Transient,
        // A gRPC server refusing a message over its size limit says RESOURCE_EXHAUSTED too;
        // sending it again cannot help.
        Code::ResourceExhausted
            if lower.contains("larger than max") || lower.contains("message too large") =>
        {
            RetryClass::Permanent(ErrorKind::InvalidInput)
        }
        Code::ResourceExhausted => RetryClass::Throttled,
        // BigQuery's REST API reports rate limits as 403.
        Code::PermissionDenied if lower.contains("rate limit") || lower.contains("quota") => {
            RetryClass::Throttled
        }
        Code::PermissionDenied | Code::Unauthenticated => RetryClass::Permanent(ErrorKind::InvalidConfig),
        Code::NotFound => RetryClass::Permanent(ErrorKind::NotFound),
        Code::AlreadyExists => RetryClass::Permanent(ErrorKind::AlreadyExists),
        Code::FailedPrecondition => RetryClass::Permanent(ErrorKind::Conflict),
        Code::InvalidArgument | Code::OutOfRange => RetryClass::Permanent(ErrorKind::InvalidInput),
        Code::Unimplemented => RetryClass::Permanent(ErrorKind::Unsupported),
        _ => RetryClass::Permanent(ErrorKind::Internal),
    }
}

/// Classifies any client error: service statuses by code, HTTP 429/5xx without a status,
/// credentials that make no token as permanent, and other failures before or around the
/// call (connect, I/O, timeouts) as transient.
pub fn classify(e: &google_cloud_gax::error::Error) -> RetryClass {
    if let Some(status) = e.status() {
        return classify_status(status.code, &status.message);
    }
    match e.http_status_code() {
        Some(429) => return RetryClass::Throttled,
        Some(500..=599) => return RetryClass::Transient,
        Some(404) => return RetryClass::Permanent(ErrorKind::NotFound),
        Some(409) => return RetryClass::Permanent(ErrorKind::AlreadyExists),
        Some(400..=499) => return RetryClass::Permanent(ErrorKind::InvalidInput),
        _ => {}
    }
    // Credentials that cannot make a token (even for a reason the auth library calls
    // transient) fail at once: retrying them only delays the message that says so.
    if e.is_authentication() {
        return RetryClass::Permanent(ErrorKind::InvalidConfig);
    }
    if e.is_timeout() || e.is_io() || e.is_connect() || e.is_transport() {
        return RetryClass::Transient;
    }
    RetryClass::Permanent(ErrorKind::Internal)
}

/// An Outflow error for a failed client call: the kind and retryability from
/// [`classify`], the service's message, `what` was being done, and the client error as
/// source.
pub fn service_error(what: &str, e: google_cloud_gax::error::Error) -> Error {
    let detail = e
        .status()
        .map(|s| s.message.clone())
        .unwrap_or_else(|| e.to_string());
    classify(&e).error(format!("{what}: {detail}")).with_source(e)
}

/// Whether the error is the service saying the thing does not exist.
pub fn is_not_found(e: &google_cloud_gax::error::Error) -> bool {
    e.status().is_some_and(|s| s.code == Code::NotFound) || e.http_status_code() == Some(404)
}

/// The process environment, as [`ResolvedConnection::resolve`] reads it.
pub fn process_env(var: &str) -> Option<String> {
    std::env::var(var).ok()
}

/// An environment for tests.
#[cfg(test)]
pub(crate) fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: std::collections::HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| map.get(k).cloned()
}

#[cfg(test)]
mod tests {
    use google_cloud_gax::error::rpc::Status;

    use super::*;

    #[test]
    fn endpoints_resolve_in_order_explicit_emulator_service() {
        let none = env_of(&[]);
        let service = ResolvedConnection::resolve(&ConnectionOptions::default(), &none).unwrap();
        assert_eq!((service.rest, service.grpc), (None, None));
        assert_eq!(service.credentials, Credentials::ApplicationDefault);

        let env = env_of(&[(EMULATOR_HOST_ENV, "127.0.0.1:9050")]);
        let emulator = ResolvedConnection::resolve(&ConnectionOptions::default(), &env).unwrap();
        assert_eq!(emulator.rest.as_deref(), Some("http://127.0.0.1:9050"));
        assert_eq!(emulator.grpc.as_deref(), Some("http://127.0.0.1:9060"));
        assert_eq!(emulator.credentials, Credentials::Anonymous);

        let env = env_of(&[
            (EMULATOR_HOST_ENV, "localhost:1"),
            (EMULATOR_GRPC_HOST_ENV, "localhost:2"),
        ]);
        let both = ResolvedConnection::resolve(&ConnectionOptions::default(), &env).unwrap();
        assert_eq!(both.grpc.as_deref(), Some("http://localhost:2"));

        let options = ConnectionOptions {
            emulator_host: Some("10.0.0.1:7000".into()),
            ..ConnectionOptions::default()
        };
        let from_options = ResolvedConnection::resolve(&options, &env).unwrap();
        assert_eq!(from_options.rest.as_deref(), Some("http://10.0.0.1:7000"));
        assert_eq!(from_options.grpc.as_deref(), Some("http://localhost:2"));

        let explicit = ConnectionOptions::emulator("http://127.0.0.1:1", "http://127.0.0.1:2");
        let resolved = ResolvedConnection::resolve(&explicit, &env).unwrap();
        assert_eq!(resolved.rest.as_deref(), Some("http://127.0.0.1:1"));
        let https = ConnectionOptions {
            rest_endpoint: Some("https://private.example".into()),
            ..ConnectionOptions::default()
        };
        let resolved = ResolvedConnection::resolve(&https, &none).unwrap();
        assert_eq!(resolved.credentials, Credentials::ApplicationDefault);
        assert_eq!(resolved.grpc, None);
    }

    fn status(code: Code, message: &str) -> google_cloud_gax::error::Error {
        google_cloud_gax::error::Error::service(Status::default().set_code(code).set_message(message))
    }

    #[test]
    fn statuses_classify_by_code_and_message() {
        assert_eq!(
            classify(&status(Code::Unavailable, "try later")),
            RetryClass::Transient
        );
        assert_eq!(classify(&status(Code::Internal, "oops")), RetryClass::Transient);
        assert_eq!(
            classify(&status(Code::ResourceExhausted, "quota")),
            RetryClass::Throttled
        );
        // What a gRPC server says about a request over its size limit (recorded from the
        // emulator): retrying cannot help.
        assert_eq!(
            classify(&status(
                Code::ResourceExhausted,
                "SERVER: Received message larger than max (5243720 vs. 4194304)"
            )),
            RetryClass::Permanent(ErrorKind::InvalidInput)
        );
        // BigQuery's REST API: rateLimitExceeded is a 403.
        assert_eq!(
            classify(&status(
                Code::PermissionDenied,
                "Exceeded rate limits: too many table update operations"
            )),
            RetryClass::Throttled
        );
        assert_eq!(
            classify(&status(Code::PermissionDenied, "Access Denied")),
            RetryClass::Permanent(ErrorKind::InvalidConfig)
        );
        assert_eq!(
            classify(&status(Code::NotFound, "Not found: Table p:d.t")),
            RetryClass::Permanent(ErrorKind::NotFound)
        );
        assert_eq!(
            classify(&status(Code::InvalidArgument, "bad")),
            RetryClass::Permanent(ErrorKind::InvalidInput)
        );
        assert_eq!(
            classify(&google_cloud_gax::error::Error::io("reset")),
            RetryClass::Transient
        );
        assert_eq!(
            classify(&google_cloud_gax::error::Error::timeout("slow")),
            RetryClass::Transient
        );
        // What a machine without a metadata server answers for Application Default
        // Credentials: the auth library calls it transient, retrying cannot help.
        let no_token = google_cloud_gax::error::Error::authentication(
            google_cloud_gax::error::CredentialsError::from_msg(
                true,
                "Fetching the token resulted in transient errors",
            ),
        );
        assert_eq!(
            classify(&no_token),
            RetryClass::Permanent(ErrorKind::InvalidConfig)
        );
        assert!(!service_error("tables.get p.d.t", no_token).is_retryable());
        let e = service_error(
            "tables.get p.d.t",
            status(Code::NotFound, "Not found: Table p:d.t"),
        );
        assert_eq!(e.kind(), ErrorKind::NotFound);
        assert!(!e.is_retryable());
        assert_eq!(e.message(), "tables.get p.d.t: Not found: Table p:d.t");
        assert!(service_error("x", status(Code::Unavailable, "")).is_retryable());
    }
}
