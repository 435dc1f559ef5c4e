//! The retry policy the sinks share: bounded attempts, exponential backoff with jitter, and
//! a total deadline.
//!
//! Only errors marked retryable ([`Error::is_retryable`]) are retried; a sink decides which
//! service errors are retryable when it converts them, and never marks a non-idempotent
//! operation retryable.
//!
//! No attempt starts after the deadline. For the deadline to bound the whole operation, an
//! attempt in flight must not run past it either: a call with a per-call timeout takes
//! [`Retrying::attempt_limit`] (its own timeout, or the time left when that is shorter), as
//! [`RetryPolicy::retry_within`] does for a closure.

use std::future::Future;
use std::time::{Duration, Instant};

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::{Error, ErrorKind, Result, duration};

/// How often and how patiently to retry a failing operation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    max_attempts: u32,
    /// The wait before the first retry.
    #[serde(with = "duration")]
    initial_backoff: Duration,
    /// The longest wait between attempts.
    #[serde(with = "duration")]
    max_backoff: Duration,
    /// How much the wait grows after each retry.
    multiplier: f64,
    /// The time after which no new attempt starts; calls with a timeout also end by it.
    #[serde(with = "duration")]
    deadline: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 10,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(10),
            multiplier: 2.0,
            deadline: Duration::from_secs(120),
        }
    }
}

impl RetryPolicy {
    /// A builder starting from the defaults (10 attempts, 100 ms doubling up to 10 s, 120 s
    /// deadline).
    pub fn builder() -> RetryPolicyBuilder {
        RetryPolicyBuilder {
            policy: RetryPolicy::default(),
        }
    }

    /// A policy that never retries.
    pub fn none() -> Self {
        RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        }
    }

    /// Attempts in all, the first included.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The time after which no new attempt starts.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// The wait before retry number `retry` (0 for the first retry), without jitter.
    pub fn backoff(&self, retry: u32) -> Duration {
        let factor = self.multiplier.powi(retry.min(64) as i32);
        let wait = self.initial_backoff.as_secs_f64() * factor;
        Duration::from_secs_f64(wait.min(self.max_backoff.as_secs_f64()))
    }

    /// Starts counting the attempts of one operation, named `what` in logs and errors.
    /// Loops that keep state between attempts, or retry only part of a request, drive the
    /// [`Retrying`] themselves; [`RetryPolicy::retry`] drives it for a closure.
    pub fn start(&self, what: impl Into<String>) -> Retrying<'_> {
        Retrying {
            policy: self,
            what: what.into(),
            attempt: 1,
            started: Instant::now(),
        }
    }

    /// Runs `op` until it succeeds, fails with an error that is not retryable, or the
    /// attempts or the deadline run out; `what` names the operation in logs and errors.
    /// `op` receives the attempt number, starting at 1.
    pub async fn retry<T, F, Fut>(&self, what: &str, mut op: F) -> Result<T>
    where
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut retrying = self.start(what);
        loop {
            match op(retrying.attempt()).await {
                Ok(value) => return Ok(value),
                Err(err) => retrying.after(err).await?,
            }
        }
    }

    /// [`RetryPolicy::retry`] for calls with a timeout: `op` receives the time its attempt
    /// may take, `per_attempt` or the time left before the deadline when that is shorter,
    /// and must give up by then (a per-call timeout), so that the whole operation ends by
    /// the deadline.
    pub async fn retry_within<T, F, Fut>(&self, what: &str, per_attempt: Duration, mut op: F) -> Result<T>
    where
        F: FnMut(Duration) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut retrying = self.start(what);
        loop {
            match op(retrying.attempt_limit(per_attempt)).await {
                Ok(value) => return Ok(value),
                Err(err) => retrying.after(err).await?,
            }
        }
    }
}

/// What a sink's classifier says about a failed service call: each sink maps its service's
/// statuses to one of these, and the retry loop does the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryClass {
    /// May succeed when sent again (connection reset, unavailable, deadline exceeded).
    Transient,
    /// The service asked to slow down: send again after a backoff.
    Throttled,
    /// Sending again cannot help; the kind says why.
    Permanent(ErrorKind),
}

