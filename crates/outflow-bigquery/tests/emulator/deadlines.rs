//! Deadlines against loopback endpoints that misbehave, on the REST side (tables.get/insert)
//! and the gRPC side (Storage Write, BatchCommitWriteStreams): one that never answers, one
//! in front of the emulator that answers slowly, one that resets each connection in the
//! middle of a response. Each failure must arrive by the retry deadline (+10%), name the
//! endpoint, and be transient (the service was unavailable), not internal.
//!
//! The time is measured around the whole write. When the gRPC side fails, a tables.get on
//! the emulator comes first (tens of milliseconds), so those cases have a 3 s deadline, of
//! which it is a small part.

use std::time::{Duration, Instant};

use outflow_bigquery::{
    BigQueryCommitter, BigQuerySink, BigQuerySinkOptions, ConnectionOptions, PendingStream,
};
use outflow_core::{Committer, Error, ErrorKind, RetryPolicy, Sink};
use outflow_testkit::faults::FaultyEndpoint;

use crate::common::*;

const REQUEST_TIMEOUT: Duration = Duration::from_millis(700);
/// The deadline when the REST side (the first call) or the committer fails.
const DEADLINE: Duration = Duration::from_secs(2);
/// The deadline when the gRPC side fails, after a tables.get.
const GRPC_DEADLINE: Duration = Duration::from_secs(3);
/// What the calls before the failing one may take, on top of the deadline.
const PRIOR_CALLS: Duration = Duration::from_secs(1);

fn policy(deadline: Duration) -> RetryPolicy {
    RetryPolicy::builder()
        .initial_backoff(Duration::from_millis(50))
        .max_backoff(Duration::from_millis(200))
        .max_attempts(100)
        .deadline(deadline)
        .build()
        .unwrap()
}

/// `host:port` of a URL.
fn host(url: &str) -> String {
    url.trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string()
}

/// Options for `table` of `ctx`'s dataset through `rest` and `grpc`, with short deadlines.
fn options(ctx: &Ctx, table: &str, rest: &str, grpc: &str, deadline: Duration) -> BigQuerySinkOptions {
    ctx.options(table)
        .schema(id_name_schema())
        .connection(ConnectionOptions::emulator(rest, grpc))
        .retry(policy(deadline))
        .request_timeout(REQUEST_TIMEOUT)
        .build()
        .unwrap()
}

/// Connects, writes a batch and closes, expecting a failure by the deadline (+10%) of the
/// failing step, plus [`PRIOR_CALLS`]; a guard four times longer keeps a hang from
/// stalling the test binary.
async fn write_fails(options: BigQuerySinkOptions) -> Error {
    let deadline = options.retry().deadline();
    let run = async {
        let mut sink = BigQuerySink::connect(options).await?;
        let started = Instant::now();
        let outcome = async {
            sink.write(id_name(0..10)).await?;
            sink.close().await
        }
        .await;
        Ok::<_, Error>((outcome, started.elapsed()))
    };
    let (outcome, elapsed) = tokio::time::timeout(deadline * 4, run)
        .await
        .expect("the write did not end within four times the deadline")
        .expect("connecting makes no request");
    let err = outcome.expect_err("the write succeeded");
    eprintln!("failed after {elapsed:?} (deadline {deadline:?}): {err}");
    // The clock starts before the calls that succeed (the gRPC cases first get the table
    // from the emulator, which takes hundreds of ms when the cores are busy): they get
    // PRIOR_CALLS on top. Without the deadline the write would go on for 100 attempts.
    assert!(
        elapsed <= deadline.mul_f64(1.1) + PRIOR_CALLS,
        "failed after {elapsed:?}, deadline {deadline:?}: {err}"
    );
    err
}

/// The service was unavailable: transient, the endpoint named.
fn assert_unavailable(err: &Error, endpoint: &str) {
    assert_eq!(err.kind(), ErrorKind::Transient, "{err}");
    assert!(
        err.to_string().contains(endpoint),
        "{endpoint} is not named: {err}"
    );
}

