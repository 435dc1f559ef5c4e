//! The connection to Bigtable: channels, credentials, request metadata, and which failures
//! are worth retrying.
//!
//! One [`BigtableClient`] holds a data client and a table admin client. Against the
//! emulator (`BIGTABLE_EMULATOR_HOST`) or an explicit endpoint both share one plaintext
//! channel and send no credentials; against the service each has its own TLS channel and
//! sends Application Default Credentials. Either way the client type is the same.
//!
//! Every call has a deadline: each attempt may take the request timeout (60 s unless set),
//! or less when the retry policy's deadline is nearer, so an endpoint that accepts
//! connections and never answers fails by the deadline, as a transient error naming it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use gcloud_sdk::google::bigtable::admin::v2::bigtable_table_admin_client::BigtableTableAdminClient;
use gcloud_sdk::google::bigtable::v2::bigtable_client;
use gcloud_sdk::google::bigtable::v2::{MutateRowsRequest, mutate_rows_request::Entry};
use gcloud_sdk::tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use gcloud_sdk::tonic::{self, Code, Status};
use gcloud_sdk::{GoogleAuthHeaders, GoogleAuthMiddleware, RequestTimeoutElapsed, RequestTimeouts};
use outflow_core::{Error, ErrorKind, Result, RetryClass, RetryPolicy};
use serde::{Deserialize, Serialize};

use crate::options::default_request_timeout;

/// The variable Google's clients read to talk to the emulator (`host:port`).
pub const EMULATOR_HOST_VAR: &str = "BIGTABLE_EMULATOR_HOST";

const DATA_ENDPOINT: &str = "https://bigtable.googleapis.com";
const ADMIN_ENDPOINT: &str = "https://bigtableadmin.googleapis.com";

/// h2 (0.4.16 and later) closes a connection that receives "too many" small DATA frames,
/// with a budget of half the connection window. A ReadRows of many small rows sends about
/// one frame per row, so a small window fails large reads with ENHANCE_YOUR_CALM; the
/// largest window HTTP/2 allows keeps the budget out of reach. tonic exposes no other knob.
const CONNECTION_WINDOW: u32 = (1 << 31) - 1;
const STREAM_WINDOW: u32 = 16 << 20;
/// Large enough for the biggest cell Bigtable stores (100 MiB) with room to spare.
const MAX_RESPONSE_BYTES: usize = 256 << 20;
/// The longest a connection may take to open, when the request timeout is not shorter.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);

/// Where and as whom to connect: the project, the instance, an app profile and the endpoint.
///
/// The endpoint is chosen in this order:
/// 1. `endpoint`, when set: `host:port` or `http://host:port` for plaintext,
///    `https://host[:port]` for TLS; no credentials are sent either way (an emulator or a
///    local proxy);
/// 2. the `BIGTABLE_EMULATOR_HOST` variable, when set: plaintext, no credentials;
/// 3. the Bigtable service (`bigtable.googleapis.com`, `bigtableadmin.googleapis.com`) over
///    TLS with Application Default Credentials.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BigtableConnection {
    project: String,
    instance: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    app_profile_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    endpoint: Option<String>,
}

impl BigtableConnection {
    /// A connection to `instance` in `project`, endpoint chosen as the type docs say.
    pub fn new(project: impl Into<String>, instance: impl Into<String>) -> Self {
        BigtableConnection {
            project: project.into(),
            instance: instance.into(),
            app_profile_id: None,
            endpoint: None,
        }
    }

    /// The same connection through an app profile.
    pub fn with_app_profile_id(mut self, app_profile_id: impl Into<String>) -> Self {
        self.app_profile_id = Some(app_profile_id.into());
        self
    }

