//! The catalog client: where tables are found, how Outflow commits to them, and what
//! iceberg-rust's errors mean for retrying.
//!
//! Three kinds, set by [`CatalogConfig`]:
//! - `sql`: a SQL catalog in a SQLite file (the embedded default; created if absent), in
//!   the JDBC layout PyIceberg's `SqlCatalog` and Java's `JdbcCatalog` read too.
//! - `memory`: a throwaway catalog for tests and one-off jobs: the same SQL catalog in a
//!   temporary directory removed when the catalog is dropped (data files too, unless a
//!   warehouse is given).
//! - `rest`: any Iceberg REST catalog.
//!
//! iceberg-rust 0.10.1 cannot commit arbitrary metadata updates (its `TableCommit` is
//! private), and Outflow needs them: type promotion, relaxation, overwrite snapshots,
//! manifests of its own. So commits go through Outflow's own path, atomic on each catalog:
//! on SQL, a new metadata file and a compare-and-swap of the table's `metadata_location`
//! row; on REST, the protocol's commit endpoint with requirements.
//!
//! Every call to a REST catalog has a deadline: a connect timeout and a per-request
//! timeout (catalog properties `connect-timeout` and `request-timeout`), and the reads
//! (`/v1/config`, loading a table, a namespace's existence) are retried while they fail
//! transiently, under the sink's retry policy, each attempt cut where that policy's deadline
//! ends. Creating and committing are sent once here: their callers look at the catalog again
//! before trying anew (a created table is loaded, a commit id is searched for).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use iceberg::io::{LocalFsStorageFactory, StorageFactory};
use iceberg::spec::{Schema as IcebergSchema, SortOrder, UnboundPartitionSpec};
use iceberg::table::Table;
use iceberg::{
    Catalog, CatalogBuilder, MetadataLocation, TableCreation, TableIdent, TableRequirement, TableUpdate,
};
use iceberg_catalog_rest::{CommitTableRequest, RestCatalogBuilder};
use iceberg_catalog_sql::SqlCatalogBuilder;
use iceberg_storage_opendal::OpenDalResolvingStorageFactory;
use outflow_core::{Error, ErrorKind, Result, RetryClass, RetryPolicy};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};

use crate::options::CatalogConfig;
use crate::rest_auth::{RestAuth, RestRequests};
use crate::schema::table_name;
use crate::vended::{self, DELEGATION_HEADER, S3Credentials, VENDED_CREDENTIALS};

/// A `file://` URL for a path or URL, made absolute.
fn file_url(location: &str) -> Result<String> {
    if location.contains("://") {
        return Ok(location.trim_end_matches('/').to_string());
    }
    let path = absolute(Path::new(location))?;
    Ok(format!("file://{}", path.display()))
}

fn absolute(path: &Path) -> Result<PathBuf> {
    if path.is_absolute() {
        return Ok(path.to_path_buf());
    }
    Ok(std::env::current_dir()?.join(path))
}

/// The SQLite file path of a `sqlite://` URI or a plain path.
fn sqlite_path(uri: &str) -> Result<PathBuf> {
    let rest = uri
        .strip_prefix("sqlite://")
        .or_else(|| uri.strip_prefix("sqlite:"))
        .unwrap_or(uri);
    let rest = rest.split('?').next().unwrap_or(rest);
    if rest.is_empty() || rest == ":memory:" {
        return Err(Error::invalid_config(
            "catalog.uri",
            format!("{uri:?} names no file; use `type: memory` for an in-memory catalog"),
        ));
    }
    // `sqlite:////abs` (PyIceberg's spelling) and `sqlite:///abs` both mean /abs.
    let trimmed = if rest.starts_with("//") { &rest[1..] } else { rest };
    absolute(Path::new(trimmed))
}

/// How Outflow commits to a catalog.
enum CommitPath {
    Sql {
        pool: SqlitePool,
    },
    Rest {
        http: reqwest::Client,
        tables_url: url::Url,
        requests: RestRequests,
    },
}

/// The catalog property bounding how long opening a connection to a REST catalog may take.
pub const REST_CONNECT_TIMEOUT: &str = "connect-timeout";
/// The catalog property bounding how long one request to a REST catalog may take.
pub const REST_REQUEST_TIMEOUT: &str = "request-timeout";
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A REST catalog's endpoint and deadlines, for bounding and describing its calls.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RestEndpoint {
    /// The catalog's URI as configured (after a job file's variables were replaced).
    uri: String,
    connect_timeout: Duration,
    request_timeout: Duration,
}

impl RestEndpoint {
    /// Reads the timeouts from the catalog's properties; a bad value names its key.
    pub(crate) fn new(uri: &str, properties: &BTreeMap<String, String>) -> Result<RestEndpoint> {
        let timeout = |key: &str, default: Duration| -> Result<Duration> {
            let Some(text) = properties.get(key) else {
                return Ok(default);
            };
            match outflow_core::duration::parse(text) {
                Ok(d) if !d.is_zero() => Ok(d),
                Ok(_) => Err(Error::invalid_config(
                    &format!("catalog.properties.{key}"),
                    "is zero",
                )),
                Err(e) => Err(Error::invalid_config(&format!("catalog.properties.{key}"), e)),
            }
        };
        Ok(RestEndpoint {
            uri: uri.to_string(),
            connect_timeout: timeout(REST_CONNECT_TIMEOUT, DEFAULT_CONNECT_TIMEOUT)?,
            request_timeout: timeout(REST_REQUEST_TIMEOUT, DEFAULT_REQUEST_TIMEOUT)?,
        })
    }

