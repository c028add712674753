//! OpenAI batch output lines, to outcomes. Pure.
//!
//! A line is `{"id": "batch_req_…", "custom_id": key, "response":
//! {"status_code", "request_id", "body"} | null, "error": {"code",
//! "message"} | null}`, in the output file (successes) or the error file
//! (everything else), in no particular order:
//!
//! - `error` `batch_expired` / `batch_cancelled`: the request never ran
//!   (the batch ended first): no outcome; FinishJob returns the row;
//! - any other `error` (`request_timeout`, …) → PROVIDER_ERROR named by
//!   its code;
//! - a `response` whose `status_code` is not 2xx → PROVIDER_ERROR with the
//!   HTTP code and the body's `error.code` (else its `type`);
//! - a 2xx `ChatCompletion`: `message.refusal` → BLOCKED; finish reason
//!   `content_filter` → BLOCKED; `length` and any other reason but `stop`
//!   → the answer is incomplete; otherwise the text is judged like every
//!   provider's ([`judge_text`]);
//! - a 2xx Response (a synchronous call of the Responses API, or a batch
//!   line of `/v1/responses`) is read into the same words first
//!   ([`super::responses`]).
//!
//! A result carries the line's `response` object as the provider wrote it
//! (`RowOutcome.response`, at most 1 MiB), which `tallyctl export --format
//! openai` writes back.
//!
//! Usage from the body: `prompt_tokens` (cached ones included, as
//! `prompt_tokens_details.cached_tokens`), `completion_tokens` less its
//! `reasoning_tokens`, which are the thinking tokens.

use serde_json::Value;
use tally_proto::v1 as pb;

use super::said::{self, Said};
use crate::output::{Expect, judge_text, str_at, truncate};

/// The largest provider response kept with a result: the server's bound
/// on it, the one on payloads.
const MAX_RESPONSE: usize = tally_core::payload::MAX_PAYLOAD_BYTES;

/// Error codes of requests the batch ended before running.
const NEVER_RAN: [&str; 2] = ["batch_expired", "batch_cancelled"];

/// The outcome of one line (`line`, parsed from `raw`); `None` for a request
/// that never ran.
pub fn outcome(key: &str, line: &Value, raw: &str, expect: &Expect<'_>) -> Option<pb::RowOutcome> {
    let response = line.get("response").filter(|r| !r.is_null());
    let error = line.get("error").filter(|e| !e.is_null());
    let body = response.and_then(|r| r.get("body"));
    let usage = body.and_then(usage_of);
    let result = match (error, response) {
        (Some(error), _) => {
            let code = str_at(error, "code");
            if NEVER_RAN.contains(&code) {
                return None;
            }
            Err(pb::Failure {
                kind: pb::FailureKind::ProviderError as i32,
                status: code.to_owned(),
                message: truncate(str_at(error, "message")),
                ..Default::default()
            })
        }
        (None, None) => Err(pb::Failure {
            kind: pb::FailureKind::EmptyResponse as i32,
            message: "output line has neither `response` nor `error`".into(),
            ..Default::default()
        }),
        (None, Some(r)) => {
            let status = r.get("status_code").and_then(Value::as_i64).unwrap_or(0);
            if (200..300).contains(&status) {
                answer(body.unwrap_or(&Value::Null), expect)
            } else {
                Err(http_error(status, body))
            }
        }
    };
    // The provider's own answer goes with a result, as it wrote it (its
    // keys in its order), so an export writes the body it returned; one over
    // the server's bound is left out.
    let kept = match (&result, response) {
        (Ok(_), Some(_)) => written_response(raw).filter(|r| r.len() <= MAX_RESPONSE),
        _ => None,
    };
    Some(pb::RowOutcome {
        key: key.to_owned(),
        outcome: Some(match result {
            Ok(value) => pb::row_outcome::Outcome::Result(value),
            Err(failure) => pb::row_outcome::Outcome::Failure(failure),
        }),
        usage,
        response: kept.map(str::to_owned).unwrap_or_default(),
        model_version: crate::output::version_at(body, "model"),
        ..Default::default()
    })
}

/// The text of a line's `response` object, as the provider wrote it.
fn written_response(raw: &str) -> Option<&str> {
    #[derive(serde::Deserialize)]
    struct Line<'a> {
        #[serde(borrow)]
        response: Option<&'a serde_json::value::RawValue>,
    }
    serde_json::from_str::<Line<'_>>(raw)
        .ok()?
        .response
        .map(serde_json::value::RawValue::get)
}

