//! `--format openai`: the OpenAI batch *output* format, one line per row,
//! so tools that read OpenAI batch results read tally's.
//!
//! A SUCCEEDED row whose worker kept the provider's response (an OpenAI
//! batch's output line): `{"id": "batch_req_<h>", "custom_id": key,
//! "response": <that response as the provider wrote it: status_code,
//! request_id, body>, "error": null}`.
//!
//! Any other SUCCEEDED row (run at another provider, or before responses
//! were kept) gets a body built from the stored result:
//! `{"id": "batch_req_<h>", "custom_id": key, "response": {"status_code": 200,
//! "request_id": <the row's latest tally job>, "body": <chat.completion>},
//! "error": null}` where the body is `{"id": "chatcmpl-<h>", "object":
//! "chat.completion", "created": <row update time, Unix seconds>, "model",
//! "choices": [{"index": 0, "message": {"role": "assistant", "content"},
//! "logprobs": null, "finish_reason": "stop"}], "usage"}`:
//! - `content` is the stored result: the answer text when the request asked
//!   for text (the result is a JSON string), else the result's JSON text;
//! - `usage`: `prompt_tokens` = input tokens, `completion_tokens` = output
//!   plus thinking tokens (OpenAI counts reasoning in completions; Gemini
//!   does not), `total_tokens` their sum, with `cached_tokens` and
//!   `reasoning_tokens` in the details; summed over the row's attempts.
//!
//! Any other row: `"response": null, "error": {"code": <the rule of its
//! latest verdict, or its status in lowercase when it has none>, "message":
//! <its last error, or "row is PENDING">}`, so every row appears exactly
//! once. `<h>` is the first 32 hex digits of the natural key of (ledger,
//! key): stable across exports.

use super::{Out, Sink, write_json_line};
use crate::render;
use serde_json::{Value, json};
use std::io;
use tally_core::keys::derive_key;
use tally_proto::v1 as pb;

pub struct OpenaiSink {
    out: Out,
    ledger: String,
}

impl OpenaiSink {
    pub fn new(out: Out, ledger: &str) -> Self {
        Self {
            out,
            ledger: ledger.to_string(),
        }
    }
}

/// The answer text of a stored result.
fn content(result: &str) -> String {
    match serde_json::from_str::<Value>(result) {
        Ok(Value::String(text)) => text,
        _ => result.to_string(),
    }
}

/// The provider's own response kept with the row's result (an OpenAI
/// worker keeps the output line's `response`), when it is a JSON object.
fn kept_response(r: &pb::Row) -> Option<Value> {
    if r.response.is_empty() {
        return None;
    }
    serde_json::from_str::<Value>(&r.response)
        .ok()
        .filter(Value::is_object)
}

/// One row's output line.
pub fn row_line(ledger: &str, r: &pb::Row) -> Value {
    let h = &derive_key(&[ledger, r.key.as_str()])[..32];
    let id = format!("batch_req_{h}");
    if r.status != pb::RowStatus::Succeeded as i32 {
        let status = render::row_status(r.status);
        let code = if r.rule.is_empty() {
            status.to_lowercase()
        } else {
            r.rule.clone()
        };
        let message = if r.last_error.is_empty() {
            format!("row is {status}")
        } else {
            r.last_error.clone()
        };
        return json!({
            "id": id,
            "custom_id": r.key,
            "response": null,
            "error": {"code": code, "message": message},
        });
    }
    if let Some(response) = kept_response(r) {
        return json!({"id": id, "custom_id": r.key, "response": response, "error": null});
    }
    let u = r.usage.unwrap_or_default();
    let completion = u.output_tokens + u.thinking_tokens;
    let created = r.update_time.as_ref().map_or(0, |t| t.seconds);
    json!({
        "id": id,
        "custom_id": r.key,
        "response": {
            "status_code": 200,
            "request_id": r.job,
            "body": {
                "id": format!("chatcmpl-{h}"),
                "object": "chat.completion",
                "created": created,
                "model": r.model,
                "choices": [{
                    "index": 0,
                    "message": {"role": "assistant", "content": content(&r.result), "refusal": null},
                    "logprobs": null,
                    "finish_reason": "stop",
                }],
                "usage": {
                    "prompt_tokens": u.input_tokens,
                    "completion_tokens": completion,
                    "total_tokens": u.input_tokens + completion,
                    "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
                    "completion_tokens_details": {"reasoning_tokens": u.thinking_tokens},
                },
            },
        },
        "error": null,
    })
}

impl Sink for OpenaiSink {
    fn write_page(&mut self, rows: &[pb::Row]) -> io::Result<()> {
        for r in rows {
            write_json_line(&mut self.out, &row_line(&self.ledger, r))?;
        }
        Ok(())
    }