    /// An HTTP client whose every request has the connect and request timeouts.
    fn http_client(&self) -> Result<reqwest::Client> {
        reqwest::Client::builder()
            .connect_timeout(self.connect_timeout)
            .timeout(self.request_timeout)
            .build()
            .map_err(|e| Error::internal(format!("building the HTTP client for {}: {e}", self.uri)))
    }

    /// Runs one call, cut at `limit`.
    async fn bounded<T>(
        &self,
        what: &str,
        limit: Duration,
        call: impl Future<Output = iceberg::Result<T>>,
    ) -> Result<T> {
        match tokio::time::timeout(limit, call).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(self.error(what, e)),
            Err(_) => Err(self.no_answer(what, limit)),
        }
    }

    /// A call cut short by its deadline: transient, naming the endpoint.
    fn no_answer(&self, what: &str, limit: Duration) -> Error {
        RetryClass::Transient
            .error(format!(
                "{what}: the REST catalog at {} did not answer within {} ms",
                self.uri,
                limit.as_millis()
            ))
            .with_context("endpoint", self.uri.clone())
    }

    /// An HTTP exchange that failed before an answer (a timeout cut it at `limit`):
    /// transient, naming the endpoint.
    fn transport(&self, what: &str, err: &reqwest::Error, limit: Duration) -> Error {
        let uri = &self.uri;
        let message = if err.is_timeout() {
            format!(
                "{what}: the REST catalog at {uri} did not answer within {} ms",
                limit.as_millis()
            )
        } else if err.is_connect() {
            format!("{what}: cannot reach the REST catalog at {uri}")
        } else {
            format!("{what}: the REST catalog at {uri} broke off the exchange")
        };
        RetryClass::Transient
            .error(format!("{message} ({})", error_chain(err)))
            .with_context("endpoint", uri.clone())
    }

    /// An answer with a status that is not success. Server errors and throttling may pass;
    /// the rest means the request or the job's settings are wrong (`otherwise`).
    fn status(&self, what: &str, status: u16, detail: &str, otherwise: ErrorKind) -> Error {
        let class = match status {
            429 => RetryClass::Throttled,
            408 | 500..=599 => RetryClass::Transient,
            _ => RetryClass::Permanent(otherwise),
        };
        let detail = if detail.is_empty() {
            String::new()
        } else {
            format!(": {detail}")
        };
        class
            .error(format!(
                "{what}: the REST catalog at {} answered HTTP {status}{detail}",
                self.uri
            ))
            .with_context("endpoint", self.uri.clone())
            .with_context("status", status.to_string())
    }

    /// Classifies an iceberg-rust error of a REST call: its HTTP failures are classified
    /// here (iceberg-rust 0.10.1 reports them all as unexpected), the rest as usual.
    fn error(&self, what: &str, err: iceberg::Error) -> Error {
        let transport = std::iter::successors(std::error::Error::source(&err), |e| e.source())
            .find_map(|e| e.downcast_ref::<reqwest::Error>());
        if let Some(http) = transport {
            return self.transport(what, http, self.request_timeout).with_source(err);
        }
        if let Some(status) = iceberg_status(&err) {
            let otherwise = match status {
                401 | 403 => ErrorKind::InvalidConfig,
                400 | 422 => ErrorKind::InvalidInput,
                404 => ErrorKind::NotFound,
                _ => ErrorKind::Internal,
            };
            return self
                .status(what, status, err.message(), otherwise)
                .with_source(err);
        }
        from_iceberg(err, format_args!("{what} (REST catalog {})", self.uri))
            .with_context("endpoint", self.uri.clone())
    }
}

/// The HTTP status iceberg-rust 0.10.1 records in an unexpected answer's context
/// (`status: 500 Internal Server Error`), which only its `Display` shows.
fn iceberg_status(err: &iceberg::Error) -> Option<u16> {
    if err.kind() != iceberg::ErrorKind::Unexpected {
        return None;
    }
    let text = err.to_string();
    let context = text.split_once("context: {")?.1;
    let status = context.split_once("status: ")?.1;
    status.get(..3)?.parse().ok()
}

