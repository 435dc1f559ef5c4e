//! Deadlines: every call has one, and an operation's retry deadline holds within 10%.
//!
//! Loopback endpoints on 127.0.0.1 stand in for a broken server: one that accepts
//! connections and never answers, one that answers slower than the request timeout (in
//! front of the shared emulator), one whose responses stall mid-write, and one that resets
//! HTTP/2 streams mid-response. Each is dropped, closing its connections, when its test
//! ends. Deadlines are short (1 to 3 s) to keep the tests quick.

use std::time::{Duration, Instant};

use outflow_bigtable::{Batching, BigtableConnection, BigtableSinkOptionsBuilder, TableCreateOptions};
use outflow_core::{CreateDisposition, Error, ErrorKind, RetryPolicy, Sink};
use outflow_testkit::bigtable::{FaultProxy, H2Reset};
use outflow_testkit::faults::FaultyEndpoint;

use crate::common::*;
use crate::faults::{assert_each_row_once, keep_writing, rows, rows_sink};

const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);
const DEADLINE: Duration = Duration::from_secs(3);

/// Retries every 20 to 100 ms until `deadline`: attempts, not backoff, use up the time.
fn policy(deadline: Duration) -> RetryPolicy {
    RetryPolicy::builder()
        .max_attempts(1_000)
        .initial_backoff(Duration::from_millis(20))
        .max_backoff(Duration::from_millis(100))
        .deadline(deadline)
        .build()
        .unwrap()
}

fn options(
    host: &str,
    table: &str,
    request_timeout: Duration,
    deadline: Duration,
) -> BigtableSinkOptionsBuilder {
    rows_sink(host, table)
        .request_timeout(request_timeout)
        .retry(policy(deadline))
}

/// The failure came at the deadline (not a whole request timeout after it, nor long
/// before it), is transient, and names the endpoint.
fn assert_failed_at_deadline(err: &Error, elapsed: Duration, deadline: Duration, endpoint: &str) {
    assert_eq!(err.kind(), ErrorKind::Transient, "{err}");
    assert!(
        elapsed <= deadline.mul_f64(1.1) && elapsed >= deadline.mul_f64(0.9),
        "failed after {elapsed:?}, deadline {deadline:?}: {err}"
    );
    assert_eq!(err.context_value("endpoint"), Some(endpoint), "{err:?}");
    assert!(err.to_string().contains(endpoint), "{err}");
    assert!(err.to_string().contains("deadline exhausted"), "{err}");
}

