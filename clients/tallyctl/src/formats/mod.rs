//! Batch files in other tools' formats → tally rows. Pure: one line of text
//! in, one converted row (or the reason it cannot be converted) out, so the
//! same table of test vectors (`tests/vectors/formats.json`) checks this and
//! the Python client.
//!
//! - [`openai`]: OpenAI batch input lines (`custom_id`, `method`, `url`,
//!   `body`), the format OpenAI, vLLM, SGLang, LiteLLM, Together and Groq
//!   accept;
//! - [`anthropic`]: Anthropic Message Batches requests (`custom_id`,
//!   `params`);
//! - [`gemini`]: the `GenerateContentRequest` both are converted to, which
//!   the row carries as its payload (the worker sends a payload holding
//!   `contents` as it is; see `clients/worker/src/provider/gemini/request.rs`).
//!
//! The conversion lives in tallyctl, not in tally-client: it is a file
//! format of the command line (like [`crate::jsonl`]), not a call of the
//! API, and keeping it here adds no dependency to the client library. The
//! Python client has its own implementation, held to the same vectors.
//!
//! A line's model goes with the row when it names a Gemini model
//! (`gemini-…`, `gemma-…`, optionally `models/…`); any other model (`gpt-4o`,
//! `claude-…`) is dropped, the row takes the ledger's model, and the
//! converted row says which model was dropped so the caller can say so.
//!
//! When the ledger's model runs at an OpenAI-shaped provider (OpenAI, or a
//! named OpenAI-compatible server: [`Target`]), OpenAI lines are not
//! converted: each row carries its request as written ([`openai::native`]),
//! and a line's model names a model of that provider. Anthropic lines for
//! such a ledger are refused: no conversion to OpenAI's shape is exact
//! enough to be made silently. Likewise, when the ledger's model is
//! Anthropic's, Anthropic lines keep their `params` as written
//! ([`anthropic::native`]) and OpenAI lines are refused.

pub mod anthropic;
pub mod gemini;
pub mod openai;

use clap::ValueEnum;
use serde_json::{Map, Value};
use tally_core::keys::validate_key;
use tally_core::payload::validate_object;

/// The format of an enroll file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum InputFormat {
    /// tally's own JSONL (`key`, `payload`, `depends_on`, `prompt`, `model`).
    #[default]
    Tally,
    /// OpenAI batch input (`custom_id`, `method`, `url`, `body`).
    Openai,
    /// Anthropic Message Batches requests (`custom_id`, `params`).
    Anthropic,
}

/// One converted line.
#[derive(Debug, Clone, PartialEq)]
pub struct Converted {
    /// The `custom_id`, checked against tally's key rules.
    pub key: String,
    /// The Gemini `GenerateContentRequest`, as the payload's JSON text
    /// (canonical: keys sorted, no spaces, so re-enrolling the same file is
    /// ALREADY_PRESENT).
    pub payload: String,
    /// The row's model: the line's, when it names a Gemini model; empty for
    /// the ledger's.
    pub model: String,
    /// The line's model when it was not a Gemini model (and so dropped).
    pub dropped_model: Option<String>,
}

/// Where the rows of a file will run: the ledger's model's provider, the
/// API it speaks, and the model's name there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub provider: String,
    pub api: Option<tally_core::provider::Api>,
    pub model: String,
}

impl Target {
    /// The target of a ledger whose model is `ledger_model`.
    pub fn of(ledger_model: &str) -> Target {
        let r = tally_core::provider::route(ledger_model);
        Target {
            provider: r.provider.to_owned(),
            api: r.api(),
            model: r.model.to_owned(),
        }
    }

    /// The request shape the provider takes where rows keep their own
    /// request: OpenAI's (OpenAI itself, or a named server: tally speaks to
    /// named servers as OpenAI-shaped) or Anthropic's; `None` for Gemini,
    /// to which lines are converted.
    fn native(&self) -> Option<InputFormat> {
        match self.api {
            Some(tally_core::provider::Api::OpenAi) | None => Some(InputFormat::Openai),
            Some(tally_core::provider::Api::Anthropic) => Some(InputFormat::Anthropic),
            Some(tally_core::provider::Api::Gemini) => None,
        }
    }