/// An error and its sources, `: `-separated (reqwest's own message leaves out the cause).
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// A connected catalog: iceberg-rust's catalog for reads and creation, and Outflow's own
/// atomic commit path.
#[derive(Clone)]
pub struct IcebergCatalog {
    name: String,
    inner: Arc<dyn Catalog>,
    commits: Arc<CommitPath>,
    /// For a REST catalog: its endpoint and deadlines.
    rest: Option<Arc<RestEndpoint>>,
    /// How reads of a REST catalog are retried.
    retry: RetryPolicy,
    /// The storage settings among the catalog's properties, for objects read outside a
    /// table's FileIO (AddFiles' inputs).
    storage: outflow_store::StorageSettings,
    /// For a REST catalog that vends storage credentials: how long before they expire its
    /// tables' credentials are renewed ([`crate::vended`]).
    vending: Option<Duration>,
    // Keeps a temporary warehouse of a memory catalog alive as long as the catalog.
    _scratch: Option<Arc<TempDir>>,
}

impl fmt::Debug for IcebergCatalog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IcebergCatalog")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// A directory removed when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl IcebergCatalog {
    /// Connects to the catalog `config` describes (creating a SQLite file if absent), with
    /// the default retry policy for a REST catalog's reads.
    pub async fn connect(config: &CatalogConfig) -> Result<IcebergCatalog> {
        IcebergCatalog::connect_with_retry(config, &RetryPolicy::default()).await
    }

    /// Connects to the catalog `config` describes; a REST catalog's reads (the connection's
    /// `/v1/config` included) are retried under `retry`, and none outlasts its deadline.
    pub async fn connect_with_retry(config: &CatalogConfig, retry: &RetryPolicy) -> Result<IcebergCatalog> {
        config.validate()?;
        match config {
            CatalogConfig::Sql {
                uri,
                warehouse,
                name,
                properties,
            } => {
                let path = sqlite_path(uri)?;
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                let sqlx_uri = format!("sqlite://{}?mode=rwc", path.display());
                let warehouse = file_url(warehouse)?;
                Self::connect_sql(name, &sqlx_uri, &warehouse, properties, None).await
            }
            CatalogConfig::Memory { warehouse, name } => {
                // The catalog lives in a temporary directory removed with the last clone of
                // this catalog: it is gone when the process is done with it.
                let dir = std::env::temp_dir().join(format!("outflow-memory-{}", uuid::Uuid::new_v4()));
                std::fs::create_dir_all(&dir)?;
                let scratch = Some(Arc::new(TempDir(dir.clone())));
                let warehouse = match warehouse {
                    Some(w) => file_url(w)?,
                    None => format!("file://{}", dir.join("warehouse").display()),
                };
                let sqlx_uri = format!("sqlite://{}?mode=rwc", dir.join("catalog.db").display());
                Self::connect_sql(name, &sqlx_uri, &warehouse, &BTreeMap::new(), scratch).await
            }
            CatalogConfig::Rest {
                uri,
                warehouse,
                name,
                properties,
            } => Self::connect_rest(name, uri, warehouse.as_deref(), properties, retry).await,
        }
    }

    async fn connect_sql(
        name: &str,
        sqlx_uri: &str,
        warehouse: &str,
        properties: &BTreeMap<String, String>,
        scratch: Option<Arc<TempDir>>,
    ) -> Result<IcebergCatalog> {
        let options = SqliteConnectOptions::from_str(sqlx_uri)
            .map_err(|e| Error::invalid_config("catalog.uri", e.to_string()))?
            .busy_timeout(std::time::Duration::from_secs(30));
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await
            .map_err(|e| {
                Error::new(
                    ErrorKind::NotFound,
                    format!("cannot open the SQLite catalog {sqlx_uri}: {e}"),
                )
                .with_context("catalog", sqlx_uri.to_string())
            })?;
        let mut props: HashMap<String, String> = properties.clone().into_iter().collect();
        props.insert("uri".into(), sqlx_uri.to_string());
        props.insert("warehouse".into(), warehouse.to_string());
        props.insert("sql_bind_style".into(), "QMark".into());
        let inner = SqlCatalogBuilder::default()
            .with_storage_factory(storage_for(Some(warehouse), properties))
            .load(name, props)
            .await
            .doing(format_args!("opening the SQL catalog {sqlx_uri}"))?;
        Ok(IcebergCatalog {
            name: name.to_string(),
            inner: Arc::new(inner),
            commits: Arc::new(CommitPath::Sql { pool }),
            rest: None,
            retry: RetryPolicy::none(),
            storage: outflow_store::StorageSettings::from_properties(properties),
            vending: None,
            _scratch: scratch,
        })
    }

    async fn connect_rest(
        name: &str,
        uri: &str,
        warehouse: Option<&str>,
        properties: &BTreeMap<String, String>,
        retry: &RetryPolicy,
    ) -> Result<IcebergCatalog> {
        let endpoint = Arc::new(RestEndpoint::new(uri, properties)?);
        let (properties, vending) = &with_delegation(properties)?;
        let mut props: HashMap<String, String> = properties
            .iter()
            .filter(|(k, _)| {
                ![REST_CONNECT_TIMEOUT, REST_REQUEST_TIMEOUT, vended::REFRESH_BEFORE].contains(&k.as_str())
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        props.insert("uri".into(), uri.to_string());
        if let Some(w) = warehouse {
            props.insert("warehouse".into(), w.to_string());
        }
        let requests = RestRequests {
            headers: properties
                .iter()
                .filter_map(|(k, v)| k.strip_prefix("header.").map(|h| (h.to_string(), v.clone())))
                .collect(),
            auth: RestAuth::from_properties(uri, properties)?,
        };
        let http = endpoint.http_client()?;
        let what = "reading the REST catalog's configuration";
        let mut retrying = retry.start(what);
        let prefix = loop {
            let limit = retrying.attempt_limit(endpoint.request_timeout);
            match rest_prefix(&http, &endpoint, warehouse, &requests, what, limit).await {
                Ok(prefix) => break prefix,
                Err(err) => retrying.after(err).await?,
            }
        };
        let mut tables_url = url::Url::parse(uri)
            .map_err(|e| Error::invalid_config("catalog.uri", format!("{uri:?} is not a URL: {e}")))?;
        {
            let mut segments = tables_url
                .path_segments_mut()
                .map_err(|_| Error::invalid_config("catalog.uri", format!("{uri:?} cannot be a base URL")))?;
            segments.pop_if_empty().push("v1");
            if let Some(prefix) = &prefix {
                segments.push(prefix);
            }
        }
        let inner = RestCatalogBuilder::default()
            .with_storage_factory(storage_for(warehouse, properties))
            .with_client(http.clone())
            .load(name, props)
            .await
            .map_err(|e| endpoint.error("opening the REST catalog", e))?;
        Ok(IcebergCatalog {
            name: name.to_string(),
            inner: Arc::new(inner),
            commits: Arc::new(CommitPath::Rest {
                http,
                tables_url,
                requests,
            }),
            rest: Some(endpoint),
            retry: retry.clone(),
            storage: outflow_store::StorageSettings::from_properties(properties),
            vending: *vending,
            _scratch: None,
        })
    }

    /// How objects outside a table are reached: the storage settings among the catalog's
    /// properties (`s3.endpoint`, keys...).
    pub fn storage_settings(&self) -> &outflow_store::StorageSettings {
        &self.storage
    }

    /// Runs a read of the catalog. On a REST catalog each attempt is bounded by the request
    /// timeout and by what is left of the retry deadline, and retried while it fails
    /// transiently; `call` makes a fresh attempt each time it is called.
    async fn read<T, F, Fut>(&self, what: &str, mut call: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = iceberg::Result<T>>,
    {
        let Some(rest) = &self.rest else {
            return call().await.doing(what);
        };
        let mut retrying = self.retry.start(what);
        loop {
            let limit = retrying.attempt_limit(rest.request_timeout);
            match rest.bounded(what, limit, call()).await {
                Ok(value) => return Ok(value),
                Err(err) => retrying.after(err).await?,
            }
        }
    }

    /// Runs a call that changes the catalog, once: bounded by the request timeout on a REST
    /// catalog, whose failures are classified and name the endpoint.
    async fn change<T>(&self, what: &str, call: impl Future<Output = iceberg::Result<T>>) -> Result<T> {
        match &self.rest {
            Some(rest) => rest.bounded(what, rest.request_timeout, call).await,
            None => call.await.doing(what),
        }
    }

    /// Runs one attempt of a retried operation on the catalog (a commit loop's reload,
    /// build and commit). On a REST catalog it is cut at `limit`, a transient failure naming
    /// the endpoint; a commit it cut may have been applied, which the loop's commit id
    /// check settles. On SQL catalogs the attempt runs to its end (SQLite's busy timeout
    /// bounds it), so no metadata file is left half-committed.
    pub async fn attempt_within<T>(
        &self,
        what: &str,
        limit: Duration,
        attempt: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let Some(rest) = &self.rest else {
            return attempt.await;
        };
        tokio::time::timeout(limit, attempt)
            .await
            .unwrap_or_else(|_| Err(rest.no_answer(what, limit)))
    }

    /// The catalog's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// iceberg-rust's catalog, for reads (scans, listing).
    pub fn iceberg(&self) -> &Arc<dyn Catalog> {
        &self.inner
    }

    /// Loads a table; `None` when it does not exist.
    pub async fn load_table(&self, ident: &TableIdent) -> Result<Option<Table>> {
        let what = format!("loading table {}", table_name(ident));
        let table = self
            .read(&what, || async move {
                match self.inner.load_table(ident).await {
                    Ok(table) => Ok(Some(table)),
                    Err(e)
                        if matches!(
                            e.kind(),
                            iceberg::ErrorKind::TableNotFound | iceberg::ErrorKind::NamespaceNotFound
                        ) =>
                    {
                        Ok(None)
                    }
                    Err(e) => Err(e),
                }
            })
            .await?;
        table.map(|t| self.renewing_credentials(t)).transpose()
    }

    /// `table` as loaded, or with storage credentials renewed before they expire when the
    /// catalog vended them.
    fn renewing_credentials(&self, table: Table) -> Result<Table> {
        match self.vending {
            Some(refresh_before) => vended::renewing(self, table, refresh_before),
            None => Ok(table),
        }
    }

    /// Asks the REST catalog for `table` again, for fresh vended storage credentials.
    pub(crate) async fn vended_credentials(&self, table: &Table) -> Result<S3Credentials> {
        let (
            CommitPath::Rest {
                http,
                tables_url,
                requests,
            },
            Some(endpoint),
        ) = (self.commits.as_ref(), &self.rest)
        else {
            return Err(Error::internal("only REST catalogs vend credentials"));
        };
        let name = table_name(table.identifier());
        let what = format!("renewing the storage credentials of {name}");
        let url = table_url(tables_url, table.identifier());
        let answer = get_json(
            http,
            endpoint,
            requests,
            &url,
            &[(DELEGATION_HEADER, VENDED_CREDENTIALS)],
            &what,
            endpoint.request_timeout,
            ErrorKind::InvalidInput,
        )
        .await?;
        vended::vended_for(&answer, table.metadata().location()).ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidInput,
                format!("{what}: the catalog at {} vended none this time", endpoint.uri),
            )
        })
    }

    /// Loads a table that must exist.
    pub async fn require_table(&self, ident: &TableIdent) -> Result<Table> {
        self.load_table(ident)
            .await?
            .ok_or_else(|| Error::not_found("table", table_name(ident)))
    }

    /// Drops `table` from the catalog and deletes its files: its metadata, the files its
    /// snapshots reference, and whatever else is under its location.
    pub async fn purge_table(&self, table: &Table) -> Result<()> {
        let ident = table.identifier();
        let name = table_name(ident);
        self.change(&format!("removing table {name}"), self.inner.purge_table(ident))
            .await?;
        let location = table.metadata().location();
        table
            .file_io()
            .delete_prefix(location)
            .await
            .doing(format_args!("deleting {location}, the location of table {name}"))
    }

    /// Creates a table (and its namespace); when another writer created it first, loads
    /// theirs. Returns the table and whether this call created it.
    pub async fn create_table(
        &self,
        ident: &TableIdent,
        schema: IcebergSchema,
        partition_spec: Option<UnboundPartitionSpec>,
        sort_order: Option<SortOrder>,
        properties: HashMap<String, String>,
    ) -> Result<(Table, bool)> {
        let namespace = ident.namespace();
        let exists = self
            .read(&format!("checking namespace {}", namespace.join(".")), || {
                self.inner.namespace_exists(namespace)
            })
            .await?;
        let creating = format!("creating namespace {}", namespace.join("."));
        if !exists
            && let Err(e) = self
                .change(&creating, self.inner.create_namespace(namespace, HashMap::new()))
                .await
        {
            // Writers racing to create it: the SQL catalog reports the loser as a unique
            // constraint violation, not as NamespaceAlreadyExists, so look again (also
            // after a REST call whose answer was lost).
            let created_by_another = e.kind() == ErrorKind::AlreadyExists
                || self
                    .read(&creating, || self.inner.namespace_exists(namespace))
                    .await
                    .unwrap_or(false);
            if !created_by_another {
                return Err(e);
            }
        }
        let creation = TableCreation::builder()
            .name(ident.name().to_string())
            .schema(schema)
            .properties(properties);
        let creation = match (partition_spec, sort_order) {
            (Some(spec), Some(order)) => creation.partition_spec(spec).sort_order(order).build(),
            (Some(spec), None) => creation.partition_spec(spec).build(),
            (None, Some(order)) => creation.sort_order(order).build(),
            (None, None) => creation.build(),
        };
        let creating = format!("creating table {}", table_name(ident));
        match self
            .change(&creating, self.inner.create_table(namespace, creation))
            .await
        {
            Ok(table) => Ok((self.renewing_credentials(table)?, true)),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok((self.require_table(ident).await?, false)),
            // As for namespaces: a lost race may surface as a constraint violation, and a
            // REST call whose answer was lost may have created it.
            Err(e) => match self.load_table(ident).await {
                Ok(Some(table)) => Ok((table, false)),
                _ => Err(e),
            },
        }
    }

    /// Commits `updates` to `table` if `requirements` hold, atomically. A lost race is an
    /// error of kind `Conflict` (retryable): reload the table and try again.
    pub async fn commit(
        &self,
        table: &Table,
        requirements: Vec<TableRequirement>,
        updates: Vec<TableUpdate>,
    ) -> Result<()> {
        let name = table_name(table.identifier());
        for requirement in &requirements {
            requirement
                .check(Some(table.metadata()))
                .doing(format_args!("committing to {name}"))?;
        }
        match self.commits.as_ref() {
            CommitPath::Sql { pool } => self.commit_sql(pool, table, updates, &name).await,
            CommitPath::Rest {
                http,
                tables_url,
                requests,
            } => {
                let endpoint = self.rest.as_deref().expect("a REST commit path has an endpoint");
                commit_rest(
                    http,
                    endpoint,
                    tables_url,
                    requests,
                    table,
                    requirements,
                    updates,
                    &name,
                )
                .await
            }
        }
    }

    async fn commit_sql(
        &self,
        pool: &SqlitePool,
        table: &Table,
        updates: Vec<TableUpdate>,
        name: &str,
    ) -> Result<()> {
        let current = table
            .metadata_location()
            .ok_or_else(|| Error::internal(format!("table {name} has no metadata location")))?
            .to_string();
        let mut builder = table.metadata().clone().into_builder(Some(current.clone()));
        for update in updates {
            builder = update
                .apply(builder)
                .doing(format_args!("updating the metadata of {name}"))?;
        }
        let metadata = builder
            .build()
            .doing(format_args!("building the metadata of {name}"))?
            .metadata;
        let location = MetadataLocation::from_str(&current)
            .doing(format_args!("reading the metadata location of {name}"))?
            .with_next_version()
            .with_new_metadata(&metadata);
        metadata
            .write_to(table.file_io(), &location)
            .await
            .doing(format_args!("writing the metadata of {name}"))?;
        let location = location.to_string();
        let ident = table.identifier();
        let swapped = sqlx::query(
            "UPDATE iceberg_tables SET metadata_location = ?, previous_metadata_location = ? \
             WHERE catalog_name = ? AND table_namespace = ? AND table_name = ? AND metadata_location = ?",
        )
        .bind(&location)
        .bind(&current)
        .bind(&self.name)
        .bind(ident.namespace().join("."))
        .bind(ident.name())
        .bind(&current)
        .execute(pool)
        .await
        .map_err(|e| {
            Error::new(
                ErrorKind::Transient,
                format!("updating the catalog row of {name}: {e}"),
            )
            .with_retryable(true)
        })?;
        if swapped.rows_affected() == 1 {
            return Ok(());
        }
        // Another writer moved the table on: our metadata file is garbage.
        let _ = table.file_io().delete(&location).await;
        Err(Error::new(
            ErrorKind::Conflict,
            format!("table {name} changed while committing"),
        )
        .with_context("table", name.to_string()))
    }
}

