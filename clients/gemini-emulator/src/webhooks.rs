//! Webhook events, built as data from a batch (pure). Delivery (signing,
//! retries, one ordered queue per batch) is `emulator_kit::delivery`.

pub use emulator_kit::delivery::Event;
use serde_json::json;

use crate::batches::{Batch, BatchState, rfc3339};
use crate::config::WebhookPayload;

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