impl RetryClass {
    /// The error kind a failure of this class is reported with.
    pub fn kind(self) -> ErrorKind {
        match self {
            RetryClass::Transient => ErrorKind::Transient,
            RetryClass::Throttled => ErrorKind::Throttled,
            RetryClass::Permanent(kind) => kind,
        }
    }

    /// Whether the retry loop may send the call again.
    pub fn is_retryable(self) -> bool {
        !matches!(self, RetryClass::Permanent(_))
    }

    /// An error of this class's kind and retryability.
    pub fn error(self, message: impl Into<String>) -> Error {
        Error::new(self.kind(), message).with_retryable(self.is_retryable())
    }
}

/// The attempts of one operation under a [`RetryPolicy`]: which attempt this is, the
/// jittered wait before the next, and the give-up error once attempts or time run out.
#[derive(Debug)]
pub struct Retrying<'p> {
    policy: &'p RetryPolicy,
    what: String,
    attempt: u32,
    started: Instant,
}

impl Retrying<'_> {
    /// The attempt under way, counting from 1.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The operation's name, as given to [`RetryPolicy::start`].
    pub fn what(&self) -> &str {
        &self.what
    }

    /// The time left before the policy's deadline (zero once it has passed).
    pub fn time_left(&self) -> Duration {
        self.policy.deadline.saturating_sub(self.started.elapsed())
    }

    /// The time the attempt under way may take: `timeout` (a call's own limit), or the time
    /// left before the deadline when that is shorter.
    pub fn attempt_limit(&self, timeout: Duration) -> Duration {
        timeout.min(self.time_left())
    }

    /// After a failed attempt: waits out the backoff and counts the next attempt, or, when
    /// the attempts or the deadline are used up, returns at once saying so. `failure` is
    /// logged with the retry.
    pub async fn backoff(
        &mut self,
        failure: &(dyn std::fmt::Display + Sync),
    ) -> std::result::Result<(), Exhausted> {
        // Jitter between half and all of the backoff spreads out retrying writers.
        let wait = self
            .policy
            .backoff(self.attempt - 1)
            .mul_f64(rand::rng().random_range(0.5..=1.0));
        let out_of_time = self.started.elapsed() + wait > self.policy.deadline;
        if self.attempt >= self.policy.max_attempts || out_of_time {
            return Err(Exhausted {
                what: self.what.clone(),
                attempts: self.attempt,
                deadline: out_of_time,
            });
        }
        tracing::warn!(operation = %self.what, attempt = self.attempt, wait_ms = wait.as_millis() as u64, error = %failure, "retrying");
        tokio::time::sleep(wait).await;
        // A busy machine can oversleep past the deadline: an attempt with no time left could
        // only time out, and would hide the failure that made it retry.
        if self.time_left() < Duration::from_millis(1) {
            return Err(Exhausted {
                what: self.what.clone(),
                attempts: self.attempt,
                deadline: true,
            });
        }
        self.attempt += 1;
        Ok(())
    }

    /// After an attempt failed with `err`: an error that is not retryable comes back as it
    /// is; a retryable one is waited out (`Ok`: try again) or, once the attempts or the
    /// deadline are used up, becomes the give-up error ([`Exhausted::error`]).
    pub async fn after(&mut self, err: Error) -> Result<()> {
        if !err.is_retryable() {
            return Err(err);
        }
        match self.backoff(&err).await {
            Ok(()) => Ok(()),
            Err(exhausted) => Err(exhausted.error(err)),
        }
    }
}

/// An operation that kept failing until its attempts or its deadline ran out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exhausted {
    /// The operation.
    pub what: String,
    /// Attempts made.
    pub attempts: u32,
    /// Whether the deadline, rather than the number of attempts, ended it.
    pub deadline: bool,
}

impl std::fmt::Display for Exhausted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.what, self.summary())
    }
}

