//! Deadlines of the REST catalog against loopback endpoints that misbehave: one that never
//! answers, one in front of Apache Iceberg's REST fixture that answers slowly, resets each
//! connection mid-response or never answers a commit, one that answers every request with
//! an HTTP status. Each
//! failure must arrive by the retry deadline (+10%), name the endpoint, and say the service
//! was unavailable (transient), not that Outflow or the job is at fault.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};

use outflow_core::{Error, ErrorKind, RetryPolicy, Sink};
use outflow_iceberg::schema::parse_table_ident;
use outflow_iceberg::{CatalogConfig, IcebergCatalog, IcebergSink, IcebergSinkOptions};
use outflow_testkit::faults::FaultyEndpoint;
use outflow_testkit::{require_env, unique_name};

const REQUEST_TIMEOUT: Duration = Duration::from_millis(700);
const DEADLINE: Duration = Duration::from_secs(2);

fn rest_config(uri: &str) -> CatalogConfig {
    CatalogConfig::Rest {
        uri: uri.to_string(),
        warehouse: None,
        name: "rest".into(),
        properties: [
            ("connect-timeout".to_string(), "700ms".to_string()),
            ("request-timeout".to_string(), "700ms".to_string()),
        ]
        .into(),
    }
}

fn policy() -> RetryPolicy {
    RetryPolicy::builder()
        .initial_backoff(Duration::from_millis(50))
        .max_backoff(Duration::from_millis(200))
        .max_attempts(100)
        .deadline(DEADLINE)
        .build()
        .unwrap()
}

/// `host:port` of the REST fixture the test script started.
fn fixture_host() -> String {
    let uri = require_env("OUTFLOW_ICEBERG_REST_URI");
    uri.trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string()
}

/// Connects through the sink (whose `retry` bounds the catalog's calls), expecting a
/// failure by the deadline (+10%); a guard three times longer keeps a hang from stalling
/// the test binary.
async fn sink_connect_fails(uri: &str) -> (Error, Duration) {
    let options = IcebergSinkOptions::builder()
        .catalog(rest_config(uri))
        .table("db.t")
        .retry(policy())
        .build()
        .unwrap();
    let started = Instant::now();
    let outcome = tokio::time::timeout(DEADLINE * 3, IcebergSink::connect(options))
        .await
        .expect("connecting did not end within three times the deadline");
    let elapsed = started.elapsed();
    let Err(err) = outcome else {
        panic!("connecting to {uri} succeeded")
    };
    eprintln!("{uri}: failed after {elapsed:?} (deadline {DEADLINE:?}): {err}");
    assert!(
        elapsed <= DEADLINE.mul_f64(1.1),
        "failed after {elapsed:?}, deadline {DEADLINE:?}: {err}"
    );
    (err, elapsed)
}

/// The service was unavailable: transient, the endpoint named, retried to the end.
fn assert_unavailable(err: &Error, endpoint: &str) {
    assert_eq!(err.kind(), ErrorKind::Transient, "{err}");
    assert!(err.to_string().contains(endpoint), "{err}");
    assert_eq!(err.context_value("endpoint"), Some(endpoint), "{err:?}");
    assert!(
        err.to_string().contains("deadline exhausted"),
        "the retries ran to the deadline: {err}"
    );
}

#[tokio::test]
async fn a_catalog_that_never_answers_fails_by_the_deadline_naming_it() {
    let silent = FaultyEndpoint::silent().await;
    let (err, elapsed) = sink_connect_fails(&silent.url()).await;
    assert_unavailable(&err, &silent.url());
    assert!(err.to_string().contains("did not answer within"), "{err}");
    // Attempts were cut by the request timeout and retried until the deadline.
    assert!(
        elapsed >= DEADLINE.mul_f64(0.9),
        "gave up early, after {elapsed:?}"
    );
    assert!(silent.connections() >= 2, "{} connections", silent.connections());
}

#[tokio::test]
async fn a_slow_catalog_is_waited_for_within_the_request_timeout_and_abandoned_past_it() {
    let upstream = fixture_host();
    let slowish = FaultyEndpoint::slow(&upstream, REQUEST_TIMEOUT / 5).await;
    let catalog = IcebergCatalog::connect_with_retry(&rest_config(&slowish.url()), &policy())
        .await
        .expect("a catalog answering within the request timeout is waited for");
    let ident = parse_table_ident(&format!("{}.t", unique_name("slow"))).unwrap();
    assert!(catalog.load_table(&ident).await.unwrap().is_none());

    let too_slow = FaultyEndpoint::slow(&upstream, DEADLINE * 3).await;
    let (err, _) = sink_connect_fails(&too_slow.url()).await;
    assert_unavailable(&err, &too_slow.url());
}

