//! Answering one request of a batch as the model would, as its result
//! line's `result`: `succeeded` with a full Message (`types/message.py`),
//! `errored` with an ErrorResponse (`{"type": "error", "error": {type,
//! message}}`), or `canceled` / `expired` for a request never sent. With a
//! JSON schema (`output_config.format`, or the older `output_format`) the
//! text is an instance of it; otherwise seeded text naming the prompt.
//! Usage counts the prompt's tokens, the cached prefix (up to the last
//! `cache_control` block) as cache creation the first time it is seen and
//! as a cache read after. Pure.

use emulator_kit::mix::hash_str;
use emulator_kit::schema_instance::{instance, prompt_words};
use emulator_kit::text::{seeded_answer, text_of, tokens};
use serde_json::{Value, json};

use crate::error::ErrorType;
use crate::faults::RowFault;
use crate::stats::Outcome;

/// One request's result and what it means.
#[derive(Debug, Clone, PartialEq)]
pub struct Answered {
    /// The `result` of the request's line.
    pub result: Value,
    pub outcome: Outcome,
}

/// Whether the request's cached prefix is written or read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cache {
    /// No `cache_control` block.
    None,
    /// The prefix (this many tokens) is cached for the first time.
    Write(u64),
    /// The prefix (this many tokens) was cached before.
    Read(u64),
}

/// The text of a request's prompt: its system prompt and messages.
pub fn prompt_text(params: &Value) -> String {
    text_of(params, &["system", "messages"])
}

/// The prompt's prefix up to and including its last block marked
/// `cache_control` (system blocks, then message content blocks): a hash
/// naming it and its tokens. `None` without such a block.
pub fn cache_prefix(params: &Value) -> Option<(u64, u64)> {
    let mut blocks: Vec<&Value> = Vec::new();
    if let Some(system) = params.get("system").and_then(Value::as_array) {
        blocks.extend(system);
    }
    for message in params
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match message.get("content") {
            Some(Value::Array(parts)) => blocks.extend(parts),
            Some(other) => blocks.push(other),
            None => {}
        }
    }
    let last = blocks
        .iter()
        .rposition(|b| b.get("cache_control").is_some_and(|c| !c.is_null()))?;
    let prefix = text_of(&json!({ "blocks": blocks[..=last] }), &["blocks"]);
    let model = params.get("model").and_then(Value::as_str).unwrap_or("");
    Some((hash_str(&format!("{model}\n{prefix}")), tokens(&prefix)))
}

/// The JSON schema the answer must follow, if the request names one.
pub fn schema_of(params: &Value) -> Option<&Value> {
    let format = params
        .pointer("/output_config/format")
        .or_else(|| params.get("output_format"))?;
    if format.get("type").and_then(Value::as_str) != Some("json_schema") {
        return None;
    }
    format.get("schema")
}

/// The model's text for `params`: a schema instance, or seeded text.
pub fn content(params: &Value, prompt: &str, seed: u64) -> String {
    match schema_of(params) {
        Some(schema) => instance(schema, prompt).to_string(),
        None => seeded_answer(prompt, seed),
    }
}

/// An `errored` result.
pub fn errored(error: ErrorType, message: &str) -> Answered {
    Answered {
        result: json!({"type": "errored", "error": {"type": "error", "error": error.object(message)}}),
        outcome: Outcome::Errored { error },
    }
}

/// The result of a request never sent to the model.
pub fn not_run(outcome: Outcome) -> Answered {
    let kind = match outcome {
        Outcome::Expired => "expired",
        _ => "canceled",
    };
    Answered {
        result: json!({ "type": kind }),
        outcome,
    }
}

