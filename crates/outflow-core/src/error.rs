//! The one error type shared by every Outflow crate.
//!
//! An [`Error`] carries a [`ErrorKind`] that callers branch on, a message written for the
//! person reading it, key-value context (the table, the column, the file...), an optional
//! source (the service or library error underneath) and a `retryable` flag that the retry
//! policy reads. Service errors reach callers through [`std::error::Error::source`], never
//! as part of the public type.

use std::fmt;

/// What went wrong, in the terms a caller can act on.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// A builder or configuration value is missing, blank or contradicts another.
    InvalidConfig,
    /// Input data is malformed or does not fit what was asked (wrong type, null in a
    /// required column, oversize row, unreadable file).
    InvalidInput,
    /// A table, dataset, namespace, family or file does not exist.
    NotFound,
    /// Something that was to be created already exists.
    AlreadyExists,
    /// An input schema cannot be written to the table under the evolution options.
    SchemaIncompatible,
    /// A concurrent change won a race (a commit whose base moved, a precondition failed).
    Conflict,
    /// The service asked us to slow down.
    Throttled,
    /// A failure that may go away on its own (connection reset, unavailable, deadline).
    Transient,
    /// Some records were rejected; the others were written.
    RejectedRecords,
    /// The operation or type is not supported by this sink or service.
    Unsupported,
    /// A bug or a broken invariant inside Outflow or a library it uses.
    Internal,
    /// The work was stopped on request (Ctrl-C) before it finished.
    Interrupted,
}

