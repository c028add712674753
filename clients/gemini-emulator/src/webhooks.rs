//! Webhook events and their delivery. The payload is built as data from a
//! batch (pure); delivery signs with [`crate::signing`] (Standard
//! Webhooks), retries with doubling backoff, and runs one background task
//! per batch so a batch's events arrive in the order they were queued.

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::batches::{Batch, BatchState, rfc3339};
use crate::config::{WebhookPayload, WebhookTarget};
use crate::service::Shared;
use crate::signing::{Secret, sign};

/// One event to deliver: its id (the same on every delivery of it) and body.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub id: String,
    pub body: Value,
}

/// The event announcing `batch`'s current state, with the `data` of
/// `payload`. The provider documents events for the terminal states only;
/// the service queues no others.
pub fn event_for(batch: &Batch, state: BatchState, payload: WebhookPayload) -> Event {
    let time = match state {
        BatchState::Running => batch.running_time.unwrap_or(batch.update_time),
        BatchState::Pending => batch.create_time,
        BatchState::Succeeded
        | BatchState::Failed
        | BatchState::Expired
        | BatchState::Cancelled => batch.update_time,
    };
    let mut data = json!({"id": batch.name()});
    let names_file = match (payload, state) {
        (_, BatchState::Succeeded) => true,
        (WebhookPayload::Rich, s) => s.is_terminal(),
        (WebhookPayload::Documented, _) => false,
    };
    if names_file && let Some(out) = batch.output_file() {
        data["output_file_uri"] = json!(out);
    }
    let names_error = match (payload, state) {
        (_, BatchState::Failed) => true,
        (WebhookPayload::Rich, BatchState::Expired | BatchState::Cancelled) => true,
        (_, _) => false,
    };
    if names_error && let Some(err) = &batch.error {
        data["error_code"] = json!(err.code);
        data["error_message"] = json!(err.message);
    }
    let suffix = state.event_type().trim_start_matches("batch.");
    Event {
        id: format!("msg_{}_{suffix}", batch.id),
        body: json!({
            "type": state.event_type(),
            "version": "v1",
            "timestamp": rfc3339(time),
            "data": data,
        }),
    }
}

/// The queue of one batch's events. Dropping it lets the delivery task end
/// once the queue is drained.
pub type EventQueue = mpsc::UnboundedSender<Event>;

/// Starts the delivery task of one batch and returns its queue.
pub fn spawn_delivery(shared: &Arc<Shared>, target: WebhookTarget, secret: Secret) -> EventQueue {
    let (tx, mut rx) = mpsc::unbounded_channel::<Event>();
    let shared_task = Arc::clone(shared);
    let shutdown = shared.shutdown.clone();
    shared.tasks.spawn(async move {
        loop {
            // A batch that never finishes keeps its queue open; shutdown
            // ends the task anyway.
            let event = tokio::select! {
                event = rx.recv() => event,
                () = shutdown.cancelled() => None,
            };
            let Some(event) = event else { break };
            let copies = if target.duplicate { 2 } else { 1 };
            for _ in 0..copies {
                deliver(&shared_task, &target, &secret, &event, &shutdown).await;
            }
            if let Some(delay) = target.redeliver_after {
                redeliver_later(&shared_task, &target, &secret, event, delay);
            }
        }
    });
    tx
}

/// Delivers `event` once more after `delay`, on its own task, so events
/// queued meanwhile (of this batch or others) arrive before it.
fn redeliver_later(
    shared: &Arc<Shared>,
    target: &WebhookTarget,
    secret: &Secret,
    event: Event,
    delay: std::time::Duration,
) {
    let (shared_task, target, secret) = (Arc::clone(shared), target.clone(), secret.clone());
    let shutdown = shared.shutdown.clone();
    shared.tasks.spawn(async move {
        tokio::select! {
            () = tokio::time::sleep(delay) => {
                deliver(&shared_task, &target, &secret, &event, &shutdown).await;
            }
            () = shutdown.cancelled() => {}
        }
    });
}