/// The catalog's path prefix, from `GET /v1/config`, in one attempt cut at `limit`.
async fn rest_prefix(
    http: &reqwest::Client,
    endpoint: &RestEndpoint,
    warehouse: Option<&str>,
    requests: &RestRequests,
    what: &str,
    limit: Duration,
) -> Result<Option<String>> {
    let uri = &endpoint.uri;
    let mut url = url::Url::parse(uri)
        .map_err(|e| Error::invalid_config("catalog.uri", format!("{uri:?} is not a URL: {e}")))?;
    url.path_segments_mut()
        .map_err(|_| Error::invalid_config("catalog.uri", format!("{uri:?} cannot be a base URL")))?
        .pop_if_empty()
        .push("v1")
        .push("config");
    if let Some(w) = warehouse {
        url.query_pairs_mut().append_pair("warehouse", w);
    }
    // A client error here means the URI, warehouse or credentials the job gives are wrong;
    // a server error is the server's.
    let config = get_json(
        http,
        endpoint,
        requests,
        &url,
        &[],
        what,
        limit,
        ErrorKind::InvalidConfig,
    )
    .await?;
    let pick = |section: &str| config[section]["prefix"].as_str().map(str::to_string);
    Ok(pick("overrides").or_else(|| pick("defaults")))
}