/// Answers one processed request: `problem` is what checking its params
/// found (an `errored` result), else its fault shapes the message.
pub fn answer(
    params: &Value,
    problem: Option<(ErrorType, String)>,
    fault: Option<&RowFault>,
    seed: u64,
    message_id: &str,
    cache: Cache,
) -> Answered {
    if let Some((error, message)) = problem {
        return errored(error, &message);
    }
    let prompt = prompt_text(params);
    let (text, stop_reason, outcome) = match fault {
        Some(RowFault::Errored { error, message }) => {
            let message = message.as_deref().unwrap_or(error.default_message());
            return errored(*error, message);
        }
        Some(RowFault::MaxTokens) => {
            let full = content(params, &prompt, seed);
            let cut: String = full.chars().take(full.chars().count() / 2).collect();
            (Some(cut), "max_tokens", Outcome::MaxTokens)
        }
        Some(RowFault::Refusal) => (None, "refusal", Outcome::Refusal),
        Some(RowFault::InvalidJson) => (
            Some(format!("{{\"answer\": \"{}", prompt_words(&prompt))),
            "end_turn",
            Outcome::InvalidJson,
        ),
        Some(RowFault::EmptyContent) => (None, "end_turn", Outcome::EmptyContent),
        None => (
            Some(content(params, &prompt, seed)),
            "end_turn",
            Outcome::Succeeded,
        ),
    };
    let output_tokens = match (&text, stop_reason) {
        (_, "max_tokens") => params
            .get("max_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(1),
        (Some(t), _) => tokens(t),
        (None, _) => 0,
    };
    let (creation, read) = match cache {
        Cache::None => (0, 0),
        Cache::Write(n) => (n, 0),
        Cache::Read(n) => (0, n),
    };
    let input_tokens = tokens(&prompt).saturating_sub(creation + read).max(1);
    let content: Vec<Value> = text
        .into_iter()
        .map(|t| json!({"type": "text", "text": t}))
        .collect();
    let mut message = json!({
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": params.get("model").cloned().unwrap_or(Value::Null),
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": null,
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cache_creation_input_tokens": creation,
            "cache_read_input_tokens": read,
            "cache_creation": {"ephemeral_5m_input_tokens": creation, "ephemeral_1h_input_tokens": 0},
            "service_tier": "batch",
        },
    });
    if outcome == Outcome::Refusal {
        message["stop_details"] = json!({"type": "refusal", "category": null, "explanation": null});
    }
    Answered {
        result: json!({"type": "succeeded", "message": message}),
        outcome,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(prompt: &str) -> Value {
        json!({"model": "claude-sonnet-4-6", "max_tokens": 64, "system": "be brief",
            "messages": [{"role": "user", "content": [{"type": "text", "text": prompt}]}]})
    }

    // Invariant: a plain answer is a succeeded Message with end_turn, text
    // naming the prompt and usage; the same prompt and seed give the same
    // result.
    #[test]
    fn answers_deterministically() {
        let a = answer(&params("hello there"), None, None, 3, "msg_1", Cache::None);
        assert_eq!(a.outcome, Outcome::Succeeded);
        let m = &a.result["message"];
        assert_eq!(a.result["type"], "succeeded");
        assert_eq!(m["type"], "message");
        assert_eq!(m["role"], "assistant");
        assert_eq!(m["model"], "claude-sonnet-4-6");
        assert_eq!(m["stop_reason"], "end_turn");
        assert!(m["stop_sequence"].is_null());
        let text = m["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("be brief hello there"), "{text}");
        assert!(m["usage"]["input_tokens"].as_u64().unwrap() > 0);
        assert_eq!(m["usage"]["cache_read_input_tokens"], 0);
        assert_eq!(
            a,
            answer(&params("hello there"), None, None, 3, "msg_1", Cache::None)
        );
    }

    // Invariant: `output_config.format` (json_schema) gets an instance of
    // the schema; the invalid_json fault gets text that does not parse.
    #[test]
    fn schema_requests_get_an_instance() {
        let mut p = params("x");
        p["output_config"] = json!({"format": {"type": "json_schema",
            "schema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}});
        let a = answer(&p, None, None, 0, "msg_1", Cache::None);
        let text = a.result["message"]["content"][0]["text"].as_str().unwrap();
        let v: Value = serde_json::from_str(text).unwrap();
        assert!(v["n"].is_i64());
        let bad = answer(
            &p,
            None,
            Some(&RowFault::InvalidJson),
            0,
            "msg_1",
            Cache::None,
        );
        let text = bad.result["message"]["content"][0]["text"]
            .as_str()
            .unwrap();
        assert!(serde_json::from_str::<Value>(text).is_err());
        assert_eq!(bad.outcome, Outcome::InvalidJson);
    }

    // Invariant: each fault shapes the result as documented: errored
    // results nest an ErrorResponse, stop reasons and empty content are
    // succeeded messages, never-run requests carry only their type.
    #[test]
    fn faults_shape_the_result() {
        let p = params("x");
        let e = answer(
            &p,
            None,
            Some(&RowFault::Errored {
                error: ErrorType::Overloaded,
                message: None,
            }),
            0,
            "m",
            Cache::None,
        );
        assert_eq!(
            e.result,
            json!({"type": "errored", "error": {"type": "error",
                "error": {"type": "overloaded_error", "message": "Overloaded"}}})
        );
        let m = answer(&p, None, Some(&RowFault::MaxTokens), 0, "m", Cache::None);
        assert_eq!(m.result["message"]["stop_reason"], "max_tokens");
        assert_eq!(m.result["message"]["usage"]["output_tokens"], 64);
        let r = answer(&p, None, Some(&RowFault::Refusal), 0, "m", Cache::None);
        assert_eq!(r.result["message"]["stop_reason"], "refusal");
        assert_eq!(r.result["message"]["content"], json!([]));
        let empty = answer(&p, None, Some(&RowFault::EmptyContent), 0, "m", Cache::None);
        assert_eq!(empty.result["message"]["content"], json!([]));
        assert_eq!(empty.outcome, Outcome::EmptyContent);
        let problem = answer(
            &p,
            Some((ErrorType::NotFound, "model: x".into())),
            Some(&RowFault::Refusal),
            0,
            "m",
            Cache::None,
        );
        assert_eq!(problem.result["error"]["error"]["type"], "not_found_error");
        assert_eq!(not_run(Outcome::Expired).result, json!({"type": "expired"}));
        assert_eq!(
            not_run(Outcome::Canceled).result,
            json!({"type": "canceled"})
        );
    }

    // Invariant: a cache_control block makes a cached prefix, counted as
    // cache creation or read and left out of input_tokens.
    #[test]
    fn cached_prefixes_are_counted() {
        assert_eq!(cache_prefix(&params("x")), None);
        let mut p = params("the question");
        p["system"] = json!([{"type": "text", "text": "a long shared context of many words here",
            "cache_control": {"type": "ephemeral"}}]);
        let (hash, n) = cache_prefix(&p).unwrap();
        assert!(n > 1);
        let mut q = p.clone();
        q["messages"][0]["content"][0]["text"] = json!("another question");
        assert_eq!(cache_prefix(&q).unwrap().0, hash);
        let plain = answer(&p, None, None, 0, "m", Cache::None);
        let read = answer(&p, None, None, 0, "m", Cache::Read(n));
        let usage = &read.result["message"]["usage"];
        assert_eq!(usage["cache_read_input_tokens"], n);
        assert_eq!(
            usage["input_tokens"].as_u64().unwrap() + n,
            plain.result["message"]["usage"]["input_tokens"]
                .as_u64()
                .unwrap()
        );
        let write = answer(&p, None, None, 0, "m", Cache::Write(n));
        assert_eq!(
            write.result["message"]["usage"]["cache_creation_input_tokens"],
            n
        );
    }
}
