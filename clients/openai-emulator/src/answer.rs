//! Answering one request line as the model would, and writing it as an
//! output or error file line. Chat completions get a full
//! `chat.completion`; `/v1/responses`, `/v1/completions` and
//! `/v1/embeddings` get their objects' essentials. With a JSON schema
//! (`response_format.json_schema.schema`, or `text.format.schema` for
//! responses) the content is an instance of it; otherwise text derived from
//! the prompt and the seed. Images and files are hashed for the stats. Pure.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use emulator_kit::mix::{Mix, hash_str};
use emulator_kit::schema_instance::{instance, prompt_words};
pub use emulator_kit::text::tokens;
use emulator_kit::text::{seeded_answer, text_of};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::faults::RowFault;
use crate::stats::Outcome;

/// The ids and clock one answer is written with.
#[derive(Debug, Clone)]
pub struct LineIds {
    /// `batch_req_…`.
    pub request: String,
    /// `chatcmpl-…` (or the endpoint's equivalent).
    pub completion: String,
    /// The `x-request-id` of the row's request.
    pub request_id: String,
    pub created: i64,
}

/// One written line and what it means.
#[derive(Debug, Clone, PartialEq)]
pub struct Answered {
    pub line: Value,
    pub outcome: Outcome,
    /// Goes to the error file (else the output file).
    pub error_file: bool,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// The text of a request's prompt (a Response's instructions first, as
/// the model reads them; then messages, input or prompt).
pub fn prompt_text(body: &Value) -> String {
    text_of(body, &["instructions", "messages", "input", "prompt"])
}

/// The SHA-256 (hex) of each image or file a request carries: `data:` URLs
/// (`image_url`, `file_data`) decoded, `file_id`s looked up with `file`.
pub fn media_hashes(body: &Value, file: &dyn Fn(&str) -> Option<Vec<u8>>) -> Vec<String> {
    let mut out = Vec::new();
    walk_media(body, file, &mut out);
    out
}

fn walk_media(v: &Value, file: &dyn Fn(&str) -> Option<Vec<u8>>, out: &mut Vec<String>) {
    match v {
        Value::Array(items) => items.iter().for_each(|i| walk_media(i, file, out)),
        Value::Object(obj) => {
            for (key, value) in obj {
                let bytes = match (key.as_str(), value) {
                    ("url" | "image_url" | "file_data", Value::String(s)) => decode_data_url(s),
                    ("file_id", Value::String(id)) => file(id),
                    _ => None,
                };
                match bytes {
                    Some(b) => out.push(hex::encode(Sha256::digest(&b))),
                    None => walk_media(value, file, out),
                }
            }
        }
        _ => {}
    }
}

fn decode_data_url(s: &str) -> Option<Vec<u8>> {
    let (_, data) = s.strip_prefix("data:")?.split_once(";base64,")?;
    STANDARD.decode(data).ok()
}

/// The JSON schema the answer must follow, if the request names one.
pub fn schema_of(body: &Value) -> Option<&Value> {
    let format = body
        .get("response_format")
        .or_else(|| body.pointer("/text/format"))?;
    if format.get("type").and_then(Value::as_str) != Some("json_schema") {
        return None;
    }
    format
        .pointer("/json_schema/schema")
        .or_else(|| format.get("schema"))
}

/// The model's text for `body`: a schema instance, or prompt-derived text.
pub fn content(body: &Value, prompt: &str, seed: u64) -> String {
    match schema_of(body) {
        Some(schema) => instance(schema, prompt).to_string(),
        None => seeded_answer(prompt, seed),
    }
}

/// Answers one row with its fault; `None` for a row left out of both files.
pub fn answer(
    custom_id: &str,
    endpoint: &str,
    body: &Value,
    fault: Option<&RowFault>,
    seed: u64,
    ids: &LineIds,
) -> Option<Answered> {
    let prompt = prompt_text(body);
    let input_tokens = tokens(&prompt);
    let envelope = |response: Value, error: Value| json!({"id": ids.request, "custom_id": custom_id, "response": response, "error": error});
    let (text, finish, refusal, outcome) = match fault {
        Some(RowFault::Missing) => return None,
        Some(RowFault::HttpError {
            status,
            code,
            kind,
            message,
        }) => {
            let body =
                json!({"error": {"message": message, "type": kind, "param": null, "code": code}});
            return Some(Answered {
                line: envelope(
                    json!({"status_code": status, "request_id": ids.request_id, "body": body}),
                    Value::Null,
                ),
                outcome: Outcome::HttpError { status: *status },
                error_file: true,
                input_tokens: 0,
                output_tokens: 0,
            });
        }
        Some(RowFault::LineError { code, message }) => {
            return Some(Answered {
                line: envelope(Value::Null, json!({"code": code, "message": message})),
                outcome: Outcome::LineError,
                error_file: true,
                input_tokens: 0,
                output_tokens: 0,
            });
        }
        Some(RowFault::Length) => {
            let full = content(body, &prompt, seed);
            let cut: String = full.chars().take(full.chars().count() / 2).collect();
            (Some(cut), "length", None, Outcome::Length)
        }
        Some(RowFault::ContentFilter) => (None, "content_filter", None, Outcome::ContentFilter),
        Some(RowFault::Refusal) => (
            None,
            "stop",
            Some("I'm sorry, but I can't help with that request."),
            Outcome::Refusal,
        ),
        Some(RowFault::InvalidJson) => (
            Some(format!("{{\"answer\": \"{}", prompt_words(&prompt))),
            "stop",
            None,
            Outcome::InvalidJson,
        ),
        Some(RowFault::Resampled) => (
            Some(content(body, &format!("resampled {prompt}"), seed)),
            "stop",
            None,
            Outcome::Success,
        ),
        None => (
            Some(content(body, &prompt, seed)),
            "stop",
            None,
            Outcome::Success,
        ),
    };
    let output_tokens = text.as_deref().map_or(0, tokens);
    let model = body.get("model").cloned().unwrap_or(Value::Null);
    let response_body = match endpoint {
        "/v1/embeddings" => embedding_body(&model, &prompt, input_tokens),
        "/v1/completions" => json!({
            "id": ids.completion.replace("chatcmpl-", "cmpl-"), "object": "text_completion",
            "created": ids.created, "model": model,
            "choices": [{"text": text.clone().unwrap_or_default(), "index": 0, "logprobs": null, "finish_reason": finish}],
            "usage": usage_chat(input_tokens, output_tokens),
        }),
        "/v1/responses" => responses_body(
            ids,
            body,
            text.as_deref(),
            refusal,
            finish,
            input_tokens,
            output_tokens,
        ),
        _ => json!({
            "id": ids.completion, "object": "chat.completion", "created": ids.created, "model": model,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": refusal, "annotations": []},
                "logprobs": null,
                "finish_reason": finish,
            }],
            "usage": usage_chat(input_tokens, output_tokens),
            "service_tier": "default",
            "system_fingerprint": "fp_emulator",
        }),
    };
    let output_tokens = if endpoint == "/v1/embeddings" {
        0
    } else {
        output_tokens
    };
    Some(Answered {
        line: envelope(
            json!({"status_code": 200, "request_id": ids.request_id, "body": response_body}),
            Value::Null,
        ),
        outcome,
        error_file: false,
        input_tokens,
        output_tokens,
    })
}

