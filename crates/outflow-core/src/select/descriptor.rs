//! The field access descriptor: which fields to select, as dotted paths.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// The configuration key that selection errors name.
pub(crate) const SELECT: &str = "select";

/// Which fields to select from a schema, written as dotted paths.
///
/// Each path names a field from the top of the schema: `user`, `location.latitude`,
/// `events.location.latitude`. A path may end in `*` to take every field of the struct it
/// reaches (`user.*`), and `*` alone takes every top-level field. A path may go through
/// lists and maps; a map is entered at its value, either implicitly (`attrs.score`) or by
/// naming it (`attrs.value.score`), and a list at its element (`events.id` or
/// `events.element.id`). See [`select_schema`](super::select_schema) for what each kind of
/// path yields.
///
/// Parsing checks the paths' shape only: blank paths, empty segments, a `*` that is not the
/// last segment and a path listed twice are rejected. Whether the fields exist is checked
/// against a schema when the descriptor is applied.
///
/// Field names are matched exactly (case-sensitive). A name that itself contains `.` or is
/// exactly `*` cannot be addressed.
///
/// The descriptor serializes as the list of its paths, in the order they were written,
/// which is also the order of the selected columns.
///
/// ```
/// use outflow_core::select::FieldAccessDescriptor;
///
/// let fields = FieldAccessDescriptor::parse(["user.*", "events.location.latitude"]).unwrap();
/// assert_eq!(fields.paths().collect::<Vec<_>>(), ["user.*", "events.location.latitude"]);
/// assert!(FieldAccessDescriptor::parse(["user..name"]).is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<String>", into = "Vec<String>")]
pub struct FieldAccessDescriptor {
    paths: Vec<FieldPath>,
}

/// One parsed dotted path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FieldPath {
    text: String,
    segments: Vec<Segment>,
}

/// One segment of a path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Segment {
    /// A field (or a container's `element` / `value` marker), by name.
    Field(String),
    /// `*`: every field of the struct reached so far.
    All,
}

impl FieldAccessDescriptor {
    /// Parses a list of dotted paths.
    ///
    /// Leading and trailing whitespace around a path is ignored. Fails, naming the path,
    /// when the list is empty, a path is blank, has an empty segment (`a..b`, `.a`, `a.`),
    /// has `*` anywhere but at the end, or is listed twice.
    pub fn parse<I, S>(paths: I) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut parsed: Vec<FieldPath> = Vec::new();
        for raw in paths {
            let path = FieldPath::parse(raw.as_ref())?;
            if parsed.iter().any(|p| p.text == path.text) {
                return Err(Error::invalid_config(
                    SELECT,
                    format!("field path {:?} is listed twice", path.text),
                )
                .with_context("path", path.text));
            }
            parsed.push(path);
        }
        if parsed.is_empty() {
            return Err(Error::invalid_config(SELECT, "at least one field path is needed"));
        }
        Ok(FieldAccessDescriptor { paths: parsed })
    }

    /// The paths, as written (trimmed), in order.
    pub fn paths(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.paths.iter().map(|p| p.text.as_str())
    }

    pub(crate) fn field_paths(&self) -> &[FieldPath] {
        &self.paths
    }
}

impl fmt::Display for FieldAccessDescriptor {
    /// The paths joined with `, `.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, path) in self.paths.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(&path.text)?;
        }
        Ok(())
    }
}

impl TryFrom<Vec<String>> for FieldAccessDescriptor {
    type Error = Error;

    fn try_from(paths: Vec<String>) -> Result<Self> {
        FieldAccessDescriptor::parse(paths)
    }
}

impl From<FieldAccessDescriptor> for Vec<String> {
    fn from(descriptor: FieldAccessDescriptor) -> Self {
        descriptor.paths.into_iter().map(|p| p.text).collect()
    }
}

impl FieldPath {
    fn parse(raw: &str) -> Result<Self> {
        let text = raw.trim();
        if text.is_empty() {
            return Err(Error::invalid_config(SELECT, "a field path is blank"));
        }
        let parts: Vec<&str> = text.split('.').collect();
        let mut segments = Vec::with_capacity(parts.len());
        for (i, part) in parts.iter().enumerate() {
            let problem = if part.is_empty() {
                Some(format!("segment {} is empty", i + 1))
            } else if *part == "*" && i + 1 != parts.len() {
                Some(format!("segment {} is `*`, which may only end a path", i + 1))
            } else {
                None
            };
            if let Some(problem) = problem {
                return Err(
                    Error::invalid_config(SELECT, format!("field path {text:?}: {problem}"))
                        .with_context("path", text),
                );
            }
            segments.push(if *part == "*" {
                Segment::All
            } else {
                Segment::Field((*part).to_string())
            });
        }
        Ok(FieldPath {
            text: text.to_string(),
            segments,
        })
    }

