//! The pace of periodic tasks.

use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Waits `every` between two rounds of a periodic task; `false` when the
/// server began stopping first (the task then returns).
pub(crate) async fn wait(every: Duration, stop: &CancellationToken) -> bool {
    tokio::select! {
        _ = stop.cancelled() => false,
        _ = tokio::time::sleep(every) => true,
    }
}
