//! Retrying calls that failed for reasons that pass: UNAVAILABLE (the
//! server restarting, a connection reset), RESOURCE_EXHAUSTED (load
//! shedding), DEADLINE_EXCEEDED, ABORTED (a lost compare-and-swap). A
//! RetryInfo delay from the server wins over the backoff when longer.
//!
//! Only retry calls that are safe to repeat: tally's writes are idempotent
//! by design (ClaimRows with the same request id, reports answered
//! DUPLICATE, MarkSubmitted/FinishJob with the same values).

use std::future::Future;
use std::time::Duration;

use tonic::{Code, Status};
use tonic_types::StatusExt;

/// Exponential backoff with a cap and a bounded number of tries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub initial: Duration,
    pub max: Duration,
    /// Tries in all, at least 1.
    pub tries: u32,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(5),
            tries: 8,
        }
    }
}

impl RetryPolicy {
    /// The pause before retry number `n` (1-based): initial·2^(n-1), capped.
    pub fn delay(&self, n: u32) -> Duration {
        let factor = 1u32.checked_shl(n.saturating_sub(1)).unwrap_or(u32::MAX);
        self.initial.saturating_mul(factor).min(self.max)
    }
}

/// Whether a failed call may succeed if repeated unchanged.
pub fn is_transient(status: &Status) -> bool {
    match status.code() {
        Code::Unavailable | Code::ResourceExhausted | Code::DeadlineExceeded | Code::Aborted => {
            true
        }
        Code::Ok
        | Code::Cancelled
        | Code::Unknown
        | Code::InvalidArgument
        | Code::NotFound
        | Code::AlreadyExists
        | Code::PermissionDenied
        | Code::FailedPrecondition
        | Code::OutOfRange
        | Code::Unimplemented
        | Code::Internal
        | Code::DataLoss
        | Code::Unauthenticated => false,
    }
}

/// The server's RetryInfo delay, if it sent one.
pub fn retry_delay(status: &Status) -> Option<Duration> {
    let details = status.get_error_details();
    details.retry_info().and_then(|r| r.retry_delay)
}

/// The server's ErrorInfo reason (e.g. `LEDGER_PAUSED`), if it sent one.
pub fn error_reason(status: &Status) -> Option<String> {
    status
        .get_error_details()
        .error_info()
        .map(|i| i.reason.clone())
}

/// The most rows the server takes in one call, when it refused a call for
/// sending more (ErrorInfo `TOO_MANY_ROWS`, its limit in `value`).
pub fn rows_per_call_limit(status: &Status) -> Option<usize> {
    if status.code() != Code::InvalidArgument {
        return None;
    }
    let details = status.get_error_details();
    let info = details.error_info()?;
    if info.reason != "TOO_MANY_ROWS" {
        return None;
    }
    info.metadata.get("value")?.parse().ok().filter(|n| *n > 0)
}

/// Runs `call` until it succeeds, fails for good, or the tries run out;
/// answers the last status.
pub async fn with_retry<T, F, Fut>(
    policy: RetryPolicy,
    what: &str,
    mut call: F,
) -> Result<T, Status>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Status>>,
{
    let mut n = 0;
    loop {
        n += 1;
        match call().await {
            Ok(v) => return Ok(v),
            Err(status) if is_transient(&status) && n < policy.tries.max(1) => {
                let pause = policy
                    .delay(n)
                    .max(retry_delay(&status).unwrap_or_default().min(policy.max));
                tracing::debug!(call = what, code = ?status.code(), message = status.message(), retry_in = ?pause, "retrying");
                tokio::time::sleep(pause).await;
            }
            Err(status) => return Err(status),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let p = RetryPolicy {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(1),
            tries: 10,
        };
        assert_eq!(p.delay(1), Duration::from_millis(100));
        assert_eq!(p.delay(2), Duration::from_millis(200));
        assert_eq!(p.delay(4), Duration::from_millis(800));
        assert_eq!(p.delay(5), Duration::from_secs(1));
        assert_eq!(p.delay(60), Duration::from_secs(1));
    }

    #[test]
    fn only_passing_failures_are_transient() {
        assert!(is_transient(&Status::unavailable("x")));
        assert!(is_transient(&Status::resource_exhausted("x")));
        assert!(!is_transient(&Status::invalid_argument("x")));
        assert!(!is_transient(&Status::failed_precondition("x")));
    }

    /// Only the server's TOO_MANY_ROWS refusal names a per-call limit.
    #[test]
    fn the_per_call_limit_is_read_from_its_refusal() {
        use tonic_types::ErrorDetails;
        let refusal = |reason: &str, value: &str| {
            let meta: std::collections::HashMap<String, String> =
                [("value".to_string(), value.to_string())].into();
            Status::with_error_details(
                Code::InvalidArgument,
                "too many",
                ErrorDetails::with_error_info(reason, "tally.v1", meta),
            )
        };
        assert_eq!(
            rows_per_call_limit(&refusal("TOO_MANY_ROWS", "100")),
            Some(100)
        );
        assert_eq!(rows_per_call_limit(&refusal("TOO_MANY_ROWS", "0")), None);
        assert_eq!(rows_per_call_limit(&refusal("OTHER", "100")), None);
        assert_eq!(rows_per_call_limit(&Status::invalid_argument("x")), None);
    }

    #[tokio::test]
    async fn transient_failures_are_retried_and_permanent_ones_are_not() {
        let p = RetryPolicy {
            initial: Duration::from_millis(1),
            max: Duration::from_millis(2),
            tries: 5,
        };
        let calls = AtomicU32::new(0);
        let out = with_retry(p, "t", || async {
            if calls.fetch_add(1, Ordering::SeqCst) < 2 {
                Err(Status::unavailable("down"))
            } else {
                Ok(7)
            }
        })
        .await;
        assert_eq!(out.unwrap(), 7);
        assert_eq!(calls.load(Ordering::SeqCst), 3);

        let calls = AtomicU32::new(0);
        let out: Result<(), _> = with_retry(p, "t", || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(Status::invalid_argument("no"))
        })
        .await;
        assert_eq!(out.unwrap_err().code(), Code::InvalidArgument);
        assert_eq!(calls.load(Ordering::SeqCst), 1);

        let calls = AtomicU32::new(0);
        let out: Result<(), _> = with_retry(p, "t", || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(Status::unavailable("down"))
        })
        .await;
        assert!(out.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 5);
    }
}