    /// The row model for a line naming `model`: the ledger's (empty) when
    /// it names the ledger's own, the name as it is when it routes to this
    /// provider, else the name under this provider (`vllm/…`).
    fn row_model(&self, model: Option<String>) -> String {
        match model {
            None => String::new(),
            Some(m) if m == self.model => String::new(),
            Some(m) if tally_core::provider::provider_of(&m) == self.provider => m,
            Some(m) => format!("{}/{m}", self.provider),
        }
    }
}

/// Converts one non-blank line of an `openai` or `anthropic` file. The
/// error says what is wrong, without the line number (the caller adds it).
pub fn convert(format: InputFormat, text: &str) -> Result<Converted, String> {
    convert_for(format, text, &Target::of("gemini-2.5-flash"))
}

/// [`convert`] for rows that will run at `target`.
pub fn convert_for(format: InputFormat, text: &str, target: &Target) -> Result<Converted, String> {
    let line: Value =
        serde_json::from_str(text).map_err(|e| format!("not a valid JSON line: {e}"))?;
    let Value::Object(mut line) = line else {
        return Err(format!(
            "a line must be a JSON object, got {}",
            kind_of(&line)
        ));
    };
    let key = match line.remove("custom_id") {
        Some(Value::String(k)) => k,
        Some(other) => {
            return Err(format!(
                "custom_id must be a string, got {}",
                kind_of(&other)
            ));
        }
        None => return Err("missing custom_id".into()),
    };
    validate_key(&key).map_err(|e| format!("custom_id {key:?} is not a valid tally key: {e}"))?;
    let shape = target.native();
    let native = shape.is_some();
    let (request, model) = match (format, shape) {
        (InputFormat::Tally, _) => return Err("tally lines are read by jsonl::parse_line".into()),
        (InputFormat::Openai, Some(InputFormat::Openai)) => openai::native(line)?,
        (InputFormat::Anthropic, Some(InputFormat::Anthropic)) => anthropic::native(line)?,
        (InputFormat::Anthropic, Some(_)) => {
            return Err(format!(
                "an Anthropic request cannot run at {} (the ledger's model): enroll it into a ledger of a Gemini or Anthropic model, or write OpenAI lines",
                target.provider
            ));
        }
        (InputFormat::Openai, Some(_)) => {
            return Err(format!(
                "an OpenAI request cannot run at {} (the ledger's model): enroll it into a ledger of a Gemini or OpenAI model, or write Anthropic lines",
                target.provider
            ));
        }
        (InputFormat::Openai, None) => openai::convert(line)?,
        (InputFormat::Anthropic, None) => anthropic::convert(line)?,
    };
    let payload = serde_json::to_string(&request).map_err(|e| e.to_string())?;
    validate_object(&payload).map_err(|e| format!("converted request: {e}"))?;
    if native {
        return Ok(Converted {
            key,
            payload,
            model: target.row_model(model),
            dropped_model: None,
        });
    }
    let (model, dropped_model) = match model {
        None => (String::new(), None),
        Some(m) => match gemini_model(&m) {
            Some(g) => (g.to_string(), None),
            None => (String::new(), Some(m)),
        },
    };
    Ok(Converted {
        key,
        payload,
        model,
        dropped_model,
    })
}

/// The Gemini model a name denotes (`models/` stripped), if it is one.
pub fn gemini_model(name: &str) -> Option<&str> {
    let bare = name.strip_prefix("models/").unwrap_or(name);
    (bare.starts_with("gemini-") || bare.starts_with("gemma-")).then_some(bare)
}

pub(crate) fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Field-by-field reading of a JSON object: each known field is taken
/// (null counts as absent), and whatever is left at the end is an error, so
/// nothing the converter does not understand is silently dropped.
pub(crate) struct Fields {
    map: Map<String, Value>,
    /// What the object is called in messages (`body`, `params`, `messages[2]`).
    what: String,
}

