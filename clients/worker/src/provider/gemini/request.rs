//! A row's request in the Gemini Batch API's shape: a
//! `GenerateContentRequest`, and its JSONL line `{"key", "request"}`. Pure.
//!
//! - A row with a prompt: the rendered template is the user turn, asking
//!   for JSON (with the prompt's response schema when it has one), the
//!   prompt's media variables `{"media": …}` parts after the text (replaced
//!   by `crate::attach`).
//! - A row without a prompt carries the request itself: a payload with
//!   `contents` is sent as it is; otherwise its `prompt` or `text` string
//!   (or, failing those, the payload's JSON text) becomes the user turn.
//!
//! Media go inline (`inlineData`, base64) or, uploaded, by reference
//! (`fileData`, the file's URI).

use serde_json::{Value, json};
use tally_core::media::MediaRef;
use tally_core::provider::Api;

use crate::jsonl::LineShape;
use crate::prompt::{InputError, PromptSpec, render};
use crate::provider::wire::base64;

/// The `GenerateContentRequest` for one row: rendered with `prompt` when
/// the row has one, else taken from the payload (see the module docs).
pub fn build_request(payload: &str, prompt: Option<&PromptSpec>) -> Result<Value, InputError> {
    let vars: Value =
        serde_json::from_str(payload).map_err(|e| InputError::Payload(e.to_string()))?;
    if !vars.is_object() {
        return Err(InputError::Payload("not an object".into()));
    }
    let Some(prompt) = prompt else {
        if let Some(why) = tally_core::provider::foreign_request(Api::Gemini, &vars) {
            return Err(InputError::Request(format!("the payload {why}")));
        }
        if vars.get("contents").is_some_and(Value::is_array) {
            return Ok(vars);
        }
        let text = ["prompt", "text"]
            .iter()
            .find_map(|k| vars.get(*k).and_then(Value::as_str).map(str::to_owned))
            .unwrap_or_else(|| vars.to_string());
        return Ok(request(&text, None, None));
    };
    let text = render(&prompt.template, &vars)?;
    let mut req = request(
        &text,
        prompt.response_schema.as_ref(),
        prompt.system_instruction.as_deref(),
    );
    let media = tally_core::media::variables(&vars, &prompt.media).map_err(InputError::Media)?;
    if let Some(parts) = req["contents"][0]["parts"].as_array_mut() {
        for (_, m) in media {
            parts.push(
                json!({"media": {"uri": m.uri, "sha256": m.sha256, "mime_type": m.mime_type}}),
            );
        }
    }
    Ok(req)
}

/// Whether the request built for a row asks for JSON: always when the row
/// has a prompt or names only its text; for a row that carries its own
/// request, when that request's `generationConfig.responseMimeType` does.
pub fn asks_for_json(payload: &str, has_prompt: bool) -> bool {
    if has_prompt {
        return true;
    }
    let Ok(vars) = serde_json::from_str::<Value>(payload) else {
        return true;
    };
    if !vars.get("contents").is_some_and(Value::is_array) {
        return true;
    }
    vars.pointer("/generationConfig/responseMimeType")
        .and_then(Value::as_str)
        == Some("application/json")
}

/// The request for one row. The registry's schema is JSON Schema, so it
/// goes in `responseJsonSchema`: `responseSchema` is the provider's
/// OpenAPI-subset `Schema` and refuses `$ref`, `const`, type arrays and
/// other JSON Schema keywords.
fn request(text: &str, schema: Option<&Value>, system: Option<&str>) -> Value {
    let mut config = json!({"responseMimeType": "application/json"});
    if let Some(schema) = schema {
        config["responseJsonSchema"] = schema.clone();
    }
    let mut req = json!({
        "contents": [{"role": "user", "parts": [{"text": text}]}],
        "generationConfig": config,
    });
    if let Some(system) = system {
        req["systemInstruction"] = json!({"parts": [{"text": system}]});
    }
    req
}

/// Gemini's batch input line: `{"key": …, "request": …}`.
pub const LINE: LineShape = LineShape {
    id: "key",
    fixed: "",
    request: "request",
};

/// The inline part for a file's bytes.
pub fn inline_part(r: &MediaRef, bytes: &[u8]) -> Value {
    json!({"inlineData": {
        "mimeType": r.mime_type,
        "data": base64(bytes),
    }})
}