    /// The same connection to an explicit endpoint, without credentials.
    pub fn with_endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoint = Some(endpoint.into());
        self
    }

    /// The project.
    pub fn project(&self) -> &str {
        &self.project
    }

    /// The instance.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// The app profile, when one is set.
    pub fn app_profile_id(&self) -> Option<&str> {
        self.app_profile_id.as_deref()
    }

    /// The explicit endpoint, when one is set.
    pub fn endpoint(&self) -> Option<&str> {
        self.endpoint.as_deref()
    }

    /// Checks that project, instance and (when set) endpoint and app profile are not blank.
    pub fn validate(&self) -> Result<()> {
        for (field, value) in [
            ("project", Some(&self.project)),
            ("instance", Some(&self.instance)),
        ]
        .into_iter()
        .chain([
            ("endpoint", self.endpoint.as_ref()),
            ("app_profile_id", self.app_profile_id.as_ref()),
        ]) {
            if value.is_some_and(|v| v.trim().is_empty()) {
                return Err(Error::invalid_config(field, "must not be blank"));
            }
        }
        Ok(())
    }

    /// Connects (see [`BigtableClient::connect`]).
    pub async fn connect(&self) -> Result<BigtableClient> {
        BigtableClient::connect(self).await
    }
}

/// Where the channels go, resolved from the connection and the environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// One endpoint for both services, no credentials.
    Unauthenticated { url: String },
    /// The service, over TLS with Application Default Credentials.
    Service { data_url: String, admin_url: String },
}

impl Target {
    /// Where data calls (MutateRows, ReadRows) go.
    pub(crate) fn data_url(&self) -> &str {
        match self {
            Target::Unauthenticated { url } => url,
            Target::Service { data_url, .. } => data_url,
        }
    }

    /// Where table administration calls go.
    pub(crate) fn admin_url(&self) -> &str {
        match self {
            Target::Unauthenticated { url } => url,
            Target::Service { admin_url, .. } => admin_url,
        }
    }

    pub(crate) fn resolve(endpoint: Option<&str>, emulator_host: Option<&str>) -> Target {
        let url_of = |e: &str| {
            let e = e.trim();
            if e.starts_with("http://") || e.starts_with("https://") {
                e.trim_end_matches('/').to_string()
            } else {
                format!("http://{e}")
            }
        };
        match (endpoint, emulator_host.filter(|h| !h.trim().is_empty())) {
            (Some(e), _) | (None, Some(e)) => Target::Unauthenticated { url: url_of(e) },
            (None, None) => Target::Service {
                data_url: DATA_ENDPOINT.into(),
                admin_url: ADMIN_ENDPOINT.into(),
            },
        }
    }
}

type DataClient = bigtable_client::BigtableClient<GoogleAuthMiddleware>;
pub(crate) type AdminClient = BigtableTableAdminClient<GoogleAuthMiddleware>;

/// A connected Bigtable client: table administration, reads and batched writes. Cheap to
/// clone; clones share the connection.
#[derive(Clone)]
pub struct BigtableClient {
    pub(crate) data: DataClient,
    pub(crate) admin: AdminClient,
    connection: Arc<BigtableConnection>,
    target: Arc<Target>,
    pub(crate) retry: RetryPolicy,
    pub(crate) request_timeout: Duration,
}

impl fmt::Debug for BigtableClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BigtableClient")
            .field("connection", &self.connection)
            .field("target", &self.target)
            .field("request_timeout", &self.request_timeout)
            .finish_non_exhaustive()
    }
}

impl BigtableClient {
    /// Connects to the endpoint `connection` resolves to (see [`BigtableConnection`]).
    ///
    /// A dropped connection is re-established by the channel on the next call. Calls take
    /// the default request timeout (60 s) and retry policy until set otherwise.
    pub async fn connect(connection: &BigtableConnection) -> Result<BigtableClient> {
        BigtableClient::connect_within(connection, default_request_timeout()).await
    }

