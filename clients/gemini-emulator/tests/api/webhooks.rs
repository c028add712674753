//! Signed webhook deliveries, received by a tiny axum server and checked
//! against the emulator's own signer (itself pinned to the Standard Webhooks
//! test vector; tally's verifier accepting them is the worker's end-to-end
//! tests' business): plain, duplicated, stale, failed jobs, and retries after
//! a refusing receiver.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use gemini_emulator::signing::{Secret, sign};
use gemini_emulator::{EmulatorConfig, FaultPlan, WebhookTarget};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::common::*;

/// One delivery as received.
#[derive(Debug, Clone)]
struct Delivery {
    id: String,
    timestamp: String,
    signature: String,
    body: Vec<u8>,
}

impl Delivery {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

#[derive(Default)]
struct Inbox {
    deliveries: Vec<Delivery>,
    /// Answer 500 to this many requests first.
    refuse: usize,
    refused: usize,
}

struct Receiver {
    url: String,
    inbox: Arc<Mutex<Inbox>>,
    stop: CancellationToken,
}

impl Receiver {
    async fn start(refuse: usize) -> Self {
        let inbox = Arc::new(Mutex::new(Inbox {
            refuse,
            ..Inbox::default()
        }));
        let app = Router::new()
            .route("/hook", post(receive))
            .with_state(inbox.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0".parse::<SocketAddr>().unwrap())
            .await
            .unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let stop = CancellationToken::new();
        let token = stop.clone();
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(token.cancelled_owned())
                .await
                .unwrap();
        });
        Self { url, inbox, stop }
    }

    fn deliveries(&self) -> Vec<Delivery> {
        self.inbox.lock().unwrap().deliveries.clone()
    }

