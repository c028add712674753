//! A row's request in the OpenAI Batch API's shape: the body of one
//! `/v1/chat/completions` line. Pure.
//!
//! - A row with a prompt: the rendered template is the user message (with
//!   the prompt's media variables as `{"media": …}` content parts after the
//!   text, replaced by `crate::attach`), the system instruction a system
//!   message, and the prompt's JSON Schema the `response_format`
//!   (`json_schema`, non-strict: the registry takes any JSON Schema, and
//!   the worker checks the answer against it).
//! - A row without a prompt: a payload with `messages` is the request as
//!   written (an OpenAI-native row); otherwise its `prompt` or `text` (or
//!   its JSON) is the user message, and JSON is asked for.
//!
//! `model` is always the job's (each batch file holds one model).

use serde_json::{Value, json};
use tally_core::media::MediaRef;
use tally_core::provider::Api;

use crate::jsonl::LineShape;
use crate::prompt::chat;
use crate::prompt::{InputError, PromptSpec};
use crate::provider::wire::{base64, images_and_pdfs_only};

/// The request body for one row: a native row's body as written, with
/// the job's model.
pub fn build_request(
    payload: &str,
    prompt: Option<&PromptSpec>,
    model: &str,
) -> Result<Value, InputError> {
    chat::request(Api::OpenAi, payload, prompt, model, Ok, request)
}

fn request(model: &str, system: Option<&str>, content: Value, schema: &Value) -> Value {
    let mut messages = Vec::new();
    if let Some(system) = system {
        messages.push(json!({"role": "system", "content": system}));
    }
    messages.push(json!({"role": "user", "content": content}));
    json!({
        "model": model,
        "messages": messages,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": schema},
        },
    })
}

/// Whether a row's answer must be JSON: always with a prompt or without
/// a request of its own; for a native request, when its `response_format`
/// asks for JSON.
pub fn asks_for_json(payload: &str, has_prompt: bool) -> bool {
    chat::asks_for_json(payload, has_prompt, |request| {
        matches!(
            request
                .pointer("/response_format/type")
                .and_then(Value::as_str),
            Some("json_object" | "json_schema")
        )
    })
}

/// The only OpenAI endpoint tally runs (every line's `url`).
pub const ENDPOINT: &str = "/v1/chat/completions";

/// OpenAI's batch input line: `{"custom_id", "method": "POST", "url":
/// "/v1/chat/completions", "body"}`.
pub const LINE: LineShape = LineShape {
    id: "custom_id",
    fixed: r#""method":"POST","url":"/v1/chat/completions","#,
    request: "body",
};

/// Why OpenAI will not take `r` inline (it takes images and PDFs).
pub fn refuses_media(r: &MediaRef) -> Option<String> {
    images_and_pdfs_only(r, "OpenAI", "a chat completion")
}

/// OpenAI's inline part for `r`'s bytes: an image as an `image_url` part
/// holding a `data:` URL, a PDF as a `file` part with its `file_data`.
pub fn inline_part(r: &MediaRef, bytes: &[u8]) -> Value {
    let data = format!("data:{};base64,{}", r.mime_type, base64(bytes));
    if r.mime_type == "application/pdf" {
        let name = r.uri.rsplit('/').next().unwrap_or("document.pdf");
        json!({"type": "file", "file": {"filename": name, "file_data": data}})
    } else {
        json!({"type": "image_url", "image_url": {"url": data}})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Invariant: a prompt row renders to one user message with the
    // system message before it and the prompt's schema as the response
    // format, for the job's model.
    #[test]
    fn a_prompt_row_renders_to_chat_completions() {
        let mut p = PromptSpec::from_registry(
            "Summarize {{ t }}",
            r#"{"type": "object", "required": ["s"]}"#,
            "be terse",
        )
        .unwrap();
        let req = build_request(r#"{"t": "x"}"#, Some(&p), "gpt-4o-mini").unwrap();
        assert_eq!(req["model"], "gpt-4o-mini");
        assert_eq!(
            req["messages"][0],
            json!({"role": "system", "content": "be terse"})
        );
        assert_eq!(
            req["messages"][1],
            json!({"role": "user", "content": "Summarize x"})
        );
        assert_eq!(req["response_format"]["type"], "json_schema");
        assert_eq!(
            req["response_format"]["json_schema"]["schema"]["required"],
            json!(["s"])
        );
        const H: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
        p.media = vec!["page".into()];
        let req = build_request(
            &json!({"t": "x", "page": {"uri": "p/1.png", "sha256": H}}).to_string(),
            Some(&p),
            "gpt-4o",
        )
        .unwrap();
        let parts = req["messages"][1]["content"].as_array().unwrap();
        assert_eq!(parts[0], json!({"type": "text", "text": "Summarize x"}));
        assert_eq!(parts[1]["media"]["mime_type"], "image/png");
    }

    // Invariant: a native row is sent as written (but for the model), and
    // a streamed one is refused at the worker, never sent.
    #[test]
    fn native_rows_keep_their_request() {
        let body = r#"{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}],
                       "temperature": 0.2, "max_completion_tokens": 50}"#;
        let req = build_request(body, None, "gpt-4o-mini").unwrap();
        assert_eq!(req["temperature"], 0.2);
        assert_eq!(req["max_completion_tokens"], 50);
        assert_eq!(req["model"], "gpt-4o-mini");
        assert!(!asks_for_json(body, false));
        let streamed = r#"{"messages": [], "stream": true}"#;
        assert!(matches!(
            build_request(streamed, None, "m"),
            Err(InputError::Request(_))
        ));
        assert!(asks_for_json(
            r#"{"messages": [], "response_format": {"type": "json_object"}}"#,
            false
        ));
        let gemini = r#"{"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}"#;
        assert!(matches!(
            build_request(gemini, None, "m"),
            Err(InputError::Request(why)) if why.contains("Gemini")
        ));
        let text = build_request(r#"{"text": "hello"}"#, None, "m").unwrap();
        assert_eq!(text["messages"][0]["content"], "hello");
        assert!(asks_for_json(r#"{"text": "hello"}"#, false));
        assert!(build_request("[1]", None, "m").is_err());
    }
}