impl Exhausted {
    /// How it ended, without the operation's name: `still failing after 3 attempts
    /// (attempts exhausted)`, for a message that names the operation already.
    pub fn summary(&self) -> String {
        let why = if self.deadline { "deadline" } else { "attempts" };
        format!("still failing after {} attempts ({why} exhausted)", self.attempts)
    }

    /// The give-up error: the last failure's kind and context, this message, no longer
    /// retryable, and the last failure as its source.
    pub fn error(self, last: Error) -> Error {
        let mut out = Error::new(last.kind(), self.to_string());
        for (key, value) in last.context() {
            out = out.with_context(key, value.clone());
        }
        out.with_context("attempts", self.attempts.to_string())
            .with_retryable(false)
            .with_source(last)
    }
}

/// Builds a [`RetryPolicy`]; setters never fail, `build()` validates.
#[derive(Clone, Debug, PartialEq)]
pub struct RetryPolicyBuilder {
    policy: RetryPolicy,
}

impl RetryPolicyBuilder {
    /// Attempts in all, the first included (at least 1).
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.policy.max_attempts = n;
        self
    }

    /// The wait before the first retry.
    pub fn initial_backoff(mut self, d: Duration) -> Self {
        self.policy.initial_backoff = d;
        self
    }

    /// The longest wait between attempts.
    pub fn max_backoff(mut self, d: Duration) -> Self {
        self.policy.max_backoff = d;
        self
    }

    /// How much the wait grows after each retry (at least 1).
    pub fn multiplier(mut self, m: f64) -> Self {
        self.policy.multiplier = m;
        self
    }

    /// The time after which no new attempt starts.
    pub fn deadline(mut self, d: Duration) -> Self {
        self.policy.deadline = d;
        self
    }

    /// Validates and builds the policy.
    pub fn build(self) -> Result<RetryPolicy> {
        self.policy.validate()?;
        Ok(self.policy)
    }
}

