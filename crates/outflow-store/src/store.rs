//! One bucket of an object store: listings, sizes and ranged reads.

use std::fmt;
use std::ops::Range;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use opendal::layers::{RetryLayer, TimeoutLayer};
use opendal::{EntryMode, Operator};
use outflow_core::{Error, ErrorKind, Result};

use crate::location::{ObjectUrl, Scheme};
use crate::settings::StorageSettings;

/// A deadline for each call that is not a data transfer (stat, list, the start of a read).
const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// A deadline for each chunk of a transfer: a stalled connection fails, a slow one does not.
const IO_TIMEOUT: Duration = Duration::from_secs(30);
/// Attempts of a call that failed in a way worth retrying (timeouts, 5xx, throttling).
const ATTEMPTS: usize = 4;

/// An object found by a listing or a stat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectEntry {
    /// Its URL.
    pub url: ObjectUrl,
    /// Its size in bytes.
    pub size: u64,
    /// When it was last written, in milliseconds since the Unix epoch (0 when the store
    /// did not say).
    pub modified_ms: i64,
}

/// One bucket of a store, reached with given settings.
#[derive(Clone)]
pub struct ObjectStore {
    operator: Operator,
    scheme: Scheme,
    bucket: String,
}

impl fmt::Debug for ObjectStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectStore")
            .field("scheme", &self.scheme)
            .field("bucket", &self.bucket)
            .finish_non_exhaustive()
    }
}

impl ObjectStore {
    /// The store holding `url`'s bucket; `what` names where the settings came from, for
    /// errors. Nothing is sent yet.
    pub fn open(url: &ObjectUrl, settings: &StorageSettings, what: &str) -> Result<ObjectStore> {
        let unreachable = |e: opendal::Error| Error::invalid_config(what, format!("cannot reach {url}: {e}"));
        let operator = match url.scheme() {
            Scheme::S3 => Operator::new(settings.s3(url.bucket(), what)?)
                .map_err(unreachable)?
                .finish(),
            Scheme::Gcs => Operator::new(settings.gcs(url.bucket(), what)?)
                .map_err(unreachable)?
                .finish(),
        }
        .layer(
            TimeoutLayer::new()
                .with_timeout(CALL_TIMEOUT)
                .with_io_timeout(IO_TIMEOUT),
        )
        .layer(RetryLayer::new().with_max_times(ATTEMPTS).with_jitter());
        Ok(ObjectStore {
            operator,
            scheme: url.scheme(),
            bucket: url.bucket().to_string(),
        })
    }

    /// Whether `url` is in this store's bucket.
    pub fn holds(&self, url: &ObjectUrl) -> bool {
        url.scheme() == self.scheme && url.bucket() == self.bucket
    }

    /// The underlying OpenDAL operator, rooted at the bucket.
    pub fn operator(&self) -> &Operator {
        &self.operator
    }

    /// The object at `url`, or `None` when there is none (a prefix is not an object).
    pub async fn stat(&self, url: &ObjectUrl) -> Result<Option<ObjectEntry>> {
        if url.key().is_empty() || url.key().ends_with('/') {
            return Ok(None);
        }
        match self.operator.stat(url.key()).await {
            Ok(meta) if meta.mode() == EntryMode::FILE => Ok(Some(ObjectEntry {
                url: url.clone(),
                size: meta.content_length(),
                modified_ms: millis(meta.last_modified()),
            })),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == opendal::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(store_error(url, "read", e)),
        }
    }

    /// Every object under `prefix` (a key prefix ending in `/`, or empty for the whole
    /// bucket), at any depth, sorted by key.
    pub async fn list(&self, prefix: &ObjectUrl) -> Result<Vec<ObjectEntry>> {
        let dir = prefix.as_prefix();
        let mut lister = self
            .operator
            .lister_with(&dir)
            .recursive(true)
            .await
            .map_err(|e| store_error(prefix, "list", e))?;
        let mut entries = Vec::new();
        while let Some(entry) = lister.next().await {
            let entry = entry.map_err(|e| store_error(prefix, "list", e))?;
            let meta = entry.metadata();
            if meta.mode() != EntryMode::FILE {
                continue;
            }
            entries.push(ObjectEntry {
                url: prefix.with_key(entry.path()),
                size: meta.content_length(),
                modified_ms: millis(meta.last_modified()),
            });
        }
        entries.sort_by(|a, b| a.url.key().cmp(b.url.key()));
        Ok(entries)
    }

