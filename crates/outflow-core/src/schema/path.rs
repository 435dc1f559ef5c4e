//! Column paths: a column's names from the top level down, written as one string.
//!
//! Names are joined with dots. A name that itself contains a dot or a backtick (pandas'
//! `json_normalize` writes `user.id`; Iceberg and Parquet allow it) is written between
//! backticks with its own backticks doubled, the quoting BigQuery and Spark use for such
//! names. So every path string reads back as exactly the names it was made of:
//! `` a.b `` is the child `b` of `a`, `` `a.b` `` the top-level column named `a.b`.
//!
//! Code that walks a schema works on the names ([`split_path`]); strings are for messages,
//! plans and configuration, built with [`join_path`] or [`path_of`].

use std::borrow::Cow;

/// `name` as one path segment: quoted when it contains a dot or a backtick.
pub fn quote_name(name: &str) -> Cow<'_, str> {
    if name.contains(['.', '`']) {
        Cow::Owned(format!("`{}`", name.replace('`', "``")))
    } else {
        Cow::Borrowed(name)
    }
}

/// The path of the child `name` under `parent` (the empty string is the top level).
pub fn join_path(parent: &str, name: &str) -> String {
    let name = quote_name(name);
    if parent.is_empty() {
        name.into_owned()
    } else {
        format!("{parent}.{name}")
    }
}

/// The path made of `names`, top level first.
pub fn path_of<S: AsRef<str>>(names: &[S]) -> String {
    names
        .iter()
        .fold(String::new(), |path, name| join_path(&path, name.as_ref()))
}

/// The names a path is made of, or why it is not a path: a segment is empty, or a quote
/// is not closed or is followed by something other than a dot.
pub fn split_path(path: &str) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    let mut chars = path.chars().peekable();
    loop {
        let mut name = String::new();
        if chars.peek() == Some(&'`') {
            chars.next();
            loop {
                match chars.next() {
                    None => return Err(format!("path {path:?} has an unclosed backtick")),
                    Some('`') if chars.peek() == Some(&'`') => {
                        chars.next();
                        name.push('`');
                    }
                    Some('`') => break,
                    Some(c) => name.push(c),
                }
            }
            if !matches!(chars.peek(), None | Some('.')) {
                return Err(format!(
                    "path {path:?}: a quoted name must be followed by a dot or the end"
                ));
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == '.' {
                    break;
                }
                if c == '`' {
                    return Err(format!("path {path:?}: a backtick may only open a quoted name"));
                }
                name.push(c);
                chars.next();
            }
        }
        if name.trim().is_empty() {
            return Err(format!("path {path:?} has an empty segment"));
        }
        names.push(name);
        match chars.next() {
            None => return Ok(names),
            Some(_dot) => {}
        }
    }
}

/// The path's names; for paths this crate built, which always parse.
pub(crate) fn names(path: &str) -> Vec<String> {
    split_path(path).unwrap_or_else(|_| vec![path.to_string()])
}

/// The parent's path and the last name, or `None` for a top-level path.
pub(crate) fn split_last(path: &str) -> (Option<String>, String) {
    let mut names = names(path);
    let last = names.pop().unwrap_or_default();
    if names.is_empty() {
        (None, last)
    } else {
        (Some(path_of(&names)), last)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn plain_names_join_with_dots() {
        assert_eq!(join_path("", "a"), "a");
        assert_eq!(join_path("a", "b"), "a.b");
        assert_eq!(split_path("a.b.element").unwrap(), ["a", "b", "element"]);
    }

    #[test]
    fn dotted_and_backticked_names_are_quoted() {
        assert_eq!(join_path("", "user.id"), "`user.id`");
        assert_eq!(join_path("s", "a.b"), "s.`a.b`");
        assert_eq!(join_path("", "x`y"), "`x``y`");
        assert_eq!(split_path("s.`a.b`.c").unwrap(), ["s", "a.b", "c"]);
        assert_eq!(split_path("`x``y`").unwrap(), ["x`y"]);
    }

    #[test]
    fn malformed_paths_say_why() {
        for (bad, why) in [
            ("", "empty segment"),
            ("a..b", "empty segment"),
            ("a.", "empty segment"),
            ("`a", "unclosed"),
            ("`a`b", "followed by a dot"),
            ("a`b", "only open"),
        ] {
            let err = split_path(bad).unwrap_err();
            assert!(err.contains(why), "{bad:?}: {err}");
        }
    }

    #[test]
    fn split_last_names_the_parent() {
        assert_eq!(split_last("a"), (None, "a".to_string()));
        assert_eq!(split_last("a.`b.c`"), (Some("a".to_string()), "b.c".to_string()));
        assert_eq!(
            split_last("`a.b`.c"),
            (Some("`a.b`".to_string()), "c".to_string())
        );
    }

    proptest! {
        #[test]
        fn every_path_reads_back_as_its_names(names in proptest::collection::vec("[a-c.` ]{0,3}[a-c.`]", 1..5)) {
            let path = path_of(&names);
            prop_assert_eq!(split_path(&path).unwrap(), names);
        }
    }
}
