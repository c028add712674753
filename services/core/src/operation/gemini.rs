//! Gemini's word on a batch, turned into reducer events: [`parse_gemini_webhook`]
//! for the webhook receiver and [`event_from_batch_resource`] for the
//! reconciliation poller. Both normalize the name and the state the same way
//! and hand back a [`BatchObservation`] or [`WebhookEvent`], so the two
//! paths meet in the same reducer and a stale poll can never overrule a
//! fresh webhook (or the reverse).
//!
//! Gemini's quirks handled here (DESIGN.md §10): `BATCH_STATE_*` on the wire
//! but `JOB_STATE_*` (and a top-level `state`) from SDKs; `batchStats` counts
//! are JSON strings and zero counts are omitted; `done` is absent until the
//! batch finishes; `updateTime` may be missing (the epoch).

use serde_json::Value;

use super::OpState;
use super::payload::{
    BatchObservation, BatchStats, PayloadError, WebhookEvent, code, first_present, first_str,
    first_text, first_time, flag, lookup, required_name, required_str, text, time,
};

/// Decodes a Gemini webhook body:
/// `{"type": "batch.succeeded", "version": "…", "timestamp": "<rfc 3339>",
///   "data": {"id": "batches/abc", "output_file_uri": "…",
///            "error_code": "…", "error_message": "…"}}`.
///
/// Malformed json, a missing `type` or `data.id`, a bad name, or a
/// `timestamp` that is present but not rfc 3339 is an error. The last is
/// rejected rather than read as the epoch: the body is signed, so a
/// timestamp we cannot read means we misunderstand the format, and the
/// poller still finds the batch's state if the sender gives up.
pub fn parse_gemini_webhook(body: &[u8]) -> Result<WebhookEvent, PayloadError> {
    let root: Value =
        serde_json::from_slice(body).map_err(|err| PayloadError::Json(err.to_string()))?;
    if !root.is_object() {
        return Err(PayloadError::NotAnObject);
    }
    let raw_type = required_str(&root, "type")?;
    let operation = required_name(&root, "data.id")?;
    Ok(WebhookEvent {
        operation,
        state: OpState::parse(raw_type),
        raw_type: raw_type.to_owned(),
        update_time: time(&root, "timestamp")?,
        output_file: text(&root, "data.output_file_uri")?
            .as_deref()
            .and_then(file_name_from_uri),
        error_code: code(&root, "data.error_code")?,
        error_message: text(&root, "data.error_message")?,
    })
}

/// The Files API name (`files/{id}`) a webhook's output URI names, in any
/// of the forms it may take (`files/abc`, a `…/v1beta/files/abc` URL, a
/// `…/files/abc:download?alt=media` download URL); `None` for a URI that
/// names no Files API file (a `gs://` object): the batch is then read with
/// GET, whose `responsesFile` is authoritative. The documentation's
/// examples do not settle the form, so every one is accepted.
pub fn file_name_from_uri(uri: &str) -> Option<String> {
    let uri = uri.trim();
    if uri.starts_with("gs://") {
        return None;
    }
    let path = uri.split(['?', '#']).next()?;
    let at = path.rfind("files/")?;
    let before = &path[..at];
    if !(before.is_empty() || before.ends_with('/')) {
        return None;
    }
    let id = path[at + "files/".len()..]
        .split(':')
        .next()?
        .trim_end_matches('/');
    let valid = !id.is_empty()
        && id.len() <= 64
        && id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    valid.then(|| format!("files/{id}"))
}

/// Where each field of a `batches.get` answer may be, first match wins: the
/// REST operation keeps state, times and stats under `metadata` in
/// camelCase; some SDKs flatten them to the top level and use snake_case.
const STATE: &[&str] = &["metadata.state", "state"];
const UPDATE_TIME: &[&str] = &[
    "metadata.updateTime",
    "metadata.update_time",
    "updateTime",
    "update_time",
];
const STATS: &[&str] = &[
    "metadata.batchStats",
    "metadata.batch_stats",
    "batchStats",
    "batch_stats",
];
const OUTPUT_FILE: &[&str] = &[
    "response.responsesFile",
    "response.responses_file",
    "metadata.output.responsesFile",
    "metadata.output.responses_file",
    "dest.fileName",
    "dest.file_name",
];

