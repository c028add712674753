//! What Anthropic's Message Batches API tells us, turned into the same
//! events as Gemini's and OpenAI's: one reducer for all.
//!
//! A batch object (`GET /v1/messages/batches/{id}`): `{id: "msgbatch_…",
//! type: "message_batch", processing_status, request_counts{processing,
//! succeeded, errored, canceled, expired}, created_at, ended_at,
//! expires_at, archived_at, cancel_initiated_at, results_url}`; times are
//! RFC 3339, any may be null. Anthropic sends no batch webhooks: the
//! poller reads every state.
//!
//! `processing_status` is `in_progress` (Running), `canceling` (Running: a
//! cancel may still lose to requests that finish) or `ended`. An ended
//! batch names no outcome of its own, only counts, so its state is read
//! from them: cancelled when a cancel was asked for and some request was
//! canceled, expired when some request expired, succeeded otherwise (its
//! errored requests are in its results, as failed lines of any succeeded
//! batch). Whatever the state, the results (`results_url`) hold every
//! request's line and are read before any row fails. Batch ids are
//! recorded as `batches/{id}` like every provider's.

use serde_json::Value;

use super::payload::{lookup, required_str, text, time};
use super::{BatchObservation, BatchStats, NameError, OpState, PayloadError, normalize_name};

/// The times a batch object may carry, latest last; the latest present is
/// the batch's update time.
const TIMES: [&str; 3] = ["created_at", "cancel_initiated_at", "ended_at"];

/// `batches/{id}` for an Anthropic batch id (`msgbatch_…`), or any
/// spelling [`normalize_name`] reads.
pub fn anthropic_batch_name(id: &str) -> Result<String, NameError> {
    if id.contains('/') {
        normalize_name(id)
    } else {
        normalize_name(&format!("batches/{}", id.trim()))
    }
}

/// The state of a batch with `processing_status` `status` and the given
/// counts; `Unknown` for a status we do not know (recorded, never
/// applied).
pub fn anthropic_state(status: &str, counts: &BatchCounts, cancel_asked: bool) -> OpState {
    match status {
        "in_progress" | "canceling" => OpState::Running,
        "ended" if cancel_asked && counts.canceled > 0 => OpState::Cancelled,
        "ended" if counts.expired > 0 => OpState::Expired,
        "ended" => OpState::Succeeded,
        _ => OpState::Unknown,
    }
}

/// A batch's `request_counts`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchCounts {
    pub processing: i64,
    pub succeeded: i64,
    pub errored: i64,
    pub canceled: i64,
    pub expired: i64,
}

impl BatchCounts {
    fn stats(&self) -> BatchStats {
        let ended = self.canceled + self.expired;
        BatchStats {
            request_count: self.processing + self.succeeded + self.errored + ended,
            successful_request_count: self.succeeded,
            failed_request_count: self.errored + ended,
            pending_request_count: self.processing,
        }
    }
}

/// Decodes an Anthropic batch object.
pub fn event_from_anthropic_batch(json: &Value) -> Result<BatchObservation, PayloadError> {
    if !json.is_object() {
        return Err(PayloadError::NotAnObject);
    }
    let operation = anthropic_batch_name(required_str(json, "id")?).map_err(|source| {
        PayloadError::BadName {
            field: "id",
            source,
        }
    })?;
    let raw_state = text(json, "processing_status")?;
    let counts = counts(json)?;
    let cancel_asked = lookup(json, "cancel_initiated_at").is_some();
    let state = raw_state.as_deref().map_or(OpState::Unknown, |s| {
        anthropic_state(s, &counts, cancel_asked)
    });
    let mut update_time = None;
    for field in TIMES {
        if let Some(t) = time(json, field)? {
            update_time = Some(update_time.map_or(t, |u: i64| u.max(t)));
        }
    }
    let done = state.is_terminal();
    Ok(BatchObservation {
        operation,
        raw_state,
        state,
        done,
        update_time,
        // The results exist only once the batch ended.
        output_file: if done {
            text(json, "results_url")?
        } else {
            None
        },
        error_file: None,
        stats: counts.stats(),
        error_code: None,
        error_message: None,
    })
}

