//! OpenAI's Responses API as a synchronous lane (`POST /responses`, chosen
//! by `--openai-api responses`): a row's chat request made the Responses
//! request OpenAI documents, and a Response object read in chat
//! completions' words, so that one judge gives the same outcomes whichever
//! API answered. Pure.
//!
//! - Each message is an input item of its role (`system` and `developer`
//!   stay items, in their place); text parts are `input_text`, images
//!   `input_image`, files `input_file`; an assistant turn is its text.
//! - `response_format` is `text.format` (`json_schema` with its `name`,
//!   `schema`, `strict`), `max_completion_tokens` (or `max_tokens`)
//!   `max_output_tokens`, `reasoning_effort` `reasoning.effort`;
//!   `temperature`, `top_p` and the fields both APIs share go as they are.
//!   `store` is false unless the row says otherwise (chat completions'
//!   default; the Responses API would keep every answer).
//! - A field the Responses API has no place for (`stop`, `seed`, `tools`,
//!   `logprobs`, …) makes the row's request unsendable here: dropping it
//!   would send another request than the row's.
//! - A Response's text is its message items' `output_text` parts, joined;
//!   a `refusal` part is the refusal; `status: "incomplete"` ends as
//!   `length` (`max_output_tokens`) or `content_filter`, the finish
//!   reasons the classifier knows; `status: "failed"` is a provider error
//!   with the Response's `error`.

use serde_json::{Map, Value, json};
use tally_proto::v1 as pb;

use super::said::Said;
use crate::output::{str_at, truncate};

/// The endpoint, under the base URL (which holds `/v1`).
pub const PATH: &str = "/responses";

/// Chat fields the Responses request takes under the same name and shape.
const SAME: [&str; 9] = [
    "model",
    "temperature",
    "top_p",
    "store",
    "metadata",
    "user",
    "prompt_cache_key",
    "prompt_cache_retention",
    "safety_identifier",
];

/// The Responses request of a chat request, or why it has none.
pub fn request(chat: &Value) -> Result<Value, String> {
    let fields = chat
        .as_object()
        .ok_or_else(|| "the request is not a JSON object".to_owned())?;
    let mut out = Map::new();
    for (key, value) in fields.iter().filter(|(_, v)| !v.is_null()) {
        match key.as_str() {
            k if SAME.contains(&k) => {
                out.insert(key.clone(), value.clone());
            }
            "messages" => {
                let messages = value
                    .as_array()
                    .ok_or_else(|| "`messages` is not an array".to_owned())?;
                let items = messages.iter().map(item).collect::<Result<_, _>>()?;
                out.insert("input".into(), Value::Array(items));
            }
            "response_format" => {
                text_config(&mut out)?.insert("format".into(), format(value)?);
            }
            "verbosity" => {
                text_config(&mut out)?.insert("verbosity".into(), value.clone());
            }
            "max_completion_tokens" => {
                out.insert("max_output_tokens".into(), value.clone());
            }
            "max_tokens" if !fields.contains_key("max_completion_tokens") => {
                out.insert("max_output_tokens".into(), value.clone());
            }
            "max_tokens" => {}
            "reasoning_effort" => {
                out.insert("reasoning".into(), json!({"effort": value}));
            }
            // The lane sets the tier; one answer and no stream are what
            // a Responses call gives anyway.
            "service_tier" => {}
            "n" if value.as_u64() == Some(1) => {}
            "stream" if value == &Value::Bool(false) => {}
            other => return Err(no_place(&format!("`{other}`"))),
        }
    }
    out.entry("store").or_insert(Value::Bool(false));
    Ok(Value::Object(out))
}

fn no_place(what: &str) -> String {
    format!("the Responses API has no place for {what} (send it with --openai-api chat)")
}

/// The request's `text` object, made when first needed.
fn text_config(out: &mut Map<String, Value>) -> Result<&mut Map<String, Value>, String> {
    out.entry("text")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or_else(|| "`text` is not an object".to_owned())
}

/// `response_format` as `text.format`.
fn format(response_format: &Value) -> Result<Value, String> {
    match str_at(response_format, "type") {
        "json_schema" => {
            let spec = &response_format["json_schema"];
            let schema = spec
                .get("schema")
                .filter(|s| s.is_object())
                .ok_or_else(|| "a `json_schema` response format without its schema".to_owned())?;
            let mut f = json!({
                "type": "json_schema",
                "name": spec.get("name").cloned().unwrap_or_else(|| json!("answer")),
                "schema": schema,
            });
            for key in ["strict", "description"] {
                if let Some(v) = spec.get(key).filter(|v| !v.is_null()) {
                    f[key] = v.clone();
                }
            }
            Ok(f)
        }
        kind @ ("json_object" | "text") => Ok(json!({"type": kind})),
        other => Err(no_place(&format!("a `{other}` response format"))),
    }
}