/// GETs `url` from a REST catalog with the catalog's headers and authentication and
/// `headers`, in one attempt cut at `limit`, and reads the JSON it answers. A client error
/// is of kind `refused`; transport and server errors are transient, each naming the endpoint.
#[allow(clippy::too_many_arguments)]
async fn get_json(
    http: &reqwest::Client,
    endpoint: &RestEndpoint,
    requests: &RestRequests,
    url: &url::Url,
    headers: &[(&str, &str)],
    what: &str,
    limit: Duration,
    refused: ErrorKind,
) -> Result<serde_json::Value> {
    let response = requests
        .send(http, limit, || {
            headers
                .iter()
                .fold(http.get(url.clone()).timeout(limit), |r, (k, v)| r.header(*k, *v))
        })
        .await?
        .map_err(|e| endpoint.transport(what, &e, limit))?;
    let status = response.status();
    let body = response
        .text()
        .await
        .map_err(|e| endpoint.transport(what, &e, limit))?;
    if !status.is_success() {
        let detail = format!("GET {url}: {}", body.chars().take(300).collect::<String>());
        return Err(endpoint.status(what, status.as_u16(), &detail, refused));
    }
    serde_json::from_str(&body).map_err(|e| {
        let uri = &endpoint.uri;
        Error::internal(format!(
            "{what}: the REST catalog at {uri} answered GET {url} with something other than JSON: {e}"
        ))
        .with_context("endpoint", uri.to_string())
    })
}

