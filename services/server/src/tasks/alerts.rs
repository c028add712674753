//! Review-threshold alerts: a background task that, every interval, asks
//! the store to evaluate each alerting ledger (a crossing is recorded, and
//! its alert queued, exactly once across replicas) and delivers due alerts
//! from the outbox: POSTed as JSON, signed like Standard Webhooks
//! (`webhook-id`, `webhook-timestamp`, `webhook-signature`), retried with
//! backoff until acknowledged with a 2xx or given up.
//!
//! The alert URL is chosen by whoever sets the policy, so the sender guards
//! against request forgery (see [`tally_core::outbound`]): unless the server
//! allows private hosts, a literal address is checked before sending, and a
//! name is resolved once by [`PublicResolver`], which refuses it when any of
//! its addresses is not public and otherwise hands exactly those addresses
//! to the connector (no second lookup that could answer differently). No
//! proxy is used (it would resolve the name itself) and no redirect is
//! followed. A refused delivery is given up at once with its reason.

use crate::metrics::{Metrics, ResultLabels};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tally_core::alert::{MAX_TRIES, SEND_BACKOFF};
use tally_core::outbound::{self, Host, Reach};
use tally_core::text::redact_urls;
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

/// Why an alert was not acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Its target is not one this server may reach: given up at once.
    Refused(String),
    /// Anything else (no connection, a timeout, a non-2xx answer, a
    /// redirect): retried with backoff.
    Failed(String),
}

/// A signing HTTP client for alerts.
pub struct Sender {
    secret: Secret,
    reach: Reach,
    http: reqwest::Client,
}

impl Sender {
    /// `reach` says which addresses alerts may go to.
    pub fn new(secret: Secret, reach: Reach) -> anyhow::Result<Self> {
        // reqwest is built without a bundled crypto provider (the default
        // one needs cmake); ring is installed once per process.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut http = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .user_agent(concat!("tally/", env!("CARGO_PKG_VERSION")))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy();
        if reach == Reach::PublicOnly {
            http = http.dns_resolver(Arc::new(PublicResolver));
        }
        Ok(Self {
            secret,
            reach,
            http: http.build()?,
        })
    }

    /// POSTs one alert.
    pub async fn deliver(&self, alert: &OutboxAlert) -> Result<(), Failure> {
        // Literal addresses never reach the resolver: checked here.
        match outbound::parse_target(&alert.url) {
            Err(why) => return Err(Failure::Refused(redact_urls(&format!("alert url {why}")))),
            Ok(Host::Ip(ip)) => {
                if let Some(why) = self.reach.refuses(ip) {
                    return Err(Failure::Refused(why));
                }
            }
            Ok(Host::Name(_)) => {}
        }
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
            .map_err(|e| match refusal_in(&e) {
                Some(why) => Failure::Refused(why),
                // The error quotes the URL, which may hold credentials: it
                // goes to logs and to the outbox's last_error without them.
                None => Failure::Failed(redact_urls(&format!(
                    "post failed: {}",
                    with_causes(&e.without_url())
                ))),
            })?;
        if resp.status().is_success() {
            Ok(())
        } else if resp.status().is_redirection() {
            Err(Failure::Failed(format!(
                "answered {} (redirects are not followed)",
                resp.status()
            )))
        } else {
            Err(Failure::Failed(format!("answered {}", resp.status())))
        }
    }
}

/// The resolver's refusal inside a request error, if that is what it is.
fn refusal_in(e: &reqwest::Error) -> Option<String> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(r) = c.downcast_ref::<Refused>() {
            return Some(r.0.clone());
        }
        cause = c.source();
    }
    None
}

/// An error with its causes, `outer: inner: …` (reqwest's own message
/// leaves out why the request could not be sent).
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// A host name whose addresses are not all public.
#[derive(Debug)]
struct Refused(String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// Resolves a name once and refuses it when any address is not public; the
/// connector then uses exactly the addresses checked here.
struct PublicResolver;

impl reqwest::dns::Resolve for PublicResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_string();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            for a in &addrs {
                if let Some(why) = Reach::PublicOnly.refuses(a.ip()) {
                    return Err(Box::new(Refused(format!("host {host}: {why}"))) as _);
                }
            }
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
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
                    SEND_BACKOFF.delay(alert.tries.max(1) as u32, jitter(alert.id, alert.tries));
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

/// A jitter sample in `[0, 1)` from the alert and its try, so replicas
/// spread retries without a random number generator.
fn jitter(id: i64, tries: i32) -> f64 {
    let x = (id as u64)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(tries as u64)
        .rotate_left(29);
    (x % 1000) as f64 / 1000.0
}