/// A request the API answered with an error status.
fn http_error(status: i64, body: Option<&Value>) -> pb::Failure {
    let error = body.and_then(|b| b.get("error"));
    let name = error
        .map(|e| {
            let code = str_at(e, "code");
            if code.is_empty() {
                str_at(e, "type")
            } else {
                code
            }
        })
        .unwrap_or_default();
    pb::Failure {
        kind: pb::FailureKind::ProviderError as i32,
        http_code: i32::try_from(status).unwrap_or(0).max(0),
        status: name.to_owned(),
        message: truncate(error.map_or("", |e| str_at(e, "message"))),
        ..Default::default()
    }
}

/// A 2xx body judged: a `ChatCompletion`, or a Response (the Responses
/// API's, [`super::responses`]).
// The failure is the outcome itself (built once per row).
#[allow(clippy::result_large_err)]
fn answer(body: &Value, expect: &Expect<'_>) -> Result<String, pb::Failure> {
    let said = if super::responses::is_response(body) {
        super::responses::said(body)?
    } else {
        chat_said(body)
    };
    if let Some(refusal) = said.refusal.filter(|r| !r.is_empty()) {
        return Err(pb::Failure {
            kind: pb::FailureKind::Blocked as i32,
            finish_reason: said.finish,
            message: truncate(&format!("the model refused: {refusal}")),
            ..Default::default()
        });
    }
    if said.finish == "content_filter" {
        return Err(pb::Failure {
            kind: pb::FailureKind::Blocked as i32,
            finish_reason: said.finish,
            message: "answer withheld: finish reason content_filter".into(),
            ..Default::default()
        });
    }
    judge_text(said.text, &said.finish, expect)
}

/// What the first choice of a `ChatCompletion` says.
fn chat_said(body: &Value) -> Said {
    let choice = body
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first());
    let message = choice.and_then(|c| c.get("message"));
    let text_at = |key: &str| {
        message
            .and_then(|m| m.get(key))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    Said {
        text: text_at("content").unwrap_or_default(),
        finish: choice
            .map(|c| str_at(c, "finish_reason"))
            .unwrap_or_default()
            .to_owned(),
        refusal: text_at("refusal"),
    }
}

/// A body's usage, whichever endpoint wrote it.
fn usage_of(body: &Value) -> Option<pb::Usage> {
    let u = body.get("usage").filter(|u| u.is_object())?;
    Some(if super::responses::is_response(body) {
        said::usage(u, &said::RESPONSE_USAGE)
    } else {
        said::usage(u, &said::CHAT_USAGE)
    })
}