    /// [`BigtableClient::connect`] with a request timeout, which also bounds opening the
    /// connection.
    pub(crate) async fn connect_within(
        connection: &BigtableConnection,
        request_timeout: Duration,
    ) -> Result<BigtableClient> {
        connection.validate()?;
        let connect_timeout = request_timeout.min(CONNECT_TIMEOUT);
        let env = std::env::var(EMULATOR_HOST_VAR).ok();
        let target = Target::resolve(connection.endpoint(), env.as_deref());
        let (data, admin) = match &target {
            Target::Unauthenticated { url } => {
                let channel = channel(url, connect_timeout).await?;
                let anonymous = gcloud_sdk::google_cloud_auth::credentials::anonymous::Builder::new().build();
                let auth = Arc::new(GoogleAuthHeaders::from(anonymous));
                (
                    middleware(channel.clone(), auth.clone())?,
                    middleware(channel, auth)?,
                )
            }
            Target::Service { data_url, admin_url } => {
                install_crypto_provider();
                let auth = GoogleAuthHeaders::from_adc().await.map_err(|e| {
                    Error::invalid_config(
                        "credentials",
                        "cannot load Application Default Credentials (set BIGTABLE_EMULATOR_HOST \
                         or an endpoint to use an emulator)",
                    )
                    .with_source(e)
                })?;
                let auth = Arc::new(auth);
                (
                    middleware(channel(data_url, connect_timeout).await?, auth.clone())?,
                    middleware(channel(admin_url, connect_timeout).await?, auth)?,
                )
            }
        };
        tracing::debug!(target = ?target, project = connection.project(), instance = connection.instance(), "connected to Bigtable");
        Ok(BigtableClient {
            data: DataClient::new(data).max_decoding_message_size(MAX_RESPONSE_BYTES),
            admin: AdminClient::new(admin),
            connection: Arc::new(connection.clone()),
            target: Arc::new(target),
            retry: RetryPolicy::default(),
            request_timeout,
        })
    }

