//! What the OpenAI Batch API tells us (and the servers that copy it),
//! turned into the same events as Gemini's: one reducer for both.
//!
//! - A batch object (`GET /v1/batches/{id}`): `{id, status, created_at,
//!   in_progress_at, finalizing_at, completed_at, failed_at, expired_at,
//!   cancelling_at, cancelled_at, output_file_id, error_file_id,
//!   request_counts{total, completed, failed}, errors{data[{code, message,
//!   line, param}]}}`; times are unix seconds, any may be null.
//! - A webhook: `{"id": "evt_…", "object": "event", "type":
//!   "batch.completed", "created_at": 1719168000, "data": {"id":
//!   "batch_…"}}` (`batch.failed`, `batch.expired`, `batch.cancelled`):
//!   nothing but the batch's id and the new state; the worker reads the
//!   batch for its files.
//!
//! Statuses: `validating` is Pending; `in_progress`, `finalizing` and
//! `cancelling` are Running (a cancel may still lose to completion);
//! `completed` is Succeeded (failed lines are in the error file, as failed
//! lines of any succeeded batch); `failed` (validation: nothing ran),
//! `expired` and `cancelled` as named. Batch ids are recorded as
//! `batches/{id}` like Gemini's.

use serde_json::Value;

use super::payload::{code, first_text, lookup, required_str, text};
use super::{
    BatchObservation, BatchStats, NameError, OpState, PayloadError, WebhookEvent, normalize_name,
};

/// The times a batch object may carry, latest state last; the latest one
/// present is the batch's update time.
const TIMES: [&str; 8] = [
    "created_at",
    "in_progress_at",
    "finalizing_at",
    "cancelling_at",
    "completed_at",
    "failed_at",
    "expired_at",
    "cancelled_at",
];

/// `batches/{id}` for an OpenAI batch id (`batch_…`), or any spelling
/// [`normalize_name`] reads.
pub fn openai_batch_name(id: &str) -> Result<String, NameError> {
    if id.contains('/') {
        normalize_name(id)
    } else {
        normalize_name(&format!("batches/{}", id.trim()))
    }
}

/// The state of an OpenAI status (`in_progress`, …); `Unknown` for one we
/// do not know (recorded, never applied).
pub fn openai_state(status: &str) -> OpState {
    OpState::parse(status)
}

/// Decodes an OpenAI batch object.
pub fn event_from_openai_batch(json: &Value) -> Result<BatchObservation, PayloadError> {
    if !json.is_object() {
        return Err(PayloadError::NotAnObject);
    }
    let operation =
        openai_batch_name(required_str(json, "id")?).map_err(|source| PayloadError::BadName {
            field: "id",
            source,
        })?;
    let raw_state = text(json, "status")?;
    let state = raw_state.as_deref().map_or(OpState::Unknown, openai_state);
    let mut update_time = None;
    for field in TIMES {
        if let Some(t) = unix_micros(json, field)? {
            update_time = Some(update_time.map_or(t, |u: i64| u.max(t)));
        }
    }
    let first_error = lookup(json, "errors.data").and_then(|d| d.get(0));
    let (error_code, error_message) = match first_error {
        Some(e) => (code(e, "code")?, error_text(e)?),
        None => (None, None),
    };
    Ok(BatchObservation {
        operation,
        raw_state,
        state,
        done: state.is_terminal(),
        update_time,
        output_file: first_text(json, &["output_file_id"])?,
        error_file: first_text(json, &["error_file_id"])?,
        stats: stats(json)?,
        error_code,
        error_message,
    })
}

/// The first error's message, with its line when it names one.
fn error_text(error: &Value) -> Result<Option<String>, PayloadError> {
    let message = text(error, "message")?;
    let line = lookup(error, "line").and_then(Value::as_u64);
    Ok(match (message, line) {
        (Some(m), Some(l)) => Some(format!("line {l}: {m}")),
        (m, _) => m,
    })
}

