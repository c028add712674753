//! OpenAI batch input lines → Gemini requests.
//!
//! `{"custom_id", "method": "POST", "url": "/v1/chat/completions", "body"}`,
//! body → request:
//! - `messages`: `system`/`developer` → `systemInstruction` parts;
//!   `user` → a `user` turn, `assistant` → a `model` turn; content a string
//!   or a list of `text` parts (and `image_url` parts holding a base64
//!   `data:` URL → `inlineData`);
//! - `max_tokens` / `max_completion_tokens` → `maxOutputTokens`;
//!   `temperature`; `top_p` → `topP`; `stop` → `stopSequences`; `n` →
//!   `candidateCount` (tally keeps the first candidate); `seed`;
//!   `presence_penalty`, `frequency_penalty`;
//! - `response_format`: `json_object` → `responseMimeType:
//!   application/json`; `json_schema` → that plus `responseJsonSchema` (JSON
//!   Schema as given: `responseSchema` is the provider's OpenAPI subset and
//!   refuses `$ref`, `const`, type arrays…); `text` → nothing;
//! - `user`, `metadata`, `store`, `service_tier` are dropped (they do not
//!   change the answer); `stream` must be false.
//!
//! Tools and function calls, log probabilities, logit bias, audio, other
//! URLs, other methods, other roles and remote images are per-line errors.

use super::gemini::{self, Request, Role};
use super::{ContentNames, Fields, content_parts, kind_of, object};
use serde_json::{Map, Value, json};

/// The only endpoint converted.
pub const CHAT_COMPLETIONS: &str = "/v1/chat/completions";

const UNSUPPORTED: [(&str, &str); 12] = [
    ("tools", "tools and function calling are not converted"),
    (
        "tool_choice",
        "tools and function calling are not converted",
    ),
    (
        "parallel_tool_calls",
        "tools and function calling are not converted",
    ),
    ("functions", "tools and function calling are not converted"),
    (
        "function_call",
        "tools and function calling are not converted",
    ),
    (
        "logprobs",
        "Gemini batch output carries no log probabilities",
    ),
    (
        "top_logprobs",
        "Gemini batch output carries no log probabilities",
    ),
    ("logit_bias", "Gemini has no logit bias"),
    ("audio", "audio output is not converted"),
    ("modalities", "only text output is converted"),
    ("prediction", "predicted outputs are not converted"),
    ("reasoning_effort", "map it to thinkingConfig yourself"),
];

/// The request as written and the model named by one line (without
/// `custom_id`), for a ledger whose model runs at an OpenAI-shaped
/// provider: nothing is converted. The body must be a chat completion that
/// can run in a batch (`messages`, not streamed).
pub fn native(line: Map<String, Value>) -> Result<(Value, Option<String>), String> {
    let body = check_line(line)?;
    let model = match body.get("model") {
        None | Some(Value::Null) => None,
        Some(Value::String(m)) => Some(m.clone()),
        Some(other) => {
            return Err(format!(
                "body.model must be a string, got {}",
                kind_of(other)
            ));
        }
    };
    match body.get("messages") {
        Some(Value::Array(m)) if !m.is_empty() => {}
        Some(Value::Array(_)) => return Err("body.messages is empty".into()),
        Some(other) => {
            return Err(format!(
                "body.messages must be a list, got {}",
                kind_of(other)
            ));
        }
        None => return Err("missing body.messages".into()),
    }
    if body.get("stream") == Some(&Value::Bool(true)) {
        return Err("body.stream must be false: batch answers are not streamed".into());
    }
    Ok((Value::Object(body), model))
}

/// The request and the model named by one line (without `custom_id`).
pub fn convert(line: Map<String, Value>) -> Result<(Value, Option<String>), String> {
    body_to_request(check_line(line)?)
}

/// A line's `body`, once its method and URL are the one endpoint tally runs.
fn check_line(line: Map<String, Value>) -> Result<Map<String, Value>, String> {
    let mut line = Fields::new(line, "line");
    match line.string("method")? {
        Some(m) if m == "POST" => {}
        Some(m) => return Err(format!("method {m:?} is not supported: only POST")),
        None => return Err("missing method (POST)".into()),
    }
    match line.string("url")? {
        Some(u) if u == CHAT_COMPLETIONS => {}
        Some(u) => {
            return Err(format!(
                "url {u:?} is not supported: only {CHAT_COMPLETIONS} is converted"
            ));
        }
        None => return Err(format!("missing url ({CHAT_COMPLETIONS})")),
    }
    let body = object(line.take("body"), "body")?;
    line.finish(&[])?;
    Ok(body)
}

