//! Anthropic Message Batches result lines, to outcomes. Pure.
//!
//! A line is `{"custom_id", "result": {"type", …}}`, in no particular
//! order, one per request:
//!
//! - `canceled` / `expired`: the request never ran (the batch was
//!   cancelled or expired first): no outcome; FinishJob returns the row;
//! - `errored` with `error.error.{type, message}` → PROVIDER_ERROR named by
//!   its type, with the HTTP status Anthropic documents for it (so the
//!   classifier's HTTP rules apply: `overloaded_error` 529 and `api_error`
//!   500 are transient, `invalid_request_error` 400 permanent);
//! - `succeeded` with a Message: `stop_reason` `refusal` → BLOCKED;
//!   `end_turn` and `stop_sequence` are complete, any other (`max_tokens`,
//!   `tool_use`, `pause_turn`) leaves the answer incomplete; the text
//!   blocks are judged like every provider's ([`judge_text`]).
//!
//! Usage from the message: `input_tokens` counts only the prompt tokens
//! neither read from nor written to the cache, so tally's input is the sum
//! of the three (`cache_read_input_tokens` as cached tokens); thinking is
//! counted within `output_tokens`.

use serde_json::Value;
use tally_proto::v1 as pb;

use crate::output::{Expect, judge_text, str_at, truncate};

/// Result types of requests that never ran.
const NEVER_RAN: [&str; 2] = ["canceled", "expired"];

/// The HTTP status Anthropic answers each error type with.
pub fn http_status(error_type: &str) -> i32 {
    match error_type {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "billing_error" => 402,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "api_error" => 500,
        "timeout_error" => 504,
        "overloaded_error" => 529,
        _ => 0,
    }
}

/// The outcome of one line; `None` for a request that never ran.
pub fn outcome(key: &str, line: &Value, expect: &Expect<'_>) -> Option<pb::RowOutcome> {
    let result = line.get("result").unwrap_or(&Value::Null);
    let kind = str_at(result, "type");
    if NEVER_RAN.contains(&kind) {
        return None;
    }
    let message = result.get("message").filter(|m| !m.is_null());
    let usage = message.and_then(|m| m.get("usage")).map(usage);
    let answer = match kind {
        "succeeded" => answer(message.unwrap_or(&Value::Null), expect),
        "errored" => {
            // `{"type": "error", "error": {"type", "message"}}`.
            let error = result
                .pointer("/error/error")
                .or_else(|| result.get("error"))
                .unwrap_or(&Value::Null);
            let name = str_at(error, "type");
            Err(pb::Failure {
                kind: pb::FailureKind::ProviderError as i32,
                http_code: http_status(name),
                status: name.to_owned(),
                message: truncate(str_at(error, "message")),
                ..Default::default()
            })
        }
        other => Err(pb::Failure {
            kind: pb::FailureKind::EmptyResponse as i32,
            message: truncate(&format!("a result of type {other:?}")),
            ..Default::default()
        }),
    };
    Some(pb::RowOutcome {
        key: key.to_owned(),
        outcome: Some(match answer {
            Ok(value) => pb::row_outcome::Outcome::Result(value),
            Err(failure) => pb::row_outcome::Outcome::Failure(failure),
        }),
        usage,
        model_version: crate::output::version_at(message, "model"),
        ..Default::default()
    })
}

/// A Message, judged.
// The failure is the outcome itself (built once per row).
#[allow(clippy::result_large_err)]
fn answer(message: &Value, expect: &Expect<'_>) -> Result<String, pb::Failure> {
    let stop = str_at(message, "stop_reason");
    let text = text_of(message);
    if stop == "refusal" {
        return Err(pb::Failure {
            kind: pb::FailureKind::Blocked as i32,
            finish_reason: stop.to_owned(),
            message: if text.trim().is_empty() {
                "the model refused (stop_reason refusal, no text)".into()
            } else {
                truncate(&format!("the model refused: {text}"))
            },
            ..Default::default()
        });
    }
    judge_text(text, stop, expect)
}

/// The message's text blocks, joined.
fn text_of(message: &Value) -> String {
    message
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|b| b["type"] == "text")
        .filter_map(|b| b["text"].as_str())
        .collect()
}

