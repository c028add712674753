//! Pure batch processing: parsing the input (a JSONL file or inline
//! requests), answering one request (a `GenerateContentResponse`, an
//! embedding, or an error line, per the row's fault verdict), and assembling
//! the output: JSONL in a seeded, non-input order, or inlined responses in
//! request order.

use serde_json::{Value, json};

use crate::error::{error_object, grpc_code};
use crate::faults::RowVerdict;
use crate::ids::shuffled;
use crate::kind::BatchKind;
use crate::schema_instance::{instance, prompt_words};
use crate::stats::Outcome;

/// One request: a JSONL line `{"key": "...", "request": {...}}`, or an
/// inline request `{"request": {...}, "metadata": {...}}` (its key is
/// `metadata.key` if that is a string, else its 1-based position).
#[derive(Debug, Clone, PartialEq)]
pub struct InputRow {
    pub key: String,
    pub request: Value,
    /// `Some` for an inline request: the metadata echoed on its response.
    pub inline: Option<Inline>,
}

/// What an inline request's response echoes.
#[derive(Debug, Clone, PartialEq)]
pub struct Inline {
    pub metadata: Option<Value>,
}

/// How answers are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Style {
    pub kind: BatchKind,
    /// Per-line errors as `google.rpc.Status` (gRPC canonical `code`, no
    /// `status`), as the provider writes them; otherwise the REST error
    /// shape (HTTP `code` plus `status`).
    pub grpc_errors: bool,
    /// The model behind the alias changed (fault `model_change`): answers
    /// differ from the same request's before the change.
    pub changed_model: bool,
}

/// Why an input file was refused (answered 400 INVALID_ARGUMENT).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    #[error("input file is not UTF-8")]
    NotUtf8,
    #[error("input file has no requests")]
    Empty,
    #[error("input line {line}: not a JSON object: {reason}")]
    NotJson { line: usize, reason: String },
    #[error("input line {line}: missing string field `key`")]
    MissingKey { line: usize },
    #[error("input line {line}: missing object field `request`")]
    MissingRequest { line: usize },
    #[error("input line {line}: request has no `contents`")]
    MissingContents { line: usize },
    #[error("input line {line}: embedding request has no `content`")]
    MissingContent { line: usize },
    #[error("inline requests: `inputConfig.requests.requests` must be a non-empty list")]
    InlineShape,
    #[error("input line {line}: duplicate key `{key}`")]
    DuplicateKey { line: usize, key: String },
}

/// Checks that a request has what its kind needs (`contents` for
/// generation, `content` for embeddings).
fn check_request(request: &Value, kind: BatchKind, line: usize) -> Result<(), InputError> {
    match kind {
        BatchKind::Generate if !request.get("contents").is_some_and(Value::is_array) => {
            Err(InputError::MissingContents { line })
        }
        BatchKind::Embed if !request.get("content").is_some_and(Value::is_object) => {
            Err(InputError::MissingContent { line })
        }
        BatchKind::Generate | BatchKind::Embed => Ok(()),
    }
}

/// Parses inline requests (`inputConfig.requests`: `{"requests": [...]}`).
pub fn parse_inline(requests: &Value, kind: BatchKind) -> Result<Vec<InputRow>, InputError> {
    let list = requests
        .get("requests")
        .and_then(Value::as_array)
        .filter(|l| !l.is_empty())
        .ok_or(InputError::InlineShape)?;
    let mut rows = Vec::with_capacity(list.len());
    for (index, item) in list.iter().enumerate() {
        let line = index + 1;
        let request = match item.get("request") {
            Some(r @ Value::Object(_)) => r.clone(),
            _ => return Err(InputError::MissingRequest { line }),
        };
        check_request(&request, kind, line)?;
        let metadata = item.get("metadata").cloned();
        let key = metadata
            .as_ref()
            .and_then(|m| m.get("key"))
            .and_then(Value::as_str)
            .map_or_else(|| line.to_string(), str::to_owned);
        rows.push(InputRow {
            key,
            request,
            inline: Some(Inline { metadata }),
        });
    }
    Ok(rows)
}