/// A golden line's answer: its text, or why it has none.
pub fn golden_answer(key: &str, line: &Value) -> pb::GoldenAnswer {
    let body = line.pointer("/response/body").unwrap_or(&Value::Null);
    let text = body
        .pointer("/choices/0/message/content")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let status = line
        .pointer("/response/status_code")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let error = if let Some(e) = line.get("error").filter(|e| !e.is_null()) {
        format!("provider error: {}", str_at(e, "message"))
    } else if !(200..300).contains(&status) {
        format!("provider error: http {status}")
    } else if text.is_empty() {
        "no answer text".to_owned()
    } else {
        String::new()
    };
    pb::GoldenAnswer {
        key: key.to_owned(),
        text: text.chars().take(64 * 1024 / 4).collect(),
        model_version: str_at(body, "model").chars().take(256).collect(),
        error: truncate(&error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pb::row_outcome::Outcome;
    use serde_json::json;

    const TEXT: Expect<'static> = Expect {
        schema: None,
        json: false,
    };
    const JSON: Expect<'static> = Expect {
        schema: None,
        json: true,
    };

    fn ok(content: &str, finish: &str) -> Value {
        json!({"id": "batch_req_1", "custom_id": "k", "error": null,
               "response": {"status_code": 200, "request_id": "req_1", "body": {
                   "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o-mini-2024-07-18",
                   "choices": [{"index": 0, "finish_reason": finish, "logprobs": null,
                                "message": {"role": "assistant", "content": content, "refusal": null}}],
                   "usage": {"prompt_tokens": 20, "completion_tokens": 9, "total_tokens": 29,
                             "prompt_tokens_details": {"cached_tokens": 4},
                             "completion_tokens_details": {"reasoning_tokens": 5}}}}})
    }

    /// The outcome of `line` as key `k`, read from its compact text.
    fn judged(line: &Value, expect: &Expect<'_>) -> Option<pb::RowOutcome> {
        outcome("k", line, &line.to_string(), expect)
    }

    fn failure(o: &pb::RowOutcome) -> &pb::Failure {
        match &o.outcome {
            Some(Outcome::Failure(f)) => f,
            other => panic!("not a failure: {other:?}"),
        }
    }

    // Invariant: an answered line is the row's result, its usage split as
    // tally prices it (reasoning tokens are thinking, not output).
    #[test]
    fn an_answer_is_the_result_with_its_usage() {
        let o = judged(&ok(r#"{"a": 1}"#, "stop"), &JSON).unwrap();
        assert_eq!(o.outcome, Some(Outcome::Result(r#"{"a":1}"#.into())));
        assert_eq!(
            o.usage,
            Some(pb::Usage {
                input_tokens: 20,
                output_tokens: 4,
                thinking_tokens: 5,
                cached_tokens: 4,
                cache_write_tokens: 0,
            })
        );
        let text = judged(&ok("hello", "stop"), &TEXT).unwrap();
        assert_eq!(text.outcome, Some(Outcome::Result(r#""hello""#.into())));
        let not_json = judged(&ok("hello", "stop"), &JSON).unwrap();
        assert_eq!(
            failure(&not_json).kind,
            pb::FailureKind::InvalidOutput as i32
        );
    }

    // Invariant: a result carries the line's `response` object as written
    // (for an export of the real body); a failure, or a response over the
    // server's bound, carries none.
    #[test]
    fn a_result_keeps_the_providers_response() {
        let line = ok("hello", "stop");
        let got = judged(&line, &TEXT).unwrap();
        let kept: Value = serde_json::from_str(&got.response).unwrap();
        assert_eq!(kept, line["response"]);
        let failed = judged(&ok("hello", "length"), &TEXT).unwrap();
        assert!(failed.response.is_empty());
        let mut huge = ok(&"x".repeat(MAX_RESPONSE), "stop");
        huge["custom_id"] = json!("k");
        let got = judged(&huge, &TEXT).unwrap();
        assert!(matches!(got.outcome, Some(Outcome::Result(_))));
        assert!(got.response.is_empty());
    }

    // Invariant: the response kept is the provider's own text of it, its
    // keys in the provider's order (an export writes back what it sent),
    // not a re-serialization of it.
    #[test]
    fn the_response_is_kept_as_the_provider_wrote_it() {
        let response = r#"{"status_code": 200, "request_id": "req_1", "body": {"id": "chatcmpl-1", "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}}"#;
        let raw = format!(
            r#"{{"id": "batch_req_1", "custom_id": "k", "response": {response}, "error": null}}"#
        );
        let line: Value = serde_json::from_str(&raw).unwrap();
        let got = outcome("k", &line, &raw, &TEXT).unwrap();
        assert_eq!(got.outcome, Some(Outcome::Result(r#""hi""#.into())));
        assert_eq!(got.response, response);
    }

    // Invariant: every way a request can fail has its kind and the
    // provider's words; requests that never ran are no outcome at all.
    #[test]
    fn failures_keep_the_providers_words() {
        let cut = judged(&ok(r#"{"a": "#, "length"), &JSON).unwrap();
        let f = failure(&cut);
        assert_eq!(
            (f.kind, f.finish_reason.as_str()),
            (pb::FailureKind::InvalidOutput as i32, "length")
        );
        let filtered = judged(&ok("", "content_filter"), &JSON).unwrap();
        assert_eq!(failure(&filtered).kind, pb::FailureKind::Blocked as i32);
        let mut refused = ok("", "stop");
        refused["response"]["body"]["choices"][0]["message"]["refusal"] = json!("I can't help");
        refused["response"]["body"]["choices"][0]["message"]["content"] = Value::Null;
        let f = judged(&refused, &JSON).unwrap();
        assert_eq!(failure(&f).kind, pb::FailureKind::Blocked as i32);
        assert!(failure(&f).message.contains("I can't help"));
        let http = json!({"custom_id": "k", "error": null, "response": {"status_code": 400,
            "request_id": "r", "body": {"error": {"message": "maximum context length is 128000",
            "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}}});
        let f = judged(&http, &JSON).unwrap();
        let f = failure(&f);
        assert_eq!(
            (f.http_code, f.status.as_str()),
            (400, "context_length_exceeded")
        );
        assert!(f.message.contains("128000"));
        let timeout = json!({"custom_id": "k", "response": null,
            "error": {"code": "request_timeout", "message": "timed out"}});
        let f = judged(&timeout, &JSON).unwrap();
        assert_eq!(failure(&f).status, "request_timeout");
        for code in NEVER_RAN {
            let line = json!({"custom_id": "k", "response": null,
                "error": {"code": code, "message": "This request could not be executed"}});
            assert!(judged(&line, &JSON).is_none(), "{code}");
        }
        let empty = judged(&json!({"custom_id": "k"}), &JSON).unwrap();
        assert_eq!(failure(&empty).kind, pb::FailureKind::EmptyResponse as i32);
    }

    /// A `/v1/responses` line: a Response of `status` (with the incomplete
    /// `reason`) whose message holds `part`, and the usage of [`ok`].
    fn response_line(status: &str, reason: Option<&str>, part: Value) -> Value {
        json!({"id": "batch_req_1", "custom_id": "k", "error": null,
               "response": {"status_code": 200, "request_id": "req_1", "body": {
                   "id": "resp_1", "object": "response", "model": "gpt-4o-mini-2024-07-18",
                   "status": status, "incomplete_details": reason.map(|r| json!({"reason": r})),
                   "output": [{"type": "message", "id": "msg_1", "role": "assistant",
                               "status": "completed", "content": [part]}],
                   "usage": {"input_tokens": 20, "output_tokens": 9, "total_tokens": 29,
                             "input_tokens_details": {"cached_tokens": 4},
                             "output_tokens_details": {"reasoning_tokens": 5}}}}})
    }

    // Invariant: a Response is judged as the ChatCompletion it would have
    // been: the same result or failure (truncated, filtered, refused), the
    // same usage, the same model version.
    #[test]
    fn a_response_reads_as_its_chat_twin() {
        let text = |t: &str| json!({"type": "output_text", "text": t, "annotations": []});
        let mut refused_chat = ok("", "stop");
        refused_chat["response"]["body"]["choices"][0]["message"]["refusal"] = json!("no");
        let pairs = [
            (
                ok(r#"{"a": 1}"#, "stop"),
                response_line("completed", None, text(r#"{"a": 1}"#)),
            ),
            (
                ok(r#"{"a": "#, "length"),
                response_line("incomplete", Some("max_output_tokens"), text(r#"{"a": "#)),
            ),
            (
                ok("", "content_filter"),
                response_line("incomplete", Some("content_filter"), text("")),
            ),
            (
                refused_chat,
                response_line(
                    "completed",
                    None,
                    json!({"type": "refusal", "refusal": "no"}),
                ),
            ),
        ];
        for (chat, response) in pairs {
            let (c, r) = (
                judged(&chat, &JSON).unwrap(),
                judged(&response, &JSON).unwrap(),
            );
            assert_eq!(
                (&c.outcome, &c.usage, &c.model_version),
                (&r.outcome, &r.usage, &r.model_version),
                "{response}"
            );
        }
    }

    // Invariant: output and error lines meet in one matcher, keyed by
    // custom_id; a line of a request that never ran leaves its row
    // unreported (FinishJob returns it) and is counted.
    #[test]
    fn the_matcher_reads_custom_ids() {
        use std::collections::HashMap;
        let expected: HashMap<String, Expect<'_>> = ["a", "b", "c"]
            .iter()
            .map(|k| (k.to_string(), JSON))
            .collect();
        let mut m = crate::output::Matcher::of(&expected, super::super::wire(Default::default()));
        let mut a = ok(r#"{"x": 1}"#, "stop");
        a["custom_id"] = json!("a");
        m.line(a.to_string().as_bytes());
        m.file_done();
        m.line(br#"{"custom_id": "b", "response": null, "error": {"code": "batch_expired", "message": "m"}}"#);
        m.reset();
        m.line(br#"{"custom_id": "b", "response": null, "error": {"code": "batch_expired", "message": "m"}}"#);
        m.line(br##"{"custom_id": "#golden/g1", "response": {"status_code": 200, "body": {"model": "m1", "choices": [{"message": {"content": "42"}}]}}, "error": null}"##);
        let got = m.finish();
        assert_eq!(
            got.outcomes.len(),
            1,
            "the reset kept the first file's line"
        );
        assert_eq!(got.outcomes[0].key, "a");
        assert_eq!(got.unanswered.len(), 1);
        assert_eq!(got.golden[0].text, "42");
        assert_eq!(got.golden[0].model_version, "m1");
        assert_eq!(got.lines(), 3);
    }
}
