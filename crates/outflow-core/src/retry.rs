//! The retry policy the sinks share: bounded attempts, exponential backoff with jitter, and
//! a total deadline.
//!
//! Only errors marked retryable ([`Error::is_retryable`]) are retried; a sink decides which
//! service errors are retryable when it converts them, and never marks a non-idempotent
//! operation retryable.

use std::future::Future;
use std::time::{Duration, Instant};

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::{Error, Result, duration};

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
    /// The time after which no new attempt starts.
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

    /// Runs `op` until it succeeds, fails with an error that is not retryable, or the
    /// attempts or the deadline run out; `what` names the operation in logs and errors.
    /// `op` receives the attempt number, starting at 1.
    pub async fn retry<T, F, Fut>(&self, what: &str, mut op: F) -> Result<T>
    where
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let started = Instant::now();
        let mut attempt = 1;
        loop {
            let err = match op(attempt).await {
                Ok(value) => return Ok(value),
                Err(err) => err,
            };
            if !err.is_retryable() {
                return Err(err);
            }
            // Jitter between half and all of the backoff spreads out retrying writers.
            let full = self.backoff(attempt - 1);
            let wait = full.mul_f64(rand::rng().random_range(0.5..=1.0));
            let out_of_time = started.elapsed() + wait > self.deadline;
            if attempt >= self.max_attempts || out_of_time {
                let why = if out_of_time { "deadline" } else { "attempts" };
                return Err(Error::new(
                    err.kind(),
                    format!("{what} still failing after {attempt} attempts ({why} exhausted)"),
                )
                .with_context("attempts", attempt.to_string())
                .with_retryable(false)
                .with_source(err));
            }
            tracing::warn!(operation = what, attempt, wait_ms = wait.as_millis() as u64, error = %err, "retrying");
            tokio::time::sleep(wait).await;
            attempt += 1;
        }
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
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;
    use crate::ErrorKind;

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
}