/// Parses a JSONL input file. Blank lines are skipped; every other line must
/// hold a key and a request with contents. Duplicate keys are refused (the
/// real API tolerates them; refusing catches a client bug early).
pub fn parse_input(bytes: &[u8], kind: BatchKind) -> Result<Vec<InputRow>, InputError> {
    let text = std::str::from_utf8(bytes).map_err(|_| InputError::NotUtf8)?;
    let mut rows = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let value: Value = serde_json::from_str(raw).map_err(|e| InputError::NotJson {
            line,
            reason: e.to_string(),
        })?;
        let Value::Object(mut obj) = value else {
            return Err(InputError::NotJson {
                line,
                reason: "not an object".to_owned(),
            });
        };
        let key = match obj.remove("key") {
            Some(Value::String(k)) if !k.is_empty() => k,
            _ => return Err(InputError::MissingKey { line }),
        };
        let request = match obj.remove("request") {
            Some(r @ Value::Object(_)) => r,
            _ => return Err(InputError::MissingRequest { line }),
        };
        check_request(&request, kind, line)?;
        if !seen.insert(key.clone()) {
            return Err(InputError::DuplicateKey { line, key });
        }
        rows.push(InputRow {
            key,
            request,
            inline: None,
        });
    }
    if rows.is_empty() {
        return Err(InputError::Empty);
    }
    Ok(rows)
}