/// Runs `op`, which must fail, with a generous bound so that a hang fails the test.
async fn timed<T: std::fmt::Debug>(op: impl Future<Output = outflow_core::Result<T>>) -> (Error, Duration) {
    let started = Instant::now();
    let err = tokio::time::timeout(Duration::from_secs(30), op)
        .await
        .expect("the call does not hang")
        .expect_err("the call fails");
    (err, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_fails_each_operation_at_its_deadline_naming_it() {
    let silent = FaultyEndpoint::silent().await;
    let endpoint = silent.url();
    let table = table_name("silent");

    // The sink: preparing the table (GetTable) gets no answer.
    let options = options(&silent.host(), &table, REQUEST_TIMEOUT, DEADLINE)
        .build()
        .unwrap();
    let mut sink = outflow_bigtable::BigtableSink::connect(options).await.unwrap();
    let (err, elapsed) = timed(sink.write(rows(0, 10))).await;
    assert_failed_at_deadline(&err, elapsed, DEADLINE, &endpoint);
    assert!(err.to_string().contains("reading table"), "{err}");
    let attempts: u32 = err.context_value("attempts").unwrap().parse().unwrap();
    assert!(attempts >= 3, "{attempts} attempts of 1 s in a 3 s deadline");

    // A client's table administration and reads, each under its own deadline.
    let deadline = Duration::from_millis(1_500);
    let client = BigtableConnection::new(PROJECT, INSTANCE)
        .with_endpoint(silent.host())
        .connect()
        .await
        .unwrap()
        .with_request_timeout(Duration::from_millis(500))
        .with_retry_policy(policy(deadline));
    let families = TableCreateOptions::builder()
        .raw_family("cf", None)
        .build()
        .unwrap();
    let (err, elapsed) =
        timed(client.ensure_table(&table, CreateDisposition::CreateIfNeeded, Some(&families))).await;
    assert_failed_at_deadline(&err, elapsed, deadline, &endpoint);
    let (err, elapsed) = timed(client.describe_table(&table)).await;
    assert_failed_at_deadline(&err, elapsed, deadline, &endpoint);
    let (err, elapsed) = timed(client.read_rows(&table)).await;
    assert_failed_at_deadline(&err, elapsed, deadline, &endpoint);
    assert!(err.to_string().contains("reading rows of table"), "{err}");
    assert!(
        silent.connections() >= 2,
        "the sink and the client each connected"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_slower_than_the_request_timeout_fails_at_the_deadline_a_slow_one_within_it_is_waited_for() {
    // Every answer comes 2 s late, after the 1 s request timeout: each attempt gives up.
    let slow = FaultyEndpoint::slow(&host(), Duration::from_secs(2)).await;
    let table = table_name("slow");
    let mut sink = open(options(&slow.host(), &table, REQUEST_TIMEOUT, DEADLINE)).await;
    let (err, elapsed) = timed(sink.write(rows(0, 10))).await;
    assert_failed_at_deadline(&err, elapsed, DEADLINE, &slow.url());
    assert!(err.to_string().contains("no answer within"), "{err}");

    // Answers 300 ms late, within the 1.5 s request timeout: nothing fails.
    let slowish = FaultyEndpoint::slow(&host(), Duration::from_millis(300)).await;
    let table = table_name("slowish");
    let mut sink = open(options(
        &slowish.host(),
        &table,
        Duration::from_millis(1_500),
        DEADLINE,
    ))
    .await;
    sink.write(rows(0, 50)).await.unwrap();
    let result = sink.close().await.unwrap();
    assert!(result.failed.is_empty(), "{:?}", result.failed);
    assert_eq!(result.rows_written(), 50);
    assert_eq!(client().await.read_rows(&table).await.unwrap().len(), 50);
}

/// A server that stops answering while a writer keeps several requests in flight (what
/// a frozen emulator looks like): the write fails one deadline after the stall, not two
/// (a request sent after the first failure used to retry for a whole deadline of its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_stalls_under_a_busy_writer_fails_it_within_the_deadline() {
    let proxy = FaultProxy::start(&host()).await;
    let endpoint = format!("http://{}", proxy.host());
    let table = table_name("stalled");
    let sink = open(
        options(&proxy.host(), &table, REQUEST_TIMEOUT, DEADLINE).batching(
            Batching::new()
                .with_max_entries(200)
                .with_max_outstanding_requests(3),
        ),
    )
    .await;
    let writer = keep_writing(sink, 1_000).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.swallow_responses(true);
    let stalled = Instant::now();
    let err = tokio::time::timeout(Duration::from_secs(30), writer)
        .await
        .expect("the writer does not hang")
        .unwrap()
        .expect_err("a writer whose server stopped answering fails");
    let elapsed = stalled.elapsed();
    assert_failed_at_deadline(&err, elapsed, DEADLINE, &endpoint);
    assert_eq!(err.context_value("table"), Some(table.as_str()));
    assert!(err.to_string().contains("no answer within"), "{err}");
}

/// HTTP/2 streams reset (RST_STREAM, or GOAWAY and a closed connection) right after the
/// response headers, when the server has applied the call but the client cannot know:
/// preparing and writing retry, and every idempotent row lands once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_reset_mid_response_are_retried_and_idempotent_rows_land_once() {
    for how in [H2Reset::Stream, H2Reset::GoAway] {
        let proxy = FaultProxy::start(&host()).await;
        let table = table_name("reset");
        // Preparing meets two: CreateTable's answer (the table was made; the retry finds
        // it exists) and the GetTable that follows.
        proxy.reset_responses(2, how);
        let mut sink = open(
            options(
                &proxy.host(),
                &table,
                Duration::from_secs(5),
                Duration::from_secs(20),
            )
            .batching(
                Batching::new()
                    .with_max_entries(100)
                    .with_max_outstanding_requests(2),
            ),
        )
        .await;
        sink.write(rows(0, 10)).await.unwrap();
        sink.flush().await.unwrap();
        assert_eq!(proxy.responses_reset(), 2, "{how:?}: preparing met both resets");

        proxy.reset_responses(4, how);
        let (batches, per_batch) = (5, 200);
        for b in 1..=batches {
            sink.write(rows(b, per_batch)).await.unwrap();
        }
        let result = sink.close().await.unwrap();
        assert_eq!(proxy.responses_reset(), 6, "{how:?}: MutateRows met four resets");
        assert!(result.failed.is_empty(), "{how:?}: {:?}", result.failed);
        let expected = 10 + batches * per_batch;
        assert_eq!(result.rows_written(), expected as u64, "{how:?}");

        assert_each_row_once(&table, expected).await;
    }
}