impl RetryPolicy {
    /// Checks the policy's values (also run on deserialized policies by the sinks).
    pub fn validate(&self) -> Result<()> {
        if self.max_attempts == 0 {
            return Err(Error::invalid_config("max_attempts", "must be at least 1"));
        }
        if !(self.multiplier >= 1.0 && self.multiplier.is_finite()) {
            return Err(Error::invalid_config(
                "multiplier",
                "must be a finite number of at least 1",
            ));
        }
        if self.max_backoff < self.initial_backoff {
            return Err(Error::invalid_config(
                "max_backoff",
                "must not be shorter than initial_backoff",
            ));
        }
        if self.deadline.is_zero() {
            return Err(Error::invalid_config("deadline", "must be longer than zero"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    fn fast() -> RetryPolicy {
        RetryPolicy::builder()
            .initial_backoff(Duration::from_millis(1))
            .max_backoff(Duration::from_millis(4))
            .max_attempts(5)
            .build()
            .unwrap()
    }

    #[test]
    fn defaults() {
        let p = RetryPolicy::default();
        assert_eq!(p.max_attempts(), 10);
        assert_eq!(p.backoff(0), Duration::from_millis(100));
        assert_eq!(p.deadline(), Duration::from_secs(120));
    }

    #[test]
    fn setters() {
        let p = RetryPolicy::builder()
            .max_attempts(3)
            .initial_backoff(Duration::from_millis(10))
            .max_backoff(Duration::from_millis(50))
            .multiplier(3.0)
            .deadline(Duration::from_secs(1))
            .build()
            .unwrap();
        assert_eq!(p.max_attempts(), 3);
        assert_eq!(p.backoff(0), Duration::from_millis(10));
        assert_eq!(p.backoff(1), Duration::from_millis(30));
        assert_eq!(p.backoff(2), Duration::from_millis(50));
        assert_eq!(p.deadline(), Duration::from_secs(1));
    }

    #[test]
    fn build_rejects_nonsense_naming_the_field() {
        let err = RetryPolicy::builder().max_attempts(0).build().unwrap_err();
        assert_eq!(err.context_value("field"), Some("max_attempts"));
        let err = RetryPolicy::builder().multiplier(0.5).build().unwrap_err();
        assert_eq!(err.context_value("field"), Some("multiplier"));
        let err = RetryPolicy::builder()
            .deadline(Duration::ZERO)
            .build()
            .unwrap_err();
        assert_eq!(err.context_value("field"), Some("deadline"));
    }

    #[test]
    fn serde_round_trip_with_readable_durations() {
        let p = fast();
        let json = serde_json::to_string(&p).unwrap();
        assert!(json.contains("\"initial_backoff\":\"1ms\""), "{json}");
        assert_eq!(serde_json::from_str::<RetryPolicy>(&json).unwrap(), p);
        let partial: RetryPolicy = serde_json::from_str(r#"{"max_attempts": 3, "deadline": "2m"}"#).unwrap();
        assert_eq!(partial.max_attempts(), 3);
        assert_eq!(partial.deadline(), Duration::from_secs(120));
    }

    #[tokio::test]
    async fn retries_retryable_errors_until_success() {
        let calls = Arc::new(AtomicU32::new(0));
        let c = calls.clone();
        let out = fast()
            .retry("flaky", move |attempt| {
                let c = c.clone();
                async move {
                    c.fetch_add(1, Ordering::SeqCst);
                    if attempt < 3 {
                        Err(Error::new(ErrorKind::Transient, "connection reset"))
                    } else {
                        Ok(attempt)
                    }
                }
            })
            .await
            .unwrap();
        assert_eq!((out, calls.load(Ordering::SeqCst)), (3, 3));
    }

    #[tokio::test]
    async fn does_not_retry_permanent_errors() {
        let calls = AtomicU32::new(0);
        let err = fast()
            .retry("bad", |_| {
                calls.fetch_add(1, Ordering::SeqCst);
                async { Err::<(), _>(Error::invalid_input("row 3 is malformed")) }
            })
            .await
            .unwrap_err();
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
    }

    #[tokio::test]
    async fn gives_up_after_max_attempts_naming_the_operation() {
        let calls = AtomicU32::new(0);
        let err = fast()
            .retry("MutateRows", |_| {
                calls.fetch_add(1, Ordering::SeqCst);
                async { Err::<(), _>(Error::new(ErrorKind::Throttled, "slow down")) }
            })
            .await
            .unwrap_err();
        assert_eq!(calls.load(Ordering::SeqCst), 5);
        assert_eq!(err.kind(), ErrorKind::Throttled);
        assert!(!err.is_retryable());
        assert!(
            err.to_string()
                .contains("MutateRows still failing after 5 attempts"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn gives_up_at_the_deadline() {
        let policy = RetryPolicy::builder()
            .initial_backoff(Duration::from_millis(20))
            .max_backoff(Duration::from_millis(20))
            .max_attempts(1000)
            .deadline(Duration::from_millis(50))
            .build()
            .unwrap();
        let calls = AtomicU32::new(0);
        let err = policy
            .retry("commit", |_| {
                calls.fetch_add(1, Ordering::SeqCst);
                async { Err::<(), _>(Error::new(ErrorKind::Conflict, "lost a race")) }
            })
            .await
            .unwrap_err();
        let n = calls.load(Ordering::SeqCst);
        assert!((2..=6).contains(&n), "{n} attempts");
        assert!(err.to_string().contains("deadline exhausted"), "{err}");
    }

    #[test]
    fn an_attempt_may_take_its_timeout_or_the_time_left_whichever_is_shorter() {
        let policy = RetryPolicy::builder()
            .deadline(Duration::from_secs(10))
            .build()
            .unwrap();
        let mut retrying = policy.start("reading table t");
        let left = retrying.time_left();
        assert!(
            left <= Duration::from_secs(10) && left > Duration::from_secs(9),
            "{left:?}"
        );
        assert_eq!(
            retrying.attempt_limit(Duration::from_secs(5)),
            Duration::from_secs(5)
        );
        let limit = retrying.attempt_limit(Duration::from_secs(50));
        assert!(limit <= left && limit > Duration::from_secs(9), "{limit:?}");

        retrying.started -= Duration::from_secs(8);
        let limit = retrying.attempt_limit(Duration::from_secs(5));
        assert!(
            limit <= Duration::from_secs(2) && limit > Duration::from_secs(1),
            "{limit:?}"
        );
        retrying.started -= Duration::from_secs(3);
        assert_eq!(retrying.time_left(), Duration::ZERO);
        assert_eq!(retrying.attempt_limit(Duration::from_secs(5)), Duration::ZERO);
    }

    /// Attempts that each use all the time they are given (a server that never answers)
    /// end the operation at the deadline, not a whole timeout after it.
    #[tokio::test]
    async fn attempts_that_time_out_end_the_operation_at_the_deadline() {
        let deadline = Duration::from_millis(600);
        let policy = RetryPolicy::builder()
            .initial_backoff(Duration::from_millis(10))
            .max_backoff(Duration::from_millis(10))
            .max_attempts(100)
            .deadline(deadline)
            .build()
            .unwrap();
        let limits = std::sync::Mutex::new(Vec::new());
        let started = Instant::now();
        let err = policy
            .retry_within("reading table t", Duration::from_millis(250), |limit| {
                limits.lock().unwrap().push(limit);
                async move {
                    tokio::time::sleep(limit).await;
                    Err::<(), _>(Error::new(ErrorKind::Transient, "no answer"))
                }
            })
            .await
            .unwrap_err();
        let elapsed = started.elapsed();
        assert!(err.to_string().contains("deadline exhausted"), "{err}");
        assert!(
            elapsed >= deadline - Duration::from_millis(20) && elapsed <= deadline.mul_f64(1.1),
            "ended after {elapsed:?}, deadline {deadline:?}"
        );
        let limits = limits.into_inner().unwrap();
        assert_eq!(limits[..2], [Duration::from_millis(250); 2], "{limits:?}");
        let last = *limits.last().unwrap();
        assert!(
            limits.len() == 3 && last < Duration::from_millis(100),
            "the third attempt gets what is left: {limits:?}"
        );
    }

    #[tokio::test]
    async fn a_loop_driving_its_own_retries_gets_the_same_backoff_and_give_up() {
        let policy = fast();
        let mut retrying = policy.start("writing to table t");
        let mut left = vec![1, 2, 3];
        // Each attempt settles one item; the policy allows five attempts, so three do.
        while !left.is_empty() {
            left.pop();
            if left.is_empty() {
                break;
            }
            retrying.backoff(&"2 entries unavailable").await.unwrap();
        }
        assert_eq!(retrying.attempt(), 3);

        let mut retrying = policy.start("writing to table t");
        let exhausted = loop {
            if let Err(e) = retrying.backoff(&"unavailable").await {
                break e;
            }
        };
        assert_eq!((exhausted.attempts, exhausted.deadline), (5, false));
        assert_eq!(
            exhausted.to_string(),
            "writing to table t still failing after 5 attempts (attempts exhausted)"
        );
        let err = exhausted.error(Error::new(ErrorKind::Transient, "unavailable").with_context("table", "t"));
        assert_eq!(err.kind(), ErrorKind::Transient);
        assert_eq!(err.context_value("table"), Some("t"));
        assert_eq!(err.context_value("attempts"), Some("5"));
        assert!(!err.is_retryable());
    }

    #[test]
    fn classes_carry_kind_and_retryability() {
        assert!(RetryClass::Transient.error("reset").is_retryable());
        assert_eq!(
            RetryClass::Throttled.error("slow down").kind(),
            ErrorKind::Throttled
        );
        let permanent = RetryClass::Permanent(ErrorKind::NotFound).error("no table");
        assert_eq!(permanent.kind(), ErrorKind::NotFound);
        assert!(!permanent.is_retryable());
    }
}