    async fn wait_for(&self, n: usize) -> Vec<Delivery> {
        eventually(&format!("{n} webhook deliveries"), || async {
            let d = self.deliveries();
            (d.len() >= n).then_some(d)
        })
        .await
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn receive(
    State(inbox): State<Arc<Mutex<Inbox>>>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let mut inbox = inbox.lock().unwrap();
    if inbox.refused < inbox.refuse {
        inbox.refused += 1;
        return StatusCode::INTERNAL_SERVER_ERROR;
    }
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    inbox.deliveries.push(Delivery {
        id: header("webhook-id"),
        timestamp: header("webhook-timestamp"),
        signature: header("webhook-signature"),
        body: body.to_vec(),
    });
    StatusCode::OK
}

/// The published Standard Webhooks test secret.
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn secret() -> Secret {
    Secret::parse(SECRET).unwrap()
}

fn assert_authentic(d: &Delivery) {
    let timestamp: i64 = d.timestamp.parse().expect("a unix timestamp");
    let skew = chrono::Utc::now().timestamp() - timestamp;
    assert!(skew.abs() <= 60, "delivery {} is {skew}s old", d.id);
    assert_eq!(
        d.signature,
        sign(&secret(), &d.id, timestamp, &d.body),
        "delivery {} does not verify",
        d.id
    );
    // A tampered body must not verify (the test's own sanity check).
    let mut tampered = d.body.clone();
    tampered.push(b' ');
    assert_ne!(d.signature, sign(&secret(), &d.id, timestamp, &tampered));
}

fn webhook_config(
    receiver: &Receiver,
    faults: FaultPlan,
    f: impl FnOnce(&mut WebhookTarget),
) -> EmulatorConfig {
    let mut target = WebhookTarget::new(receiver.url.clone(), SECRET);
    target.retry_backoff = Duration::from_millis(10);
    f(&mut target);
    let mut cfg = config(faults);
    cfg.webhook = Some(target);
    cfg
}

#[tokio::test]
async fn a_signed_event_announces_each_terminal_state() {
    let receiver = Receiver::start(0).await;
    let faults = plan(json!({"jobs": [
        {"match": {"display_name_contains": "doomed"}, "fault": {"kind": "failed"}},
        {"match": {"display_name_contains": "cancel-me"}, "fault": {"kind": "stays_pending"}}
    ]}));
    let (emu, api) = start(webhook_config(&receiver, faults, |_| {})).await;

    let ok = api.submit("fine", &[line("w1", "q")]).await;
    let op = api.wait_done(&ok).await;
    let d = receiver.wait_for(1).await;
    assert_eq!(d.len(), 1, "terminal events only by default");
    assert_authentic(&d[0]);
    let body = d[0].json();
    assert_eq!(body["type"], "batch.succeeded");
    assert_eq!(body["version"], "v1");
    assert_eq!(body["timestamp"], op["metadata"]["updateTime"]);
    assert_eq!(body["data"]["id"], ok);
    assert_eq!(
        body["data"]["output_file_uri"],
        op["response"]["responsesFile"]
    );

    let doomed = api.submit("doomed", &[line("w2", "q")]).await;
    let op = api.wait_done(&doomed).await;
    let d = receiver.wait_for(2).await;
    assert_authentic(&d[1]);
    let body = d[1].json();
    assert_eq!(body["type"], "batch.failed");
    assert_eq!(body["data"]["id"], doomed);
    assert_eq!(body["data"]["error_code"], op["error"]["code"]);
    assert!(body["data"]["error_message"].is_string());
    assert_ne!(d[0].id, d[1].id, "ids are unique per event");

    let held = api.submit("cancel-me", &[line("w3", "q")]).await;
    api.post(&format!("/v1beta/{held}:cancel"))
        .send()
        .await
        .unwrap();
    let d = receiver.wait_for(3).await;
    assert_authentic(&d[2]);
    let body = d[2].json();
    assert_eq!(body["type"], "batch.cancelled");
    assert_eq!(
        body["data"],
        json!({"id": held}),
        "a documented cancel event carries only the id"
    );

    // The receiver has the body before the sender has the answer.
    let stats = eventually("3 deliveries counted", || async {
        let s = emu.stats();
        (s.webhooks_sent == 3).then_some(s)
    })
    .await;
    assert_eq!(stats.webhooks_failed, 0);
    emu.shutdown().await;
}

/// Duplicates and late redeliveries carry the same webhook-id and body;
/// a redelivery comes at least its delay after the first delivery (the
/// signature timestamps, in seconds, are a second apart); and only the
/// documented terminal event is ever sent (no `batch.running` first).
#[tokio::test]
async fn duplicates_and_redeliveries_repeat_the_terminal_event() {
    let receiver = Receiver::start(0).await;
    let cfg = webhook_config(&receiver, FaultPlan::default(), |t| {
        t.duplicate = true;
        t.redeliver_after = Some(Duration::from_millis(1100));
    });
    let (emu, api) = start(cfg).await;
    let name = api.submit("dup", &[line("d1", "q")]).await;
    let op = api.wait_done(&name).await;
    // the event, its duplicate, then the late copy
    let d = receiver.wait_for(3).await;
    for delivery in &d {
        assert_authentic(delivery);
        assert_eq!(delivery.json()["type"], "batch.succeeded");
        assert_eq!(
            delivery.id, d[0].id,
            "every copy carries the same webhook-id"
        );
        assert_eq!(delivery.body, d[0].body);
    }
    assert_eq!(
        d[0].json()["timestamp"],
        op["metadata"]["updateTime"],
        "the event carries the time of the state change, not of the delivery"
    );
    let sent_at = |x: &Delivery| x.timestamp.parse::<i64>().unwrap();
    assert!(
        sent_at(&d[2]) > sent_at(&d[0]),
        "the redelivery comes later: {} vs {}",
        d[2].timestamp,
        d[0].timestamp
    );
    eventually("3 deliveries counted", || async {
        (emu.stats().webhooks_sent == 3).then_some(())
    })
    .await;
    emu.shutdown().await;
}

#[tokio::test]
async fn refused_deliveries_are_retried() {
    let receiver = Receiver::start(2).await;
    let (emu, api) = start(webhook_config(&receiver, FaultPlan::default(), |_| {})).await;
    let name = api.submit("retry", &[line("r1", "q")]).await;
    api.wait_done(&name).await;
    let d = receiver.wait_for(1).await;
    assert_authentic(&d[0]);
    let stats = eventually("delivery stats", || async {
        let s = emu.stats();
        (s.webhooks_sent == 1).then_some(s)
    })
    .await;
    assert_eq!(stats.webhooks_failed, 2);
    assert_eq!(stats.webhooks_abandoned, 0);
    emu.shutdown().await;
}

#[tokio::test]
async fn an_unreachable_receiver_is_given_up_on() {
    // Bind and drop a listener to get a port nobody listens on.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut target = WebhookTarget::new(format!("http://127.0.0.1:{port}/hook"), SECRET);
    target.max_attempts = 3;
    target.retry_backoff = Duration::from_millis(5);
    let mut cfg = config(FaultPlan::default());
    cfg.webhook = Some(target);
    let (emu, api) = start(cfg).await;
    let name = api.submit("nobody", &[line("n1", "q")]).await;
    api.wait_done(&name).await;
    let stats = eventually("the delivery to be abandoned", || async {
        let s = emu.stats();
        (s.webhooks_abandoned == 1).then_some(s)
    })
    .await;
    assert_eq!(stats.webhooks_failed, 3);
    assert_eq!(stats.webhooks_sent, 0);
    emu.shutdown().await;
}

#[tokio::test]
async fn a_bad_secret_refuses_to_start() {
    let mut cfg = config(FaultPlan::default());
    cfg.webhook = Some(WebhookTarget::new(
        "http://127.0.0.1:1/hook",
        "not-a-secret",
    ));
    let result = gemini_emulator::Emulator::start("127.0.0.1:0".parse().unwrap(), cfg).await;
    assert_eq!(
        result.err().unwrap().kind(),
        std::io::ErrorKind::InvalidInput
    );
}

#[tokio::test]
async fn shutdown_does_not_wait_for_batches_that_never_finish() {
    let receiver = Receiver::start(0).await;
    let faults = plan(json!({"jobs": [{"match": {}, "fault": {"kind": "stays_pending"}}]}));
    let (emu, api) = start(webhook_config(&receiver, faults, |_| {})).await;
    api.submit("forever", &[line("f1", "q")]).await;
    let started = std::time::Instant::now();
    emu.shutdown().await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "shutdown took {:?}",
        started.elapsed()
    );
    assert!(receiver.deliveries().is_empty());
}
