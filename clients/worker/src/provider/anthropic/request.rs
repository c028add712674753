//! A row's request in Anthropic's Message Batches shape: the `params` of
//! one request (a Messages API body). Pure.
//!
//! - A row with a prompt: the rendered template is the user message (with
//!   the prompt's media variables as `{"media": …}` content blocks after
//!   the text, replaced by `crate::attach`), the system instruction is
//!   `system`, and the prompt's JSON Schema is the structured output
//!   (`output_config.format`, `json_schema`); the worker checks the answer
//!   against it too.
//! - A row without a prompt: a payload with `messages` is the request as
//!   written (an Anthropic-native row, `tallyctl enroll --format
//!   anthropic`); otherwise its `prompt` or `text` (or its JSON) is the user
//!   message, and a JSON object is asked for.
//!
//! `model` is always the job's; `max_tokens`, which the API requires, is
//! [`DEFAULT_MAX_TOKENS`] where the row does not set it.

use serde_json::{Value, json};
use tally_core::media::MediaRef;
use tally_core::provider::Api;

use crate::jsonl::LineShape;
use crate::prompt::chat;
use crate::prompt::{InputError, PromptSpec};
use crate::provider::wire::{base64, images_and_pdfs_only};

/// The output budget of a request that names none (the API requires one;
/// every current Claude model allows at least this many).
pub const DEFAULT_MAX_TOKENS: u64 = 4096;

/// The `params` for one row.
pub fn build_request(
    payload: &str,
    prompt: Option<&PromptSpec>,
    model: &str,
) -> Result<Value, InputError> {
    chat::request(Api::Anthropic, payload, prompt, model, native, request)
}

fn request(model: &str, system: Option<&str>, content: Value, schema: &Value) -> Value {
    let mut params = json!({
        "model": model,
        "max_tokens": DEFAULT_MAX_TOKENS,
        "messages": [{"role": "user", "content": content}],
        "output_config": {"format": {"type": "json_schema", "schema": schema}},
    });
    if let Some(system) = system {
        params["system"] = json!(system);
    }
    params
}

/// An Anthropic-native row (its params as written, with the job's model):
/// a `max_tokens` where it set none; a system message is refused.
fn native(mut params: Value) -> Result<Value, InputError> {
    if params
        .get("messages")
        .and_then(Value::as_array)
        .is_some_and(|m| m.iter().any(|t| t["role"] == "system"))
    {
        return Err(InputError::Request(
            "a message with role `system`: Anthropic takes the system prompt as `system`, not as a message (enroll OpenAI requests into a ledger of an OpenAI model)".into(),
        ));
    }
    if params.get("max_tokens").is_none_or(Value::is_null) {
        params["max_tokens"] = json!(DEFAULT_MAX_TOKENS);
    }
    Ok(params)
}

/// Whether a row's answer must be JSON: always with a prompt or without a
/// request of its own; for a native request, when it asks for a JSON
/// Schema output.
pub fn asks_for_json(payload: &str, has_prompt: bool) -> bool {
    chat::asks_for_json(payload, has_prompt, |params| {
        params
            .pointer("/output_config/format/type")
            .and_then(Value::as_str)
            == Some("json_schema")
    })
}

/// Anthropic's batch request: `{"custom_id", "params"}`.
pub const LINE: LineShape = LineShape {
    id: "custom_id",
    fixed: "",
    request: "params",
};

/// Why Anthropic will not take `r` inline (it takes images and PDFs).
pub fn refuses_media(r: &MediaRef) -> Option<String> {
    images_and_pdfs_only(r, "Anthropic", "a message")
}

/// Anthropic's content block for `r`'s bytes: an image, or a PDF
/// document, inline as base64.
pub fn inline_part(r: &MediaRef, bytes: &[u8]) -> Value {
    let kind = if r.mime_type == "application/pdf" {
        "document"
    } else {
        "image"
    };
    json!({"type": kind, "source": {
        "type": "base64",
        "media_type": r.mime_type,
        "data": base64(bytes),
    }})
}

#[cfg(test)]
mod tests {
    use super::*;

    // Invariant: a prompt row renders to one user message, the system
    // instruction as `system`, the prompt's schema as the structured
    // output, `max_tokens` always set, for the job's model.
    #[test]
    fn a_prompt_row_renders_to_messages_params() {
        let mut p = PromptSpec::from_registry(
            "Summarize {{ t }}",
            r#"{"type": "object", "required": ["s"]}"#,
            "be terse",
        )
        .unwrap();
        let req = build_request(r#"{"t": "x"}"#, Some(&p), "claude-haiku-4-5").unwrap();
        assert_eq!(req["model"], "claude-haiku-4-5");
        assert_eq!(req["system"], "be terse");
        assert_eq!(req["max_tokens"], DEFAULT_MAX_TOKENS);
        assert_eq!(
            req["messages"],
            json!([{"role": "user", "content": "Summarize x"}])
        );
        assert_eq!(req["output_config"]["format"]["type"], "json_schema");
        assert_eq!(
            req["output_config"]["format"]["schema"]["required"],
            json!(["s"])
        );
        const H: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
        p.media = vec!["page".into()];
        p.system_instruction = None;
        let req = build_request(
            &json!({"t": "x", "page": {"uri": "p/1.png", "sha256": H}}).to_string(),
            Some(&p),
            "claude-sonnet-4-6",
        )
        .unwrap();
        assert!(req.get("system").is_none());
        let blocks = req["messages"][0]["content"].as_array().unwrap();
        assert_eq!(blocks[0], json!({"type": "text", "text": "Summarize x"}));
        assert_eq!(blocks[1]["media"]["mime_type"], "image/png");
    }

    // Invariant: a native row keeps its params (but for the model, and a
    // max_tokens where none was set); a streamed one, a system message or
    // another provider's request is refused at the worker, never sent.
    #[test]
    fn native_rows_keep_their_params() {
        let body = r#"{"model": "claude-x", "system": "s", "max_tokens": 50, "temperature": 0.2,
                       "messages": [{"role": "user", "content": "hi"}]}"#;
        let req = build_request(body, None, "claude-haiku-4-5").unwrap();
        assert_eq!(req["temperature"], 0.2);
        assert_eq!(req["max_tokens"], 50);
        assert_eq!(req["system"], "s");
        assert_eq!(req["model"], "claude-haiku-4-5");
        assert!(!asks_for_json(body, false));
        let bare = build_request(r#"{"messages": []}"#, None, "m").unwrap();
        assert_eq!(bare["max_tokens"], DEFAULT_MAX_TOKENS);
        assert!(matches!(
            build_request(r#"{"messages": [], "stream": true}"#, None, "m"),
            Err(InputError::Request(_))
        ));
        let openai = r#"{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]}"#;
        assert!(matches!(
            build_request(openai, None, "m"),
            Err(InputError::Request(why)) if why.contains("system")
        ));
        let gemini = r#"{"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}"#;
        assert!(matches!(
            build_request(gemini, None, "m"),
            Err(InputError::Request(why)) if why.contains("Gemini")
        ));
        assert!(asks_for_json(
            r#"{"messages": [], "output_config": {"format": {"type": "json_schema", "schema": {}}}}"#,
            false
        ));
        let text = build_request(r#"{"text": "hello"}"#, None, "m").unwrap();
        assert_eq!(text["messages"][0]["content"], "hello");
        assert!(asks_for_json(r#"{"text": "hello"}"#, false));
    }
}
