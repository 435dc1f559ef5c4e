//! Converting iceberg-rust errors into Outflow's error, keeping them as the source.

use outflow_core::{Error, ErrorKind};

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
