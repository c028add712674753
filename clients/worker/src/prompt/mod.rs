//! A row's prompt, whatever the provider: the registered prompt as the
//! worker needs it ([`PromptSpec`]), its rendering (Jinja, via minijinja,
//! the row payload as variables), and why a row cannot become a request
//! ([`InputError`]). Each provider wraps the text in its own request
//! (`crate::provider`); [`chat`] is the one turn OpenAI's and Anthropic's
//! requests share. Pure: no I/O.

use minijinja::{Environment, UndefinedBehavior};
use serde_json::Value;

pub mod chat;

/// A registered prompt as the worker needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptSpec {
    pub template: String,
    /// The JSON Schema the answer must match, parsed.
    pub response_schema: Option<Value>,
    pub system_instruction: Option<String>,
    /// Template variables that are media references: sent as
    /// `{"media": …}` parts after the text, in this order (the provider's
    /// parts replace them when the batch is built: `crate::attach`).
    pub media: Vec<String>,
}

/// Why a row cannot be turned into a request. Every one of these is the
/// row's own fault (reported as invalid input), never a reason to retry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    #[error("payload is not a JSON object: {0}")]
    Payload(String),
    #[error("prompt template does not render: {0}")]
    Render(String),
    #[error("prompt's response schema is not valid JSON: {0}")]
    Schema(String),
    #[error("{0}")]
    Media(String),
    #[error("the row's request cannot be sent: {0}")]
    Request(String),
    #[error("request of {size} bytes is larger than the batch byte limit ({limit})")]
    TooLarge { size: usize, limit: usize },
    #[error(
        "request of about {tokens} input tokens is larger than the provider's enqueued-token limit for the model ({limit}): no batch can carry it"
    )]
    TooManyTokens { tokens: u64, limit: u64 },
}

impl PromptSpec {
    /// From the registry's fields (`response_schema` and
    /// `system_instruction` empty when unset).
    pub fn from_registry(
        template: &str,
        response_schema: &str,
        system_instruction: &str,
    ) -> Result<Self, InputError> {
        let response_schema = if response_schema.trim().is_empty() {
            None
        } else {
            Some(
                serde_json::from_str(response_schema)
                    .map_err(|e| InputError::Schema(e.to_string()))?,
            )
        };
        Ok(Self {
            template: template.to_string(),
            response_schema,
            system_instruction: Some(system_instruction.to_string()).filter(|s| !s.is_empty()),
            media: Vec::new(),
        })
    }
}

/// Renders `template` with the JSON object `vars`. Undefined variables are
/// errors: a prompt that silently loses a field would be paid for anyway.
pub fn render(template: &str, vars: &Value) -> Result<String, InputError> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.render_str(template, minijinja::Value::from_serialize(vars))
        .map_err(|e| InputError::Render(render_error(&e)))
}

fn render_error(e: &minijinja::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A missing variable is an error, not an empty string.
    #[test]
    fn an_undefined_variable_is_an_error() {
        assert!(matches!(
            render("Hello {{ name }}", &serde_json::json!({"other": 1})),
            Err(InputError::Render(_))
        ));
        assert_eq!(
            render("Hello {{ name }}", &serde_json::json!({"name": "x"})).unwrap(),
            "Hello x"
        );
        assert!(PromptSpec::from_registry("x", "{not json", "").is_err());
    }
}
