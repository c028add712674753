//! Review-threshold alerts: a background task that, every interval, asks
//! the store to evaluate each alerting ledger (a crossing is recorded, and
//! its alert queued, exactly once across replicas) and delivers due alerts
//! from the outbox: POSTed as JSON, signed like Standard Webhooks
//! (`webhook-id`, `webhook-timestamp`, `webhook-signature`), retried with
//! backoff until acknowledged with a 2xx or given up.
//!
//! The alert URL is chosen by whoever sets the policy, so the POST goes
//! through [`crate::tasks::outbound`], which refuses addresses the server
//! may not reach (request forgery); a refused delivery is given up at once
//! with its reason.

use crate::metrics::{Metrics, ResultLabels};
pub use crate::tasks::outbound::Failure;
use crate::tasks::outbound::Poster;
use std::time::Duration;
use tally_core::alert::{MAX_TRIES, SEND_BACKOFF};
use tally_core::backoff::sample;
use tally_core::outbound::Reach;
use tally_core::webhook::Secret;
use tally_store::Store;
use tally_store::types::OutboxAlert;
use tokio_util::sync::CancellationToken;

/// How long a sender holds an alert it is delivering.
const LEASE: Duration = Duration::from_secs(60);
/// Deliveries per round.
const BATCH: i64 = 20;

/// A signing HTTP client for alerts.
pub struct Sender {
    secret: Secret,
    poster: Poster,
}

impl Sender {
    /// `reach` says which addresses alerts may go to.
    pub fn new(secret: Secret, reach: Reach) -> anyhow::Result<Self> {
        Ok(Self {
            secret,
            poster: Poster::new(reach)?,
        })
    }

    /// POSTs one alert.
    pub async fn deliver(&self, alert: &OutboxAlert) -> Result<(), Failure> {
        let timestamp = chrono::Utc::now().timestamp();
        let status = self
            .poster
            .post(
                &alert.url,
                &self.secret,
                &alert.msg_id,
                timestamp,
                alert.body.clone(),
            )
            .await?;
        if status.is_success() {
            Ok(())
        } else if status.is_redirection() {
            Err(Failure::Failed(format!(
                "answered {status} (redirects are not followed)"
            )))
        } else {
            Err(Failure::Failed(format!("answered {status}")))
        }
    }
}

/// Runs until `stop` fires.
pub async fn run(
    store: Store,
    sender: Sender,
    every: Duration,
    metrics: Metrics,
    stop: CancellationToken,
) {
    for result in ["delivered", "retry", "given_up"] {
        let _ = metrics
            .alert_deliveries
            .get_or_create(&ResultLabels { result });
    }
    loop {
        if !crate::tasks::every::wait(every, &stop).await {
            return;
        }
        if let Err(e) = evaluate(&store).await {
            tracing::warn!(error = %e, "evaluating review thresholds failed");
        }
        if let Err(e) = deliver_due(&store, &sender, &metrics, &stop).await {
            tracing::warn!(error = %e, "delivering alerts failed");
        }
    }
}

async fn evaluate(store: &Store) -> tally_store::Result<()> {
    for ledger in store.alerting_ledgers().await? {
        store.evaluate_alert(&ledger).await?;
    }
    Ok(())
}

async fn deliver_due(
    store: &Store,
    sender: &Sender,
    metrics: &Metrics,
    stop: &CancellationToken,
) -> tally_store::Result<()> {
    for alert in store.lease_alerts(BATCH, LEASE).await? {
        if stop.is_cancelled() {
            // Leased but not sent: the lease runs out and a replica (or
            // this one, restarted) sends it.
            return Ok(());
        }
        match sender.deliver(&alert).await {
            Ok(()) => {
                metrics
                    .alert_deliveries
                    .get_or_create(&ResultLabels {
                        result: "delivered",
                    })
                    .inc();
                store.alert_delivered(alert.id).await?;
                tracing::info!(ledger = %alert.ledger, id = %alert.msg_id, reason = %alert.kind, "alert delivered");
            }
            Err(Failure::Refused(why)) => give_up(store, metrics, &alert, &why).await?,
            Err(Failure::Failed(why)) if alert.tries >= MAX_TRIES => {
                give_up(store, metrics, &alert, &why).await?
            }
            Err(Failure::Failed(why)) => {
                metrics
                    .alert_deliveries
                    .get_or_create(&ResultLabels { result: "retry" })
                    .inc();
                let retry_in =
                    SEND_BACKOFF.delay(alert.tries.max(1) as u32, sample(alert.id, alert.tries));
                tracing::warn!(ledger = %alert.ledger, id = %alert.msg_id, tries = alert.tries, retry_in = ?retry_in, error = %why, "alert delivery failed");
                store.alert_failed(alert.id, &why, Some(retry_in)).await?;
            }
        }
    }
    Ok(())
}

/// Records that `alert` will not be sent, and why.
async fn give_up(
    store: &Store,
    metrics: &Metrics,
    alert: &OutboxAlert,
    why: &str,
) -> tally_store::Result<()> {
    metrics
        .alert_deliveries
        .get_or_create(&ResultLabels { result: "given_up" })
        .inc();
    tracing::error!(ledger = %alert.ledger, id = %alert.msg_id, tries = alert.tries, error = %why, "alert given up");
    store.alert_failed(alert.id, why, None).await
}
