//! The Gemini `GenerateContentRequest` that converted lines become: turns
//! (`contents`), the system instruction and `generationConfig`, with the
//! checks both source formats share.

use serde_json::{Map, Value, json};

/// Most stop sequences Gemini accepts.
pub const MAX_STOP_SEQUENCES: usize = 5;

/// A request being built.
#[derive(Debug, Default)]
pub struct Request {
    system: Vec<Value>,
    contents: Vec<Value>,
    config: Map<String, Value>,
}

/// Who speaks a turn, in Gemini's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    User,
    Model,
}

impl Request {
    /// System text parts, in order (several system messages become several
    /// parts of the one system instruction).
    pub fn system(&mut self, parts: Vec<Value>) {
        self.system.extend(parts);
    }

    pub fn turn(&mut self, role: Role, parts: Vec<Value>) {
        let role = match role {
            Role::User => "user",
            Role::Model => "model",
        };
        self.contents.push(json!({"role": role, "parts": parts}));
    }

    /// Sets a `generationConfig` field.
    pub fn config(&mut self, name: &str, value: Value) {
        self.config.insert(name.to_string(), value);
    }

    /// `stopSequences` from one string or a list of strings.
    pub fn stop(&mut self, stop: Value, what: &str) -> Result<(), String> {
        let list = match stop {
            Value::String(s) => vec![Value::String(s)],
            Value::Array(items) if items.iter().all(Value::is_string) => items,
            _ => return Err(format!("{what} must be a string or a list of strings")),
        };
        if list.len() > MAX_STOP_SEQUENCES {
            return Err(format!(
                "{what} has {} sequences; Gemini accepts at most {MAX_STOP_SEQUENCES}",
                list.len()
            ));
        }
        if !list.is_empty() {
            self.config("stopSequences", Value::Array(list));
        }
        Ok(())
    }

    /// The request; an error when there is no turn to answer.
    pub fn build(self) -> Result<Value, String> {
        if self.contents.is_empty() {
            return Err("no user or assistant message to send".into());
        }
        let mut req = json!({"contents": self.contents});
        if !self.system.is_empty() {
            req["systemInstruction"] = json!({"parts": self.system});
        }
        if !self.config.is_empty() {
            req["generationConfig"] = Value::Object(self.config);
        }
        Ok(req)
    }
}

/// A text part; empty text is refused (Gemini rejects empty parts).
pub fn text_part(text: String, what: &str) -> Result<Value, String> {
    if text.is_empty() {
        return Err(format!("{what} is empty"));
    }
    Ok(json!({"text": text}))
}

/// An inline image part from its MIME type and base64 data.
pub fn inline_part(mime: &str, data: &str, what: &str) -> Result<Value, String> {
    if !mime.starts_with("image/") || data.is_empty() {
        return Err(format!(
            "{what} must be base64 image data with an image/* type"
        ));
    }
    Ok(json!({"inlineData": {"mimeType": mime, "data": data}}))
}

/// `data:image/png;base64,AAAA` → (`image/png`, `AAAA`).
pub fn parse_data_url(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("data:")?;
    let (meta, data) = rest.split_once(',')?;
    let mime = meta.strip_suffix(";base64")?;
    Some((mime, data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_urls_split_into_type_and_data() {
        assert_eq!(
            parse_data_url("data:image/png;base64,iVBO"),
            Some(("image/png", "iVBO"))
        );
        assert_eq!(parse_data_url("https://x/y.png"), None);
        assert_eq!(parse_data_url("data:image/png,raw"), None);
    }

    /// A request needs at least one turn; system text alone is not one.
    #[test]
    fn a_request_without_turns_is_refused() {
        let mut r = Request::default();
        r.system(vec![json!({"text": "be brief"})]);
        assert!(r.build().unwrap_err().contains("no user or assistant"));
    }
}