impl Fields {
    pub fn new(map: Map<String, Value>, what: impl Into<String>) -> Self {
        Self {
            map,
            what: what.into(),
        }
    }

    /// The field, if present and not null.
    pub fn take(&mut self, name: &str) -> Option<Value> {
        self.map.remove(name).filter(|v| !v.is_null())
    }

    pub fn string(&mut self, name: &str) -> Result<Option<String>, String> {
        match self.take(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(format!(
                "{}.{name} must be a string, got {}",
                self.what,
                kind_of(&other)
            )),
        }
    }

    pub fn number(&mut self, name: &str) -> Result<Option<Value>, String> {
        match self.take(name) {
            None => Ok(None),
            Some(v @ Value::Number(_)) => Ok(Some(v)),
            Some(other) => Err(format!(
                "{}.{name} must be a number, got {}",
                self.what,
                kind_of(&other)
            )),
        }
    }

    /// A whole number of at least 1.
    pub fn count(&mut self, name: &str) -> Result<Option<u64>, String> {
        match self.take(name) {
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(n) if n >= 1 => Ok(Some(n)),
                _ => Err(format!(
                    "{}.{name} must be a whole number of at least 1, got {v}",
                    self.what
                )),
            },
        }
    }

    pub fn boolean(&mut self, name: &str) -> Result<Option<bool>, String> {
        match self.take(name) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(b)),
            Some(other) => Err(format!(
                "{}.{name} must be a boolean, got {}",
                self.what,
                kind_of(&other)
            )),
        }
    }

    /// Drops fields that do not change the answer (user ids, metadata).
    pub fn ignore(&mut self, names: &[&str]) {
        for n in names {
            self.map.remove(*n);
        }
    }

    /// Refuses any field left: a listed one with its reason, any other as
    /// unknown.
    pub fn finish(self, unsupported: &[(&str, &str)]) -> Result<(), String> {
        let Some(name) = self.map.keys().next() else {
            return Ok(());
        };
        match unsupported.iter().find(|(n, _)| n == name) {
            Some((_, why)) => Err(format!(
                "{}.{name} cannot be converted to a Gemini request ({why})",
                self.what
            )),
            None => Err(format!("{}.{name} is not a known field", self.what)),
        }
    }
}

/// The object under `name`, required.
pub(crate) fn object(v: Option<Value>, what: &str) -> Result<Map<String, Value>, String> {
    match v {
        Some(Value::Object(m)) => Ok(m),
        Some(other) => Err(format!(
            "{what} must be a JSON object, got {}",
            kind_of(&other)
        )),
        None => Err(format!("missing {what}")),
    }
}

#[cfg(test)]
mod vectors;

/// How a format names its content in errors: `{what}{field} is empty`,
/// `… must be a string or a list of {list}`.
struct ContentNames {
    /// `.content` (OpenAI) or ` content` (Anthropic).
    pub field: &'static str,
    /// `parts` or `blocks`.
    pub list: &'static str,
    /// Fields of an item dropped without conversion.
    pub ignored: &'static [&'static str],
}

