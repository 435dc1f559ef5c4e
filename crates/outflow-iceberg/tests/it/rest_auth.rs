//! OAuth2 client credentials on a REST catalog: Apache Iceberg's REST fixture issues the
//! tokens (its `/v1/oauth/tokens`), a recording proxy in front of it shows what Outflow sent.

use crate::common::*;
use outflow_iceberg::CatalogConfig;
use outflow_testkit::faults::FaultyEndpoint;
use outflow_testkit::iceberg::TestCatalog;
use outflow_testkit::{require_env, unique_name};

/// The sink, given only `credential` (client id and secret), asks the catalog's token
/// endpoint for a token and sends it with its own calls (the configuration, the commit);
/// the secret goes only in the token request's body and shows in no `Debug` output; both
/// readers read the rows back.
#[tokio::test]
async fn client_credentials_are_exchanged_for_the_token_the_commit_carries() {
    let fixture = require_env("OUTFLOW_ICEBERG_REST_URI");
    let proxy = FaultyEndpoint::recording(fixture.trim_start_matches("http://").trim_end_matches('/')).await;
    let secret = "app-secret-4b1d";
    let config = CatalogConfig::Rest {
        uri: proxy.url(),
        warehouse: None,
        name: "rest".into(),
        properties: [("credential".to_string(), format!("outflow-app:{secret}"))].into(),
    };
    assert!(!format!("{config:?}").contains(secret), "{config:?}");
    let namespace = unique_name("oauth");
    let table = format!("{namespace}.t");
    write_all(
        options(&config, &table).build().unwrap(),
        vec![events(0..25, "eu")],
    )
    .await
    .unwrap();

    let sent = proxy.recorded();
    // The head (request line and headers) of every request whose line starts with `line`.
    let heads = |line: &str| -> Vec<String> {
        sent.match_indices(line)
            .map(|(at, _)| {
                let rest = &sent[at..];
                rest[..rest.find("\r\n\r\n").unwrap_or(rest.len())].to_ascii_lowercase()
            })
            .collect()
    };
    assert!(
        !heads("POST /v1/oauth/tokens ").is_empty(),
        "no token request in:\n{sent}"
    );
    assert!(
        sent.contains("grant_type=client_credentials") && sent.contains("client_id=outflow-app"),
        "{sent}"
    );
    // Outflow's own calls: the configuration, and the commit (a POST to the table itself;
    // iceberg-rust creates the table with a POST to .../tables).
    let bearer = "authorization: bearer client-credentials-token:sub=outflow-app";
    let commits = heads(&format!("POST /v1/namespaces/{namespace}/tables/t HTTP/1.1"));
    assert!(!commits.is_empty(), "no commit in:\n{sent}");
    assert!(commits.iter().all(|c| c.contains(bearer)), "{commits:?}");
    let configs = heads("GET /v1/config");
    assert!(
        !configs.is_empty() && configs.iter().all(|c| c.contains(bearer)),
        "{configs:?}"
    );

    let readers = TestCatalog::Rest {
        name: "rest".into(),
        uri: fixture,
        properties: Default::default(),
    };
    assert_eq!(readers.read_both(&table)["row_count"], 25);
}
