//! Review-threshold alerts: a background task that, every interval, asks
//! the store to evaluate each alerting ledger (a crossing is recorded, and
//! its alert queued, exactly once across replicas) and delivers due alerts
//! from the outbox: POSTed as JSON, signed like Standard Webhooks
//! (`webhook-id`, `webhook-timestamp`, `webhook-signature`), retried with
//! backoff until acknowledged with a 2xx or given up.

use crate::metrics::{Metrics, ResultLabels};
use std::time::Duration;
use tally_core::alert::{MAX_TRIES, SEND_BACKOFF};
use tally_core::webhook::{Secret, sign};
use tally_store::Store;
use tally_store::types::OutboxAlert;
use tokio_util::sync::CancellationToken;

/// How long a sender holds an alert it is delivering.
const LEASE: Duration = Duration::from_secs(60);
/// Deliveries per round.
const BATCH: i64 = 20;
/// One delivery's time limit.
const TIMEOUT: Duration = Duration::from_secs(10);

/// A signing HTTP client for alerts.
pub struct Sender {
    secret: Secret,
    http: reqwest::Client,
}

impl Sender {
    pub fn new(secret: Secret) -> anyhow::Result<Self> {
        // reqwest is built without a bundled crypto provider (the default
        // one needs cmake); ring is installed once per process.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .user_agent(concat!("tally/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Self { secret, http })
    }

    /// POSTs one alert; `Err` carries why it was not acknowledged.
    async fn deliver(&self, alert: &OutboxAlert) -> Result<(), String> {
        let timestamp = chrono::Utc::now().timestamp();
        let signature = sign(
            &self.secret,
            &alert.msg_id,
            timestamp,
            alert.body.as_bytes(),
        );
        let resp = self
            .http
            .post(&alert.url)
            .header("content-type", "application/json")
            .header("webhook-id", &alert.msg_id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(alert.body.clone())
            .send()
            .await
            .map_err(|e| format!("post failed: {e}"))?;
        if resp.status().is_success() {
            Ok(())
        } else {
            Err(format!("answered {}", resp.status()))
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
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
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
            Err(why) if alert.tries >= MAX_TRIES => {
                metrics
                    .alert_deliveries
                    .get_or_create(&ResultLabels { result: "given_up" })
                    .inc();
                tracing::error!(ledger = %alert.ledger, id = %alert.msg_id, tries = alert.tries, error = %why, "alert given up");
                store.alert_failed(alert.id, &why, None).await?;
            }
            Err(why) => {
                metrics
                    .alert_deliveries
                    .get_or_create(&ResultLabels { result: "retry" })
                    .inc();
                let retry_in =
                    SEND_BACKOFF.delay(alert.tries.max(1) as u32, jitter(alert.id, alert.tries));
                tracing::warn!(ledger = %alert.ledger, id = %alert.msg_id, tries = alert.tries, retry_in = ?retry_in, error = %why, "alert delivery failed");
                store.alert_failed(alert.id, &why, Some(retry_in)).await?;
            }
        }
    }
    Ok(())
}

/// A jitter sample in `[0, 1)` from the alert and its try, so replicas
/// spread retries without a random number generator.
fn jitter(id: i64, tries: i32) -> f64 {
    let x = (id as u64)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(tries as u64)
        .rotate_left(29);
    (x % 1000) as f64 / 1000.0
}
