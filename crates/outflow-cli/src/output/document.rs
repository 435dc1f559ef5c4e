//! The one shape of every `--json` document, for runs, plans, checks, the sink
//! subcommands and errors alike (docs/jobs.md lists every key).
//!
//! Each document is one JSON object on stdout with an envelope: `version` (of this shape,
//! raised when a key changes meaning or goes away), `command` (`run`, `plan`, `check`,
//! `iceberg add-files`...), `status` and `exit_code`, then the command's own keys. A failed
//! command's document has `error`: the error's `kind` (a stable name), its `message` as
//! printed on stderr, the places it names (`file`, `line`, `key`, `column`, `table`, `row`,
//! null when it names none) and its whole `context`.

use outflow_core::Error;
use serde_json::{Map, Value, json};

use crate::exit::ExitStatus;

/// The version of the documents' shape.
pub const VERSION: u32 = 1;

/// The keys of an error that name where it is, each taken from the error's context (`key`
/// is the context's `field`, the job-file key or option at fault).
const PLACES: [(&str, &str); 6] = [
    ("file", "file"),
    ("line", "line"),
    ("key", "field"),
    ("column", "column"),
    ("table", "table"),
    ("row", "row"),
];

/// `command`'s document: the envelope, then the keys of `body` (an object).
pub fn document(command: &str, status: ExitStatus, body: Value) -> Value {
    let mut doc = Map::new();
    doc.insert("version".into(), json!(VERSION));
    doc.insert("command".into(), json!(command));
    doc.insert("status".into(), json!(status.as_str()));
    doc.insert("exit_code".into(), json!(status.code()));
    if let Value::Object(fields) = body {
        for (key, value) in fields {
            doc.entry(key).or_insert(value);
        }
    }
    Value::Object(doc)
}

/// The document of a command that failed with `err`, printed as `message`; `redact` hides
/// substituted values in what the error's context quotes.
pub fn error_document(
    command: &str,
    mut body: Map<String, Value>,
    err: &Error,
    message: &str,
    redact: impl Fn(&str) -> String,
) -> Value {
    let status = ExitStatus::of(err);
    body.insert("error".into(), error_value(err, message, redact));
    document(command, status, Value::Object(body))
}

/// An error as JSON; see the module docs.
pub fn error_value(err: &Error, message: &str, redact: impl Fn(&str) -> String) -> Value {
    let mut error = Map::new();
    error.insert("kind".into(), json!(err.kind().code()));
    error.insert("message".into(), json!(message));
    for (key, from) in PLACES {
        let value = err.context_value(from).map(&redact);
        error.insert(key.into(), json!(value));
    }
    let context: Map<String, Value> = err
        .context()
        .iter()
        .map(|(k, v)| (k.to_string(), json!(redact(v))))
        .collect();
    error.insert("context".into(), Value::Object(context));
    Value::Object(error)
}

/// The document of arguments the command line could not parse (`clap`'s message).
pub fn usage_document(message: &str) -> Value {
    let error = json!({
        "kind": "usage",
        "message": message,
        "file": null, "line": null, "key": null, "column": null, "table": null, "row": null,
        "context": {},
    });
    document("outflow", ExitStatus::Usage, json!({ "error": error }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_document_starts_with_the_envelope() {
        let doc = document("run", ExitStatus::Rejected, json!({"rows": 3, "status": "mine"}));
        assert_eq!(doc["version"], 1);
        assert_eq!(doc["command"], "run");
        assert_eq!(doc["status"], "rejected", "the envelope wins over a body key");
        assert_eq!(doc["exit_code"], 3);
        assert_eq!(doc["rows"], 3);
    }

    #[test]
    fn errors_carry_their_kind_and_places() {
        let err = Error::invalid_config("sink.iceberg.table", "is blank")
            .with_context("file", "/jobs/job.yaml")
            .with_context("line", "7")
            .with_context("endpoint", "http://secret@host");
        let doc = error_document("check", Map::new(), &err, "job.yaml: is blank", |v| {
            v.replace("secret", "${TOKEN}")
        });
        assert_eq!(doc["status"], "usage");
        assert_eq!(doc["exit_code"], 2);
        let error = &doc["error"];
        assert_eq!(error["kind"], "invalid_config");
        assert_eq!(error["message"], "job.yaml: is blank");
        assert_eq!(error["key"], "sink.iceberg.table");
        assert_eq!(error["file"], "/jobs/job.yaml");
        assert_eq!(error["line"], "7");
        assert_eq!(error["column"], Value::Null);
        assert_eq!(error["context"]["endpoint"], "http://${TOKEN}@host");
    }

    #[test]
    fn usage_errors_are_documents_too() {
        let doc = usage_document("unexpected argument '--nope'");
        assert_eq!(doc["command"], "outflow");
        assert_eq!(doc["exit_code"], 2);
        assert_eq!(doc["error"]["kind"], "usage");
        assert_eq!(doc["error"]["table"], Value::Null);
    }
}