fn usage_chat(input: u64, output: u64) -> Value {
    json!({
        "prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
            "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0},
    })
}

fn embedding_body(model: &Value, prompt: &str, input_tokens: u64) -> Value {
    let mut mix = Mix::new(hash_str(prompt));
    let vector: Vec<f64> = (0..8)
        .map(|_| (mix.below(2001) as f64 - 1000.0) / 1000.0)
        .collect();
    json!({"object": "list", "model": model,
        "data": [{"object": "embedding", "index": 0, "embedding": vector}],
        "usage": {"prompt_tokens": input_tokens, "total_tokens": input_tokens}})
}

/// A Response as the SDK's `Response` type has it: every field it
/// requires, the request's settings echoed as the API echoes them.
fn responses_body(
    ids: &LineIds,
    request: &Value,
    text: Option<&str>,
    refusal: Option<&str>,
    finish: &str,
    input: u64,
    output: u64,
) -> Value {
    let part = match (text, refusal) {
        (_, Some(r)) => json!({"type": "refusal", "refusal": r}),
        (t, None) => {
            json!({"type": "output_text", "text": t.unwrap_or_default(), "annotations": [], "logprobs": []})
        }
    };
    let (status, incomplete) = match finish {
        "length" => ("incomplete", json!({"reason": "max_output_tokens"})),
        "content_filter" => ("incomplete", json!({"reason": "content_filter"})),
        _ => ("completed", Value::Null),
    };
    let echo = |key: &str, default: Value| request.get(key).cloned().unwrap_or(default);
    json!({
        "id": ids.completion.replace("chatcmpl-", "resp_"), "object": "response",
        "created_at": ids.created, "status": status, "incomplete_details": incomplete,
        "model": echo("model", Value::Null), "error": null,
        "instructions": echo("instructions", Value::Null),
        "max_output_tokens": echo("max_output_tokens", Value::Null),
        "metadata": echo("metadata", json!({})),
        "parallel_tool_calls": echo("parallel_tool_calls", json!(true)),
        "previous_response_id": echo("previous_response_id", Value::Null),
        "temperature": echo("temperature", json!(1.0)),
        "top_p": echo("top_p", json!(1.0)),
        "text": echo("text", json!({"format": {"type": "text"}})),
        "tool_choice": echo("tool_choice", json!("auto")),
        "tools": echo("tools", json!([])),
        "truncation": echo("truncation", json!("disabled")),
        "output": [{"type": "message", "id": ids.completion.replace("chatcmpl-", "msg_"),
            "status": if status == "completed" { "completed" } else { "incomplete" },
            "role": "assistant", "content": [part]}],
        "usage": {"input_tokens": input,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": output, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input + output},
    })
}

/// The error line of a row that never ran (`batch_expired`,
/// `batch_cancelled`).
pub fn never_ran(custom_id: &str, request: &str, code: &str) -> Value {
    let message = match code {
        "batch_expired" => {
            "This request could not be executed before the completion window expired."
        }
        _ => "This request could not be executed before the batch was cancelled.",
    };
    json!({"id": request, "custom_id": custom_id, "response": null,
        "error": {"code": code, "message": message}})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> LineIds {
        LineIds {
            request: "batch_req_1".into(),
            completion: "chatcmpl-1".into(),
            request_id: "req_1".into(),
            created: 1,
        }
    }

    fn chat(prompt: &str) -> Value {
        json!({"model": "gpt-4o", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": [{"type": "text", "text": prompt}]}]})
    }

    // Invariant: a plain answer is a 200 chat.completion with text derived
    // from the prompt; the same prompt and seed give the same text.
    #[test]
    fn answers_chat_deterministically() {
        let a = answer(
            "r1",
            "/v1/chat/completions",
            &chat("hello there"),
            None,
            3,
            &ids(),
        )
        .unwrap();
        assert_eq!(a.outcome, Outcome::Success);
        assert!(!a.error_file);
        let body = &a.line["response"]["body"];
        assert_eq!(a.line["response"]["status_code"], 200);
        assert_eq!(body["object"], "chat.completion");
        let text = body["choices"][0]["message"]["content"].as_str().unwrap();
        assert!(text.contains("be brief hello there"), "{text}");
        let b = answer(
            "r1",
            "/v1/chat/completions",
            &chat("hello there"),
            None,
            3,
            &ids(),
        )
        .unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn schema_requests_get_an_instance() {
        let mut body = chat("x");
        body["response_format"] = json!({"type": "json_schema", "json_schema": {"name": "s", "strict": true,
            "schema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}});
        let a = answer("r", "/v1/chat/completions", &body, None, 0, &ids()).unwrap();
        let text = a.line["response"]["body"]["choices"][0]["message"]["content"]
            .as_str()
            .unwrap();
        let v: Value = serde_json::from_str(text).unwrap();
        assert!(v["n"].is_i64());
        let bad = answer(
            "r",
            "/v1/chat/completions",
            &body,
            Some(&RowFault::InvalidJson),
            0,
            &ids(),
        )
        .unwrap();
        let text = bad.line["response"]["body"]["choices"][0]["message"]["content"]
            .as_str()
            .unwrap();
        assert!(serde_json::from_str::<Value>(text).is_err());
    }

    #[test]
    fn faults_shape_the_line() {
        let body = chat("x");
        let f = RowFault::HttpError {
            status: 429,
            code: Some("rate_limit_exceeded".into()),
            kind: "requests".into(),
            message: "slow".into(),
        };
        let a = answer("r", "/v1/chat/completions", &body, Some(&f), 0, &ids()).unwrap();
        assert!(a.error_file);
        assert_eq!(a.line["response"]["status_code"], 429);
        assert_eq!(
            a.line["response"]["body"]["error"]["code"],
            "rate_limit_exceeded"
        );
        let r = answer(
            "r",
            "/v1/chat/completions",
            &body,
            Some(&RowFault::Refusal),
            0,
            &ids(),
        )
        .unwrap();
        assert!(r.line["response"]["body"]["choices"][0]["message"]["content"].is_null());
        assert!(r.line["response"]["body"]["choices"][0]["message"]["refusal"].is_string());
        assert!(
            answer(
                "r",
                "/v1/chat/completions",
                &body,
                Some(&RowFault::Missing),
                0,
                &ids()
            )
            .is_none()
        );
        let e = never_ran("r", "batch_req_2", "batch_expired");
        assert_eq!(e["error"]["code"], "batch_expired");
    }

    // Invariant: a resampled answer is a success like any other, with
    // another text than the usual answer to the same request (plain and
    // with a schema), and the same usage of its prompt.
    #[test]
    fn a_resampled_answer_differs_from_the_usual_one() {
        let text = |a: &Answered| {
            a.line["response"]["body"]["choices"][0]["message"]["content"]
                .as_str()
                .unwrap()
                .to_owned()
        };
        let mut schema = chat("Page 1. Before: Page 0.");
        schema["response_format"] = json!({"type": "json_schema", "json_schema": {"name": "s",
            "schema": {"type": "object", "properties": {"summary": {"type": "string"}},
                       "required": ["summary"]}}});
        for body in [chat("hello there"), schema] {
            let usual = answer("r", "/v1/chat/completions", &body, None, 0, &ids()).unwrap();
            let again = answer(
                "r",
                "/v1/chat/completions",
                &body,
                Some(&RowFault::Resampled),
                0,
                &ids(),
            )
            .unwrap();
            assert_eq!(again.outcome, Outcome::Success);
            assert_ne!(text(&usual), text(&again), "{body}");
            assert_eq!(usual.input_tokens, again.input_tokens);
        }
    }

    // Invariant: a Response carries every field the SDK's `Response`
    // requires, echoes the request's settings, reads its instructions as
    // part of the prompt, and says how it was cut short.
    #[test]
    fn a_response_has_what_the_sdk_requires() {
        let body = json!({"model": "gpt-4o", "instructions": "be brief", "max_output_tokens": 40,
            "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello"}]}]});
        assert_eq!(prompt_text(&body), "be brief\nhello");
        let a = answer("", "/v1/responses", &body, None, 0, &ids()).unwrap();
        let r = &a.line["response"]["body"];
        for key in [
            "id",
            "created_at",
            "model",
            "object",
            "output",
            "parallel_tool_calls",
            "tool_choice",
            "tools",
        ] {
            assert!(r.get(key).is_some_and(|v| !v.is_null()), "{key}: {r}");
        }
        assert_eq!(
            (r["status"].as_str(), r["max_output_tokens"].as_u64()),
            (Some("completed"), Some(40))
        );
        assert_eq!(r["usage"]["input_tokens_details"]["cache_write_tokens"], 0);
        let cut = answer(
            "",
            "/v1/responses",
            &body,
            Some(&RowFault::Length),
            0,
            &ids(),
        )
        .unwrap();
        let r = &cut.line["response"]["body"];
        assert_eq!(
            (
                r["status"].as_str(),
                r["incomplete_details"]["reason"].as_str(),
                r["output"][0]["status"].as_str()
            ),
            (
                Some("incomplete"),
                Some("max_output_tokens"),
                Some("incomplete")
            )
        );
    }

    #[test]
    fn media_are_hashed() {
        let png = STANDARD.encode(b"png");
        let body = json!({"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{png}")}},
            {"type": "file", "file": {"file_id": "file-1"}}]}]});
        let hashes = media_hashes(&body, &|id| (id == "file-1").then(|| b"pdf".to_vec()));
        assert_eq!(
            hashes,
            vec![
                hex::encode(Sha256::digest(b"png")),
                hex::encode(Sha256::digest(b"pdf"))
            ]
        );
    }
}
