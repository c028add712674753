//! Helpers for the emulators' integration tests: waiting for what a
//! background task will do. Not used by the emulators themselves.

use std::future::Future;
use std::time::Duration;

/// Polls `check` until it yields a value, panicking with `what` after
/// `deadline`.
pub async fn eventually<T, F, Fut>(what: &str, deadline: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + deadline;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
