//! Anthropic Message Batches requests → Gemini requests.
//!
//! `{"custom_id", "params": {model, max_tokens, system, messages,
//! temperature, top_p, top_k, stop_sequences}}`:
//! - `system` (a string or a list of `text` blocks) → `systemInstruction`;
//! - `messages`: `user` → a `user` turn, `assistant` → a `model` turn;
//!   content a string or a list of `text` blocks (and `image` blocks with a
//!   `base64` source → `inlineData`); `cache_control` on blocks is dropped;
//! - `max_tokens` → `maxOutputTokens`, `temperature`, `top_p` → `topP`,
//!   `top_k` → `topK`, `stop_sequences` → `stopSequences`;
//! - `metadata` and `service_tier` are dropped; `stream` must be false.
//!
//! Tools, tool use and results, documents, extended thinking and URL image
//! sources are per-line errors.

use super::gemini::{self, Request, Role};
use super::{ContentNames, Fields, content_parts, kind_of, object};
use serde_json::{Map, Value, json};

const UNSUPPORTED: [(&str, &str); 5] = [
    ("tools", "tools and tool use are not converted"),
    ("tool_choice", "tools and tool use are not converted"),
    ("thinking", "map it to thinkingConfig yourself"),
    ("mcp_servers", "tools and tool use are not converted"),
    ("container", "code execution is not converted"),
];

/// The line's `params` as written, for a ledger of an Anthropic model:
/// only what no batch takes is refused (no messages, a streamed request).
pub fn native(line: Map<String, Value>) -> Result<(Value, Option<String>), String> {
    let mut line = Fields::new(line, "line");
    let params = object(line.take("params"), "params")?;
    line.finish(&[])?;
    let model = match params.get("model") {
        None | Some(Value::Null) => None,
        Some(Value::String(m)) => Some(m.clone()),
        Some(other) => {
            return Err(format!(
                "params.model must be a string, got {}",
                kind_of(other)
            ));
        }
    };
    match params.get("messages") {
        Some(Value::Array(m)) if !m.is_empty() => {}
        Some(Value::Array(_)) => return Err("params.messages is empty".into()),
        Some(other) => {
            return Err(format!(
                "params.messages must be a list, got {}",
                kind_of(other)
            ));
        }
        None => return Err("missing params.messages".into()),
    }
    if params.get("stream") == Some(&Value::Bool(true)) {
        return Err("params.stream must be false: batch answers are not streamed".into());
    }
    Ok((Value::Object(params), model))
}

/// The request and the model named by one line (without `custom_id`).
pub fn convert(line: Map<String, Value>) -> Result<(Value, Option<String>), String> {
    let mut line = Fields::new(line, "line");
    let params = object(line.take("params"), "params")?;
    line.finish(&[])?;
    let mut params = Fields::new(params, "params");
    let model = params.string("model")?;
    let mut req = Request::default();
    if let Some(system) = params.take("system") {
        req.system(blocks(system, "params.system", false)?);
    }
    let messages = match params.take("messages") {
        Some(Value::Array(m)) if !m.is_empty() => m,
        Some(Value::Array(_)) => return Err("params.messages is empty".into()),
        Some(other) => {
            return Err(format!(
                "params.messages must be a list, got {}",
                kind_of(&other)
            ));
        }
        None => return Err("missing params.messages".into()),
    };
    for (i, m) in messages.into_iter().enumerate() {
        let what = format!("messages[{i}]");
        let Value::Object(m) = m else {
            return Err(format!("{what} must be an object, got {}", kind_of(&m)));
        };
        let mut m = Fields::new(m, what.clone());
        let role = m
            .string("role")?
            .ok_or_else(|| format!("{what} has no role"))?;
        let content = m
            .take("content")
            .ok_or_else(|| format!("{what} has no content"))?;
        m.finish(&[])?;
        match role.as_str() {
            "user" => req.turn(Role::User, blocks(content, &what, true)?),
            "assistant" => req.turn(Role::Model, blocks(content, &what, false)?),
            other => return Err(format!("{what}: unknown role {other:?}")),
        }
    }
    if let Some(n) = params.count("max_tokens")? {
        req.config("maxOutputTokens", json!(n));
    }
    if let Some(t) = params.number("temperature")? {
        req.config("temperature", t);
    }
    if let Some(p) = params.number("top_p")? {
        req.config("topP", p);
    }
    if let Some(k) = params.count("top_k")? {
        req.config("topK", json!(k));
    }
    if let Some(stop) = params.take("stop_sequences") {
        req.stop(stop, "params.stop_sequences")?;
    }
    if params.boolean("stream")? == Some(true) {
        return Err("params.stream must be false: batch answers are not streamed".into());
    }
    params.ignore(&["metadata", "service_tier"]);
    params.finish(&UNSUPPORTED)?;
    Ok((req.build()?, model))
}

/// A string or a list of content blocks → Gemini parts. Images only where
/// `images` (user turns).
fn blocks(content: Value, what: &str, images: bool) -> Result<Vec<Value>, String> {
    let names = ContentNames {
        field: " content",
        list: "blocks",
        ignored: &["cache_control", "citations"],
    };
    content_parts(content, what, &names, |kind, item, bwhat| match kind {
        "image" if images => {
            let mut source = Fields::new(
                object(item.take("source"), &format!("{bwhat}.source"))?,
                format!("{bwhat}.source"),
            );
            let kind = source.string("type")?.unwrap_or_default();
            if kind != "base64" {
                return Err(format!(
                    "{bwhat}: only base64 image sources are converted, not {kind:?}"
                ));
            }
            let mime = source.string("media_type")?.unwrap_or_default();
            let data = source.string("data")?.unwrap_or_default();
            source.finish(&[])?;
            gemini::inline_part(&mime, &data, bwhat)
        }
        other => Err(format!(
            "{bwhat}: block type {other:?} cannot be converted here"
        )),
    })
}