/// All text of a request: the system instruction, then every text part of
/// every turn, joined by newlines.
pub fn prompt_text(request: &Value) -> String {
    fn texts(content: &Value) -> impl Iterator<Item = &str> {
        content
            .get("parts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|p| p.get("text")?.as_str())
    }
    let system = ["systemInstruction", "system_instruction"]
        .into_iter()
        .filter_map(|k| request.get(k));
    let turns = request
        .get("contents")
        .and_then(Value::as_array)
        .into_iter()
        .flatten();
    system
        .chain(turns)
        .flat_map(texts)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The answer text for a request that is answered normally: a schema
/// instance in JSON mode, `{"answer": …}` in JSON mode without a schema,
/// plain text otherwise.
pub fn answer_text(request: &Value, prompt: &str) -> String {
    let config = request
        .get("generationConfig")
        .or_else(|| request.get("generation_config"));
    let get = |camel: &str, snake: &str| config.and_then(|c| c.get(camel).or_else(|| c.get(snake)));
    let json_mode = get("responseMimeType", "response_mime_type")
        .and_then(Value::as_str)
        .is_some_and(|m| m.eq_ignore_ascii_case("application/json"));
    if !json_mode {
        // The media the request carried are named (see `media.rs`), so a
        // test can tell a row that sent its image from one that did not.
        let seen: Vec<&str> = media_mentions(prompt).collect();
        return if seen.is_empty() {
            format!("Emulated answer to: {}", prompt_words(prompt))
        } else {
            format!(
                "Emulated answer to: {} (seen: {})",
                prompt_words(prompt),
                seen.join(", ")
            )
        };
    }
    let schema = get("responseJsonSchema", "response_json_schema")
        .or_else(|| get("responseSchema", "response_schema"));
    let value = match schema {
        Some(schema) => instance(schema, prompt),
        None => json!({"answer": prompt_words(prompt)}),
    };
    value.to_string()
}

/// The `[mime N bytes sha256:…]` texts that stand for a request's media
/// (`media::resolve`) in its prompt text.
fn media_mentions(prompt: &str) -> impl Iterator<Item = &str> {
    prompt.match_indices('[').filter_map(move |(start, _)| {
        let end = start + prompt[start..].find(']')?;
        let inner = &prompt[start + 1..end];
        inner.contains(" bytes sha256:").then_some(inner)
    })
}

/// Thinking tokens a MAX_TOKENS answer spent.
const MAX_TOKENS_THOUGHTS: u64 = 64;

/// Thinking tokens of an answer: the request's
/// `generationConfig.thinkingConfig.thinkingBudget`, capped at 32 (none
/// without a budget, or with 0: thinking off).
fn thinking_tokens(request: &Value) -> u64 {
    request
        .pointer("/generationConfig/thinkingConfig/thinkingBudget")
        .and_then(Value::as_u64)
        .map_or(0, |b| b.min(32))
}

/// Cached input tokens: half the prompt when the request names
/// `cachedContent`.
fn cached_tokens(request: &Value, prompt_tokens: u64) -> u64 {
    if request.get("cachedContent").is_some_and(Value::is_string) {
        prompt_tokens / 2
    } else {
        0
    }
}

/// Tokens as the emulator counts them: about one per four characters.
pub fn token_count(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4)
}

/// The `GenerateContentResponse` (or error object) for one row, and what it
/// counts as in stats. `None` for a row left out of the output.
pub fn answer_row(
    row: &InputRow,
    verdict: RowVerdict,
    model_version: &str,
    style: Style,
) -> Option<(Value, Outcome)> {
    let verdict = match (style.kind, schema_problem(&row.request)) {
        (BatchKind::Generate, Some(_)) if verdict != RowVerdict::Missing => RowVerdict::Error(400),
        _ => verdict,
    };
    let (body, outcome) = match (verdict, style.kind) {
        (RowVerdict::Missing, _) => return None,
        (RowVerdict::Error(code), _) => {
            let message = schema_problem(&row.request).unwrap_or_else(|| row_error_message(code));
            let error = if style.grpc_errors {
                json!({"code": grpc_code(code), "message": message})
            } else {
                error_object(code, &message)
            };
            (json!({"error": error}), Outcome::Error { code })
        }
        (_, BatchKind::Embed) => (
            json!({"response": {"embedding": {"values": embedding(&row.request)}}}),
            Outcome::Success,
        ),
        (verdict, BatchKind::Generate) => {
            generated(row, verdict, model_version, style.changed_model)
        }
    };
    let mut line = match &row.inline {
        None => json!({"key": row.key}),
        Some(Inline { metadata: Some(m) }) => json!({"metadata": m}),
        Some(Inline { metadata: None }) => json!({}),
    };
    if let (Value::Object(line), Value::Object(body)) = (&mut line, body) {
        line.extend(body);
    }
    Some((line, outcome))
}

/// JSON Schema keywords the provider's `responseSchema` (an OpenAPI-subset
/// `Schema` proto) does not know; JSON Schema goes in `responseJsonSchema`.
const JSON_SCHEMA_ONLY: [&str; 5] = ["$ref", "$defs", "$schema", "const", "additionalProperties"];

/// Why a request's `responseSchema` would be refused (400), if it would:
/// a JSON-Schema-only keyword or a type array anywhere in it.
pub fn schema_problem(request: &Value) -> Option<String> {
    fn walk(v: &Value, path: &str) -> Option<String> {
        match v {
            Value::Object(map) => {
                for (k, child) in map {
                    if JSON_SCHEMA_ONLY.contains(&k.as_str()) {
                        return Some(format!(
                            "Invalid JSON payload received. Unknown name \"{k}\" at '{path}': Cannot find field."
                        ));
                    }
                    if k == "type" && child.is_array() {
                        return Some(format!(
                            "Invalid JSON payload received. Invalid value at '{path}.type' (type.googleapis.com/google.ai.generativelanguage.v1beta.Type): a type array is not a Type."
                        ));
                    }
                    if let Some(p) = walk(child, &format!("{path}.{k}")) {
                        return Some(p);
                    }
                }
                None
            }
            Value::Array(items) => items.iter().find_map(|i| walk(i, path)),
            _ => None,
        }
    }
    let config = request
        .get("generationConfig")
        .or_else(|| request.get("generation_config"))?;
    let schema = config
        .get("responseSchema")
        .or_else(|| config.get("response_schema"))?;
    walk(schema, "generation_config.response_schema")
}

/// Dimensions of an emulated embedding (unless the request asks for fewer).
const EMBEDDING_DIMENSIONS: usize = 8;

/// A deterministic unit vector for a request's text.
fn embedding(request: &Value) -> Vec<f64> {
    let text: String = request
        .get("content")
        .map(|c| prompt_text(&json!({"contents": [c]})))
        .unwrap_or_default();
    let dims = request
        .get("outputDimensionality")
        .and_then(Value::as_u64)
        .map_or(EMBEDDING_DIMENSIONS, |d| (d as usize).clamp(1, 3072));
    let seed = crate::ids::hash_str(&text);
    let raw: Vec<f64> = (0..dims)
        .map(|i| ((seed.rotate_left(i as u32 * 7) % 2001) as f64 - 1000.0) / 1000.0)
        .collect();
    let norm = raw
        .iter()
        .map(|x| x * x)
        .sum::<f64>()
        .sqrt()
        .max(f64::EPSILON);
    raw.iter().map(|x| x / norm).collect()
}

/// A generation answer (any verdict but an error or a missing row).
fn generated(
    row: &InputRow,
    verdict: RowVerdict,
    model_version: &str,
    changed_model: bool,
) -> (Value, Outcome) {
    let prompt = prompt_text(&row.request);
    // Another model answers the same prompt otherwise: its answer is drawn
    // from the prompt and the model's version.
    let basis = if changed_model {
        format!("{prompt} ~ {model_version}")
    } else {
        prompt.clone()
    };
    let prompt_tokens = token_count(&prompt).max(1);
    let thoughts = thinking_tokens(&row.request);
    let cached = cached_tokens(&row.request, prompt_tokens);
    let usage = |candidate_tokens: u64, thoughts: u64| {
        // promptTokenCount includes cached tokens; candidatesTokenCount
        // excludes thoughts; the total counts everything once.
        let mut u = json!({"promptTokenCount": prompt_tokens});
        if candidate_tokens > 0 {
            u["candidatesTokenCount"] = json!(candidate_tokens);
        }
        if thoughts > 0 {
            u["thoughtsTokenCount"] = json!(thoughts);
        }
        if cached > 0 {
            u["cachedContentTokenCount"] = json!(cached);
        }
        u["totalTokenCount"] = json!(prompt_tokens + candidate_tokens + thoughts);
        u
    };
    let finished = |text: &str, reason: &str, thoughts: u64| {
        let tokens = token_count(text);
        json!({
            "candidates": [{
                "content": {"parts": [{"text": text}], "role": "model"},
                "finishReason": reason,
                "index": 0
            }],
            "usageMetadata": usage(tokens, thoughts),
            "modelVersion": model_version
        })
    };
    let text_response = |text: &str| finished(text, "STOP", thoughts);
    let safety_ratings = json!([
        {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": true},
        {"category": "HARM_CATEGORY_HARASSMENT", "probability": "NEGLIGIBLE"}
    ]);
    match verdict {
        RowVerdict::Answer => (
            json!({"response": text_response(&answer_text(&row.request, &basis))}),
            Outcome::Success,
        ),
        RowVerdict::EmptyText => (json!({"response": text_response("")}), Outcome::Empty),
        RowVerdict::InvalidJson => (
            json!({"response": text_response("not json {")}),
            Outcome::Invalid,
        ),
        RowVerdict::Safety => (
            json!({"response": {
                "candidates": [{"finishReason": "SAFETY", "index": 0, "safetyRatings": safety_ratings}],
                "usageMetadata": usage(0, thoughts),
                "modelVersion": model_version
            }}),
            Outcome::Safety,
        ),
        RowVerdict::PromptBlocked => (
            json!({"response": {
                "promptFeedback": {"blockReason": "SAFETY", "safetyRatings": safety_ratings},
                "usageMetadata": usage(0, 0),
                "modelVersion": model_version
            }}),
            Outcome::PromptBlocked,
        ),
        RowVerdict::MaxTokens => {
            // Thinking took most of the budget; the answer stops mid-way.
            let full = answer_text(&row.request, &prompt);
            let cut: String = full.chars().take(full.chars().count() / 2).collect();
            (
                json!({"response": finished(&cut, "MAX_TOKENS", thoughts.max(MAX_TOKENS_THOUGHTS))}),
                Outcome::Finish {
                    reason: "MAX_TOKENS",
                },
            )
        }
        RowVerdict::Recitation => (
            json!({"response": {
                "candidates": [{"finishReason": "RECITATION", "index": 0}],
                "usageMetadata": usage(0, thoughts),
                "modelVersion": model_version
            }}),
            Outcome::Finish {
                reason: "RECITATION",
            },
        ),
        RowVerdict::OtherFinish => (
            json!({"response": finished("Partial", "OTHER", thoughts)}),
            Outcome::Finish { reason: "OTHER" },
        ),
        RowVerdict::Error(_) | RowVerdict::Missing => {
            unreachable!("answer_row handles errors and missing rows")
        }
    }
}

fn row_error_message(code: u16) -> String {
    match code {
        429 => "Resource has been exhausted (e.g. check quota).".to_owned(),
        500 => "An internal error has occurred. Please retry.".to_owned(),
        503 => "The model is overloaded. Please try again later.".to_owned(),
        400 => "Request contains an invalid argument.".to_owned(),
        403 => "You do not have permission to access the File or it may not exist.".to_owned(),
        other => format!("emulated error {other}"),
    }
}

/// The output of a processed batch: the lines in input order, the JSONL
/// bytes (the lines shuffled by `seed`) and each row's outcome in input
/// order.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchOutput {
    pub lines: Vec<Value>,
    pub jsonl: Vec<u8>,
    pub outcomes: Vec<(String, Outcome)>,
    /// Lines that carry a response.
    pub successful: u64,
    /// Lines that carry an error.
    pub failed: u64,
}

/// Answers every row with `decide` (called in input order, so counters
/// advance deterministically) and shuffles the lines by `seed`.
pub fn build_output(
    rows: &[InputRow],
    model_version: &str,
    seed: u64,
    style: Style,
    mut decide: impl FnMut(&InputRow, &str) -> RowVerdict,
) -> BatchOutput {
    let mut lines = Vec::with_capacity(rows.len());
    let mut outcomes = Vec::with_capacity(rows.len());
    let (mut successful, mut failed) = (0, 0);
    for row in rows {
        let prompt = prompt_text(&row.request);
        let verdict = decide(row, &prompt);
        match answer_row(row, verdict, model_version, style) {
            Some((line, outcome)) => {
                if line.get("error").is_some() {
                    failed += 1;
                } else {
                    successful += 1;
                }
                lines.push(line);
                outcomes.push((row.key.clone(), outcome));
            }
            None => {
                // The provider believes it answered the row; it just is not
                // in the file.
                successful += 1;
                outcomes.push((row.key.clone(), Outcome::Missing));
            }
        }
    }
    let mut jsonl = Vec::new();
    for line in shuffled(lines.clone(), seed) {
        jsonl.extend_from_slice(line.to_string().as_bytes());
        jsonl.push(b'\n');
    }
    BatchOutput {
        lines,
        jsonl,
        outcomes,
        successful,
        failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GEN: Style = Style {
        kind: BatchKind::Generate,
        grpc_errors: true,
        changed_model: false,
    };

    fn row(key: &str, request: Value) -> InputRow {
        InputRow {
            key: key.into(),
            request,
            inline: None,
        }
    }

    fn user(text: &str) -> Value {
        json!({"contents": [{"role": "user", "parts": [{"text": text}]}]})
    }

    #[test]
    fn parses_jsonl_and_refuses_bad_lines() {
        let good = b"{\"key\":\"a\",\"request\":{\"contents\":[]}}\n\n{\"key\":\"b\",\"request\":{\"contents\":[]}}\n";
        let rows = parse_input(good, BatchKind::Generate).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1].key, "b");
        assert!(matches!(
            parse_input(b"not json", BatchKind::Generate),
            Err(InputError::NotJson { line: 1, .. })
        ));
        assert_eq!(
            parse_input(b"{\"request\":{\"contents\":[]}}", BatchKind::Generate),
            Err(InputError::MissingKey { line: 1 })
        );
        assert_eq!(
            parse_input(b"{\"key\":\"a\"}", BatchKind::Generate),
            Err(InputError::MissingRequest { line: 1 })
        );
        assert_eq!(
            parse_input(b"{\"key\":\"a\",\"request\":{}}", BatchKind::Generate),
            Err(InputError::MissingContents { line: 1 })
        );
        assert_eq!(
            parse_input(b"\n", BatchKind::Generate),
            Err(InputError::Empty)
        );
        assert!(matches!(
            parse_input(b"{\"key\":\"a\",\"request\":{\"contents\":[]}}\n{\"key\":\"a\",\"request\":{\"contents\":[]}}", BatchKind::Generate),
            Err(InputError::DuplicateKey { line: 2, .. })
        ));
    }

    #[test]
    fn prompt_text_includes_the_system_instruction() {
        let req = json!({
            "systemInstruction": {"parts": [{"text": "Be brief."}]},
            "contents": [{"role": "user", "parts": [{"text": "Hi"}, {"text": "there"}]}]
        });
        assert_eq!(prompt_text(&req), "Be brief.\nHi\nthere");
    }

    #[test]
    fn answers_follow_the_requested_format() {
        let plain = user("Why is the sky blue?");
        assert_eq!(
            answer_text(&plain, "Why is the sky blue?"),
            "Emulated answer to: Why is the sky blue?"
        );
        let mut json_mode = user("Rate it");
        json_mode["generationConfig"] = json!({"responseMimeType": "application/json"});
        assert_eq!(
            answer_text(&json_mode, "Rate it"),
            r#"{"answer":"Rate it"}"#
        );
        json_mode["generationConfig"]["responseSchema"] = json!({"type": "OBJECT", "properties": {"stars": {"type": "INTEGER", "minimum": 4, "maximum": 4}}, "required": ["stars"]});
        assert_eq!(answer_text(&json_mode, "Rate it"), r#"{"stars":4}"#);
        json_mode["generationConfig"]["responseJsonSchema"] = json!({"type": "boolean"});
        let v: Value = serde_json::from_str(&answer_text(&json_mode, "Rate it")).unwrap();
        assert!(v.is_boolean());
    }

    // Invariant: another model behind the alias answers the same request
    // differently and names its version; the usual model's answer is
    // unchanged.
    #[test]
    fn a_changed_model_answers_otherwise() {
        let mut request = user("Classify: the service was slow");
        request["generationConfig"] = json!({
            "responseMimeType": "application/json",
            "responseJsonSchema": {"type": "object", "properties": {
                "label": {"type": "string", "enum": ["pos", "neg", "neutral", "mixed"]},
                "score": {"type": "integer"}}, "required": ["label", "score"]}
        });
        let r = row("k", request);
        let text =
            |line: &Value| line["response"]["candidates"][0]["content"]["parts"][0]["text"].clone();
        let (before, _) = answer_row(&r, RowVerdict::Answer, "flash-latest", GEN).unwrap();
        let (again, _) = answer_row(&r, RowVerdict::Answer, "flash-latest", GEN).unwrap();
        assert_eq!(text(&before), text(&again), "deterministic");
        let changed = Style {
            changed_model: true,
            ..GEN
        };
        let (after, _) = answer_row(&r, RowVerdict::Answer, "flash-2", changed).unwrap();
        assert_ne!(text(&before), text(&after));
        assert_eq!(after["response"]["modelVersion"], "flash-2");
    }

    #[test]
    fn each_verdict_has_its_shape() {
        let r = row("k", user("hello world, how are you"));
        let (line, outcome) = answer_row(&r, RowVerdict::Answer, "m", GEN).unwrap();
        assert_eq!(outcome, Outcome::Success);
        assert_eq!(line["key"], "k");
        let resp = &line["response"];
        assert_eq!(resp["candidates"][0]["finishReason"], "STOP");
        assert_eq!(resp["candidates"][0]["content"]["role"], "model");
        assert_eq!(resp["usageMetadata"]["promptTokenCount"], 6);
        let total = resp["usageMetadata"]["totalTokenCount"].as_u64().unwrap();
        let cand = resp["usageMetadata"]["candidatesTokenCount"]
            .as_u64()
            .unwrap();
        assert_eq!(total, 6 + cand);

        let (line, outcome) = answer_row(&r, RowVerdict::Safety, "m", GEN).unwrap();
        assert_eq!(outcome, Outcome::Safety);
        assert_eq!(line["response"]["candidates"][0]["finishReason"], "SAFETY");
        assert!(line["response"]["candidates"][0].get("content").is_none());
        assert!(
            line["response"]["usageMetadata"]
                .get("candidatesTokenCount")
                .is_none()
        );

        let (line, _) = answer_row(&r, RowVerdict::PromptBlocked, "m", GEN).unwrap();
        assert!(line["response"].get("candidates").is_none());
        assert_eq!(line["response"]["promptFeedback"]["blockReason"], "SAFETY");

        let (line, _) = answer_row(&r, RowVerdict::EmptyText, "m", GEN).unwrap();
        assert_eq!(
            line["response"]["candidates"][0]["content"]["parts"][0]["text"],
            ""
        );

        let (line, _) = answer_row(&r, RowVerdict::InvalidJson, "m", GEN).unwrap();
        let text = line["response"]["candidates"][0]["content"]["parts"][0]["text"]
            .as_str()
            .unwrap();
        assert!(serde_json::from_str::<Value>(text).is_err());

        let (line, outcome) = answer_row(&r, RowVerdict::Error(429), "m", GEN).unwrap();
        assert_eq!(outcome, Outcome::Error { code: 429 });
        assert_eq!(line["error"]["code"], 8, "gRPC RESOURCE_EXHAUSTED");
        assert!(line["error"].get("status").is_none());
        assert!(line.get("response").is_none());
        let rest = Style {
            grpc_errors: false,
            ..GEN
        };
        let (line, _) = answer_row(&r, RowVerdict::Error(429), "m", rest).unwrap();
        assert_eq!(line["error"]["code"], 429);
        assert_eq!(line["error"]["status"], "RESOURCE_EXHAUSTED");

        assert!(answer_row(&r, RowVerdict::Missing, "m", GEN).is_none());
    }

    #[test]
    fn output_is_shuffled_deterministically_and_counts_lines() {
        let rows: Vec<InputRow> = (0..10).map(|i| row(&format!("k{i}"), user("q"))).collect();
        let decide = |r: &InputRow, _: &str| match r.key.as_str() {
            "k3" => RowVerdict::Missing,
            "k4" => RowVerdict::Error(503),
            _ => RowVerdict::Answer,
        };
        let a = build_output(&rows, "m", 42, GEN, decide);
        let b = build_output(&rows, "m", 42, GEN, decide);
        assert_eq!(a, b);
        let keys: Vec<String> = String::from_utf8(a.jsonl.clone())
            .unwrap()
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["key"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert_eq!(keys.len(), 9);
        assert!(!keys.contains(&"k3".to_owned()));
        let input_order: Vec<String> = (0..10)
            .filter(|i| *i != 3)
            .map(|i| format!("k{i}"))
            .collect();
        assert_ne!(keys, input_order);
        assert_eq!((a.successful, a.failed), (9, 1));
        assert_eq!(a.outcomes[3], ("k3".to_owned(), Outcome::Missing));
    }

    #[test]
    fn inline_requests_echo_metadata_in_request_order() {
        let requests = json!({"requests": [
            {"request": user("a"), "metadata": {"key": "first"}},
            {"request": user("b")},
        ]});
        let rows = parse_inline(&requests, BatchKind::Generate).unwrap();
        assert_eq!(rows[0].key, "first");
        assert_eq!(rows[1].key, "2");
        let out = build_output(&rows, "m", 7, GEN, |_, _| RowVerdict::Answer);
        assert_eq!(out.lines[0]["metadata"]["key"], "first");
        assert!(out.lines[0].get("key").is_none());
        assert!(out.lines[1].get("metadata").is_none());
        assert!(out.lines[1]["response"]["candidates"].is_array());
        assert_eq!(
            parse_inline(&json!({"requests": []}), BatchKind::Generate),
            Err(InputError::InlineShape)
        );
        assert_eq!(
            parse_inline(&json!({"requests": [{"request": {}}]}), BatchKind::Generate),
            Err(InputError::MissingContents { line: 1 })
        );
    }

    #[test]
    fn embeddings_are_deterministic_unit_vectors() {
        let request = json!({"content": {"parts": [{"text": "hello"}]}, "outputDimensionality": 4});
        let rows = parse_inline(
            &json!({"requests": [{"request": request}]}),
            BatchKind::Embed,
        )
        .unwrap();
        let style = Style {
            kind: BatchKind::Embed,
            grpc_errors: true,
            changed_model: false,
        };
        let (a, outcome) = answer_row(&rows[0], RowVerdict::Answer, "m", style).unwrap();
        let (b, _) = answer_row(&rows[0], RowVerdict::Answer, "m", style).unwrap();
        assert_eq!(a, b);
        assert_eq!(outcome, Outcome::Success);
        let values: Vec<f64> = a["response"]["embedding"]["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert_eq!(values.len(), 4);
        let norm: f64 = values.iter().map(|x| x * x).sum();
        assert!((norm - 1.0).abs() < 1e-9);
        assert_eq!(
            parse_input(
                b"{\"key\":\"a\",\"request\":{\"contents\":[]}}",
                BatchKind::Embed
            ),
            Err(InputError::MissingContent { line: 1 })
        );
    }

    #[test]
    fn response_schema_refuses_json_schema_keywords_response_json_schema_takes_them() {
        let schema = json!({"type": "object", "properties": {"a": {"type": ["string", "null"]}},
                            "additionalProperties": false});
        let mut bad = user("q");
        bad["generationConfig"] =
            json!({"responseMimeType": "application/json", "responseSchema": schema});
        let (line, outcome) = answer_row(&row("k", bad), RowVerdict::Answer, "m", GEN).unwrap();
        assert_eq!(outcome, Outcome::Error { code: 400 });
        assert_eq!(line["error"]["code"], 3);
        assert!(
            line["error"]["message"]
                .as_str()
                .unwrap()
                .contains("additionalProperties")
        );
        let mut good = user("q");
        good["generationConfig"] =
            json!({"responseMimeType": "application/json", "responseJsonSchema": schema});
        let (_, outcome) = answer_row(&row("k", good), RowVerdict::Answer, "m", GEN).unwrap();
        assert_eq!(outcome, Outcome::Success);
        let mut typed = user("q");
        typed["generationConfig"] = json!({"responseSchema": {"type": "OBJECT", "properties": {"x": {"type": ["STRING", "NULL"]}}}});
        assert!(schema_problem(&typed).unwrap().contains("type array"));
    }

    #[test]
    fn finish_reasons_and_token_kinds_have_the_providers_shapes() {
        let mut req = user("a question long enough to count");
        req["generationConfig"] = json!({"thinkingConfig": {"thinkingBudget": 10}});
        req["cachedContent"] = json!("cachedContents/abc");
        let r = row("k", req);
        let (line, _) = answer_row(&r, RowVerdict::Answer, "m", GEN).unwrap();
        let u = &line["response"]["usageMetadata"];
        assert_eq!(u["thoughtsTokenCount"], 10);
        let prompt = u["promptTokenCount"].as_u64().unwrap();
        assert_eq!(u["cachedContentTokenCount"], prompt / 2);
        assert_eq!(
            u["totalTokenCount"].as_u64().unwrap(),
            prompt + u["candidatesTokenCount"].as_u64().unwrap() + 10
        );
        let (line, outcome) = answer_row(&r, RowVerdict::MaxTokens, "m", GEN).unwrap();
        assert_eq!(
            outcome,
            Outcome::Finish {
                reason: "MAX_TOKENS"
            }
        );
        assert_eq!(
            line["response"]["candidates"][0]["finishReason"],
            "MAX_TOKENS"
        );
        assert_eq!(line["response"]["usageMetadata"]["thoughtsTokenCount"], 64);
        let (line, _) = answer_row(&r, RowVerdict::Recitation, "m", GEN).unwrap();
        assert!(line["response"]["candidates"][0].get("content").is_none());
        let (line, _) = answer_row(&r, RowVerdict::OtherFinish, "m", GEN).unwrap();
        assert_eq!(line["response"]["candidates"][0]["finishReason"], "OTHER");
    }
}