    /// The path as written.
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    pub(crate) fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// The first `n` segments, dotted: where in the schema a path has got to.
    pub(crate) fn prefix(&self, n: usize) -> String {
        self.text.split('.').take(n).collect::<Vec<_>>().join(".")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;
    use proptest::prelude::*;

    #[test]
    fn parses_fields_wildcards_and_markers() {
        let d =
            FieldAccessDescriptor::parse(["user", " location.latitude ", "user.*", "*", "attrs.value.score"])
                .unwrap();
        assert_eq!(
            d.paths().collect::<Vec<_>>(),
            ["user", "location.latitude", "user.*", "*", "attrs.value.score"]
        );
        assert_eq!(
            d.field_paths()[2].segments(),
            [Segment::Field("user".into()), Segment::All]
        );
        assert_eq!(d.field_paths()[3].segments(), [Segment::All]);
        assert_eq!(d.field_paths()[4].prefix(2), "attrs.value");
        assert_eq!(
            d.to_string(),
            "user, location.latitude, user.*, *, attrs.value.score"
        );
    }

    #[test]
    fn rejects_blank_paths_and_empty_segments_naming_them() {
        let blank = FieldAccessDescriptor::parse(["user", "  "]).unwrap_err();
        assert_eq!(blank.kind(), ErrorKind::InvalidConfig);
        assert_eq!(blank.message(), "select: a field path is blank");

        for (path, segment) in [("a..b", 2), (".a", 1), ("a.", 2)] {
            let err = FieldAccessDescriptor::parse([path]).unwrap_err();
            assert_eq!(
                err.message(),
                format!("select: field path {path:?}: segment {segment} is empty")
            );
            assert_eq!(err.context_value("path"), Some(path));
        }
    }

    #[test]
    fn rejects_inner_wildcards_duplicates_and_nothing() {
        let inner = FieldAccessDescriptor::parse(["user.*.name"]).unwrap_err();
        assert_eq!(
            inner.message(),
            "select: field path \"user.*.name\": segment 2 is `*`, which may only end a path"
        );
        let twice = FieldAccessDescriptor::parse(["user", " user"]).unwrap_err();
        assert_eq!(twice.message(), "select: field path \"user\" is listed twice");
        let none = FieldAccessDescriptor::parse(Vec::<String>::new()).unwrap_err();
        assert_eq!(none.message(), "select: at least one field path is needed");
    }

    #[test]
    fn serde_is_the_list_of_paths() {
        let d = FieldAccessDescriptor::parse(["user.*", "events.location.latitude"]).unwrap();
        let json = serde_json::to_string(&d).unwrap();
        assert_eq!(json, r#"["user.*","events.location.latitude"]"#);
        assert_eq!(serde_json::from_str::<FieldAccessDescriptor>(&json).unwrap(), d);
        let yaml: FieldAccessDescriptor = serde_yaml_ng::from_str("[user, location.latitude]").unwrap();
        assert_eq!(
            yaml,
            FieldAccessDescriptor::parse(["user", "location.latitude"]).unwrap()
        );
        let err = serde_json::from_str::<FieldAccessDescriptor>(r#"["a..b"]"#).unwrap_err();
        assert!(err.to_string().contains("segment 2 is empty"), "{err}");
    }

    fn segment() -> impl Strategy<Value = String> {
        "[a-z_]([a-z0-9_ ]{0,5}[a-z0-9_])?"
    }

    fn path() -> impl Strategy<Value = String> {
        (prop::collection::vec(segment(), 1..4), any::<bool>()).prop_map(|(mut parts, all)| {
            if all {
                parts.push("*".into());
            }
            parts.join(".")
        })
    }

    proptest! {
        #[test]
        fn parse_and_serde_round_trip(paths in prop::collection::btree_set(path(), 1..5)) {
            let d = FieldAccessDescriptor::parse(&paths).unwrap();
            prop_assert_eq!(d.paths().collect::<Vec<_>>(), paths.iter().collect::<Vec<_>>());
            let again = FieldAccessDescriptor::parse(d.paths()).unwrap();
            prop_assert_eq!(&again, &d);
            let json = serde_json::to_string(&d).unwrap();
            prop_assert_eq!(serde_json::from_str::<FieldAccessDescriptor>(&json).unwrap(), d);
        }
    }
}