/// The URL of a table of a REST catalog: `{tables_url}/namespaces/{ns}/tables/{name}`.
fn table_url(tables_url: &url::Url, ident: &TableIdent) -> url::Url {
    let mut url = tables_url.clone();
    url.path_segments_mut()
        .expect("checked at connect")
        .push("namespaces")
        .push(&ident.namespace().join("\u{1f}"))
        .push("tables")
        .push(ident.name());
    url
}

/// The properties of a REST catalog with the header asking for vended storage credentials
/// (as Java's and PyIceberg's clients send it), unless the properties give S3 keys or a
/// header of their own; and, when the header asks for them, how long before they expire
/// they are renewed.
fn with_delegation(
    properties: &BTreeMap<String, String>,
) -> Result<(BTreeMap<String, String>, Option<Duration>)> {
    let mut properties = properties.clone();
    let given = properties
        .iter()
        .find(|(k, _)| {
            k.strip_prefix("header.")
                .is_some_and(|h| h.eq_ignore_ascii_case(DELEGATION_HEADER))
        })
        .map(|(_, v)| v.clone());
    let delegation = match given {
        Some(value) => value,
        None if properties.contains_key("s3.access-key-id") => String::new(),
        None => {
            properties.insert(
                format!("header.{DELEGATION_HEADER}"),
                VENDED_CREDENTIALS.to_string(),
            );
            VENDED_CREDENTIALS.to_string()
        }
    };
    if !delegation.split(',').any(|v| v.trim() == VENDED_CREDENTIALS) {
        return Ok((properties, None));
    }
    let refresh_before = match properties.get(vended::REFRESH_BEFORE) {
        None => vended::DEFAULT_REFRESH_BEFORE,
        Some(text) => outflow_core::duration::parse(text).map_err(|e| {
            Error::invalid_config(&format!("catalog.properties.{}", vended::REFRESH_BEFORE), e)
        })?,
    };
    Ok((properties, Some(refresh_before)))
}