    /// The same client, retrying transient failures of table administration calls
    /// (reading, creating, adding families) and of reads under `policy` instead of the
    /// default. The policy's deadline bounds each of those operations, retries included.
    pub fn with_retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// The same client, giving each call at most `timeout` (the default is 60 s); a call
    /// that gets no answer in time fails as transient, and is retried under the policy.
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Where data calls go (`http://host:port` or the service's URL), for errors and logs.
    pub(crate) fn data_endpoint(&self) -> &str {
        self.target.data_url()
    }

    /// Where table administration calls go.
    pub(crate) fn admin_endpoint(&self) -> &str {
        self.target.admin_url()
    }

    /// The connection this client was made from.
    pub fn connection(&self) -> &BigtableConnection {
        &self.connection
    }

    /// `projects/P/instances/I`.
    pub fn instance_path(&self) -> String {
        format!(
            "projects/{}/instances/{}",
            self.connection.project(),
            self.connection.instance()
        )
    }

    /// `projects/P/instances/I/tables/T`.
    pub fn table_path(&self, table: &str) -> String {
        format!("{}/tables/{table}", self.instance_path())
    }

    /// One call to the table admin API, retried under the client's policy, each attempt
    /// within the request timeout: `message` builds the request (routed on
    /// `param`=`resource`), `call` sends it on a clone of the admin client and may turn a
    /// status into an answer (a NotFound, say); any other status becomes Outflow's error,
    /// `doing` saying what failed.
    pub(crate) async fn admin_call<T, R, Fut>(
        &self,
        doing: &str,
        (param, resource): (&str, &str),
        message: impl Fn() -> T,
        call: impl Fn(AdminClient, tonic::Request<T>) -> Fut,
    ) -> Result<R>
    where
        Fut: std::future::Future<Output = std::result::Result<R, Status>>,
    {
        self.retry
            .retry_within(doing, self.request_timeout, |timeout| {
                let answer = call(
                    self.admin.clone(),
                    self.request(message(), param, resource, timeout),
                );
                async move {
                    answer
                        .await
                        .map_err(|status| status_error(status, doing, self.admin_endpoint()))
                }
            })
            .await
    }

    /// A request with the routing header the service expects (it routes on the resource
    /// named in `x-goog-request-params`; the emulator ignores it), to be answered within
    /// `timeout`.
    pub(crate) fn request<T>(
        &self,
        message: T,
        param: &str,
        resource: &str,
        timeout: Duration,
    ) -> tonic::Request<T> {
        let mut params = format!("{param}={}", url_encode(resource));
        if let Some(profile) = self.connection.app_profile_id() {
            params.push_str("&app_profile_id=");
            params.push_str(&url_encode(profile));
        }
        let mut request = tonic::Request::new(message);
        if let Ok(value) = params.parse() {
            request.metadata_mut().insert("x-goog-request-params", value);
        }
        request
            .extensions_mut()
            .insert(RequestTimeouts::new().with_total(timeout));
        request
    }

    /// One MutateRows call, given `timeout` to answer: the status of each entry that got
    /// one, and the error that ended the call early, if any. Never retries.
    pub(crate) async fn mutate_rows(
        &self,
        table: &str,
        entries: Vec<Entry>,
        timeout: Duration,
    ) -> CallOutcome {
        let table_name = self.table_path(table);
        let count = entries.len();
        let message = MutateRowsRequest {
            table_name: table_name.clone(),
            app_profile_id: self.connection.app_profile_id().unwrap_or_default().to_string(),
            entries,
            ..Default::default()
        };
        let request = self.request(message, "table_name", &table_name, timeout);
        let mut outcome = CallOutcome {
            statuses: vec![None; count],
            error: None,
        };
        let mut data = self.data.clone();
        let mut stream = match data.mutate_rows(request).await {
            Ok(response) => response.into_inner(),
            Err(status) => {
                outcome.error = Some(status);
                return outcome;
            }
        };
        loop {
            match stream.message().await {
                Ok(Some(response)) => {
                    for entry in response.entries {
                        let Some(slot) = usize::try_from(entry.index)
                            .ok()
                            .and_then(|i| outcome.statuses.get_mut(i))
                        else {
                            continue;
                        };
                        *slot = Some(match entry.status {
                            Some(s) if s.code != 0 => EntryStatus::Failed {
                                code: s.code,
                                message: s.message,
                            },
                            _ => EntryStatus::Ok,
                        });
                    }
                }
                Ok(None) => break,
                Err(status) => {
                    outcome.error = Some(status);
                    break;
                }
            }
        }
        if outcome.error.is_none() && outcome.statuses.iter().any(Option::is_none) {
            // The service answers every entry; a missing answer is a broken stream.
            outcome.error = Some(Status::unavailable(
                "MutateRows ended without a status for every entry",
            ));
        }
        outcome
    }
}

/// What one entry of a MutateRows call came back with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum EntryStatus {
    /// Applied.
    Ok,
    /// Not applied, with the gRPC code and message.
    Failed { code: i32, message: String },
}

/// The result of one MutateRows call: a status per entry (`None`: no answer) and the error
/// that ended the call, if any.
#[derive(Debug, Default)]
pub(crate) struct CallOutcome {
    pub(crate) statuses: Vec<Option<EntryStatus>>,
    pub(crate) error: Option<Status>,
}

async fn channel(url: &str, connect_timeout: Duration) -> Result<Channel> {
    let bad_endpoint = |e: &dyn std::fmt::Display| {
        Error::invalid_config("endpoint", format!("{url} is not a usable endpoint: {e}"))
    };
    let mut endpoint = Endpoint::from_shared(url.to_string())
        .map_err(|e| bad_endpoint(&e))?
        .connect_timeout(connect_timeout)
        .tcp_nodelay(true)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .initial_stream_window_size(STREAM_WINDOW);
    if url.starts_with("https://") {
        install_crypto_provider();
        endpoint = endpoint
            .tls_config(ClientTlsConfig::new().with_webpki_roots())
            .map_err(|e| bad_endpoint(&e))?;
    }
    endpoint.connect().await.map_err(|e| {
        Error::new(
            ErrorKind::Transient,
            format!("cannot connect to Bigtable at {url}"),
        )
        .with_context("endpoint", url)
        .with_source(e)
    })
}

