//! Standard Webhooks delivery: signs each event with [`crate::signing`],
//! retries with doubling backoff, and runs one background task per queue
//! (one queue per batch), so one batch's events arrive in the order they
//! were queued. Options model what real deliveries may do: arrive twice, or
//! once more much later (after later events).

use std::sync::{Arc, Weak};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::signing::{Secret, SecretError, sign};

/// A receiver of Standard Webhooks deliveries and how to deliver to it.
/// `P` is what the emulator's events carry where the provider left it open
/// (Gemini's `WebhookPayload`); `()` where there is no such choice.
#[derive(Debug, Clone)]
pub struct WebhookTarget<P = ()> {
    /// Full URL the events are POSTed to.
    pub url: String,
    /// The signing secret, `whsec_<base64>`.
    pub secret: String,
    /// Deliver every event twice, with the same `webhook-id`.
    pub duplicate: bool,
    /// Deliver every event once more, with the same `webhook-id`, this long
    /// after the first delivery: a redelivery that arrives after later
    /// events of other batches and after the batch was read by polling (out
    /// of order, as real deliveries can be).
    pub redeliver_after: Option<Duration>,
    /// Tries per delivery before giving up (at least 1).
    pub max_attempts: u32,
    /// Delay before the first retry; doubled for each further one.
    pub retry_backoff: Duration,
    /// What the events' `data` carries, where the emulator offers a choice.
    pub payload: P,
}

impl<P: Default> WebhookTarget<P> {
    /// A target with the usual defaults: no duplicates, no redelivery, 4
    /// tries starting at 50ms backoff, the default payload.
    pub fn new(url: impl Into<String>, secret: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            secret: secret.into(),
            duplicate: false,
            redeliver_after: None,
            max_attempts: 4,
            retry_backoff: Duration::from_millis(50),
            payload: P::default(),
        }
    }
}

impl<P> WebhookTarget<P> {
    /// How to deliver (what [`Outbox`] needs) and what to deliver, apart.
    pub fn split(self) -> (WebhookTarget, P) {
        let delivery = WebhookTarget {
            url: self.url,
            secret: self.secret,
            duplicate: self.duplicate,
            redeliver_after: self.redeliver_after,
            max_attempts: self.max_attempts,
            retry_backoff: self.retry_backoff,
            payload: (),
        };
        (delivery, self.payload)
    }

    /// The decoded secret, or why it is unusable (checked at start, so a
    /// misconfigured emulator refuses to run).
    pub fn parse_secret(&self) -> Result<Secret, SecretError> {
        Secret::parse(&self.secret)
    }
}

/// One event to deliver: its id (the same on every delivery of it) and body.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub id: String,
    pub body: Value,
}

/// What became of one delivery attempt, for the emulator's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// Answered 2xx.
    Sent,
    /// Non-2xx or no connection; retried if tries are left.
    Failed,
    /// The last try failed; the delivery is given up.
    Abandoned,
}

impl Attempt {
    /// Of one thing per kind of attempt (e.g. counters), the one for this.
    pub fn pick<T>(self, sent: T, failed: T, abandoned: T) -> T {
        match self {
            Attempt::Sent => sent,
            Attempt::Failed => failed,
            Attempt::Abandoned => abandoned,
        }
    }

    /// Adds one to the counter of this kind of attempt.
    pub fn count(self, sent: &mut u64, failed: &mut u64, abandoned: &mut u64) {
        *self.pick(sent, failed, abandoned) += 1;
    }
}

/// A `report` for [`Outbox::new`] that tells `owner` of each attempt while
/// it lives. Weak, because the owner holds the outbox.
pub fn report_to<S>(
    owner: Weak<S>,
    count: impl Fn(&S, Attempt) + Send + Sync + 'static,
) -> impl Fn(Attempt) + Send + Sync + 'static
where
    S: Send + Sync + 'static,
{
    move |attempt| {
        if let Some(owner) = owner.upgrade() {
            count(&owner, attempt);
        }
    }
}

/// Installs ring as rustls's crypto provider unless one is chosen already:
/// reqwest is built without a bundled TLS provider (see the workspace
/// manifest).
pub fn install_crypto() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// The HTTP client deliveries go out on: a 5s timeout per request.
pub fn http_client() -> reqwest::Result<reqwest::Client> {
    install_crypto();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
}