fn counts(json: &Value) -> Result<BatchCounts, PayloadError> {
    let Some(counts) = lookup(json, "request_counts") else {
        return Ok(BatchCounts::default());
    };
    let count = |field: &'static str| -> Result<i64, PayloadError> {
        match lookup(counts, field) {
            None => Ok(0),
            Some(v) => v
                .as_i64()
                .filter(|n| *n >= 0)
                .ok_or_else(|| PayloadError::BadCount {
                    stats: "request_counts",
                    field,
                    value: v.to_string(),
                }),
        }
    };
    Ok(BatchCounts {
        processing: count("processing")?,
        succeeded: count("succeeded")?,
        errored: count("errored")?,
        canceled: count("canceled")?,
        expired: count("expired")?,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn batch(status: &str, counts: Value, cancel: bool) -> Value {
        json!({"id": "msgbatch_01", "type": "message_batch", "processing_status": status,
               "request_counts": counts,
               "created_at": "2026-11-27T10:00:00Z",
               "cancel_initiated_at": if cancel { json!("2026-11-27T10:01:00Z") } else { Value::Null },
               "ended_at": if status == "ended" { json!("2026-11-27T10:02:00.5Z") } else { Value::Null },
               "results_url": if status == "ended" {
                   json!("https://api.anthropic.com/v1/messages/batches/msgbatch_01/results")
               } else { Value::Null }})
    }

    // Invariant: every processing status maps onto the one state machine;
    // an ended batch's state comes from its counts (a cancel that canceled
    // nothing ended as a success), and only an ended batch is terminal and
    // names its results.
    #[test]
    fn every_status_and_ending_has_its_state() {
        let running = json!({"processing": 3});
        let cases = [
            (
                batch("in_progress", running.clone(), false),
                OpState::Running,
            ),
            (batch("canceling", running, true), OpState::Running),
            (
                batch("ended", json!({"succeeded": 2, "errored": 1}), false),
                OpState::Succeeded,
            ),
            (
                batch("ended", json!({"succeeded": 2, "canceled": 1}), true),
                OpState::Cancelled,
            ),
            (
                batch("ended", json!({"succeeded": 3}), true),
                OpState::Succeeded,
            ),
            (
                batch("ended", json!({"succeeded": 1, "expired": 2}), false),
                OpState::Expired,
            ),
            (
                batch("archived_forever", json!({}), false),
                OpState::Unknown,
            ),
        ];
        for (json, state) in cases {
            let obs = event_from_anthropic_batch(&json).unwrap();
            assert_eq!(obs.state, state, "{json}");
            assert_eq!(obs.done, state.is_terminal(), "{json}");
            assert_eq!(obs.output_file.is_some(), obs.done, "{json}");
            assert_eq!(obs.operation, "batches/msgbatch_01");
        }
    }

    // Invariant: the update time is the latest time the batch carries, and
    // the counts become stats whose total covers every request.
    #[test]
    fn times_and_counts() {
        let obs = event_from_anthropic_batch(&batch(
            "ended",
            json!({"succeeded": 5, "errored": 1, "canceled": 2, "expired": 0, "processing": 0}),
            true,
        ))
        .unwrap();
        // 2026-11-27T10:02:00.5Z
        assert_eq!(obs.update_time, Some(1_795_773_720_500_000));
        assert_eq!(obs.stats.request_count, 8);
        assert_eq!(obs.stats.successful_request_count, 5);
        assert_eq!(obs.stats.failed_request_count, 3);
        let bad = json!({"id": "msgbatch_1", "processing_status": "ended",
                         "request_counts": {"succeeded": -1}});
        assert!(event_from_anthropic_batch(&bad).is_err());
        assert!(event_from_anthropic_batch(&json!([])).is_err());
    }
}