    /// The objects a glob URL matches (`s3://b/in/*/part-*.csv`), sorted by key: the glob
    /// applies to the whole key, `*` stops at `/` and `**` crosses it, as for local files.
    pub async fn glob(&self, pattern: &ObjectUrl, what: &str) -> Result<Vec<ObjectEntry>> {
        let matcher = glob::Pattern::new(pattern.key()).map_err(|e| {
            Error::invalid_config(
                what,
                format!("{:?} is not a valid glob: {e}", pattern.to_string()),
            )
            .with_context("path", pattern.to_string())
        })?;
        let options = glob::MatchOptions {
            require_literal_separator: true,
            ..glob::MatchOptions::new()
        };
        let under = pattern.with_key(pattern.literal_prefix());
        let all = self.list(&under).await?;
        Ok(all
            .into_iter()
            .filter(|e| matcher.matches_with(e.url.key(), options))
            .collect())
    }

    /// The bytes `range` of the object at `url`.
    pub async fn read(&self, url: &ObjectUrl, range: Range<u64>) -> Result<Bytes> {
        let buffer = self
            .operator
            .read_with(url.key())
            .range(range)
            .await
            .map_err(|e| store_error(url, "read", e))?;
        Ok(buffer.to_bytes())
    }

    /// The object at `url` as a stream of chunks, from `start` to its end, read by one
    /// request as the chunks are taken.
    pub async fn stream_from(
        &self,
        url: &ObjectUrl,
        start: u64,
    ) -> Result<impl futures::Stream<Item = Result<Bytes>> + Send + Unpin + use<>> {
        let reader = self
            .operator
            .reader(url.key())
            .await
            .map_err(|e| store_error(url, "read", e))?;
        let failed = url.clone();
        let stream = reader
            .into_bytes_stream(start..)
            .await
            .map_err(|e| store_error(url, "read", e))?;
        Ok(stream.map(move |chunk| {
            chunk.map_err(|e| {
                Error::new(ErrorKind::Transient, format!("cannot read {failed}: {e}"))
                    .with_context("file", failed.to_string())
            })
        }))
    }

    /// Deletes the object at `url` (deleting one that is not there succeeds).
    pub async fn delete(&self, url: &ObjectUrl) -> Result<()> {
        self.operator
            .delete(url.key())
            .await
            .map_err(|e| store_error(url, "delete", e))
    }

    /// The store as an `object_store` store (for DataFusion), rooted at the bucket.
    #[cfg(feature = "object-store")]
    pub fn object_store(&self) -> std::sync::Arc<dyn object_store::ObjectStore> {
        std::sync::Arc::new(object_store_opendal::OpendalStore::new(self.operator.clone()))
    }
}

fn millis(time: Option<opendal::raw::Timestamp>) -> i64 {
    time.map_or(0, |t| t.into_inner().as_millisecond())
}

/// An error of a call about `url`, in Outflow's kinds: a missing object is `NotFound`, a
/// refused credential is a configuration error, what may pass (timeouts, 5xx) is transient.
pub(crate) fn store_error(url: &ObjectUrl, doing: &str, e: opendal::Error) -> Error {
    let kind = match e.kind() {
        opendal::ErrorKind::NotFound => ErrorKind::NotFound,
        opendal::ErrorKind::PermissionDenied | opendal::ErrorKind::ConfigInvalid => ErrorKind::InvalidConfig,
        opendal::ErrorKind::RateLimited => ErrorKind::Throttled,
        opendal::ErrorKind::RangeNotSatisfied => ErrorKind::InvalidInput,
        // Network failures and 5xx answers, still failing after the retries.
        opendal::ErrorKind::Unexpected => ErrorKind::Transient,
        // What the store refuses for good (an object that is a directory, an unsupported
        // call) is about the object named.
        _ => ErrorKind::InvalidInput,
    };
    // OpenDAL's own text carries the request and the whole response head: logged, and
    // left out of the message users read.
    tracing::debug!(url = %url, error = %e, "object store call failed");
    let why = match e.kind() {
        opendal::ErrorKind::NotFound => "no such object".to_string(),
        opendal::ErrorKind::PermissionDenied => "access denied (check the store's credentials)".to_string(),
        other => format!("{other}: {}", e.message()),
    };
    Error::new(kind, format!("cannot {doing} {url}: {why}")).with_context("file", url.to_string())
}