/// The queue of one batch's events. Dropping it lets its delivery task end
/// once the queue is drained.
pub type EventQueue = mpsc::UnboundedSender<Event>;

type Report = Arc<dyn Fn(Attempt) + Send + Sync>;

/// Delivers events to one target, on tasks of the emulator's tracker that
/// end at its shutdown.
#[derive(Clone)]
pub struct Outbox {
    target: WebhookTarget,
    secret: Secret,
    http: reqwest::Client,
    tasks: TaskTracker,
    shutdown: CancellationToken,
    report: Report,
}

impl std::fmt::Debug for Outbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbox")
            .field("url", &self.target.url)
            .finish_non_exhaustive()
    }
}

impl Outbox {
    /// An outbox for `target`, whose secret the caller parsed (see
    /// [`WebhookTarget::parse_secret`]); `report` hears of every attempt.
    pub fn new(
        target: WebhookTarget,
        secret: Secret,
        http: reqwest::Client,
        tasks: TaskTracker,
        shutdown: CancellationToken,
        report: impl Fn(Attempt) + Send + Sync + 'static,
    ) -> Self {
        Self {
            target,
            secret,
            http,
            tasks,
            shutdown,
            report: Arc::new(report),
        }
    }

    /// Starts the delivery task of one queue and returns the queue.
    pub fn queue(&self) -> EventQueue {
        let (tx, mut rx) = mpsc::unbounded_channel::<Event>();
        let outbox = self.clone();
        self.tasks.spawn(async move {
            loop {
                // A batch that never finishes keeps its queue open;
                // shutdown ends the task anyway.
                let event = tokio::select! {
                    event = rx.recv() => event,
                    () = outbox.shutdown.cancelled() => None,
                };
                let Some(event) = event else { break };
                let copies = if outbox.target.duplicate { 2 } else { 1 };
                for _ in 0..copies {
                    outbox.deliver(&event).await;
                }
                if let Some(delay) = outbox.target.redeliver_after {
                    outbox.redeliver_later(event, delay);
                }
            }
        });
        tx
    }

    /// Delivers `event` once more after `delay`, on its own task, so events
    /// queued meanwhile (of this batch or others) arrive before it.
    fn redeliver_later(&self, event: Event, delay: Duration) {
        let outbox = self.clone();
        self.tasks.spawn(async move {
            tokio::select! {
                () = tokio::time::sleep(delay) => outbox.deliver(&event).await,
                () = outbox.shutdown.cancelled() => {}
            }
        });
    }

    /// Delivers one event, retrying on non-2xx and connection errors.
    async fn deliver(&self, event: &Event) {
        let body = event.body.to_string();
        let attempts = self.target.max_attempts.max(1);
        let mut backoff = self.target.retry_backoff;
        for attempt in 1..=attempts {
            let timestamp = chrono::Utc::now().timestamp();
            let signature = sign(&self.secret, &event.id, timestamp, body.as_bytes());
            let request = self
                .http
                .post(&self.target.url)
                .header("content-type", "application/json")
                .header("webhook-id", &event.id)
                .header("webhook-timestamp", timestamp.to_string())
                .header("webhook-signature", signature)
                .body(body.clone())
                .send();
            let result = tokio::select! {
                r = request => r,
                () = self.shutdown.cancelled() => return,
            };
            match result {
                Ok(response) if response.status().is_success() => {
                    (self.report)(Attempt::Sent);
                    tracing::debug!(id = %event.id, attempt, "webhook delivered");
                    return;
                }
                Ok(response) => {
                    tracing::warn!(id = %event.id, attempt, status = %response.status(), "webhook refused");
                }
                Err(error) => {
                    tracing::warn!(id = %event.id, attempt, %error, "webhook delivery failed");
                }
            }
            (self.report)(Attempt::Failed);
            if attempt < attempts {
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    () = self.shutdown.cancelled() => return,
                }
                backoff = backoff.saturating_mul(2);
            }
        }
        (self.report)(Attempt::Abandoned);
        tracing::warn!(id = %event.id, "webhook abandoned after the last retry");
    }
}
