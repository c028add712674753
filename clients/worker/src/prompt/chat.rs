//! What OpenAI's and Anthropic's requests share: a row read as one chat
//! turn, and made into the provider's request. Pure.
//!
//! - A row with a prompt: the rendered template is the user message, with
//!   the prompt's media variables as `{"media": …}` content blocks after
//!   the text (replaced by `crate::attach`); the system instruction and
//!   the prompt's JSON Schema go with it.
//! - A row without a prompt: a payload with `messages` is the row's own
//!   request; another provider's request is refused; otherwise its
//!   `prompt` or `text` (or its JSON) is the user message, and a JSON
//!   object is asked for.

use serde_json::{Value, json};
use tally_core::provider::Api;

use super::{InputError, PromptSpec, render};

/// A row as one chat turn.
#[derive(Debug, Clone, PartialEq)]
pub enum Turn {
    /// The row's own request, as written (a payload with `messages`).
    Native(Value),
    /// One user message.
    User {
        /// A string, or text and media blocks.
        content: Value,
        system: Option<String>,
        /// The JSON Schema the answer must match.
        schema: Value,
    },
}

/// The schema a row that names none asks for: any JSON object.
fn any_object() -> Value {
    json!({"type": "object"})
}

/// The turn of one row bound for `api`'s provider.
pub fn turn(api: Api, payload: &str, prompt: Option<&PromptSpec>) -> Result<Turn, InputError> {
    let vars: Value =
        serde_json::from_str(payload).map_err(|e| InputError::Payload(e.to_string()))?;
    if !vars.is_object() {
        return Err(InputError::Payload("not an object".into()));
    }
    let Some(prompt) = prompt else {
        if let Some(why) = tally_core::provider::foreign_request(api, &vars) {
            return Err(InputError::Request(format!("the payload {why}")));
        }
        if vars.get("messages").is_some_and(Value::is_array) {
            return Ok(Turn::Native(vars));
        }
        let text = ["prompt", "text"]
            .iter()
            .find_map(|k| vars.get(*k).and_then(Value::as_str).map(str::to_owned))
            .unwrap_or_else(|| vars.to_string());
        return Ok(Turn::User {
            content: json!(text),
            system: None,
            schema: any_object(),
        });
    };
    let text = render(&prompt.template, &vars)?;
    let media = tally_core::media::variables(&vars, &prompt.media).map_err(InputError::Media)?;
    let content = if media.is_empty() {
        json!(text)
    } else {
        let mut blocks = vec![json!({"type": "text", "text": text})];
        blocks.extend(media.into_iter().map(
            |(_, m)| json!({"media": {"uri": m.uri, "sha256": m.sha256, "mime_type": m.mime_type}}),
        ));
        Value::Array(blocks)
    };
    Ok(Turn::User {
        content,
        system: prompt.system_instruction.clone(),
        schema: prompt.response_schema.clone().unwrap_or_else(any_object),
    })
}

/// The request of one row for `model` at `api`'s chat provider: the row's
/// own request (refused if it streams) with the job's model, then
/// `native`'s checks and defaults; else the request `user` makes of its one
/// user turn (`user(model, system, content, schema)`).
pub fn request(
    api: Api,
    payload: &str,
    prompt: Option<&PromptSpec>,
    model: &str,
    native: fn(Value) -> Result<Value, InputError>,
    user: fn(&str, Option<&str>, Value, &Value) -> Value,
) -> Result<Value, InputError> {
    match turn(api, payload, prompt)? {
        Turn::Native(mut request) => {
            refuse_stream(&request)?;
            request["model"] = json!(model);
            native(request)
        }
        Turn::User {
            content,
            system,
            schema,
        } => Ok(user(model, system.as_deref(), content, &schema)),
    }
}

/// Whether a native request streams (no batch takes one): the error to
/// refuse it with.
fn refuse_stream(request: &Value) -> Result<(), InputError> {
    if request.get("stream").and_then(Value::as_bool) == Some(true) {
        return Err(InputError::Request(
            "`stream` must be false: batch answers are not streamed".into(),
        ));
    }
    Ok(())
}

/// Whether a row's answer must be JSON: always with a prompt or without a
/// request of its own; for a native request, when `json_asked` says its
/// request asks for it.
pub fn asks_for_json(payload: &str, has_prompt: bool, json_asked: impl Fn(&Value) -> bool) -> bool {
    if has_prompt {
        return true;
    }
    let Ok(vars) = serde_json::from_str::<Value>(payload) else {
        return true;
    };
    if !vars.get("messages").is_some_and(Value::is_array) {
        return true;
    }
    json_asked(&vars)
}
