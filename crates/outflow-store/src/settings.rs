//! How to reach a store, in Iceberg FileIO's property names.

use std::collections::BTreeMap;
use std::fmt;

use opendal::services::{Gcs, S3};
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
/// | `gcs.service.path` | the GCS endpoint, for a server other than Google's (`http://127.0.0.1:4443`) |
/// | `gcs.credentials-json` | a service account's JSON key, base64-encoded |
/// | `gcs.oauth2.token` | an OAuth2 access token |
/// | `gcs.allow-anonymous` | `true` to send unsigned requests (public buckets) |
/// | `gcs.no-auth` | `true`: unsigned, and no looking for credentials (local servers) |
///
/// Without explicit keys, each store's usual credential chain applies. For S3: the `AWS_*`
/// environment variables, the shared profile files, then the instance metadata service.
/// For GCS, Application Default Credentials: `GOOGLE_APPLICATION_CREDENTIALS`, gcloud's
/// application-default file, then the metadata server. Unknown keys are refused, naming the
/// key, so a misspelt setting is not silently ignored.
///
/// `Debug` shows the keys and hides the secrets' values.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StorageSettings(BTreeMap<String, String>);

/// Keys whose values are credentials.
const SECRET_KEYS: &[&str] = &[
    "s3.secret-access-key",
    "s3.session-token",
    "gcs.credentials-json",
    "gcs.oauth2.token",
];

/// Every key Outflow reads: S3's, then GCS's.
const KNOWN_KEYS: &[&str] = &[
    "s3.endpoint",
    "s3.region",
    "client.region",
    "s3.path-style-access",
    "s3.access-key-id",
    "s3.secret-access-key",
    "s3.session-token",
    "s3.allow-anonymous",
    "gcs.service.path",
    "gcs.credentials-json",
    "gcs.oauth2.token",
    "gcs.allow-anonymous",
    "gcs.no-auth",
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

    /// Refuses a key Outflow does not read, naming it. One set of settings may hold both
    /// stores' keys (a job reading from S3 into a warehouse on GCS); each store reads its own.
    fn check_known(&self, what: &str) -> Result<()> {
        match self.0.keys().find(|k| !KNOWN_KEYS.contains(&k.as_str())) {
            Some(unknown) => Err(Error::invalid_config(
                what,
                format!("{unknown:?} is not a storage setting Outflow knows (see docs/object-stores.md)"),
            )),
            None => Ok(()),
        }
    }

    /// The S3 service for `bucket` under these settings; `what` names where the settings
    /// came from, for errors.
    pub(crate) fn s3(&self, bucket: &str, what: &str) -> Result<S3> {
        self.check_known(what)?;
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
                // GCS's keys, for another store.
                _ => builder,
            };
        }
        if virtual_host {
            builder = builder.enable_virtual_host_style();
        }
        Ok(builder)
    }

    /// The GCS service for `bucket` under these settings; `what` names where the settings
    /// came from, for errors.
    pub(crate) fn gcs(&self, bucket: &str, what: &str) -> Result<Gcs> {
        self.check_known(what)?;
        let mut builder = Gcs::default().bucket(bucket);
        for (key, value) in &self.0 {
            let value = value.as_str();
            builder = match key.as_str() {
                "gcs.service.path" => builder.endpoint(value),
                "gcs.credentials-json" => builder.credential(value),
                "gcs.oauth2.token" => builder.token(value.to_string()),
                "gcs.allow-anonymous" if truthy(key, value, what)? => builder.skip_signature(),
                "gcs.no-auth" if truthy(key, value, what)? => builder
                    .skip_signature()
                    .disable_vm_metadata()
                    .disable_config_load(),
                // iceberg-rust's storage goes unsigned whenever the key is present, whatever
                // its value: refused, so the catalog's files and Outflow's reads agree.
                "gcs.no-auth" => {
                    return Err(Error::invalid_config(
                        what,
                        "gcs.no-auth=false is not honoured by the Iceberg catalog's storage; leave the key out",
                    ));
                }
                // S3's keys, for another store.
                _ => builder,
            };
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
            let value = if key.ends_with("-access") || key.ends_with("anonymous") || key.ends_with("no-auth")
            {
                "true"
            } else {
                "x"
            };
            let settings = StorageSettings::new().with(*key, value);
            assert!(settings.s3("b", "test").is_ok(), "{key}");
            assert!(settings.gcs("b", "test").is_ok(), "{key}");
        }
    }

    #[test]
    fn gcs_settings_are_checked_like_s3_ones() {
        let settings = StorageSettings::new()
            .with("gcs.service.path", "http://127.0.0.1:4443")
            .with("gcs.oauth2.token", "ya29.secret-token")
            .with("gcs.credentials-json", "eyJzZWNyZXQiOiJ4In0=");
        assert!(settings.gcs("b", "source.storage").is_ok());
        let shown = format!("{settings:?}");
        assert!(!shown.contains("ya29") && !shown.contains("eyJz"), "{shown}");
        let err = StorageSettings::new()
            .with("gcs.no-auth", "false")
            .gcs("b", "source.storage")
            .unwrap_err();
        assert!(err.to_string().contains("leave the key out"), "{err}");
        let err = StorageSettings::new()
            .with("gcs.endpoint", "http://x")
            .gcs("b", "source.storage")
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("\"gcs.endpoint\" is not a storage setting"),
            "{err}"
        );
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
