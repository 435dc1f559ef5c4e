//! Object URLs: `scheme://bucket/key`.

use std::fmt;

use outflow_core::{Error, Result};

/// The kind of store an URL's scheme names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// Amazon S3 and S3-compatible stores: `s3://`, also spelled `s3a://` and `s3n://`
    /// (Hadoop's names, common in table locations written by Spark).
    S3,
    /// Google Cloud Storage: `gs://` (the spelling every Iceberg implementation reads).
    Gcs,
}

/// An object's (or a prefix's) URL, as the user wrote it: the spelling of the scheme is
/// kept, so a location recorded in a table is the one given.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjectUrl {
    scheme: String,
    kind: Scheme,
    bucket: String,
    key: String,
}

/// Whether a file's name says it is not data: hidden files (`.a.csv.crc`) and the markers
/// Spark and Hive leave (`_SUCCESS`). Listings of a directory or a prefix leave them out,
/// for local files and objects alike.
pub fn is_hidden_name(name: &str) -> bool {
    name.starts_with('.') || name.starts_with('_')
}

/// Whether `text` is an object URL this crate reads (`s3://...`, `gs://...`), rather than a local
/// path or a URL of another kind.
pub fn is_object_url(text: &str) -> bool {
    text.split_once("://")
        .is_some_and(|(scheme, _)| scheme_kind(scheme).is_some())
}

fn scheme_kind(scheme: &str) -> Option<Scheme> {
    match scheme.to_ascii_lowercase().as_str() {
        "s3" | "s3a" | "s3n" => Some(Scheme::S3),
        "gs" => Some(Scheme::Gcs),
        _ => None,
    }
}

impl ObjectUrl {
    /// Parses `url`; `what` names the setting or argument it came from, for errors.
    ///
    /// The key is everything after the bucket's `/`, taken literally (no percent decoding:
    /// object keys may hold `%`, spaces and `#`).
    pub fn parse(url: &str, what: &str) -> Result<ObjectUrl> {
        let invalid =
            |why: &str| Error::invalid_config(what, format!("{url:?} {why}")).with_context("url", url);
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| invalid("is not an object URL"))?;
        let kind = scheme_kind(scheme)
            .ok_or_else(|| invalid("has a scheme Outflow cannot read (s3:// and gs:// are)"))?;
        let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.trim().is_empty() {
            return Err(invalid("names no bucket"));
        }
        Ok(ObjectUrl {
            scheme: scheme.to_string(),
            kind,
            bucket: bucket.to_string(),
            key: key.to_string(),
        })
    }

    /// The store kind.
    pub fn scheme(&self) -> Scheme {
        self.kind
    }

    /// The bucket.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The key inside the bucket (empty for the bucket itself).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The object `key` in the same bucket, spelled with the same scheme.
    pub fn with_key(&self, key: impl Into<String>) -> ObjectUrl {
        ObjectUrl {
            key: key.into(),
            ..self.clone()
        }
    }

    /// The last segment of the key: the object's name.
    pub fn name(&self) -> &str {
        self.key.rsplit('/').next().unwrap_or_default()
    }

    /// Whether the key holds glob characters (`*`, `?`, `[`).
    pub fn is_glob(&self) -> bool {
        self.key.contains(['*', '?', '['])
    }

    /// The part of the key before its first glob character, cut back to a `/`: the prefix
    /// a glob's matches are listed under.
    pub fn literal_prefix(&self) -> &str {
        let literal = self
            .key
            .find(['*', '?', '['])
            .map_or(self.key.as_str(), |i| &self.key[..i]);
        literal.rfind('/').map_or("", |i| &literal[..=i])
    }

    /// The key as a directory prefix: ending in `/` (empty for the bucket's root).
    pub fn as_prefix(&self) -> String {
        if self.key.is_empty() || self.key.ends_with('/') {
            self.key.clone()
        } else {
            format!("{}/", self.key)
        }
    }
}

impl fmt::Display for ObjectUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}/{}", self.scheme, self.bucket, self.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_keep_their_spelling_and_keys_stay_literal() {
        let url = ObjectUrl::parse("s3a://lake/raw/a b%20c#1.parquet", "path").unwrap();
        assert_eq!(url.scheme(), Scheme::S3);
        assert_eq!((url.bucket(), url.key()), ("lake", "raw/a b%20c#1.parquet"));
        assert_eq!(url.to_string(), "s3a://lake/raw/a b%20c#1.parquet");
        assert_eq!(url.with_key("x/y").to_string(), "s3a://lake/x/y");
        assert_eq!(url.name(), "a b%20c#1.parquet");
        assert!(is_hidden_name("_SUCCESS") && is_hidden_name(".a.crc") && !is_hidden_name("a_b.csv"));
        let root = ObjectUrl::parse("s3://lake", "path").unwrap();
        assert_eq!((root.key(), root.as_prefix()), ("", String::new()));
        assert_eq!(ObjectUrl::parse("s3://lake/in", "p").unwrap().as_prefix(), "in/");
    }

    #[test]
    fn a_glob_is_listed_under_its_literal_directory() {
        let glob = ObjectUrl::parse("s3://b/in/2026-*/part-?.csv", "path").unwrap();
        assert!(glob.is_glob());
        assert_eq!(glob.literal_prefix(), "in/");
        let top = ObjectUrl::parse("s3://b/*.csv", "path").unwrap();
        assert_eq!(top.literal_prefix(), "");
        assert!(!ObjectUrl::parse("s3://b/in/a.csv", "path").unwrap().is_glob());
    }

    #[test]
    fn what_is_not_an_object_url_is_named() {
        for (url, why) in [
            ("s3:///key", "names no bucket"),
            ("ftp://host/x", "has a scheme Outflow cannot read"),
            ("/local/path", "is not an object URL"),
        ] {
            let err = ObjectUrl::parse(url, "source.path").unwrap_err();
            assert!(err.to_string().contains(why), "{url}: {err}");
            assert!(err.to_string().contains("source.path"), "{err}");
        }
        assert!(is_object_url("S3://b/k") && is_object_url("gs://b/k") && !is_object_url("a/s3://b"));
        assert_eq!(
            ObjectUrl::parse("gs://lake/a", "p").unwrap().scheme(),
            Scheme::Gcs
        );
        assert!(!is_object_url("gcs://b/k"), "Java and PyIceberg read gs:// only");
    }
}