/// One chat message as an input item.
fn item(message: &Value) -> Result<Value, String> {
    let role = str_at(message, "role");
    if !matches!(role, "system" | "developer" | "user" | "assistant") {
        return Err(no_place(&format!("a `{role}` message")));
    }
    let empty = |v: &Value| v.is_null() || v.as_array().is_some_and(Vec::is_empty);
    if let Some((key, _)) = message
        .as_object()
        .into_iter()
        .flatten()
        .find(|(k, v)| !matches!(k.as_str(), "role" | "content") && !empty(v))
    {
        return Err(no_place(&format!("a message's `{key}`")));
    }
    let content = match &message["content"] {
        Value::String(s) => json!(s),
        Value::Null => json!(""),
        // An assistant turn's parts would be output parts: its text says
        // the same.
        Value::Array(parts) if role == "assistant" => json!(
            parts
                .iter()
                .filter(|p| str_at(p, "type") == "text")
                .map(|p| str_at(p, "text"))
                .collect::<String>()
        ),
        Value::Array(parts) => Value::Array(parts.iter().map(part).collect::<Result<_, _>>()?),
        _ => return Err("a message's content is neither text nor parts".to_owned()),
    };
    Ok(json!({"type": "message", "role": role, "content": content}))
}

/// One content part of a user (or system) message as an input part.
fn part(p: &Value) -> Result<Value, String> {
    match str_at(p, "type") {
        "text" => Ok(json!({"type": "input_text", "text": str_at(p, "text")})),
        "image_url" => {
            let image = &p["image_url"];
            let detail = image.get("detail").filter(|d| !d.is_null());
            Ok(json!({
                "type": "input_image",
                "image_url": str_at(image, "url"),
                "detail": detail.cloned().unwrap_or_else(|| json!("auto")),
            }))
        }
        "file" => {
            let mut f = json!({"type": "input_file"});
            for key in ["file_data", "file_id", "filename"] {
                if let Some(v) = p["file"].get(key).filter(|v| !v.is_null()) {
                    f[key] = v.clone();
                }
            }
            Ok(f)
        }
        other => Err(no_place(&format!("a `{other}` content part"))),
    }
}

/// Whether a 2xx body is a Response (not a `ChatCompletion`).
pub fn is_response(body: &Value) -> bool {
    str_at(body, "object") == "response"
}