fn stats(json: &Value) -> Result<BatchStats, PayloadError> {
    let Some(counts) = lookup(json, "request_counts") else {
        return Ok(BatchStats::default());
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
    let (total, completed, failed) = (count("total")?, count("completed")?, count("failed")?);
    Ok(BatchStats {
        request_count: total,
        successful_request_count: completed,
        failed_request_count: failed,
        pending_request_count: (total - completed - failed).max(0),
    })
}

/// A unix-seconds time as microseconds; null or absent is `None`.
fn unix_micros(root: &Value, field: &'static str) -> Result<Option<i64>, PayloadError> {
    match lookup(root, field) {
        None => Ok(None),
        Some(v) => v
            .as_i64()
            .filter(|s| *s >= 0)
            .and_then(|s| s.checked_mul(1_000_000))
            .map(Some)
            .ok_or_else(|| PayloadError::BadTimestamp {
                field,
                value: v.to_string().chars().take(64).collect(),
            }),
    }
}

/// Decodes an OpenAI webhook body (see the module docs). A missing `type`
/// or `data.id`, or a `created_at` that is not unix seconds, is an error;
/// a type we do not know is an `Unknown` event (recorded and dropped).
pub fn parse_openai_webhook(body: &[u8]) -> Result<WebhookEvent, PayloadError> {
    let root: Value =
        serde_json::from_slice(body).map_err(|err| PayloadError::Json(err.to_string()))?;
    if !root.is_object() {
        return Err(PayloadError::NotAnObject);
    }
    let raw_type = required_str(&root, "type")?;
    let operation = openai_batch_name(required_str(&root, "data.id")?).map_err(|source| {
        PayloadError::BadName {
            field: "data.id",
            source,
        }
    })?;
    Ok(WebhookEvent {
        operation,
        state: OpState::parse(raw_type),
        raw_type: raw_type.to_owned(),
        update_time: unix_micros(&root, "created_at")?,
        output_file: None,
        error_code: None,
        error_message: None,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    // Invariant: every documented status maps onto the one state machine,
    // and only the four final ones are terminal.
    #[test]
    fn every_status_has_its_state() {
        let cases = [
            ("validating", OpState::Pending),
            ("in_progress", OpState::Running),
            ("finalizing", OpState::Running),
            ("cancelling", OpState::Running),
            ("completed", OpState::Succeeded),
            ("failed", OpState::Failed),
            ("expired", OpState::Expired),
            ("cancelled", OpState::Cancelled),
            ("paused_forever", OpState::Unknown),
        ];
        for (status, state) in cases {
            assert_eq!(openai_state(status), state, "{status}");
            let obs = event_from_openai_batch(&json!({"id": "batch_1", "status": status})).unwrap();
            assert_eq!(obs.done, state.is_terminal(), "{status}");
        }
    }

    #[test]
    fn a_completed_batch_names_both_files_and_its_counts() {
        let obs = event_from_openai_batch(&json!({
            "id": "batch_69c3", "object": "batch", "status": "completed",
            "created_at": 1_700_000_000, "in_progress_at": 1_700_000_003,
            "finalizing_at": 1_700_000_100, "completed_at": 1_700_000_102,
            "failed_at": null, "output_file_id": "file-out", "error_file_id": "file-err",
            "request_counts": {"total": 10, "completed": 7, "failed": 2},
            "errors": null
        }))
        .unwrap();
        assert_eq!(obs.operation, "batches/batch_69c3");
        assert_eq!(obs.state, OpState::Succeeded);
        assert_eq!(obs.raw_state.as_deref(), Some("completed"));
        assert_eq!(obs.update_time, Some(1_700_000_102_000_000));
        assert_eq!(obs.output_file.as_deref(), Some("file-out"));
        assert_eq!(obs.error_file.as_deref(), Some("file-err"));
        assert_eq!(
            obs.stats,
            BatchStats {
                request_count: 10,
                successful_request_count: 7,
                failed_request_count: 2,
                pending_request_count: 1,
            }
        );
    }

    #[test]
    fn a_failed_batch_carries_its_first_error() {
        let obs = event_from_openai_batch(&json!({
            "id": "batch_2", "status": "failed", "created_at": 5, "failed_at": 9,
            "output_file_id": null,
            "errors": {"object": "list", "data": [
                {"code": "token_limit_exceeded", "line": null, "param": null,
                 "message": "Enqueued token limit reached for gpt-4o-mini"},
                {"code": "invalid_json_line", "line": 2, "message": "x"}
            ]}
        }))
        .unwrap();
        assert_eq!(obs.state, OpState::Failed);
        assert_eq!(obs.error_code.as_deref(), Some("token_limit_exceeded"));
        assert_eq!(
            obs.error_message.as_deref(),
            Some("Enqueued token limit reached for gpt-4o-mini")
        );
        assert_eq!(obs.output_file, None);
        let line = event_from_openai_batch(&json!({
            "id": "batch_3", "status": "failed",
            "errors": {"data": [{"code": "invalid_json_line", "line": 2, "message": "bad"}]}
        }))
        .unwrap();
        assert_eq!(line.error_message.as_deref(), Some("line 2: bad"));
    }

    #[test]
    fn unreadable_batches_are_errors() {
        assert!(event_from_openai_batch(&json!({"status": "completed"})).is_err());
        assert!(event_from_openai_batch(&json!({"id": "a:b"})).is_err());
        assert!(event_from_openai_batch(&json!({"id": "b", "created_at": "yesterday"})).is_err());
        assert!(
            event_from_openai_batch(&json!({"id": "b", "request_counts": {"total": -1}})).is_err()
        );
    }

    #[test]
    fn webhooks_name_the_batch_and_its_new_state() {
        let body = json!({"id": "evt_1", "object": "event", "type": "batch.completed",
                          "created_at": 1_719_168_000, "data": {"id": "batch_abc123"}});
        let e = parse_openai_webhook(body.to_string().as_bytes()).unwrap();
        assert_eq!(e.operation, "batches/batch_abc123");
        assert_eq!(e.state, OpState::Succeeded);
        assert_eq!(e.raw_type, "batch.completed");
        assert_eq!(e.update_time, Some(1_719_168_000_000_000));
        for (t, s) in [
            ("batch.failed", OpState::Failed),
            ("batch.expired", OpState::Expired),
            ("batch.cancelled", OpState::Cancelled),
            ("response.completed", OpState::Unknown),
        ] {
            let body = json!({"type": t, "created_at": 1, "data": {"id": "batch_x"}});
            assert_eq!(
                parse_openai_webhook(body.to_string().as_bytes())
                    .unwrap()
                    .state,
                s
            );
        }
        assert!(parse_openai_webhook(br#"{"type": "batch.failed", "data": {}}"#).is_err());
        assert!(parse_openai_webhook(b"[]").is_err());
    }
}