/// Decodes the provider's `batches.get` answer, a long-running operation:
/// `{name, metadata: {state, createTime, updateTime, endTime, batchStats},
///   done, response: {responsesFile}, error: {code, message}}`.
///
/// When no state is given (or none we know) but `done` is true, the
/// operation's own outcome decides: an `error` means `Failed`, a `response`
/// means `Succeeded`. An explicit known state is trusted over `done`: the
/// reducer, not this parser, decides what is progress.
pub fn event_from_batch_resource(json: &Value) -> Result<BatchObservation, PayloadError> {
    if !json.is_object() {
        return Err(PayloadError::NotAnObject);
    }
    let operation = required_name(json, "name")?;
    let raw_state = first_str(json, STATE)?;
    let done = flag(json, "done")?;
    let error_code = code(json, "error.code")?;
    let error_message = text(json, "error.message")?;
    let state = state_of(
        raw_state,
        done,
        error_code.is_some() || error_message.is_some(),
        lookup(json, "response").is_some(),
    );
    Ok(BatchObservation {
        operation,
        raw_state: raw_state.map(str::to_owned),
        state,
        done,
        update_time: first_time(json, UPDATE_TIME)?,
        output_file: first_text(json, OUTPUT_FILE)?,
        error_file: None,
        stats: stats(json)?,
        error_code,
        error_message,
    })
}

fn state_of(raw: Option<&str>, done: bool, has_error: bool, has_response: bool) -> OpState {
    let stated = raw.map_or(OpState::Unknown, OpState::parse);
    if stated.is_known() || !done {
        return stated;
    }
    if has_error {
        OpState::Failed
    } else if has_response {
        OpState::Succeeded
    } else {
        OpState::Unknown
    }
}

fn stats(json: &Value) -> Result<BatchStats, PayloadError> {
    let Some((field, stats)) = first_present(json, STATS) else {
        return Ok(BatchStats::default());
    };
    if !stats.is_object() {
        return Err(PayloadError::WrongType {
            field,
            expected: "an object",
        });
    }
    let read = |camel, snake| count(field, stats, camel, snake);
    Ok(BatchStats {
        request_count: read("requestCount", "request_count")?,
        successful_request_count: read("successfulRequestCount", "successful_request_count")?,
        failed_request_count: read("failedRequestCount", "failed_request_count")?,
        pending_request_count: read("pendingRequestCount", "pending_request_count")?,
    })
}