fn body_to_request(body: Map<String, Value>) -> Result<(Value, Option<String>), String> {
    let mut body = Fields::new(body, "body");
    let model = body.string("model")?;
    let mut req = Request::default();
    let messages = match body.take("messages") {
        Some(Value::Array(m)) if !m.is_empty() => m,
        Some(Value::Array(_)) => return Err("body.messages is empty".into()),
        Some(other) => {
            return Err(format!(
                "body.messages must be a list, got {}",
                kind_of(&other)
            ));
        }
        None => return Err("missing body.messages".into()),
    };
    for (i, m) in messages.into_iter().enumerate() {
        message(&mut req, m, i)?;
    }
    let max_tokens = body.count("max_tokens")?;
    let max_completion = body.count("max_completion_tokens")?;
    match (max_tokens, max_completion) {
        (Some(a), Some(b)) if a != b => {
            return Err(format!(
                "body.max_tokens ({a}) and body.max_completion_tokens ({b}) disagree"
            ));
        }
        (Some(n), _) | (None, Some(n)) => req.config("maxOutputTokens", json!(n)),
        (None, None) => {}
    }
    if let Some(t) = body.number("temperature")? {
        req.config("temperature", t);
    }
    if let Some(p) = body.number("top_p")? {
        req.config("topP", p);
    }
    if let Some(stop) = body.take("stop") {
        req.stop(stop, "body.stop")?;
    }
    if let Some(n) = body.count("n")? {
        req.config("candidateCount", json!(n));
    }
    if let Some(seed) = body.number("seed")? {
        req.config("seed", seed);
    }
    if let Some(p) = body.number("presence_penalty")? {
        req.config("presencePenalty", p);
    }
    if let Some(p) = body.number("frequency_penalty")? {
        req.config("frequencyPenalty", p);
    }
    if let Some(format) = body.take("response_format") {
        response_format(&mut req, format)?;
    }
    if body.boolean("stream")? == Some(true) {
        return Err("body.stream must be false: batch answers are not streamed".into());
    }
    body.ignore(&["user", "metadata", "store", "service_tier"]);
    body.finish(&UNSUPPORTED)?;
    Ok((req.build()?, model))
}

fn message(req: &mut Request, m: Value, i: usize) -> Result<(), String> {
    let what = format!("messages[{i}]");
    let Value::Object(m) = m else {
        return Err(format!("{what} must be an object, got {}", kind_of(&m)));
    };
    let mut m = Fields::new(m, what.clone());
    let role = m
        .string("role")?
        .ok_or_else(|| format!("{what} has no role"))?;
    let content = m.take("content");
    let refusal = m.take("refusal");
    m.finish(&[
        ("tool_calls", "tools and function calling are not converted"),
        (
            "function_call",
            "tools and function calling are not converted",
        ),
        (
            "tool_call_id",
            "tools and function calling are not converted",
        ),
        ("name", "Gemini turns have no participant names"),
        ("audio", "audio is not converted"),
    ])?;
    if refusal.is_some() {
        return Err(format!("{what}.refusal is not converted"));
    }
    let content = content.ok_or_else(|| format!("{what} has no content"))?;
    match role.as_str() {
        "system" | "developer" => {
            let parts = parts(content, &what, false)?;
            req.system(parts);
        }
        "user" => req.turn(Role::User, parts(content, &what, true)?),
        "assistant" => req.turn(Role::Model, parts(content, &what, false)?),
        "tool" | "function" => {
            return Err(format!(
                "{what}: role {role:?} cannot be converted (tools and function calling are not converted)"
            ));
        }
        other => return Err(format!("{what}: unknown role {other:?}")),
    }
    Ok(())
}

/// Content (a string, or a list of parts) → Gemini parts. Images only where
/// `images` (user turns).
fn parts(content: Value, what: &str, images: bool) -> Result<Vec<Value>, String> {
    let names = ContentNames {
        field: ".content",
        list: "parts",
        ignored: &[],
    };
    content_parts(content, what, &names, |kind, item, pwhat| match kind {
        "image_url" if images => {
            let mut image = Fields::new(object(item.take("image_url"), pwhat)?, pwhat);
            let url = image.string("url")?.unwrap_or_default();
            image.ignore(&["detail"]);
            image.finish(&[])?;
            let (mime, data) = gemini::parse_data_url(&url).ok_or_else(|| {
                format!(
                    "{pwhat}: only base64 data: URLs are converted (Gemini batch requests cannot fetch remote images)"
                )
            })?;
            gemini::inline_part(mime, data, pwhat)
        }
        other => Err(format!(
            "{pwhat}: part type {other:?} cannot be converted here"
        )),
    })
}

fn response_format(req: &mut Request, format: Value) -> Result<(), String> {
    let Value::Object(format) = format else {
        return Err("body.response_format must be an object".into());
    };
    let mut format = Fields::new(format, "body.response_format");
    let kind = format.string("type")?.unwrap_or_default();
    match kind.as_str() {
        "text" => {}
        "json_object" => req.config("responseMimeType", json!("application/json")),
        "json_schema" => {
            let mut spec = Fields::new(
                object(
                    format.take("json_schema"),
                    "body.response_format.json_schema",
                )?,
                "body.response_format.json_schema",
            );
            let schema = match spec.take("schema") {
                Some(s @ Value::Object(_)) => s,
                Some(_) => {
                    return Err("body.response_format.json_schema.schema must be an object".into());
                }
                None => return Err("missing body.response_format.json_schema.schema".into()),
            };
            spec.ignore(&["name", "description", "strict"]);
            spec.finish(&[])?;
            req.config("responseMimeType", json!("application/json"));
            req.config("responseJsonSchema", schema);
        }
        other => {
            return Err(format!(
                "body.response_format.type {other:?} is not one of text, json_object, json_schema"
            ));
        }
    }
    format.finish(&[])
}
