//! Table names: `table`, `dataset.table`, `project.dataset.table` or Beam's
//! `project:dataset.table`, completed from the sink's default project and dataset and checked
//! against BigQuery's naming rules before any request is made.

use std::fmt;

use outflow_core::{Error, Result};

/// A fully qualified BigQuery table.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TableRef {
    /// The project id.
    pub project: String,
    /// The dataset id.
    pub dataset: String,
    /// The table id.
    pub table: String,
}

impl TableRef {
    /// A table reference from its parts, validated.
    pub fn new(project: &str, dataset: &str, table: &str) -> Result<TableRef> {
        validate_project(project)?;
        validate_dataset(dataset)?;
        validate_table(table)?;
        Ok(TableRef {
            project: project.to_string(),
            dataset: dataset.to_string(),
            table: table.to_string(),
        })
    }

    /// Reads `table`, `dataset.table`, `project.dataset.table` or `project:dataset.table`,
    /// taking the missing parts from `default_project` and `default_dataset`.
    pub fn parse(
        text: &str,
        default_project: Option<&str>,
        default_dataset: Option<&str>,
    ) -> Result<TableRef> {
        let bad = |why: String| {
            Error::invalid_config("table", format!("table name {text:?}: {why}")).with_context("table", text)
        };
        let text = text.trim();
        // A domain-scoped project ("example.com:proj") holds a dot, so a colon, when present,
        // is what ends the project.
        let (project, rest) = match text.rfind(':') {
            Some(i) => (Some(&text[..i]), &text[i + 1..]),
            None => (None, text),
        };
        let parts: Vec<&str> = rest.split('.').collect();
        let (project, dataset, table) = match (project, parts.as_slice()) {
            (Some(p), [d, t]) => (Some(p), Some(*d), *t),
            (Some(_), _) => return Err(bad("after `project:` comes `dataset.table`".into())),
            (None, [t]) => (None, None, *t),
            (None, [d, t]) => (None, Some(*d), *t),
            (None, [p, d, t]) => (Some(*p), Some(*d), *t),
            (None, _) => return Err(bad("use table, dataset.table or project.dataset.table".into())),
        };
        let project = project
            .or(default_project)
            .ok_or_else(|| bad("it names no project and no default `project` is set".into()))?;
        let dataset = dataset
            .or(default_dataset)
            .ok_or_else(|| bad("it names no dataset and no default `dataset` is set".into()))?;
        TableRef::new(project, dataset, table).map_err(|e| bad(e.message().to_string()))
    }

    /// `projects/P/datasets/D/tables/T`, the Storage Write API's name for the table.
    pub fn path(&self) -> String {
        format!(
            "projects/{}/datasets/{}/tables/{}",
            self.project, self.dataset, self.table
        )
    }

    /// The same dataset, another table.
    pub fn with_table(&self, table: impl Into<String>) -> TableRef {
        TableRef {
            table: table.into(),
            ..self.clone()
        }
    }

    /// The name as written in SQL: `` `project.dataset.table` ``.
    pub fn sql(&self) -> String {
        format!("`{}.{}.{}`", self.project, self.dataset, self.table)
    }
}

impl fmt::Display for TableRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.project, self.dataset, self.table)
    }
}

/// Project ids: lowercase letters, digits and hyphens, optionally after a `domain:` prefix.
pub(crate) fn validate_project(project: &str) -> Result<()> {
    let field = "project";
    if project.trim().is_empty() {
        return Err(Error::invalid_config(field, "the project id is blank"));
    }
    let ok = project
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.' | ':'));
    if !ok || project.len() > 100 {
        return Err(Error::invalid_config(
            field,
            format!("{project:?} is not a project id (lowercase letters, digits and hyphens)"),
        ));
    }
    Ok(())
}

/// Dataset ids: letters, digits and underscores, at most 1024 characters.
pub(crate) fn validate_dataset(dataset: &str) -> Result<()> {
    let field = "dataset";
    if dataset.is_empty() {
        return Err(Error::invalid_config(field, "the dataset id is blank"));
    }
    if dataset.len() > 1024 || !dataset.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(Error::invalid_config(
            field,
            format!("{dataset:?} is not a dataset id (letters, digits and underscores, at most 1024)"),
        ));
    }
    Ok(())
}

/// Table ids: letters, marks, digits, connectors, dashes and spaces, at most 1024 bytes.
/// Partition decorators (`t$20240101`) and wildcards are not table names and are refused.
pub(crate) fn validate_table(table: &str) -> Result<()> {
    let field = "table";
    if table.trim().is_empty() {
        return Err(Error::invalid_config(field, "the table id is blank"));
    }
    let allowed = |c: char| c.is_alphanumeric() || matches!(c, '_' | '-' | ' ') || is_mark(c);
    if let Some(c) = table.chars().find(|&c| !allowed(c)) {
        return Err(Error::invalid_config(
            field,
            format!(
                "{table:?} is not a table id: {c:?} is not allowed (letters, digits, underscores, \
                 dashes and spaces)"
            ),
        ));
    }
    if table.len() > 1024 {
        return Err(Error::invalid_config(
            field,
            format!("table id {table:?} is longer than 1024 bytes"),
        ));
    }
    Ok(())
}

/// Combining marks (accents written as separate code points), which BigQuery allows.
fn is_mark(c: char) -> bool {
    matches!(c as u32, 0x0300..=0x036F | 0x1AB0..=0x1AFF | 0x1DC0..=0x1DFF | 0x20D0..=0x20FF | 0xFE20..=0xFE2F)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_spelling() {
        let full = TableRef::new("p", "d", "t").unwrap();
        assert_eq!(TableRef::parse("t", Some("p"), Some("d")).unwrap(), full);
        assert_eq!(TableRef::parse("d.t", Some("p"), None).unwrap(), full);
        assert_eq!(TableRef::parse("p.d.t", None, None).unwrap(), full);
        assert_eq!(TableRef::parse("p:d.t", None, None).unwrap(), full);
        let scoped = TableRef::parse("example.com:proj:d.t", None, None).unwrap();
        assert_eq!(scoped.project, "example.com:proj");
        assert_eq!(full.path(), "projects/p/datasets/d/tables/t");
        assert_eq!(full.to_string(), "p.d.t");
        assert_eq!(full.sql(), "`p.d.t`");
    }

    #[test]
    fn malformed_names_are_rejected_naming_the_table() {
        for bad in [
            "bad-name!",
            "a.b.c.d",
            "d.",
            "t$20240101",
            "p:t",
            "dataset-with-dash.t",
            "",
            "d.t/x",
        ] {
            let err = TableRef::parse(bad, Some("p"), Some("d")).unwrap_err();
            assert_eq!(err.context_value("field"), Some("table"), "{bad:?}: {err}");
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
        let err = TableRef::parse("t", None, Some("d")).unwrap_err();
        assert!(err.to_string().contains("no project"), "{err}");
        let err = TableRef::parse("t", Some("p"), None).unwrap_err();
        assert!(err.to_string().contains("no dataset"), "{err}");
        assert!(TableRef::parse("Événements 2024-01", Some("p"), Some("d")).is_ok());
        assert!(TableRef::new("Upper", "d", "t").is_err());
    }
}
