//! Storage credentials a REST catalog vends with its tables.
//!
//! A table loaded with `X-Iceberg-Access-Delegation: vended-credentials` can come with S3
//! credentials that reach only its own files and lapse after a while (Polaris, Unity,
//! SeaweedFS's catalog do this). iceberg-rust puts them among the table's FileIO
//! properties and keeps them fixed; a write longer than their lifetime would then fail
//! halfway. So the sink gives such a table a storage whose credentials come from a
//! [`TableCredentials`]: the vended ones at first, then, `refresh-before` ahead of their
//! expiry, fresh ones the catalog vends when asked for the table again. Every S3 request is
//! signed with whatever is current, a multipart upload in progress included.
//!
//! The choice of credentials in a catalog's answer ([`vended_for`]) is pure; the asking is
//! the catalog's ([`crate::client::IcebergCatalog`]).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use iceberg::io::{FileIO, FileIOBuilder};
use iceberg::table::Table;
use iceberg_storage_opendal::{
    AwsCredential, CustomAwsCredentialLoader, OpenDalResolvingStorageFactory, ProvideCredential,
};
use serde_json::Value;

use outflow_core::{Error, Result};

use crate::client::IcebergCatalog;

/// The header asking a REST catalog for vended credentials, and its value.
pub(crate) const DELEGATION_HEADER: &str = "X-Iceberg-Access-Delegation";
pub(crate) const VENDED_CREDENTIALS: &str = "vended-credentials";
/// The catalog property saying how long before vended credentials expire they are renewed.
pub const REFRESH_BEFORE: &str = "vended-credentials.refresh-before";
pub(crate) const DEFAULT_REFRESH_BEFORE: Duration = Duration::from_secs(5 * 60);
/// reqsign, which signs OpenDAL's S3 requests, asks for a new credential once the one it
/// holds has less than this left.
const SIGNER_MARGIN: Duration = Duration::from_secs(120);

const ACCESS_KEY_ID: &str = "s3.access-key-id";
const SECRET_ACCESS_KEY: &str = "s3.secret-access-key";
const SESSION_TOKEN: &str = "s3.session-token";
const EXPIRES_AT_MS: &str = "s3.session-token-expires-at-ms";

/// S3 session credentials, as Iceberg's REST spec spells them among a table's config.
#[derive(Clone, PartialEq)]
pub(crate) struct S3Credentials {
    access_key_id: String,
    secret_access_key: String,
    session_token: String,
    /// Milliseconds since the Unix epoch.
    expires_at_ms: i64,
}

impl fmt::Debug for S3Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Credentials")
            .field("expires_at_ms", &self.expires_at_ms)
            .finish_non_exhaustive()
    }
}

impl S3Credentials {
    /// Session credentials with an expiry among `config`; `None` for anything else (fixed
    /// keys need no renewing).
    pub(crate) fn from_config(config: &HashMap<String, String>) -> Option<S3Credentials> {
        Some(S3Credentials {
            access_key_id: config.get(ACCESS_KEY_ID)?.clone(),
            secret_access_key: config.get(SECRET_ACCESS_KEY)?.clone(),
            session_token: config.get(SESSION_TOKEN)?.clone(),
            expires_at_ms: config.get(EXPIRES_AT_MS)?.trim().parse().ok()?,
        })
    }

    fn remaining(&self, now_ms: i64) -> Duration {
        Duration::from_millis(self.expires_at_ms.saturating_sub(now_ms).max(0) as u64)
    }

    /// The credential for the signer, with an expiry such that the signer asks again
    /// `refresh_before` ahead of the real one (never later than the real one).
    fn for_signer(&self, refresh_before: Duration) -> Result<AwsCredential> {
        let early = refresh_before.saturating_sub(SIGNER_MARGIN).as_millis() as i64;
        let expires = reqsign_core::time::Timestamp::from_millisecond(self.expires_at_ms - early)
            .map_err(|e| Error::internal(format!("a vended credential's expiry: {e}")))?;
        Ok(AwsCredential {
            access_key_id: self.access_key_id.clone(),
            secret_access_key: self.secret_access_key.clone(),
            session_token: Some(self.session_token.clone()),
            expires_in: Some(expires),
        })
    }
}

/// The S3 credentials a catalog's answer to loading a table vends for the table at
/// `location`: those of the `storage-credentials` entry with the longest prefix of the
/// location, else those in its `config`.
pub(crate) fn vended_for(answer: &Value, location: &str) -> Option<S3Credentials> {
    let as_config = |v: &Value| -> HashMap<String, String> {
        v.as_object()
            .map(|o| {
                o.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default()
    };
    let scoped = answer
        .get("storage-credentials")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            let prefix = entry.get("prefix")?.as_str()?;
            let config = entry.get("config")?;
            location.starts_with(prefix).then_some((prefix.len(), config))
        })
        .max_by_key(|(len, _)| *len)
        .and_then(|(_, config)| S3Credentials::from_config(&as_config(config)));
    scoped.or_else(|| S3Credentials::from_config(&as_config(answer.get("config")?)))
}

/// The S3 credentials of one table, renewed from its catalog before they expire.
pub(crate) struct TableCredentials {
    catalog: IcebergCatalog,
    table: Table,
    refresh_before: Duration,
    current: tokio::sync::Mutex<S3Credentials>,
}

impl fmt::Debug for TableCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TableCredentials")
            .field("table", self.table.identifier())
            .finish_non_exhaustive()
    }
}

impl ProvideCredential for TableCredentials {
    type Credential = AwsCredential;