fn middleware(channel: Channel, auth: Arc<GoogleAuthHeaders>) -> Result<GoogleAuthMiddleware> {
    GoogleAuthMiddleware::new(channel, auth, None)
        .map_err(|e| Error::internal("cannot set up Bigtable request headers").with_source(e))
}

/// rustls needs one process-wide crypto provider when more than one is compiled in (other
/// crates of a program may bring `ring`); aws-lc-rs is the one gcloud-sdk's stack uses.
fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race to another installer is fine: a provider is installed either way.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn url_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Whether a per-entry gRPC code may succeed when the entry is sent again.
pub(crate) fn is_retryable_code(code: i32) -> bool {
    matches!(
        Code::from_i32(code),
        Code::Unavailable | Code::DeadlineExceeded | Code::Aborted | Code::ResourceExhausted
    )
}

/// Whether a failed call may succeed when sent again. Besides the retryable codes, a
/// status the client made from a broken connection or stream is transient, whatever code
/// tonic gave it:
/// - a connection reset or broken pipe under a call in flight (`Unknown`), a connection
///   closed before the call got through (`Cancelled`);
/// - an HTTP/2 stream reset or GOAWAY (`h2 protocol error`, `Internal` for most reasons);
/// - a response stream that ended without a gRPC status (`Unknown`: a proxy cut it short).
///
/// The same codes sent by the server are not retried.
pub(crate) fn is_retryable_status(status: &Status) -> bool {
    is_retryable_code(status.code() as i32)
        || (matches!(status.code(), Code::Unknown | Code::Cancelled | Code::Internal)
            && (has_transport_source(status) || is_truncated_stream(status)))
}

fn has_transport_source(status: &Status) -> bool {
    let mut source = std::error::Error::source(status);
    // Bounded: error chains are short, but a cycle must not hang the writer.
    for _ in 0..16 {
        let Some(err) = source else { return false };
        if err.is::<tonic::transport::Error>()
            || err.is::<std::io::Error>()
            || err.is::<tonic::TimeoutExpired>()
            || err.downcast_ref::<h2::Error>().is_some_and(is_broken_stream)
        {
            return true;
        }
        source = err.source();
    }
    false
}

/// An HTTP/2 failure of the connection or the stream (an I/O error, a reset or GOAWAY
/// either peer sent), as opposed to a misuse of the library by the caller.
fn is_broken_stream(err: &h2::Error) -> bool {
    err.is_io() || err.reason().is_some()
}

/// tonic's status for a response that ended, cleanly at the HTTP/2 level, without the
/// gRPC status trailer (a stream reset with `NO_ERROR` or `CANCEL` becomes that). It has
/// no source to tell it by, only its message.
fn is_truncated_stream(status: &Status) -> bool {
    status.code() == Code::Unknown && status.message().contains("missing grpc-status trailer")
}

/// The limit of ours a call ran out of, when it did.
fn elapsed_limit(status: &Status) -> Option<Duration> {
    let mut source = std::error::Error::source(status);
    for _ in 0..16 {
        let err = source?;
        if let Some(elapsed) = err.downcast_ref::<RequestTimeoutElapsed>() {
            return match elapsed {
                RequestTimeoutElapsed::Total(limit) | RequestTimeoutElapsed::Idle(limit) => Some(*limit),
                _ => None,
            };
        }
        source = err.source();
    }
    None
}