/// What a Response says, in chat completions' words; a failed Response is
/// the provider's error.
// The failure is the outcome itself (built once per row).
#[allow(clippy::result_large_err)]
pub(super) fn said(body: &Value) -> Result<Said, pb::Failure> {
    let finish = match str_at(body, "status") {
        "completed" => "stop",
        "incomplete" => match body.pointer("/incomplete_details/reason") {
            Some(Value::String(r)) if r == "max_output_tokens" => "length",
            Some(Value::String(r)) if r == "content_filter" => "content_filter",
            _ => "incomplete",
        },
        "failed" => {
            let error = &body["error"];
            return Err(pb::Failure {
                kind: pb::FailureKind::ProviderError as i32,
                status: str_at(error, "code").to_owned(),
                message: truncate(str_at(error, "message")),
                ..Default::default()
            });
        }
        // `in_progress`, `queued`, `cancelled`: no answer (yet).
        other => other,
    };
    let mut said = Said {
        finish: finish.to_owned(),
        ..Default::default()
    };
    let messages = body["output"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|o| str_at(o, "type") == "message");
    for part in messages.flat_map(|m| m["content"].as_array().into_iter().flatten()) {
        match str_at(part, "type") {
            "output_text" => said.text.push_str(str_at(part, "text")),
            "refusal" => {
                let r = said.refusal.get_or_insert_with(String::new);
                r.push_str(str_at(part, "refusal"));
            }
            _ => {}
        }
    }
    Ok(said)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Invariant: a rendered row (system, text and an image, a schema) and
    // a native one's settings become the documented Responses request.
    #[test]
    fn a_chat_request_becomes_a_responses_request() {
        let chat = json!({
            "model": "gpt-4o-mini",
            "messages": [
                {"role": "system", "content": "be terse"},
                {"role": "user", "content": [
                    {"type": "text", "text": "Summarize x"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}},
                    {"type": "file", "file": {"filename": "a.pdf", "file_data": "data:application/pdf;base64,AA=="}},
                ]},
                {"role": "assistant", "content": [{"type": "text", "text": "ok"}], "refusal": null},
            ],
            "response_format": {"type": "json_schema",
                "json_schema": {"name": "answer", "strict": true, "schema": {"type": "object"}}},
            "max_tokens": 10,
            "max_completion_tokens": 50,
            "temperature": 0.2,
            "top_p": 0.9,
            "reasoning_effort": "low",
            "service_tier": "flex",
            "n": 1,
        });
        let r = request(&chat).unwrap();
        assert_eq!(
            r,
            json!({
                "model": "gpt-4o-mini",
                "input": [
                    {"type": "message", "role": "system", "content": "be terse"},
                    {"type": "message", "role": "user", "content": [
                        {"type": "input_text", "text": "Summarize x"},
                        {"type": "input_image", "image_url": "data:image/png;base64,AA==", "detail": "auto"},
                        {"type": "input_file", "filename": "a.pdf", "file_data": "data:application/pdf;base64,AA=="},
                    ]},
                    {"type": "message", "role": "assistant", "content": "ok"},
                ],
                "text": {"format": {"type": "json_schema", "name": "answer", "strict": true,
                    "schema": {"type": "object"}}},
                "max_output_tokens": 50,
                "temperature": 0.2,
                "top_p": 0.9,
                "reasoning": {"effort": "low"},
                "store": false,
            })
        );
        let short = request(&json!({"messages": [], "max_tokens": 7, "store": true})).unwrap();
        assert_eq!(
            (short["max_output_tokens"].as_u64(), &short["store"]),
            (Some(7), &json!(true))
        );
        assert_eq!(
            request(&json!({"response_format": {"type": "json_object"}})).unwrap()["text"],
            json!({"format": {"type": "json_object"}})
        );
    }

    // Invariant: what the Responses API cannot say is refused, never
    // dropped.
    #[test]
    fn what_has_no_place_is_refused() {
        for chat in [
            json!({"messages": [], "stop": ["\n"]}),
            json!({"messages": [], "n": 2}),
            json!({"messages": [{"role": "tool", "content": "x", "tool_call_id": "c"}]}),
            json!({"messages": [{"role": "user", "content": "x", "name": "bob"}]}),
            json!({"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]}),
            json!({"messages": [], "response_format": {"type": "json_schema", "json_schema": {"name": "a"}}}),
        ] {
            let why = request(&chat).unwrap_err();
            assert!(
                why.contains("Responses API") || why.contains("schema"),
                "{why}"
            );
        }
    }

    fn response(status: &str, reason: Option<&str>, content: Value) -> Value {
        json!({
            "id": "resp_1", "object": "response", "status": status,
            "incomplete_details": reason.map(|r| json!({"reason": r})),
            "output": [
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                 "content": content},
            ],
            "usage": {"input_tokens": 20, "input_tokens_details": {"cached_tokens": 4, "cache_write_tokens": 0},
                      "output_tokens": 9, "output_tokens_details": {"reasoning_tokens": 5},
                      "total_tokens": 29},
            "service_tier": "flex",
        })
    }

    fn text(t: &str) -> Value {
        json!({"type": "output_text", "text": t, "annotations": []})
    }

    // Invariant: a Response reads as the chat answer it would have been:
    // its text, `stop`/`length`/`content_filter`, its refusal, its usage
    // split as tally prices it; a failed one is the provider's error.
    #[test]
    fn a_response_reads_in_chat_words() {
        let done = response("completed", None, json!([text("{\"a\":"), text(" 1}")]));
        assert!(is_response(&done));
        assert_eq!(
            said(&done).unwrap(),
            Said {
                text: "{\"a\": 1}".into(),
                finish: "stop".into(),
                refusal: None
            }
        );
        let cut = response(
            "incomplete",
            Some("max_output_tokens"),
            json!([text("{\"a\"")]),
        );
        assert_eq!(said(&cut).unwrap().finish, "length");
        let filtered = response("incomplete", Some("content_filter"), json!([]));
        assert_eq!(said(&filtered).unwrap().finish, "content_filter");
        let refused = response(
            "completed",
            None,
            json!([{"type": "refusal", "refusal": "I can't help"}]),
        );
        assert_eq!(
            said(&refused).unwrap().refusal.as_deref(),
            Some("I can't help")
        );
        let failed = json!({"object": "response", "status": "failed",
            "error": {"code": "server_error", "message": "boom"}});
        let f = said(&failed).unwrap_err();
        assert_eq!(
            (f.status.as_str(), f.message.as_str()),
            ("server_error", "boom")
        );
        assert_eq!(
            crate::provider::openai::said::usage(
                &done["usage"],
                &crate::provider::openai::said::RESPONSE_USAGE
            ),
            pb::Usage {
                input_tokens: 20,
                output_tokens: 4,
                thinking_tokens: 5,
                cached_tokens: 4,
                cache_write_tokens: 0,
            }
        );
        assert!(!is_response(&json!({"object": "chat.completion"})));
    }
}