/// A message's `usage`.
fn usage(u: &Value) -> pb::Usage {
    let n = |k: &str| u.get(k).and_then(Value::as_i64).unwrap_or(0).max(0);
    let (fresh, read, written) = (
        n("input_tokens"),
        n("cache_read_input_tokens"),
        n("cache_creation_input_tokens"),
    );
    pb::Usage {
        input_tokens: fresh.saturating_add(read).saturating_add(written),
        output_tokens: n("output_tokens"),
        thinking_tokens: 0,
        cached_tokens: read,
        cache_write_tokens: written,
    }
}

/// A golden line's answer: its text, or why it has none.
pub fn golden_answer(key: &str, line: &Value) -> pb::GoldenAnswer {
    let result = line.get("result").unwrap_or(&Value::Null);
    let message = result.get("message").unwrap_or(&Value::Null);
    let text = text_of(message);
    let error = match str_at(result, "type") {
        "succeeded" if text.is_empty() => "no answer text".to_owned(),
        "succeeded" => String::new(),
        "errored" => format!(
            "provider error: {}",
            result
                .pointer("/error/error/message")
                .and_then(Value::as_str)
                .unwrap_or_default()
        ),
        other => format!("not run: {other}"),
    };
    pb::GoldenAnswer {
        key: key.to_owned(),
        text: text.chars().take(64 * 1024 / 4).collect(),
        model_version: str_at(message, "model").chars().take(256).collect(),
        error: truncate(&error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pb::row_outcome::Outcome;
    use serde_json::json;

    const JSON: Expect<'static> = Expect {
        schema: None,
        json: true,
    };

    fn succeeded(text: &str, stop: &str) -> Value {
        json!({"custom_id": "m-k", "result": {"type": "succeeded", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-haiku-4-5",
            "content": [{"type": "text", "text": text}], "stop_reason": stop,
            "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 4,
                      "cache_creation_input_tokens": 3, "cache_read_input_tokens": 5}}}})
    }

    fn failure(o: &pb::RowOutcome) -> &pb::Failure {
        match &o.outcome {
            Some(Outcome::Failure(f)) => f,
            other => panic!("{other:?}"),
        }
    }

    // Invariant: a complete answer is the result, with tally's input the
    // sum of fresh, cache-read and cache-written tokens.
    #[test]
    fn a_succeeded_line_is_the_result_with_its_usage() {
        let o = outcome("k", &succeeded(r#"{"a": 1}"#, "end_turn"), &JSON).unwrap();
        assert_eq!(o.key, "k");
        assert!(matches!(&o.outcome, Some(Outcome::Result(r)) if r.contains("\"a\"")));
        let u = o.usage.unwrap();
        assert_eq!(
            (
                u.input_tokens,
                u.cached_tokens,
                u.cache_write_tokens,
                u.output_tokens
            ),
            (18, 5, 3, 4)
        );
    }

    // Invariant: each way an answer falls short has its failure: refusal
    // blocked, max_tokens incomplete, errored named with its HTTP status,
    // canceled and expired never ran.
    #[test]
    fn every_result_type_has_its_outcome() {
        let refused = outcome("k", &succeeded("no", "refusal"), &JSON).unwrap();
        assert_eq!(failure(&refused).kind, pb::FailureKind::Blocked as i32);
        let cut = outcome("k", &succeeded("{\"a\"", "max_tokens"), &JSON).unwrap();
        assert_eq!(failure(&cut).finish_reason, "max_tokens");
        let errored = json!({"custom_id": "m-k", "result": {"type": "errored", "error": {
            "type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}}});
        let e = outcome("k", &errored, &JSON).unwrap();
        let f = failure(&e);
        assert_eq!((f.http_code, f.status.as_str()), (529, "overloaded_error"));
        assert_eq!(f.message, "Overloaded");
        for kind in ["canceled", "expired"] {
            let line = json!({"custom_id": "m-k", "result": {"type": kind}});
            assert!(outcome("k", &line, &JSON).is_none(), "{kind}");
        }
        let odd = json!({"custom_id": "m-k", "result": {"type": "weird"}});
        assert_eq!(
            failure(&outcome("k", &odd, &JSON).unwrap()).kind,
            pb::FailureKind::EmptyResponse as i32
        );
    }

    #[test]
    fn golden_lines_keep_text_or_say_why_not() {
        let g = golden_answer("g", &succeeded("42", "end_turn"));
        assert_eq!((g.text.as_str(), g.error.as_str()), ("42", ""));
        assert_eq!(g.model_version, "claude-haiku-4-5");
        let e = golden_answer("g", &json!({"result": {"type": "expired"}}));
        assert!(e.error.contains("expired"));
    }
}
