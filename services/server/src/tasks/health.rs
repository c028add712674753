//! gRPC health: SERVING only while the database answers. tonic-health
//! starts the overall service as SERVING, so it is set NOT_SERVING before
//! the listener opens, and flipped by a task that pings the database.

use crate::metrics::Metrics;
use std::time::Duration;
use tally_store::Store;
use tokio_util::sync::CancellationToken;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

/// Every service name health answers for ("" is the server as a whole).
pub const SERVICES: [&str; 5] = [
    "",
    "tally.v1.LedgerService",
    "tally.v1.JobService",
    "tally.v1.OperationsService",
    "tally.v1.DeliveryService",
];

pub async fn set_all(reporter: &HealthReporter, status: ServingStatus) {
    for s in SERVICES {
        reporter.set_service_status(s, status).await;
    }
}

/// Pings the database every `interval` until `stop`; reports the result.
pub async fn watch_database(
    store: Store,
    reporter: HealthReporter,
    metrics: Metrics,
    interval: Duration,
    stop: CancellationToken,
) {
    let mut up: Option<bool> = None;
    loop {
        let pinged = tokio::time::timeout(interval.max(Duration::from_secs(1)), store.ping()).await;
        let now_up = match pinged {
            Ok(Ok(waited)) => {
                metrics.pool_acquire.observe(waited.as_secs_f64());
                true
            }
            _ => false,
        };
        if up != Some(now_up) {
            if now_up {
                tracing::info!("database reachable: serving");
                set_all(&reporter, ServingStatus::Serving).await;
            } else {
                tracing::warn!("database unreachable: not serving");
                set_all(&reporter, ServingStatus::NotServing).await;
            }
            up = Some(now_up);
        }
        metrics.database_up.set(i64::from(now_up));
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
        }
    }
}