/// Delivers one event, retrying on non-2xx and connection errors.
async fn deliver(
    shared: &Shared,
    target: &WebhookTarget,
    secret: &Secret,
    event: &Event,
    shutdown: &CancellationToken,
) {
    let body = event.body.to_string();
    let attempts = target.max_attempts.max(1);
    let mut backoff = target.retry_backoff;
    for attempt in 1..=attempts {
        let timestamp = chrono::Utc::now().timestamp();
        let signature = sign(secret, &event.id, timestamp, body.as_bytes());
        let request = shared
            .http
            .post(&target.url)
            .header("content-type", "application/json")
            .header("webhook-id", &event.id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(body.clone())
            .send();
        let result = tokio::select! {
            r = request => r,
            () = shutdown.cancelled() => return,
        };
        match result {
            Ok(response) if response.status().is_success() => {
                shared.with_stats(|s| s.webhooks_sent += 1);
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
        shared.with_stats(|s| s.webhooks_failed += 1);
        if attempt < attempts {
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                () = shutdown.cancelled() => return,
            }
            backoff = backoff.saturating_mul(2);
        }
    }
    shared.with_stats(|s| s.webhooks_abandoned += 1);
    tracing::warn!(id = %event.id, "webhook abandoned after the last retry");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batches::BatchError;

    fn batch() -> Batch {
        let mut b = crate::batches::test_batch(1, 0);
        b.id = "abc".into();
        b
    }

    #[test]
    fn success_event_names_the_output_file() {
        let mut b = batch();
        let t0 = b.update_time;
        b.transition(BatchState::Running, t0 + chrono::Duration::seconds(1));
        b.output = Some(crate::batches::Responses::File("files/out".into()));
        b.transition(BatchState::Succeeded, t0 + chrono::Duration::seconds(2));
        let e = event_for(&b, BatchState::Succeeded, WebhookPayload::Documented);
        assert_eq!(e.id, "msg_abc_succeeded");
        assert_eq!(
            e.body,
            json!({"type": "batch.succeeded", "version": "v1",
                   "timestamp": "2023-11-14T22:13:22.000000Z",
                   "data": {"id": "batches/abc", "output_file_uri": "files/out"}})
        );
        // A late RUNNING event still carries the RUNNING-era time.
        let stale = event_for(&b, BatchState::Running, WebhookPayload::Documented);
        assert_eq!(stale.id, "msg_abc_running");
        assert_eq!(stale.body["timestamp"], "2023-11-14T22:13:21.000000Z");
    }

    #[test]
    fn failure_events_carry_the_error() {
        let mut b = batch();
        b.error = Some(BatchError {
            code: 13,
            message: "boom".into(),
        });
        let t = b.update_time;
        b.transition(BatchState::Failed, t);
        let e = event_for(&b, BatchState::Failed, WebhookPayload::Documented);
        assert_eq!(e.body["type"], "batch.failed");
        assert_eq!(e.body["data"]["error_code"], 13);
        assert_eq!(e.body["data"]["error_message"], "boom");
    }

    // Invariant: the documented payloads name a responses file only for a
    // batch that succeeded, an error only for one that failed; the rich
    // form names both on every terminal event that has them.
    #[test]
    fn documented_events_name_no_file_unless_the_batch_succeeded() {
        for state in [
            BatchState::Failed,
            BatchState::Cancelled,
            BatchState::Expired,
        ] {
            let mut b = batch();
            b.output = Some(crate::batches::Responses::File("files/part".into()));
            b.error = Some(BatchError {
                code: 13,
                message: "boom".into(),
            });
            let t = b.update_time;
            b.transition(state, t);
            let documented = event_for(&b, state, WebhookPayload::Documented);
            let data = &documented.body["data"];
            assert_eq!(data["id"], "batches/abc", "{state:?}");
            assert!(data.get("output_file_uri").is_none(), "{state:?}: {data}");
            assert_eq!(
                data.get("error_code").is_some(),
                state == BatchState::Failed,
                "{state:?}: {data}"
            );
            let rich = event_for(&b, state, WebhookPayload::Rich);
            assert_eq!(rich.body["data"]["output_file_uri"], "files/part");
            assert_eq!(rich.body["data"]["error_code"], 13);
        }
    }
}
