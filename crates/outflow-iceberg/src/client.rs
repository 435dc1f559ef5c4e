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

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use iceberg::io::LocalFsStorageFactory;
use iceberg::spec::{Schema as IcebergSchema, SortOrder, UnboundPartitionSpec};
use iceberg::table::Table;
use iceberg::{
    Catalog, CatalogBuilder, MetadataLocation, TableCreation, TableIdent, TableRequirement, TableUpdate,
};
use iceberg_catalog_rest::{CommitTableRequest, RestCatalogBuilder};
use iceberg_catalog_sql::SqlCatalogBuilder;
use outflow_core::{Error, ErrorKind, Result};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};

use crate::options::CatalogConfig;
use crate::schema::table_name;

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
        headers: HashMap<String, String>,
    },
}

/// A connected catalog: iceberg-rust's catalog for reads and creation, and Outflow's own
/// atomic commit path.
#[derive(Clone)]
pub struct IcebergCatalog {
    name: String,
    inner: Arc<dyn Catalog>,
    commits: Arc<CommitPath>,
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
    /// Connects to the catalog `config` describes (creating a SQLite file if absent).
    pub async fn connect(config: &CatalogConfig) -> Result<IcebergCatalog> {
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
            } => Self::connect_rest(name, uri, warehouse.as_deref(), properties).await,
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
            .with_storage_factory(Arc::new(LocalFsStorageFactory))
            .load(name, props)
            .await
            .doing(format_args!("opening the SQL catalog {sqlx_uri}"))?;
        Ok(IcebergCatalog {
            name: name.to_string(),
            inner: Arc::new(inner),
            commits: Arc::new(CommitPath::Sql { pool }),
            _scratch: scratch,
        })
    }

    async fn connect_rest(
        name: &str,
        uri: &str,
        warehouse: Option<&str>,
        properties: &BTreeMap<String, String>,
    ) -> Result<IcebergCatalog> {
        let mut props: HashMap<String, String> = properties.clone().into_iter().collect();
        props.insert("uri".into(), uri.to_string());
        if let Some(w) = warehouse {
            props.insert("warehouse".into(), w.to_string());
        }
        let mut headers: HashMap<String, String> = properties
            .iter()
            .filter_map(|(k, v)| k.strip_prefix("header.").map(|h| (h.to_string(), v.clone())))
            .collect();
        if let Some(token) = properties.get("token") {
            headers.insert("Authorization".into(), format!("Bearer {token}"));
        }
        let http = reqwest::Client::new();
        let prefix = rest_prefix(&http, uri, warehouse, &headers).await?;
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
            .with_storage_factory(Arc::new(LocalFsStorageFactory))
            .load(name, props)
            .await
            .doing(format_args!("opening the REST catalog {uri}"))?;
        Ok(IcebergCatalog {
            name: name.to_string(),
            inner: Arc::new(inner),
            commits: Arc::new(CommitPath::Rest {
                http,
                tables_url,
                headers,
            }),
            _scratch: None,
        })
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
            Err(e) => Err(e).doing(format_args!("loading table {}", table_name(ident))),
        }
    }

    /// Loads a table that must exist.
    pub async fn require_table(&self, ident: &TableIdent) -> Result<Table> {
        self.load_table(ident)
            .await?
            .ok_or_else(|| Error::not_found("table", table_name(ident)))
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
            .inner
            .namespace_exists(namespace)
            .await
            .doing(format_args!("checking namespace {}", namespace.join(".")))?;
        if !exists && let Err(e) = self.inner.create_namespace(namespace, HashMap::new()).await {
            // Writers racing to create it: the SQL catalog reports the loser as a unique
            // constraint violation, not as NamespaceAlreadyExists, so look again.
            let created_by_another = e.kind() == iceberg::ErrorKind::NamespaceAlreadyExists
                || self.inner.namespace_exists(namespace).await.unwrap_or(false);
            if !created_by_another {
                return Err(e).doing(format_args!("creating namespace {}", namespace.join(".")));
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
        match self.inner.create_table(namespace, creation).await {
            Ok(table) => Ok((table, true)),
            Err(e) if e.kind() == iceberg::ErrorKind::TableAlreadyExists => {
                Ok((self.require_table(ident).await?, false))
            }
            // As for namespaces: a lost race may surface as a constraint violation.
            Err(e) => match self.load_table(ident).await {
                Ok(Some(table)) => Ok((table, false)),
                _ => Err(e).doing(format_args!("creating table {}", table_name(ident))),
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
                headers,
            } => commit_rest(http, tables_url, headers, table, requirements, updates, &name).await,
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

async fn rest_prefix(
    http: &reqwest::Client,
    uri: &str,
    warehouse: Option<&str>,
    headers: &HashMap<String, String>,
) -> Result<Option<String>> {
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
    let mut request = http.get(url.clone());
    for (k, v) in headers {
        request = request.header(k, v);
    }
    let response = request.send().await.map_err(|e| {
        Error::new(
            ErrorKind::Transient,
            format!("cannot reach the REST catalog at {uri}: {e}"),
        )
        .with_context("catalog", uri.to_string())
    })?;
    if !response.status().is_success() {
        return Err(Error::new(
            ErrorKind::InvalidConfig,
            format!(
                "the REST catalog at {uri} answered {} to {url}",
                response.status()
            ),
        ));
    }
    let config: serde_json::Value = response
        .json()
        .await
        .map_err(|e| Error::internal(format!("the REST catalog's config is not JSON: {e}")))?;
    let pick = |section: &str| config[section]["prefix"].as_str().map(str::to_string);
    Ok(pick("overrides").or_else(|| pick("defaults")))
}

async fn commit_rest(
    http: &reqwest::Client,
    tables_url: &url::Url,
    headers: &HashMap<String, String>,
    table: &Table,
    requirements: Vec<TableRequirement>,
    updates: Vec<TableUpdate>,
    name: &str,
) -> Result<()> {
    let ident = table.identifier();
    let mut url = tables_url.clone();
    url.path_segments_mut()
        .expect("checked at connect")
        .push("namespaces")
        .push(&ident.namespace().join("\u{1f}"))
        .push("tables")
        .push(ident.name());
    let body = CommitTableRequest {
        identifier: Some(ident.clone()),
        requirements,
        updates,
    };
    let mut request = http.post(url).json(&body);
    for (k, v) in headers {
        request = request.header(k, v);
    }
    let response = request.send().await.map_err(|e| {
        // The request may or may not have been applied: the caller reloads and looks for
        // its commit id before trying again.
        Error::new(ErrorKind::Transient, format!("committing to {name}: {e}")).with_retryable(true)
    })?;
    let status = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    match status {
        200..=299 => Ok(()),
        409 => Err(Error::new(
            ErrorKind::Conflict,
            format!("table {name} changed while committing: {text}"),
        )
        .with_context("table", name.to_string())),
        404 => Err(Error::not_found("table", name)),
        500..=599 => Err(Error::new(
            ErrorKind::Transient,
            format!("committing to {name}: the catalog answered {status}, state unknown: {text}"),
        )
        .with_retryable(true)),
        _ => Err(Error::new(
            ErrorKind::InvalidInput,
            format!("committing to {name}: the catalog answered {status}: {text}"),
        )),
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