/// The part referencing an uploaded file.
pub fn file_part(r: &MediaRef, uri: &str) -> Value {
    json!({"fileData": {"mimeType": r.mime_type, "fileUri": uri}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_asked_for_unless_the_row_brings_a_request_without_it() {
        assert!(asks_for_json("{}", true));
        assert!(asks_for_json(r#"{"text": "hi"}"#, false));
        assert!(!asks_for_json(r#"{"contents": []}"#, false));
        assert!(asks_for_json(
            r#"{"contents": [], "generationConfig": {"responseMimeType": "application/json"}}"#,
            false
        ));
    }

    fn spec(template: &str, schema: &str) -> PromptSpec {
        PromptSpec::from_registry(template, schema, "").unwrap()
    }

    /// The rendered text is the template with the payload's variables, and
    /// the request asks for JSON matching the prompt's schema.
    #[test]
    fn a_prompt_is_rendered_with_the_payload_and_asks_for_its_schema() {
        let p = spec(
            "Summarize {{ title }}: {% for w in words %}{{ w }} {% endfor %}",
            r#"{"type": "object", "required": ["summary"]}"#,
        );
        let req = build_request(r#"{"title": "T", "words": ["a", "b"]}"#, Some(&p)).unwrap();
        assert_eq!(
            req["contents"][0]["parts"][0]["text"],
            json!("Summarize T: a b ")
        );
        assert_eq!(req["contents"][0]["role"], json!("user"));
        assert_eq!(
            req["generationConfig"]["responseMimeType"],
            json!("application/json")
        );
        assert_eq!(
            req["generationConfig"]["responseJsonSchema"]["required"],
            json!(["summary"])
        );
        assert!(req.get("systemInstruction").is_none());
    }

    /// A missing variable is an input error, not an empty string.
    #[test]
    fn an_undefined_variable_is_an_error() {
        let p = spec("Hello {{ name }}", "");
        assert!(matches!(
            build_request(r#"{"other": 1}"#, Some(&p)),
            Err(InputError::Render(_))
        ));
        assert!(matches!(
            build_request("[1]", Some(&p)),
            Err(InputError::Payload(_))
        ));
    }

    #[test]
    fn system_instruction_and_no_schema() {
        let p = PromptSpec::from_registry("x {{ a }}", "", "be terse").unwrap();
        let req = build_request(r#"{"a": 1}"#, Some(&p)).unwrap();
        assert_eq!(
            req["systemInstruction"]["parts"][0]["text"],
            json!("be terse")
        );
        assert!(req["generationConfig"].get("responseSchema").is_none());
        assert!(req["generationConfig"].get("responseJsonSchema").is_none());
        assert!(PromptSpec::from_registry("x", "{not json", "").is_err());
    }

    /// Without a prompt the payload is the request, or its text.
    #[test]
    fn rows_without_a_prompt_carry_their_request() {
        let verbatim = r#"{"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}"#;
        assert_eq!(
            build_request(verbatim, None).unwrap(),
            serde_json::from_str::<Value>(verbatim).unwrap()
        );
        let req = build_request(r#"{"text": "hello"}"#, None).unwrap();
        assert_eq!(req["contents"][0]["parts"][0]["text"], json!("hello"));
        let req = build_request(r#"{"n": 1}"#, None).unwrap();
        assert_eq!(req["contents"][0]["parts"][0]["text"], json!(r#"{"n":1}"#));
    }

    // Invariant: a prompt's media variables become `media` parts after the
    // text, in the declared order, checked; the text renders from the
    // other variables.
    #[test]
    fn media_variables_follow_the_text_as_parts() {
        const H: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
        let mut p = spec("Transcribe page {{ n }}.", "");
        p.media = vec!["page".into(), "cover".into()];
        let payload = json!({"n": 3, "page": {"uri": "b/3.png", "sha256": H},
                             "cover": {"uri": "b/c.jpg", "sha256": H}})
        .to_string();
        let req = build_request(&payload, Some(&p)).unwrap();
        let parts = req["contents"][0]["parts"].as_array().unwrap();
        assert_eq!(parts[0]["text"], "Transcribe page 3.");
        assert_eq!(parts[1]["media"]["uri"], "b/3.png");
        assert_eq!(parts[1]["media"]["mime_type"], "image/png");
        assert_eq!(parts[2]["media"]["mime_type"], "image/jpeg");
        let missing = build_request(&json!({"n": 1}).to_string(), Some(&p)).unwrap_err();
        assert!(
            missing.to_string().contains("`page` is missing"),
            "{missing}"
        );
    }
}
