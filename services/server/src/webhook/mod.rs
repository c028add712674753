//! The provider webhook receiver: an HTTP listener, separate from gRPC,
//! serving `POST /webhooks/gemini` and `POST /webhooks/openai`.
//!
//! A delivery is checked in this order, and nothing is written until every
//! check has passed:
//!
//! 1. size: a body over the limit is answered 413 (a declared length is
//!    refused before reading; an undeclared one is read up to the limit);
//! 2. authenticity: Standard Webhooks headers verified against every
//!    configured secret (constant-time, within the timestamp tolerance):
//!    401 otherwise, with the reason in the body and the log, never a
//!    secret;
//! 3. shape: a body that is not the provider's webhook payload is
//!    acknowledged (200, `unparseable`) and ignored: the poller finds the
//!    batch's state anyway;
//! 4. the event goes through the same store call as IngestEvent (source
//!    WEBHOOK, delivery id `webhook-id`): a repeated delivery is logged and
//!    dropped as `duplicate_event`.
//!
//! Every authentic event is answered 200 with the verdict, applied or not,
//! so the sender does not redeliver what we chose to drop. A database
//! failure is 503, so the sender does redeliver.

mod delivery;

use crate::config::WebhookListener;
use crate::metrics::Metrics;
use std::sync::Arc;
use tally_core::webhook::Secret;
use tally_store::Store;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// What the handlers share.
pub struct WebhookState {
    pub store: Store,
    pub metrics: Metrics,
    pub secrets: Vec<Secret>,
    pub tolerance_secs: i64,
    pub max_body_bytes: usize,
}

impl WebhookState {
    pub fn new(store: Store, metrics: Metrics, config: &WebhookListener) -> Self {
        for outcome in [
            "accepted",
            "unparseable",
            "unauthorized",
            "malformed",
            "too_large",
            "unavailable",
            "error",
        ] {
            let _ = metrics
                .webhook_requests
                .get_or_create(&crate::metrics::OutcomeLabels { outcome });
        }
        Self {
            store,
            metrics,
            secrets: config.secrets.clone(),
            tolerance_secs: config.tolerance.as_secs() as i64,
            max_body_bytes: config.max_body_bytes,
        }
    }
}

/// The routes of the webhook listener.
pub fn router(state: Arc<WebhookState>) -> axum::Router {
    axum::Router::new()
        .route("/webhooks/gemini", axum::routing::post(delivery::gemini))
        .route("/webhooks/openai", axum::routing::post(delivery::openai))
        .with_state(state)
}

/// Serves webhooks on `listener` until `stop`; in-flight deliveries finish.
pub async fn serve(
    listener: TcpListener,
    state: Arc<WebhookState>,
    limits: crate::config::HttpLimits,
    stop: CancellationToken,
) {
    crate::http_listener::serve(listener, router(state), limits, "webhook", stop).await;
}