    fn finish(self: Box<Self>) -> io::Result<Out> {
        let mut out = self.out;
        io::Write::flush(&mut out)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(status: pb::RowStatus, result: &str) -> pb::Row {
        pb::Row {
            key: "req-1".into(),
            status: status as i32,
            result: result.into(),
            model: "gemini-2.5-flash".into(),
            job: "ledgers/l/jobs/j1".into(),
            usage: Some(pb::Usage {
                input_tokens: 10,
                output_tokens: 5,
                thinking_tokens: 2,
                cached_tokens: 4,
                cache_write_tokens: 0,
            }),
            update_time: Some(prost_types::Timestamp {
                seconds: 1_700_000_000,
                nanos: 0,
            }),
            ..Default::default()
        }
    }

    /// A text answer (stored as a JSON string) is the message content as
    /// is; usage counts thinking as completion tokens, as OpenAI does.
    #[test]
    fn a_succeeded_row_is_a_chat_completion() {
        let v = row_line("l", &row(pb::RowStatus::Succeeded, r#""Hello there""#));
        assert_eq!(v["custom_id"], "req-1");
        assert!(v["error"].is_null());
        let resp = &v["response"];
        assert_eq!(resp["status_code"], 200);
        assert_eq!(resp["request_id"], "ledgers/l/jobs/j1");
        let body = &resp["body"];
        assert_eq!(body["object"], "chat.completion");
        assert_eq!(body["created"], 1_700_000_000);
        assert_eq!(body["model"], "gemini-2.5-flash");
        assert_eq!(body["choices"][0]["message"]["content"], "Hello there");
        assert_eq!(body["choices"][0]["finish_reason"], "stop");
        assert_eq!(body["usage"]["prompt_tokens"], 10);
        assert_eq!(body["usage"]["completion_tokens"], 7);
        assert_eq!(body["usage"]["total_tokens"], 17);
        assert_eq!(body["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
        assert_eq!(
            body["usage"]["completion_tokens_details"]["reasoning_tokens"],
            2
        );
        let id = v["id"].as_str().unwrap();
        assert!(id.starts_with("batch_req_") && id.len() == 42, "{id}");
        assert_eq!(
            v,
            row_line("l", &row(pb::RowStatus::Succeeded, r#""Hello there""#)),
            "ids are stable"
        );
        assert_ne!(
            v["id"],
            row_line("other", &row(pb::RowStatus::Succeeded, "1"))["id"]
        );
    }

    /// A JSON answer is its JSON text (what the model wrote).
    #[test]
    fn a_json_result_is_its_text() {
        let v = row_line("l", &row(pb::RowStatus::Succeeded, r#"{"answer":"yes"}"#));
        assert_eq!(
            v["response"]["body"]["choices"][0]["message"]["content"],
            r#"{"answer":"yes"}"#
        );
    }

    /// Invariant: the provider's own response, when the row kept one, is
    /// written as it came (its request id and body, not ones built from
    /// the result); anything but a JSON object falls back to the built one.
    #[test]
    fn a_kept_response_is_written_as_the_provider_wrote_it() {
        let mut r = row(pb::RowStatus::Succeeded, r#""hi""#);
        r.response = r#"{"status_code": 200, "request_id": "req_9", "body": {"id": "chatcmpl-real", "system_fingerprint": "fp_1"}}"#.into();
        let v = row_line("l", &r);
        assert_eq!(v["response"]["request_id"], "req_9");
        assert_eq!(v["response"]["body"]["id"], "chatcmpl-real");
        assert_eq!(v["response"]["body"]["system_fingerprint"], "fp_1");
        assert_eq!(v["custom_id"], "req-1");
        assert!(v["id"].as_str().unwrap().starts_with("batch_req_"));
        r.response = "[1]".into();
        let v = row_line("l", &r);
        assert_eq!(v["response"]["body"]["object"], "chat.completion");
    }

    /// Rows that did not succeed carry an error (rule and last error, or
    /// their status) and no response.
    #[test]
    fn other_rows_are_errors() {
        let mut r = row(pb::RowStatus::Permanent, "");
        r.rule = "content_attempts_exhausted".into();
        r.last_error = "invalid output".into();
        let v = row_line("l", &r);
        assert!(v["response"].is_null());
        assert_eq!(v["error"]["code"], "content_attempts_exhausted");
        assert_eq!(v["error"]["message"], "invalid output");
        let v = row_line("l", &row(pb::RowStatus::Pending, ""));
        assert_eq!(v["error"]["code"], "pending");
        assert_eq!(v["error"]["message"], "row is PENDING");
    }
}