    async fn provide_credential(
        &self,
        _: &reqsign_core::Context,
    ) -> reqsign_core::Result<Option<AwsCredential>> {
        let mut current = self.current.lock().await;
        let now = now_ms();
        if current.remaining(now) <= self.refresh_before {
            match self.catalog.vended_credentials(&self.table).await {
                Ok(fresh) => {
                    tracing::debug!(table = %self.table.identifier(), "renewed the vended storage credentials");
                    *current = fresh;
                }
                // The old ones still work for a while: use them to their end.
                Err(e) if current.remaining(now) > Duration::ZERO => {
                    tracing::warn!(table = %self.table.identifier(), error = %e, "renewing the vended storage credentials failed; using the current ones until they lapse");
                    return Ok(Some(current.for_signer(Duration::ZERO).map_err(signer_error)?));
                }
                Err(e) => return Err(signer_error(e)),
            }
        }
        Ok(Some(
            current.for_signer(self.refresh_before).map_err(signer_error)?,
        ))
    }
}

fn signer_error(e: Error) -> reqsign_core::Error {
    reqsign_core::Error::credential_invalid(e.message().to_string())
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// `table` with a storage whose S3 credentials are renewed from `catalog`, when its FileIO
/// holds vended session credentials; as it is otherwise.
pub(crate) fn renewing(catalog: &IcebergCatalog, table: Table, refresh_before: Duration) -> Result<Table> {
    let props = table.file_io().config().props();
    let Some(vended) = S3Credentials::from_config(props) else {
        return Ok(table);
    };
    // The renewed credentials replace these; left among the properties, they would be
    // used as fixed keys.
    let rest: HashMap<String, String> = props
        .iter()
        .filter(|(k, _)| {
            ![ACCESS_KEY_ID, SECRET_ACCESS_KEY, SESSION_TOKEN, EXPIRES_AT_MS].contains(&k.as_str())
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let credentials = TableCredentials {
        catalog: catalog.clone(),
        table: table.clone(),
        refresh_before,
        current: tokio::sync::Mutex::new(vended),
    };
    let factory = OpenDalResolvingStorageFactory::new()
        .with_s3_credential_loader(CustomAwsCredentialLoader::new(credentials));
    let file_io: FileIO = FileIOBuilder::new(Arc::new(factory)).with_props(rest).build();
    let mut builder = Table::builder()
        .identifier(table.identifier().clone())
        .metadata(table.metadata_ref())
        .file_io(file_io)
        .runtime(iceberg::Runtime::current());
    if let Some(location) = table.metadata_location() {
        builder = builder.metadata_location(location.to_string());
    }
    builder
        .build()
        .map_err(|e| Error::internal(format!("rebuilding table {}: {e}", table.identifier())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn creds(key: &str, expires: i64) -> Value {
        json!({
            "s3.access-key-id": key, "s3.secret-access-key": "s", "s3.session-token": "t",
            "s3.session-token-expires-at-ms": expires.to_string(), "s3.endpoint": "http://e"
        })
    }

    #[test]
    fn the_longest_matching_prefix_wins_over_config() {
        let answer = json!({
            "config": creds("from-config", 1),
            "storage-credentials": [
                {"prefix": "s3://b/", "config": creds("bucket", 2)},
                {"prefix": "s3://b/ns/t", "config": creds("table", 3)},
                {"prefix": "s3://other/ns/t/longer/than/any", "config": creds("other", 4)},
            ]
        });
        let got = vended_for(&answer, "s3://b/ns/t").unwrap();
        assert_eq!((got.access_key_id.as_str(), got.expires_at_ms), ("table", 3));
        let got = vended_for(&answer, "s3://b/elsewhere").unwrap();
        assert_eq!(got.access_key_id, "bucket");
        let got = vended_for(&answer, "s3://c/x").unwrap();
        assert_eq!(got.access_key_id, "from-config");
    }

    #[test]
    fn fixed_keys_or_no_expiry_are_not_vended_credentials() {
        assert_eq!(vended_for(&json!({"config": {}}), "s3://b/t"), None);
        assert_eq!(vended_for(&json!({}), "s3://b/t"), None);
        let fixed = json!({"config": {"s3.access-key-id": "k", "s3.secret-access-key": "s"}});
        assert_eq!(vended_for(&fixed, "s3://b/t"), None);
        let unparsable = json!({"config": creds("k", 0)});
        let mut unparsable = unparsable.clone();
        unparsable["config"]["s3.session-token-expires-at-ms"] = json!("soon");
        assert_eq!(vended_for(&unparsable, "s3://b/t"), None);
    }

    #[test]
    fn the_signer_asks_again_refresh_before_the_expiry() {
        let c = S3Credentials::from_config(
            &[
                (ACCESS_KEY_ID, "AKIA-SEEN"),
                (SECRET_ACCESS_KEY, "SECRET-SEEN"),
                (SESSION_TOKEN, "TOKEN-SEEN"),
                (EXPIRES_AT_MS, "1000000000"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        )
        .unwrap();
        let at = |refresh_before: u64| {
            let t = c
                .for_signer(Duration::from_secs(refresh_before))
                .unwrap()
                .expires_in
                .unwrap();
            t.as_second() * 1000 + i64::from(t.subsec_nanosecond() / 1_000_000)
        };
        // The signer asks SIGNER_MARGIN ahead of what it is told, so it is told
        // refresh_before - SIGNER_MARGIN early: 300 s - 120 s.
        assert_eq!(at(300), 1_000_000_000 - 180_000);
        // Never later than the real expiry.
        assert_eq!(at(60), 1_000_000_000);
        assert_eq!(c.remaining(1_000_000_000 - 5_000), Duration::from_secs(5));
        assert_eq!(c.remaining(2_000_000_000), Duration::ZERO);
        assert!(!format!("{c:?}").contains("SEEN"), "{c:?}");
    }
}
