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

/// A dependency's result as a row's prompt reads it.
#[derive(Debug, Clone, Copy)]
pub struct DependencyInput<'a> {
    pub key: &'a str,
    /// The name the row gave it ("" for none).
    pub name: &'a str,
    pub result: &'a str,
}

/// The variable a row's dependency results are rendered as.
pub const DEPS: &str = "deps";

/// `payload` (a JSON object) with its dependencies' results added as
/// [`DEPS`]: each result (parsed as JSON, or as text when it is not) under
/// its key and, when it has one, its name (a name wins over a key it
/// shadows). A payload that has a `deps` field of its own is refused: the
/// template could not tell the two apart.
pub fn with_dependencies(
    payload: &str,
    deps: &[DependencyInput<'_>],
) -> Result<String, InputError> {
    let mut vars: serde_json::Map<String, Value> =
        serde_json::from_str(payload).map_err(|e| InputError::Payload(e.to_string()))?;
    if vars.contains_key(DEPS) {
        return Err(InputError::Payload(format!(
            "the payload's {DEPS:?} field is reserved for the row's dependency results"
        )));
    }
    let mut by = serde_json::Map::new();
    for d in deps {
        let value = serde_json::from_str(d.result).unwrap_or_else(|_| Value::from(d.result));
        by.insert(d.key.to_owned(), value);
    }
    for d in deps.iter().filter(|d| !d.name.is_empty()) {
        let value = by[d.key].clone();
        by.insert(d.name.to_owned(), value);
    }
    vars.insert(DEPS.to_owned(), Value::Object(by));
    serde_json::to_string(&vars).map_err(|e| InputError::Payload(e.to_string()))
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

    /// A dependant's template reads each dependency's answer by name and
    /// by key, JSON answers as structures; a payload's own `deps` field
    /// is refused rather than silently replaced.
    #[test]
    fn dependency_results_render_by_name_and_key() {
        let deps = [
            DependencyInput {
                key: "book1:p1",
                name: "previous",
                result: r#"{"summary":"the storm"}"#,
            },
            DependencyInput {
                key: "glossary",
                name: "",
                result: "plain text",
            },
        ];
        let vars = with_dependencies(r#"{"page":2}"#, &deps).unwrap();
        let vars: Value = serde_json::from_str(&vars).unwrap();
        let text = render(
            "p{{ page }} after {{ deps.previous.summary }} / {{ deps['book1:p1'].summary }} / {{ deps.glossary }}",
            &vars,
        )
        .unwrap();
        assert_eq!(text, "p2 after the storm / the storm / plain text");
        assert!(matches!(
            with_dependencies(r#"{"deps":1}"#, &deps),
            Err(InputError::Payload(_))
        ));
    }
}