impl ErrorKind {
    /// The kind's name as printed in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidConfig => "invalid configuration",
            ErrorKind::InvalidInput => "invalid input",
            ErrorKind::NotFound => "not found",
            ErrorKind::AlreadyExists => "already exists",
            ErrorKind::SchemaIncompatible => "schema incompatible",
            ErrorKind::Conflict => "conflict",
            ErrorKind::Throttled => "throttled",
            ErrorKind::Transient => "transient failure",
            ErrorKind::RejectedRecords => "records rejected",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::Internal => "internal error",
            ErrorKind::Interrupted => "interrupted",
        }
    }

    /// The kind's stable name for machines (`invalid_config`, `transient`...), as the
    /// command line's `--json` documents carry it.
    pub fn code(self) -> &'static str {
        match self {
            ErrorKind::InvalidConfig => "invalid_config",
            ErrorKind::InvalidInput => "invalid_input",
            ErrorKind::NotFound => "not_found",
            ErrorKind::AlreadyExists => "already_exists",
            ErrorKind::SchemaIncompatible => "schema_incompatible",
            ErrorKind::Conflict => "conflict",
            ErrorKind::Throttled => "throttled",
            ErrorKind::Transient => "transient",
            ErrorKind::RejectedRecords => "rejected_records",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::Internal => "internal",
            ErrorKind::Interrupted => "interrupted",
        }
    }

    /// Whether errors of this kind are worth retrying unless said otherwise.
    pub fn retryable_by_default(self) -> bool {
        matches!(
            self,
            ErrorKind::Conflict | ErrorKind::Throttled | ErrorKind::Transient
        )
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

type Source = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Outflow's error: a kind, a message, context and an optional source.
pub struct Error {
    kind: ErrorKind,
    message: String,
    context: Vec<(&'static str, String)>,
    source: Option<Source>,
    retryable: bool,
}

/// Outflow's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A new error of `kind` with a message for people.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            context: Vec::new(),
            source: None,
            retryable: kind.retryable_by_default(),
        }
    }

    /// An invalid configuration value, naming the field.
    pub fn invalid_config(field: &str, message: impl fmt::Display) -> Self {
        Error::new(ErrorKind::InvalidConfig, format!("{field}: {message}")).with_context("field", field)
    }

    /// Invalid input data.
    pub fn invalid_input(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::InvalidInput, message)
    }

    /// Something that does not exist, naming what and which.
    pub fn not_found(what: &str, name: impl fmt::Display) -> Self {
        Error::new(ErrorKind::NotFound, format!("{what} {name} does not exist"))
            .with_context(what_key(what), name.to_string())
    }

    /// A broken invariant.
    pub fn internal(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Internal, message)
    }

    /// Adds a key-value pair of context (the table, the column, the file...).
    pub fn with_context(mut self, key: &'static str, value: impl Into<String>) -> Self {
        self.context.push((key, value.into()));
        self
    }

    /// Sets the underlying error.
    pub fn with_source(mut self, source: impl Into<Source>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// The same error with another message (to say where it happened, in the caller's
    /// words): kind, context, source and retryability are kept.
    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        self.message = message.into();
        self
    }

    /// Overrides whether the retry policy may retry this error.
    pub fn with_retryable(mut self, retryable: bool) -> Self {
        self.retryable = retryable;
        self
    }

    /// What went wrong.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message, without kind or context.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The context pairs, in the order they were added.
    pub fn context(&self) -> &[(&'static str, String)] {
        &self.context
    }

    /// The value of one context key, if present.
    pub fn context_value(&self, key: &str) -> Option<&str> {
        self.context
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Whether retrying the same operation may succeed.
    pub fn is_retryable(&self) -> bool {
        self.retryable
    }
}

fn what_key(what: &str) -> &'static str {
    match what {
        "table" => "table",
        "namespace" => "namespace",
        "dataset" => "dataset",
        "column family" => "family",
        "file" => "file",
        "catalog" => "catalog",
        _ => "name",
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)?;
        if let Some(source) = &self.source {
            write!(f, " ({source})")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Error");
        d.field("kind", &self.kind).field("message", &self.message);
        if !self.context.is_empty() {
            d.field("context", &self.context);
        }
        if let Some(source) = &self.source {
            d.field("source", &format_args!("{source}"));
        }
        d.field("retryable", &self.retryable).finish()
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|s| s as &(dyn std::error::Error + 'static))
    }
}

impl From<arrow_schema::ArrowError> for Error {
    fn from(err: arrow_schema::ArrowError) -> Self {
        Error::new(ErrorKind::InvalidInput, "Arrow error").with_source(err)
    }
}

impl From<std::io::Error> for Error {
    fn from(err: std::io::Error) -> Self {
        let kind = match err.kind() {
            std::io::ErrorKind::NotFound => ErrorKind::NotFound,
            std::io::ErrorKind::Interrupted | std::io::ErrorKind::TimedOut => ErrorKind::Transient,
            _ => ErrorKind::InvalidInput,
        };
        Error::new(kind, "I/O error").with_source(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn display_names_kind_message_and_source() {
        let io = std::io::Error::other("disk on fire");
        let err = Error::invalid_input("row 3: column id is null").with_source(io);
        assert_eq!(
            err.to_string(),
            "invalid input: row 3: column id is null (disk on fire)"
        );
        assert_eq!(err.source().unwrap().to_string(), "disk on fire");
    }

    #[test]
    fn retryable_follows_kind_unless_overridden() {
        assert!(Error::new(ErrorKind::Transient, "x").is_retryable());
        assert!(!Error::new(ErrorKind::InvalidInput, "x").is_retryable());
        assert!(
            !Error::new(ErrorKind::Transient, "x")
                .with_retryable(false)
                .is_retryable()
        );
    }

    #[test]
    fn not_found_names_the_thing() {
        let err = Error::not_found("table", "db.events");
        assert_eq!(err.kind(), ErrorKind::NotFound);
        assert_eq!(err.context_value("table"), Some("db.events"));
        assert!(err.to_string().contains("table db.events does not exist"));
    }

    #[test]
    fn a_new_message_keeps_kind_context_source_and_retryability() {
        let err = Error::new(ErrorKind::Transient, "reset")
            .with_context("table", "db.t")
            .with_source(std::io::Error::other("broken pipe"))
            .with_retryable(false)
            .with_message("a.parquet: reset");
        assert_eq!(err.kind(), ErrorKind::Transient);
        assert_eq!(err.message(), "a.parquet: reset");
        assert_eq!(err.context_value("table"), Some("db.t"));
        assert!(err.source().unwrap().downcast_ref::<std::io::Error>().is_some());
        assert!(!err.is_retryable());
    }

    #[test]
    fn invalid_config_names_the_field() {
        let err = Error::invalid_config("column_families", "must not be empty");
        assert_eq!(err.context_value("field"), Some("column_families"));
        assert_eq!(err.message(), "column_families: must not be empty");
    }
}