#[allow(clippy::too_many_arguments)]
async fn commit_rest(
    http: &reqwest::Client,
    endpoint: &RestEndpoint,
    tables_url: &url::Url,
    requests: &RestRequests,
    table: &Table,
    requirements: Vec<TableRequirement>,
    updates: Vec<TableUpdate>,
    name: &str,
) -> Result<()> {
    let ident = table.identifier();
    let url = table_url(tables_url, ident);
    let body = CommitTableRequest {
        identifier: Some(ident.clone()),
        requirements,
        updates,
    };
    let what = format!("committing to {name}");
    // The client's request timeout bounds the commit. Whatever happens to it after it was
    // sent (no answer, a reset, a server error), it may or may not have been applied: the
    // caller reloads the table and looks for its commit id before trying again.
    let unknown = |e: reqwest::Error| {
        let err = endpoint.transport(&what, &e, endpoint.request_timeout);
        let message = format!("{}; the commit's state is unknown", err.message());
        err.with_message(message)
    };
    let response = requests
        .send(http, endpoint.request_timeout, || {
            http.post(url.clone()).json(&body)
        })
        .await?
        .map_err(unknown)?;
    let status = response.status().as_u16();
    let text = response.text().await.map_err(unknown)?;
    match status {
        200..=299 => Ok(()),
        409 => Err(Error::new(
            ErrorKind::Conflict,
            format!("table {name} changed while committing: {text}"),
        )
        .with_context("table", name.to_string())),
        404 => Err(Error::not_found("table", name)),
        _ => {
            let detail = match status {
                408 | 429 | 500..=599 => format!("state unknown: {text}"),
                _ => text,
            };
            Err(endpoint.status(&what, status, &detail, ErrorKind::InvalidInput))
        }
    }
}

/// The storage of a catalog's tables: OpenDAL's, which resolves each location by its scheme,
/// when the warehouse is in an object store or storage settings are given; iceberg's own
/// local filesystem otherwise, as every local table has always been written.
fn storage_for(warehouse: Option<&str>, properties: &BTreeMap<String, String>) -> Arc<dyn StorageFactory> {
    let in_object_store = warehouse.is_some_and(outflow_store::is_object_url);
    if in_object_store
        || properties
            .keys()
            .any(|k| k.starts_with("s3.") || k.starts_with("gcs."))
    {
        Arc::new(OpenDalResolvingStorageFactory::new())
    } else {
        Arc::new(LocalFsStorageFactory)
    }
}

/// Wraps an iceberg-rust error: the kind says what callers can do about it, the original
/// stays reachable through `source()`.
pub(crate) fn from_iceberg(err: iceberg::Error, doing: impl std::fmt::Display) -> Error {
    use iceberg::ErrorKind as K;
    let kind = match err.kind() {
        K::TableNotFound | K::NamespaceNotFound => ErrorKind::NotFound,
        K::TableAlreadyExists | K::NamespaceAlreadyExists => ErrorKind::AlreadyExists,
        K::CatalogCommitConflicts => ErrorKind::Conflict,
        K::DataInvalid | K::PreconditionFailed => ErrorKind::InvalidInput,
        K::FeatureUnsupported => ErrorKind::Unsupported,
        _ if err.retryable() => ErrorKind::Transient,
        _ => ErrorKind::Internal,
    };
    let retryable = err.retryable() || kind == ErrorKind::Conflict;
    Error::new(kind, format!("{doing}: {}", err.message()))
        .with_retryable(retryable)
        .with_source(err)
}