#[tokio::test]
async fn a_rest_endpoint_that_never_answers_fails_by_the_deadline_naming_it() {
    let ctx = Ctx::new().await;
    let silent = FaultyEndpoint::silent().await;
    let err = write_fails(options(&ctx, "t", &silent.url(), &ctx.env.grpc, DEADLINE)).await;
    assert_unavailable(&err, &silent.url());
    assert!(
        silent.connections() >= 2,
        "retried: {} connections",
        silent.connections()
    );
}

#[tokio::test]
async fn a_grpc_endpoint_that_never_answers_fails_by_the_deadline_naming_it() {
    let ctx = Ctx::new().await;
    let silent = FaultyEndpoint::silent().await;
    let err = write_fails(options(&ctx, "t", &ctx.env.rest, &silent.url(), GRPC_DEADLINE)).await;
    assert_unavailable(&err, &silent.url());
}

#[tokio::test]
async fn slow_endpoints_are_waited_for_within_the_request_timeout_and_abandoned_past_it() {
    let ctx = Ctx::new().await;
    let rest = FaultyEndpoint::slow(&host(&ctx.env.rest), REQUEST_TIMEOUT / 5).await;
    let grpc = FaultyEndpoint::slow(&host(&ctx.env.grpc), REQUEST_TIMEOUT / 5).await;
    write_all(
        options(&ctx, "waited", &rest.url(), &grpc.url(), DEADLINE),
        vec![id_name(0..10)],
    )
    .await;
    assert_eq!(ctx.ids("waited"), (0..10).collect::<Vec<_>>());

    let too_slow = FaultyEndpoint::slow(&host(&ctx.env.rest), DEADLINE * 3).await;
    let err = write_fails(options(
        &ctx,
        "abandoned",
        &too_slow.url(),
        &ctx.env.grpc,
        DEADLINE,
    ))
    .await;
    assert_unavailable(&err, &too_slow.url());
    let too_slow = FaultyEndpoint::slow(&host(&ctx.env.grpc), DEADLINE * 3).await;
    let err = write_fails(options(
        &ctx,
        "abandoned",
        &ctx.env.rest,
        &too_slow.url(),
        GRPC_DEADLINE,
    ))
    .await;
    assert_unavailable(&err, &too_slow.url());
}

#[tokio::test]
async fn endpoints_that_reset_mid_response_are_retried_then_fail_by_the_deadline() {
    let ctx = Ctx::new().await;
    // 12 bytes: an HTTP/1.1 answer is cut inside its status line, an HTTP/2 one inside the
    // server's first frame.
    let rest = FaultyEndpoint::reset_mid_response(&host(&ctx.env.rest), 12).await;
    let err = write_fails(options(&ctx, "t", &rest.url(), &ctx.env.grpc, DEADLINE)).await;
    assert_unavailable(&err, &rest.url());
    assert!(
        rest.connections() >= 2,
        "retried: {} connections",
        rest.connections()
    );
    let grpc = FaultyEndpoint::reset_mid_response(&host(&ctx.env.grpc), 12).await;
    let err = write_fails(options(&ctx, "t", &ctx.env.rest, &grpc.url(), GRPC_DEADLINE)).await;
    assert_unavailable(&err, &grpc.url());
}

#[tokio::test]
async fn a_commit_endpoint_that_never_answers_fails_by_the_deadline_naming_it() {
    let ctx = Ctx::new().await;
    let silent = FaultyEndpoint::silent().await;
    let committer = BigQueryCommitter::connect(&options(&ctx, "t", &ctx.env.rest, &silent.url(), DEADLINE))
        .await
        .expect("connecting makes no request");
    let stream = PendingStream {
        table: ctx.full("t"),
        stream: format!(
            "projects/{}/datasets/{}/tables/t/streams/s",
            ctx.env.project, ctx.dataset
        ),
    };
    let started = Instant::now();
    let outcome = tokio::time::timeout(DEADLINE * 4, committer.commit(vec![stream]))
        .await
        .expect("the commit did not end within four times the deadline");
    let elapsed = started.elapsed();
    let err = outcome.expect_err("the commit succeeded");
    eprintln!("commit failed after {elapsed:?} (deadline {DEADLINE:?}): {err}");
    assert!(
        elapsed <= DEADLINE.mul_f64(1.1),
        "failed after {elapsed:?}: {err}"
    );
    assert_unavailable(&err, &silent.url());
}