/// Content (a string, or a non-empty list of typed items) → Gemini parts:
/// a string and `text` items here, any other item type by `other(kind,
/// item, what)`, which answers its part or why it cannot be converted.
fn content_parts(
    content: Value,
    what: &str,
    names: &ContentNames,
    mut other: impl FnMut(&str, &mut Fields, &str) -> Result<Value, String>,
) -> Result<Vec<Value>, String> {
    let field = names.field;
    let items = match content {
        Value::String(s) => {
            return Ok(vec![gemini::text_part(s, &format!("{what}.content"))?]);
        }
        Value::Array(items) if !items.is_empty() => items,
        Value::Array(_) => return Err(format!("{what}{field} is empty")),
        other => {
            return Err(format!(
                "{what}{field} must be a string or a list of {}, got {}",
                names.list,
                kind_of(&other)
            ));
        }
    };
    let mut out = Vec::with_capacity(items.len());
    for (j, item) in items.into_iter().enumerate() {
        let iwhat = format!("{what}.content[{j}]");
        let Value::Object(item) = item else {
            return Err(format!("{iwhat} must be an object"));
        };
        let mut item = Fields::new(item, iwhat.clone());
        let kind = item.string("type")?.unwrap_or_default();
        let part = if kind == "text" {
            let text = item
                .string("text")?
                .ok_or_else(|| format!("{iwhat} has no text"))?;
            gemini::text_part(text, &format!("{iwhat}.text"))?
        } else {
            other(&kind, &mut item, &iwhat)?
        };
        item.ignore(names.ignored);
        item.finish(&[])?;
        out.push(part);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Invariant: for a ledger whose model runs at an OpenAI-shaped
    // provider, an OpenAI line is kept as written (never converted), and
    // its model is one of that provider's; an Anthropic line is refused.
    #[test]
    fn openai_lines_stay_as_written_for_openai_ledgers() {
        let line = r#"{"custom_id": "k1", "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}],
                     "logprobs": true, "tools": [{"type": "function", "function": {"name": "f"}}]}}"#;
        let openai = Target::of("gpt-4o-mini");
        let row = convert_for(InputFormat::Openai, line, &openai).unwrap();
        let payload: Value = serde_json::from_str(&row.payload).unwrap();
        assert_eq!(payload["logprobs"], true, "kept as written");
        assert!(payload["tools"].is_array());
        assert_eq!(row.model, "gpt-4o");
        assert_eq!(row.dropped_model, None);
        let same = line.replace("gpt-4o\"", "gpt-4o-mini\"");
        assert_eq!(
            convert_for(InputFormat::Openai, &same, &openai)
                .unwrap()
                .model,
            ""
        );
        let vllm = Target::of("vllm/meta-llama/Llama-3.1-8B-Instruct");
        let row = convert_for(InputFormat::Openai, line, &vllm).unwrap();
        assert_eq!(row.model, "vllm/gpt-4o");
        let streamed = line.replace("\"logprobs\": true", "\"stream\": true");
        assert!(
            convert_for(InputFormat::Openai, &streamed, &openai)
                .unwrap_err()
                .contains("stream")
        );
        let anthropic = r#"{"custom_id": "k1", "params": {"model": "claude-x", "max_tokens": 5,
            "messages": [{"role": "user", "content": "hi"}]}}"#;
        assert!(
            convert_for(InputFormat::Anthropic, anthropic, &openai)
                .unwrap_err()
                .contains("cannot run at openai")
        );
        // A Gemini ledger converts, as before, and refuses what Gemini
        // cannot take (the first such field is named).
        assert!(
            convert(InputFormat::Openai, line)
                .unwrap_err()
                .contains("body.logprobs cannot be converted")
        );
    }

    #[test]
    fn gemini_models_are_recognized_by_name() {
        assert_eq!(gemini_model("gemini-2.5-flash"), Some("gemini-2.5-flash"));
        assert_eq!(
            gemini_model("models/gemini-2.5-pro"),
            Some("gemini-2.5-pro")
        );
        assert_eq!(gemini_model("gemma-3-27b-it"), Some("gemma-3-27b-it"));
        assert_eq!(gemini_model("gpt-4o-mini"), None);
        assert_eq!(gemini_model("claude-sonnet-4-5"), None);
        assert_eq!(gemini_model("models/"), None);
    }

    /// Unknown fields are refused, so a mapping we lack is never silently
    /// dropped; fields that cannot map say why.
    #[test]
    fn leftover_fields_are_errors() {
        let mut f = Fields::new(
            serde_json::from_str(r#"{"a": 1, "tools": []}"#).unwrap(),
            "body",
        );
        assert_eq!(f.take("a"), Some(Value::from(1)));
        let e = f.finish(&[("tools", "function calling")]).unwrap_err();
        assert_eq!(
            e,
            "body.tools cannot be converted to a Gemini request (function calling)"
        );
        let f = Fields::new(serde_json::from_str(r#"{"zz": 1}"#).unwrap(), "params");
        assert_eq!(f.finish(&[]).unwrap_err(), "params.zz is not a known field");
    }
}