/// Extension to convert iceberg results with a description of what was being done.
pub(crate) trait IcebergResultExt<T> {
    /// Converts the error, saying what was being done.
    fn doing(self, what: impl std::fmt::Display) -> outflow_core::Result<T>;
}

impl<T> IcebergResultExt<T> for iceberg::Result<T> {
    fn doing(self, what: impl std::fmt::Display) -> outflow_core::Result<T> {
        self.map_err(|e| from_iceberg(e, what))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_paths_accept_every_spelling() {
        assert_eq!(
            sqlite_path("sqlite:///tmp/c.db").unwrap(),
            PathBuf::from("/tmp/c.db")
        );
        assert_eq!(
            sqlite_path("sqlite:////tmp/c.db").unwrap(),
            PathBuf::from("/tmp/c.db")
        );
        assert_eq!(sqlite_path("/tmp/c.db").unwrap(), PathBuf::from("/tmp/c.db"));
        assert!(sqlite_path("relative/c.db").unwrap().is_absolute());
        assert!(sqlite_path("sqlite::memory:").is_err());
    }

    #[test]
    fn serde_round_trip_and_defaults() {
        let yaml = "type: sql\nuri: ./cat.db\nwarehouse: ./wh\n";
        let c: CatalogConfig = serde_yaml_ng::from_str(yaml).unwrap();
        assert_eq!(c.name(), "outflow");
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(serde_json::from_str::<CatalogConfig>(&json).unwrap(), c);
        let rest: CatalogConfig =
            serde_yaml_ng::from_str("type: rest\nuri: http://127.0.0.1:8181\nproperties: {token: s3cr3t}\n")
                .unwrap();
        assert!(!format!("{rest:?}").contains("s3cr3t"));
        let err = serde_yaml_ng::from_str::<CatalogConfig>("type: sql\nuri: a\nwarehouse: b\nwarehous: c\n")
            .unwrap_err();
        assert!(err.to_string().contains("warehous"), "{err}");
    }

    /// iceberg-rust 0.10.1 reports every unexpected HTTP status as `Unexpected`, the status
    /// only in its context; these are the errors it builds.
    #[test]
    fn rest_statuses_from_iceberg_are_classified_and_name_the_endpoint() {
        let endpoint = RestEndpoint::new("http://127.0.0.1:8181", &BTreeMap::new()).unwrap();
        let answered = |status: &str| {
            iceberg::Error::new(
                iceberg::ErrorKind::Unexpected,
                "Received response with unexpected status code",
            )
            .with_context("status", status)
            .with_context("headers", "{}")
        };
        let err = endpoint.error("loading table db.t", answered("503 Service Unavailable"));
        assert_eq!(err.kind(), ErrorKind::Transient, "{err}");
        assert!(err.is_retryable());
        assert!(
            err.message()
                .contains("the REST catalog at http://127.0.0.1:8181 answered HTTP 503"),
            "{err}"
        );
        assert_eq!(err.context_value("endpoint"), Some("http://127.0.0.1:8181"));
        let err = endpoint.error("loading table db.t", answered("429 Too Many Requests"));
        assert_eq!(err.kind(), ErrorKind::Throttled, "{err}");
        let err = endpoint.error("loading table db.t", answered("403 Forbidden"));
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
        assert!(!err.is_retryable());
        let missing = iceberg::Error::new(iceberg::ErrorKind::TableNotFound, "no such table");
        assert_eq!(
            endpoint.error("loading table db.t", missing).kind(),
            ErrorKind::NotFound
        );
    }

    #[test]
    fn rest_timeouts_default_and_are_read_from_properties() {
        let defaults = RestEndpoint::new("http://h:1", &BTreeMap::new()).unwrap();
        assert_eq!(defaults.connect_timeout, Duration::from_secs(10));
        assert_eq!(defaults.request_timeout, Duration::from_secs(30));
        let props: BTreeMap<String, String> = [
            ("connect-timeout".to_string(), "2s".to_string()),
            ("request-timeout".to_string(), "500ms".to_string()),
        ]
        .into();
        let set = RestEndpoint::new("http://h:1", &props).unwrap();
        assert_eq!(set.connect_timeout, Duration::from_secs(2));
        assert_eq!(set.request_timeout, Duration::from_millis(500));
        let zero: BTreeMap<String, String> = [("connect-timeout".to_string(), "0s".to_string())].into();
        let err = RestEndpoint::new("http://h:1", &zero).unwrap_err();
        assert_eq!(
            err.context_value("field"),
            Some("catalog.properties.connect-timeout")
        );
    }

    #[test]
    fn validation_names_the_field() {
        let c = CatalogConfig::Rest {
            uri: "not a url".into(),
            warehouse: None,
            name: "x".into(),
            properties: BTreeMap::new(),
        };
        assert_eq!(
            c.validate().unwrap_err().context_value("field"),
            Some("catalog.uri")
        );
        let blank = CatalogConfig::Memory {
            warehouse: None,
            name: " ".into(),
        };
        assert_eq!(
            blank.validate().unwrap_err().context_value("field"),
            Some("catalog.name")
        );
    }
}