#[tokio::test]
async fn a_catalog_that_resets_mid_response_is_retried_then_fails_by_the_deadline() {
    // 12 bytes: the reply is cut inside its status line.
    let cutting = FaultyEndpoint::reset_mid_response(&fixture_host(), 12).await;
    let (err, _) = sink_connect_fails(&cutting.url()).await;
    assert_unavailable(&err, &cutting.url());
    assert!(
        cutting.connections() >= 2,
        "{} connections",
        cutting.connections()
    );
}

#[tokio::test]
async fn a_server_error_on_config_is_the_servers_and_a_client_error_the_jobs() {
    let failing = FaultyEndpoint::http_status(500).await;
    let (err, _) = sink_connect_fails(&failing.url()).await;
    assert_unavailable(&err, &failing.url());
    assert!(err.to_string().contains("HTTP 500"), "{err}");
    assert_eq!(err.context_value("status"), Some("500"), "{err:?}");

    // A 404 means the URI is wrong: the job's fault, at once, not retried.
    let wrong = FaultyEndpoint::http_status(404).await;
    let started = Instant::now();
    let err = IcebergCatalog::connect_with_retry(&rest_config(&wrong.url()), &policy())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(err.to_string().contains(&wrong.url()), "{err}");
    assert!(err.to_string().contains("HTTP 404"), "{err}");
    assert!(started.elapsed() < REQUEST_TIMEOUT, "{:?}", started.elapsed());
    assert_eq!(wrong.connections(), 1);
}

#[test]
fn bad_timeouts_are_refused_naming_the_property() {
    let mut config = rest_config("http://127.0.0.1:1");
    if let CatalogConfig::Rest { properties, .. } = &mut config {
        properties.insert("request-timeout".into(), "soon".into());
    }
    let err = config.validate().unwrap_err();
    assert_eq!(
        err.context_value("field"),
        Some("catalog.properties.request-timeout"),
        "{err:?}"
    );
}

fn ids(range: std::ops::Range<i64>) -> RecordBatch {
    RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)])),
        vec![Arc::new(Int64Array::from_iter_values(range)) as ArrayRef],
    )
    .unwrap()
}

#[tokio::test]
async fn a_commit_never_answered_fails_by_the_deadline_and_commits_nothing() {
    let namespace = unique_name("stall");
    let table = format!("{namespace}.t");
    let options = |catalog: CatalogConfig| {
        IcebergSinkOptions::builder()
            .catalog(catalog)
            .table(&table)
            .retry(policy())
            .build()
            .unwrap()
    };
    // The table, its name mapping and a first snapshot, straight to the fixture.
    let direct = rest_config(&require_env("OUTFLOW_ICEBERG_REST_URI"));
    let mut first = IcebergSink::connect(options(direct.clone())).await.unwrap();
    first.write(ids(0..3)).await.unwrap();
    first.close().await.unwrap();

    // Through an endpoint that passes everything but the table's commits (reads and the
    // reload before each attempt go through), which it never answers.
    let needle = format!("POST /v1/namespaces/{namespace}/tables/t HTTP");
    let stalling = FaultyEndpoint::silent_on(&fixture_host(), needle.as_bytes()).await;
    let mut sink = IcebergSink::connect(options(rest_config(&stalling.url())))
        .await
        .unwrap();
    sink.write(ids(3..6)).await.unwrap();
    let started = Instant::now();
    let outcome = tokio::time::timeout(DEADLINE * 3, sink.flush())
        .await
        .expect("the flush did not end within three times the deadline");
    let elapsed = started.elapsed();
    let err = outcome.expect_err("the commit went through");
    eprintln!("commit: failed after {elapsed:?} (deadline {DEADLINE:?}): {err}");
    assert!(
        elapsed <= DEADLINE.mul_f64(1.1),
        "failed after {elapsed:?}, deadline {DEADLINE:?}: {err}"
    );
    assert_unavailable(&err, &stalling.url());
    assert!(
        stalling.connections() >= 2,
        "{} connections",
        stalling.connections()
    );

    let catalog = IcebergCatalog::connect(&direct).await.unwrap();
    let loaded = catalog
        .require_table(&parse_table_ident(&table).unwrap())
        .await
        .unwrap();
    assert_eq!(loaded.metadata().snapshots().count(), 1, "nothing was committed");
}