/// What a failed call means for retrying: Bigtable's classifier for the shared retry loop.
pub(crate) fn classify(status: &Status) -> RetryClass {
    if status.code() == Code::ResourceExhausted {
        return RetryClass::Throttled;
    }
    if is_retryable_status(status) {
        return RetryClass::Transient;
    }
    RetryClass::Permanent(match status.code() {
        Code::NotFound => ErrorKind::NotFound,
        Code::AlreadyExists => ErrorKind::AlreadyExists,
        Code::InvalidArgument | Code::OutOfRange => ErrorKind::InvalidInput,
        Code::FailedPrecondition => ErrorKind::Conflict,
        Code::PermissionDenied | Code::Unauthenticated => ErrorKind::InvalidConfig,
        Code::Unimplemented => ErrorKind::Unsupported,
        _ => ErrorKind::Internal,
    })
}

/// Converts a failed call to `endpoint` into Outflow's error, saying what was being done
/// and where: `reading table T at http://host:port: ...`, with the endpoint in the context.
pub(crate) fn status_error(status: Status, doing: impl fmt::Display, endpoint: &str) -> Error {
    let class = classify(&status);
    let what = match elapsed_limit(&status) {
        // In whole milliseconds: an attempt cut short by the deadline has an odd limit.
        Some(limit) => format!(
            "no answer within {}",
            humantime::format_duration(Duration::from_millis(limit.as_millis() as u64))
        ),
        None if status.message().is_empty() => format!("{:?}", status.code()),
        None => format!("{:?}: {}", status.code(), status.message()),
    };
    class
        .error(format!("{doing} at {endpoint}: {what}"))
        .with_context("endpoint", endpoint)
        .with_context("code", format!("{:?}", status.code()))
        .with_source(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_is_explicit_then_the_emulator_then_the_service() {
        assert_eq!(
            Target::resolve(Some("127.0.0.1:9000"), Some("127.0.0.1:8086")),
            Target::Unauthenticated {
                url: "http://127.0.0.1:9000".into()
            }
        );
        assert_eq!(
            Target::resolve(Some("https://proxy.local/"), None),
            Target::Unauthenticated {
                url: "https://proxy.local".into()
            }
        );
        assert_eq!(
            Target::resolve(None, Some("127.0.0.1:8086")),
            Target::Unauthenticated {
                url: "http://127.0.0.1:8086".into()
            }
        );
        assert_eq!(
            Target::resolve(None, Some("  ")),
            Target::Service {
                data_url: DATA_ENDPOINT.into(),
                admin_url: ADMIN_ENDPOINT.into()
            }
        );
    }

    #[test]
    fn connections_validate_blank_fields() {
        assert!(BigtableConnection::new("p", "i").validate().is_ok());
        let err = BigtableConnection::new(" ", "i").validate().unwrap_err();
        assert_eq!(err.context_value("field"), Some("project"));
        let err = BigtableConnection::new("p", "i")
            .with_endpoint("")
            .validate()
            .unwrap_err();
        assert_eq!(err.context_value("field"), Some("endpoint"));
        let json =
            serde_json::to_string(&BigtableConnection::new("p", "i").with_app_profile_id("batch")).unwrap();
        assert_eq!(json, r#"{"project":"p","instance":"i","app_profile_id":"batch"}"#);
    }

    #[test]
    fn routing_params_are_url_encoded() {
        assert_eq!(
            url_encode("projects/p/instances/i/tables/t-1"),
            "projects%2Fp%2Finstances%2Fi%2Ftables%2Ft-1"
        );
    }

    #[test]
    fn retryable_codes() {
        for code in [
            Code::Unavailable,
            Code::DeadlineExceeded,
            Code::Aborted,
            Code::ResourceExhausted,
        ] {
            assert!(is_retryable_code(code as i32), "{code:?}");
            assert!(is_retryable_status(&Status::new(code, "x")), "{code:?}");
        }
        for code in [
            Code::Internal,
            Code::InvalidArgument,
            Code::NotFound,
            Code::PermissionDenied,
            Code::FailedPrecondition,
            Code::Unknown,
        ] {
            assert!(!is_retryable_code(code as i32), "{code:?}");
            assert!(!is_retryable_status(&Status::new(code, "x")), "{code:?}");
        }
    }

    #[test]
    fn unknown_is_retryable_only_over_a_transport_failure() {
        let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "connection reset");
        let status = Status::from_error(Box::new(reset));
        assert_eq!(status.code(), Code::Unknown);
        assert!(is_retryable_status(&status));
        let err = status_error(status, "writing to t", "http://127.0.0.1:1");
        assert_eq!(err.kind(), ErrorKind::Transient);
        assert!(err.is_retryable());

        let mut closed = Status::cancelled("operation was canceled");
        closed.set_source(Arc::new(std::io::Error::new(
            std::io::ErrorKind::BrokenPipe,
            "connection closed",
        )));
        assert!(is_retryable_status(&closed));
        assert!(!is_retryable_status(&Status::cancelled("the server cancelled")));

        let from_server = Status::unknown("the server could not say");
        assert!(!is_retryable_status(&from_server));
        let err = status_error(from_server, "writing to t", "http://127.0.0.1:1");
        assert_eq!(err.kind(), ErrorKind::Internal);
        assert!(!err.is_retryable());
    }

    #[test]
    fn a_reset_or_goaway_is_retryable_a_server_internal_is_not() {
        // What tonic makes of a RST_STREAM or GOAWAY: most reasons become `Internal`.
        for reason in [
            h2::Reason::PROTOCOL_ERROR,
            h2::Reason::INTERNAL_ERROR,
            h2::Reason::NO_ERROR,
        ] {
            let mut status = Status::internal(format!("h2 protocol error: {reason}"));
            status.set_source(Arc::new(h2::Error::from(reason)));
            assert!(is_retryable_status(&status), "{reason:?}");
            let err = status_error(status, "writing to t", "http://127.0.0.1:1");
            assert_eq!(err.kind(), ErrorKind::Transient, "{reason:?}");
        }
        let truncated = Status::unknown(
            "protocol error: missing grpc-status trailer, stream was terminated without a final status",
        );
        assert!(is_retryable_status(&truncated));
        assert!(!is_retryable_status(&Status::internal("the server failed")));
        assert_eq!(
            status_error(
                Status::internal("the server failed"),
                "writing to t",
                "http://127.0.0.1:1"
            )
            .kind(),
            ErrorKind::Internal
        );
    }

    #[test]
    fn a_call_that_ran_out_of_time_is_transient_and_names_the_endpoint() {
        let status = Status::from(RequestTimeoutElapsed::Total(Duration::from_millis(1500)));
        let err = status_error(status, "reading table t", "http://127.0.0.1:4711");
        assert_eq!(err.kind(), ErrorKind::Transient);
        assert!(err.is_retryable());
        assert_eq!(err.context_value("endpoint"), Some("http://127.0.0.1:4711"));
        assert!(
            err.to_string()
                .contains("reading table t at http://127.0.0.1:4711: no answer within 1s 500ms"),
            "{err}"
        );
    }

    #[test]
    fn statuses_become_errors_by_kind() {
        let at = "http://127.0.0.1:1";
        let err = status_error(
            Status::not_found("table \"t\" not found"),
            "preparing table t",
            at,
        );
        assert_eq!(err.kind(), ErrorKind::NotFound);
        assert!(
            err.to_string()
                .contains("preparing table t at http://127.0.0.1:1: NotFound: table \"t\" not found"),
            "{err}"
        );
        let err = status_error(Status::resource_exhausted("slow down"), "writing", at);
        assert_eq!(err.kind(), ErrorKind::Throttled);
        assert!(err.is_retryable());
        let err = status_error(Status::permission_denied("no"), "writing", at);
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert!(!err.is_retryable());
    }
}