/// A count sent as a JSON string (int64 in proto3 JSON) or a number; an
/// omitted count is zero.
fn count(
    at: &'static str,
    stats: &Value,
    camel: &'static str,
    snake: &'static str,
) -> Result<i64, PayloadError> {
    let Some((field, value)) = first_present(stats, &[camel, snake]) else {
        return Ok(0);
    };
    let bad = || PayloadError::BadCount {
        stats: at,
        field,
        value: value.to_string(),
    };
    let parsed = match value {
        Value::String(text) => text.trim().parse::<i64>().ok(),
        Value::Number(number) => number.as_i64(),
        Value::Null | Value::Bool(_) | Value::Array(_) | Value::Object(_) => None,
    };
    parsed.filter(|n| *n >= 0).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::operation::OpEvent;

    // 2024-05-01T10:00:00Z
    const T0: i64 = 1_714_557_600_000_000;

    fn webhook(value: Value) -> Result<WebhookEvent, PayloadError> {
        parse_gemini_webhook(value.to_string().as_bytes())
    }

    #[test]
    fn a_succeeded_webhook() {
        let event = webhook(json!({
            "type": "batch.succeeded",
            "version": "v1",
            "timestamp": "2024-05-01T10:00:00.123456Z",
            "data": {
                "id": "projects/p/locations/l/batches/abc",
                "output_file_uri": "files/out-1",
            }
        }))
        .unwrap();
        assert_eq!(
            event,
            WebhookEvent {
                operation: "batches/abc".into(),
                raw_type: "batch.succeeded".into(),
                state: OpState::Succeeded,
                update_time: Some(T0 + 123_456),
                output_file: Some("files/out-1".into()),
                error_code: None,
                error_message: None,
            }
        );
        assert_eq!(
            event.op_event(),
            OpEvent {
                state: OpState::Succeeded,
                update_time: Some(T0 + 123_456)
            }
        );
    }

    #[test]
    fn a_failed_webhook_carries_its_error() {
        let event = webhook(json!({
            "type": "batch.failed",
            "timestamp": "2024-05-01T12:00:00+02:00",
            "data": {
                "id": "batches/abc",
                "error_code": "INTERNAL",
                "error_message": "backend error",
            }
        }))
        .unwrap();
        assert_eq!(event.state, OpState::Failed);
        assert_eq!(event.update_time, Some(T0));
        assert_eq!(event.error_code.as_deref(), Some("INTERNAL"));
        assert_eq!(event.error_message.as_deref(), Some("backend error"));
        assert_eq!(event.output_file, None);
    }

    #[test]
    fn webhook_types_map_to_states() {
        for (kind, state) in [
            ("batch.succeeded", OpState::Succeeded),
            ("batch.failed", OpState::Failed),
            ("batch.expired", OpState::Expired),
            ("batch.cancelled", OpState::Cancelled),
            ("batch.running", OpState::Running),
            ("batch.pending", OpState::Pending),
            ("batch.archived", OpState::Unknown),
            ("interaction.completed", OpState::Unknown),
        ] {
            let event = webhook(json!({"type": kind, "data": {"id": "batches/a"}})).unwrap();
            assert_eq!(event.state, state, "{kind}");
            assert_eq!(event.raw_type, kind);
        }
    }

    #[test]
    fn a_webhook_without_timestamp_has_no_time() {
        let event = webhook(json!({
            "type": "batch.running",
            "timestamp": null,
            "data": {"id": "batches/a", "output_file_uri": "", "error_code": 13}
        }))
        .unwrap();
        assert_eq!(event.update_time, None);
        assert_eq!(event.output_file, None);
        assert_eq!(event.error_code.as_deref(), Some("13"));
    }

    #[test]
    fn malformed_webhooks_are_rejected_clearly() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (b"{not json".to_vec(), "payload is not valid json: "),
            (b"".to_vec(), "payload is not valid json: "),
            (b"[1, 2]".to_vec(), "payload is not a json object"),
            (
                json!({"data": {"id": "batches/a"}}).to_string().into_bytes(),
                "payload has no `type`",
            ),
            (
                json!({"type": " ", "data": {"id": "batches/a"}})
                    .to_string()
                    .into_bytes(),
                "payload has no `type`",
            ),
            (
                json!({"type": 7, "data": {"id": "batches/a"}})
                    .to_string()
                    .into_bytes(),
                "`type` must be a string",
            ),
            (
                json!({"type": "batch.failed"}).to_string().into_bytes(),
                "payload has no `data.id`",
            ),
            (
                json!({"type": "batch.failed", "data": {}})
                    .to_string()
                    .into_bytes(),
                "payload has no `data.id`",
            ),
            (
                json!({"type": "batch.failed", "data": {"id": "files/a"}})
                    .to_string()
                    .into_bytes(),
                "`data.id` is not an operation name: operation name `files/a` has no `batches/{id}` at its end",
            ),
            (
                json!({"type": "batch.failed", "timestamp": "yesterday", "data": {"id": "batches/a"}})
                    .to_string()
                    .into_bytes(),
                "`timestamp` is not an rfc 3339 timestamp: \"yesterday\"",
            ),
            (
                json!({"type": "batch.failed", "timestamp": 1714557600, "data": {"id": "batches/a"}})
                    .to_string()
                    .into_bytes(),
                "`timestamp` must be a string",
            ),
            (
                json!({"type": "batch.failed", "data": {"id": "batches/a", "error_code": [1]}})
                    .to_string()
                    .into_bytes(),
                "`data.error_code` must be a string or a number",
            ),
        ];
        for (body, message) in cases {
            let err = parse_gemini_webhook(&body).unwrap_err().to_string();
            assert!(
                err.starts_with(message),
                "{}: {err}",
                String::from_utf8_lossy(&body)
            );
        }
    }

    #[test]
    fn a_finished_batch_resource() {
        let observation = event_from_batch_resource(&json!({
            "name": "batches/abc",
            "metadata": {
                "@type": "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatch",
                "state": "BATCH_STATE_SUCCEEDED",
                "createTime": "2024-05-01T09:00:00Z",
                "updateTime": "2024-05-01T10:00:00.000001999Z",
                "endTime": "2024-05-01T10:00:00Z",
                "batchStats": {
                    "requestCount": "10",
                    "successfulRequestCount": "9",
                    "failedRequestCount": "1"
                }
            },
            "done": true,
            "response": {"responsesFile": "files/out-1"}
        }))
        .unwrap();
        assert_eq!(
            observation,
            BatchObservation {
                operation: "batches/abc".into(),
                raw_state: Some("BATCH_STATE_SUCCEEDED".into()),
                state: OpState::Succeeded,
                done: true,
                update_time: Some(T0 + 1),
                output_file: Some("files/out-1".into()),
                error_file: None,
                stats: BatchStats {
                    request_count: 10,
                    successful_request_count: 9,
                    failed_request_count: 1,
                    pending_request_count: 0,
                },
                error_code: None,
                error_message: None,
            }
        );
    }

    #[test]
    fn a_running_batch_has_no_done_and_omits_zero_counts() {
        let observation = event_from_batch_resource(&json!({
            "name": "batches/abc",
            "metadata": {
                "state": "BATCH_STATE_RUNNING",
                "updateTime": "2024-05-01T10:00:00Z",
                "batchStats": {"requestCount": "4", "pendingRequestCount": "4"}
            }
        }))
        .unwrap();
        assert_eq!(observation.state, OpState::Running);
        assert!(!observation.done);
        assert_eq!(observation.output_file, None);
        assert_eq!(
            observation.stats,
            BatchStats {
                request_count: 4,
                pending_request_count: 4,
                ..BatchStats::default()
            }
        );
        assert_eq!(
            observation.op_event(),
            OpEvent {
                state: OpState::Running,
                update_time: Some(T0)
            }
        );
    }

    #[test]
    fn a_fresh_batch_without_stats_or_update_time() {
        let observation = event_from_batch_resource(&json!({
            "name": "batches/abc",
            "metadata": {"state": "BATCH_STATE_PENDING", "batchStats": {}}
        }))
        .unwrap();
        assert_eq!(observation.state, OpState::Pending);
        assert_eq!(observation.update_time, None);
        assert_eq!(observation.stats, BatchStats::default());
    }

    #[test]
    fn the_sdk_shape_with_a_top_level_job_state() {
        let observation = event_from_batch_resource(&json!({
            "name": "models/gemini-2.5-flash/batches/abc",
            "state": "JOB_STATE_SUCCEEDED",
            "update_time": "2024-05-01T10:00:00Z",
            "dest": {"file_name": "files/out-1"},
            "batch_stats": {"request_count": 3, "successful_request_count": "3"}
        }))
        .unwrap();
        assert_eq!(observation.operation, "batches/abc");
        assert_eq!(
            observation.raw_state.as_deref(),
            Some("JOB_STATE_SUCCEEDED")
        );
        assert_eq!(observation.state, OpState::Succeeded);
        assert_eq!(observation.update_time, Some(T0));
        assert_eq!(observation.output_file.as_deref(), Some("files/out-1"));
        assert_eq!(observation.stats.request_count, 3);
        assert_eq!(observation.stats.successful_request_count, 3);
    }

    #[test]
    fn metadata_wins_over_the_top_level() {
        let observation = event_from_batch_resource(&json!({
            "name": "batches/abc",
            "state": "JOB_STATE_RUNNING",
            "metadata": {"state": "BATCH_STATE_FAILED"},
            "response": {"responses_file": "files/snake"}
        }))
        .unwrap();
        assert_eq!(observation.state, OpState::Failed);
        assert_eq!(observation.output_file.as_deref(), Some("files/snake"));
    }

    #[test]
    fn a_failed_batch_carries_its_error() {
        let observation = event_from_batch_resource(&json!({
            "name": "batches/abc",
            "metadata": {"state": "BATCH_STATE_FAILED", "updateTime": "2024-05-01T10:00:00Z"},
            "done": true,
            "error": {"code": 13, "message": "internal error"}
        }))
        .unwrap();
        assert_eq!(observation.state, OpState::Failed);
        assert_eq!(observation.error_code.as_deref(), Some("13"));
        assert_eq!(observation.error_message.as_deref(), Some("internal error"));
    }

    #[test]
    fn done_without_a_known_state_falls_back_on_the_outcome() {
        let failed = event_from_batch_resource(&json!({
            "name": "batches/abc", "done": true, "error": {"code": 9, "message": "x"}
        }))
        .unwrap();
        assert_eq!((failed.state, failed.raw_state), (OpState::Failed, None));
        let succeeded = event_from_batch_resource(&json!({
            "name": "batches/abc",
            "metadata": {"state": "BATCH_STATE_UNSPECIFIED"},
            "done": true,
            "response": {"responsesFile": "files/o"}
        }))
        .unwrap();
        assert_eq!(succeeded.state, OpState::Succeeded);
        let bare =
            event_from_batch_resource(&json!({"name": "batches/abc", "done": true})).unwrap();
        assert_eq!(bare.state, OpState::Unknown);
        // Not done: no guessing.
        let open = event_from_batch_resource(&json!({"name": "batches/abc"})).unwrap();
        assert_eq!(open.state, OpState::Unknown);
        // A known state is trusted over `done`.
        let lagging = event_from_batch_resource(&json!({
            "name": "batches/abc",
            "metadata": {"state": "BATCH_STATE_RUNNING"},
            "done": true,
            "error": {"code": 9}
        }))
        .unwrap();
        assert_eq!(lagging.state, OpState::Running);
    }

    #[test]
    fn malformed_batch_resources_are_rejected_clearly() {
        for (value, message) in [
            (json!("batches/abc"), "payload is not a json object"),
            (json!({"metadata": {}}), "payload has no `name`"),
            (
                json!({"name": "batches/a:b"}),
                "`name` is not an operation name: batch id `a:b` contains ':'",
            ),
            (
                json!({"name": "batches/a", "metadata": {"state": 3}}),
                "`metadata.state` must be a string",
            ),
            (
                json!({"name": "batches/a", "done": "yes"}),
                "`done` must be a boolean",
            ),
            (
                json!({"name": "batches/a", "metadata": {"updateTime": "2024-05-01"}}),
                "`metadata.updateTime` is not an rfc 3339 timestamp: \"2024-05-01\"",
            ),
            (
                json!({"name": "batches/a", "metadata": {"batchStats": {"requestCount": "ten"}}}),
                "`metadata.batchStats.requestCount` is not a non-negative integer: \"ten\"",
            ),
            (
                json!({"name": "batches/a", "metadata": {"batchStats": {"failedRequestCount": "-1"}}}),
                "`metadata.batchStats.failedRequestCount` is not a non-negative integer: \"-1\"",
            ),
            (
                json!({"name": "batches/a", "metadata": {"batchStats": [1]}}),
                "`metadata.batchStats` must be an object",
            ),
        ] {
            let err = event_from_batch_resource(&value).unwrap_err().to_string();
            assert!(err.starts_with(message), "{value}: {err}");
        }
    }

    #[test]
    fn webhook_output_uris_in_any_form_name_the_file() {
        for uri in [
            "files/abc-123",
            "https://generativelanguage.googleapis.com/v1beta/files/abc-123",
            "https://generativelanguage.googleapis.com/download/v1beta/files/abc-123:download?alt=media",
            " files/abc-123/ ",
        ] {
            assert_eq!(
                file_name_from_uri(uri).as_deref(),
                Some("files/abc-123"),
                "{uri}"
            );
        }
        for uri in [
            "gs://bucket/batch/output.jsonl",
            "https://example.com/profiles/abc",
            "files/",
            "files/UPPER",
            "",
        ] {
            assert_eq!(file_name_from_uri(uri), None, "{uri}");
        }
        let body = br#"{"type": "batch.succeeded", "data": {"id": "batches/a", "output_file_uri": "gs://b/o.jsonl"}}"#;
        assert_eq!(parse_gemini_webhook(body).unwrap().output_file, None);
    }
}
