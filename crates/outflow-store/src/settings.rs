//! How to reach a store, in Iceberg FileIO's property names.

use std::collections::BTreeMap;
use std::fmt;

use opendal::services::S3;
use outflow_core::{Error, Result};
use serde::{Deserialize, Serialize};

/// The settings of a store, as `key: value` pairs named like Iceberg's FileIO properties,
/// so a job's source and its Iceberg catalog are configured alike:
///
/// | key | meaning |
/// |---|---|
/// | `s3.endpoint` | the store's URL, for a store other than AWS (`http://127.0.0.1:8333`) |
/// | `s3.region` (or `client.region`) | the region |
/// | `s3.path-style-access` | `true` for `endpoint/bucket/key` URLs (needed on an IP address) |
/// | `s3.access-key-id`, `s3.secret-access-key`, `s3.session-token` | explicit credentials |
/// | `s3.allow-anonymous` | `true` to send unsigned requests (public buckets) |
///
/// Without explicit keys, S3's usual credential chain applies: the `AWS_*` environment
/// variables, the shared profile files, then the instance metadata service. Unknown keys
/// are refused, naming the key, so a misspelt setting is not silently ignored.
///
/// `Debug` shows the keys and hides the secrets' values.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StorageSettings(BTreeMap<String, String>);

/// Keys whose values are credentials.
const SECRET_KEYS: &[&str] = &["s3.secret-access-key", "s3.session-token"];

/// Every key Outflow reads.
const KNOWN_KEYS: &[&str] = &[
    "s3.endpoint",
    "s3.region",
    "client.region",
    "s3.path-style-access",
    "s3.access-key-id",
    "s3.secret-access-key",
    "s3.session-token",
    "s3.allow-anonymous",
];

impl StorageSettings {
    /// No settings: the store's defaults and credential chain.
    pub fn new() -> StorageSettings {
        StorageSettings::default()
    }

    /// The settings among `properties` (a catalog's) that this crate reads; the catalog's
    /// other properties, its own storage settings included, are left to it.
    pub fn from_properties<'a>(
        properties: impl IntoIterator<Item = (&'a String, &'a String)>,
    ) -> StorageSettings {
        StorageSettings(
            properties
                .into_iter()
                .filter(|(k, _)| KNOWN_KEYS.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        )
    }

    /// Adds or replaces a setting.
    pub fn with(mut self, key: impl Into<String>, value: impl Into<String>) -> StorageSettings {
        self.0.insert(key.into(), value.into());
        self
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// Whether no setting is given.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `key`'s value is a credential, never to be shown.
    pub fn is_secret(key: &str) -> bool {
        SECRET_KEYS.contains(&key)
    }

    /// The S3 service for `bucket` under these settings; `what` names where the settings
    /// came from, for errors.
    pub(crate) fn s3(&self, bucket: &str, what: &str) -> Result<S3> {
        let mut builder = S3::default().bucket(bucket);
        // Iceberg's default: virtual-host style (`bucket.endpoint/key`), as AWS wants.
        let mut virtual_host = true;
        for (key, value) in &self.0 {
            let value = value.as_str();
            builder = match key.as_str() {
                "s3.endpoint" => builder.endpoint(value),
                "s3.region" | "client.region" => builder.region(value),
                "s3.access-key-id" => builder.access_key_id(value),
                "s3.secret-access-key" => builder.secret_access_key(value),
                "s3.session-token" => builder.session_token(value),
                "s3.path-style-access" => {
                    virtual_host = !truthy(key, value, what)?;
                    builder
                }
                "s3.allow-anonymous" if truthy(key, value, what)? => builder.skip_signature(),
                "s3.allow-anonymous" => builder,
                other => {
                    return Err(Error::invalid_config(
                        what,
                        format!(
                            "{other:?} is not a storage setting Outflow knows (see docs/object-stores.md)"
                        ),
                    ));
                }
            };
        }
        if virtual_host {
            builder = builder.enable_virtual_host_style();
        }
        Ok(builder)
    }
}

fn truthy(key: &str, value: &str, what: &str) -> Result<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "yes" | "1" | "on" => Ok(true),
        "false" | "no" | "0" | "off" => Ok(false),
        _ => Err(Error::invalid_config(
            what,
            format!("{key} must be true or false, not {value:?}"),
        )),
    }
}

impl fmt::Debug for StorageSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut map = f.debug_map();
        for (key, value) in &self.0 {
            if StorageSettings::is_secret(key) {
                map.entry(key, &"<redacted>");
            } else {
                map.entry(key, value);
            }
        }
        map.finish()
    }
}

impl FromIterator<(String, String)> for StorageSettings {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(iter: I) -> Self {
        StorageSettings(iter.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_the_secrets() {
        let settings = StorageSettings::new()
            .with("s3.access-key-id", "AKIDEXAMPLE")
            .with("s3.secret-access-key", "wJalrXUtnFEMI-secret")
            .with("s3.session-token", "token-value-123");
        let shown = format!("{settings:?}");
        assert!(
            !shown.contains("wJalrXUtnFEMI") && !shown.contains("token-value"),
            "{shown}"
        );
        assert!(
            shown.contains("AKIDEXAMPLE") && shown.contains("<redacted>"),
            "{shown}"
        );
    }

    #[test]
    fn unknown_keys_and_bad_flags_are_named() {
        let err = StorageSettings::new()
            .with("s3.endpoint-url", "http://x")
            .s3("b", "source.storage")
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("\"s3.endpoint-url\" is not a storage setting"),
            "{err}"
        );
        assert!(err.to_string().contains("source.storage"), "{err}");
        let err = StorageSettings::new()
            .with("s3.path-style-access", "maybe")
            .s3("b", "source.storage")
            .unwrap_err();
        assert!(err.to_string().contains("must be true or false"), "{err}");
    }

    #[test]
    fn every_key_catalogs_pass_on_is_one_the_store_reads() {
        for key in KNOWN_KEYS {
            let value = if key.ends_with("-access") || key.ends_with("anonymous") {
                "true"
            } else {
                "x"
            };
            let settings = StorageSettings::new().with(*key, value);
            assert!(settings.s3("b", "test").is_ok(), "{key}");
        }
    }

    #[test]
    fn catalog_properties_give_only_their_storage_settings() {
        let props: BTreeMap<String, String> = [
            ("s3.region", "eu"),
            ("uri", "x"),
            ("client.region", "us"),
            ("s3.sse.type", "s3"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let settings = StorageSettings::from_properties(&props);
        assert_eq!(
            (settings.get("s3.region"), settings.get("uri")),
            (Some("eu"), None)
        );
        assert_eq!(settings.get("s3.sse.type"), None);
        assert_eq!(settings.get("client.region"), Some("us"));
    }
}
