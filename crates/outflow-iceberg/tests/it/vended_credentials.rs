//! SeaweedFS's Iceberg REST catalog (`scripts/servers/seaweedfs.sh`), a second REST
//! implementation beside Apache's fixture: it requires OAuth2 tokens for every call, takes
//! its path prefix from `/v1/config`, and vends S3 credentials scoped to each table.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::*;
use outflow_core::Sink;
use outflow_iceberg::CatalogConfig;
use outflow_testkit::faults::FaultyEndpoint;
use outflow_testkit::iceberg::{S3Store, TestCatalog};
use outflow_testkit::{require_env, unique_name};

fn props(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The catalog with `credential`, at `uri` (SeaweedFS's, or a proxy in front of it).
fn catalog(uri: String, credential: &str, more: &[(&str, &str)]) -> CatalogConfig {
    let mut properties = props(&[("credential", credential)]);
    properties.extend(props(more));
    CatalogConfig::Rest {
        uri,
        warehouse: Some(require_env("OUTFLOW_S3_REST_WAREHOUSE")),
        name: "seaweedfs".into(),
        properties,
    }
}

/// `(x-amz-date as Unix seconds, x-amz-security-token)` of every request in `sent` that
/// carries a session token.
fn signed_requests(sent: &str) -> Vec<(i64, String)> {
    let lower = sent.to_ascii_lowercase();
    let header = |at: usize, end: usize, name: &str| -> Option<String> {
        let from = at + lower[at..end].find(&format!("\r\n{name}:"))? + name.len() + 3;
        Some(sent[from..end].split("\r\n").next()?.trim().to_string())
    };
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(len) = lower[at..].find("\r\n\r\n") {
        let end = at + len;
        if let (Some(date), Some(token)) = (
            header(at, end, "x-amz-date"),
            header(at, end, "x-amz-security-token"),
        ) {
            let date = chrono::NaiveDateTime::parse_from_str(&date, "%Y%m%dT%H%M%SZ")
                .unwrap_or_else(|e| panic!("x-amz-date {date}: {e}"));
            out.push((date.and_utc().timestamp(), token));
        }
        at = end + 4;
    }
    out
}

/// The `exp` of SeaweedFS's session token (a JWT), in Unix seconds.
fn token_expiry(token: &str) -> i64 {
    use base64::Engine;
    let payload = token.split('.').nth(1).expect("a JWT");
    let claims: serde_json::Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .unwrap(),
    )
    .unwrap();
    claims["exp"].as_i64().expect("exp")
}

fn client_credential(s3: &S3Store) -> String {
    format!("{}:{}", s3.access_key_id, s3.secret_access_key)
}

/// A wrong client secret: the token endpoint refuses it, and the error names the catalog
/// and what was refused, never the secret.
#[tokio::test]
async fn a_wrong_client_secret_is_refused_naming_the_catalog_and_never_the_secret() {
    let uri = require_env("OUTFLOW_S3_REST_URI");
    let s3 = S3Store::from_env();
    let secret = "not-the-secret-7f3a";
    let config = catalog(uri.clone(), &format!("{}:{secret}", s3.access_key_id), &[]);
    let options = options(&config, &format!("{}.t", unique_name("refused")))
        .build()
        .unwrap();
    let err = outflow_iceberg::IcebergSink::connect(options).await.unwrap_err();
    let text = format!("{err} {err:?}");
    assert!(text.contains(&uri), "{text}");
    assert!(
        text.contains("OAuth2 token") && text.contains("HTTP 401"),
        "{text}"
    );
    assert!(!text.contains(secret), "{text}");
}

/// The sink is given no S3 keys: it writes with the credentials the catalog vends for the
/// table, and renews them before they expire (here `refresh-before` is within a second of
/// their 900 s lifetime, so a write that waits a few seconds needs new ones). The store
/// sees S3 requests signed with more than one session token and accepts them all; both
/// readers, through the same catalog and its vended credentials, read every row.
#[tokio::test]
async fn the_sink_writes_with_vended_credentials_it_renews_and_both_readers_read_the_table() {
    let s3 = S3Store::from_env();
    let store = FaultyEndpoint::recording(s3.endpoint.trim_start_matches("http://")).await;
    let credential = client_credential(&s3);
    let config = catalog(
        require_env("OUTFLOW_S3_REST_URI"),
        &credential,
        &[
            // Only the endpoint, to see the requests: the keys are the catalog's.
            ("s3.endpoint", &store.url()),
            ("vended-credentials.refresh-before", "899s"),
        ],
    );
    let namespace = unique_name("vended");
    let table = format!("{namespace}.events");
    let mut sink = sink(
        options(&config, &table)
            .table_options(partitioned(&["region"]))
            .build()
            .unwrap(),
    )
    .await;
    sink.write(events(0..40, "eu")).await.unwrap();
    sink.flush().await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    sink.write(events(40..70, "us")).await.unwrap();
    let result = sink.close().await.unwrap();
    assert_eq!(result.destinations[&table].rows, 70, "{result:?}");

    // Every S3 request was signed with credentials that had more than `refresh-before`
    // left (less 1 s: both times are in whole seconds). The first ones would have had at
    // most 900 - 3 s left for the second batch's files: they were renewed.
    let sent = store.recorded();
    let signed = signed_requests(&sent);
    assert!(!signed.is_empty(), "no request carried a session token");
    for (date, token) in &signed {
        let left = token_expiry(token) - date;
        assert!(
            left >= 898,
            "a request at {date} signed with credentials {left} s from expiry"
        );
    }
    let mut tokens: Vec<&str> = signed.iter().map(|(_, t)| t.as_str()).collect();
    tokens.sort();
    tokens.dedup();
    assert!(
        tokens.len() >= 2,
        "{} requests, all with one session token",
        signed.len()
    );
    assert!(
        !sent.contains(&s3.secret_access_key),
        "the store saw the client secret"
    );

    let readers = TestCatalog::Rest {
        name: "seaweedfs".into(),
        uri: require_env("OUTFLOW_S3_REST_URI"),
        properties: props(&[
            ("credential", &credential),
            ("warehouse", &require_env("OUTFLOW_S3_REST_WAREHOUSE")),
            ("header.X-Iceberg-Access-Delegation", "vended-credentials"),
            ("s3.region", &s3.region),
        ]),
    };
    let read = readers.read_both(&table);
    assert_eq!(read["row_count"], 70);
    assert_eq!(
        outflow_testkit::iceberg::sorted_ids(&read),
        (0..70).collect::<Vec<i64>>()
    );
}
