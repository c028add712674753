//! Pure batch processing: parsing the input JSONL, answering one request
//! (a `GenerateContentResponse` or an error line, per the row's fault
//! verdict), and assembling the output JSONL in a seeded, non-input order.

use serde_json::{Value, json};

use crate::error::error_object;
use crate::faults::RowVerdict;
use crate::ids::shuffled;
use crate::schema_instance::{instance, prompt_words};
use crate::stats::Outcome;

/// One input line: `{"key": "...", "request": <GenerateContentRequest>}`.
#[derive(Debug, Clone, PartialEq)]
pub struct InputRow {
    pub key: String,
    pub request: Value,
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
    #[error("input line {line}: duplicate key `{key}`")]
    DuplicateKey { line: usize, key: String },
}

/// Parses a JSONL input file. Blank lines are skipped; every other line must
/// hold a key and a request with contents. Duplicate keys are refused (the
/// real API tolerates them; refusing catches a client bug early).
pub fn parse_input(bytes: &[u8]) -> Result<Vec<InputRow>, InputError> {
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
        if !request.get("contents").is_some_and(Value::is_array) {
            return Err(InputError::MissingContents { line });
        }
        if !seen.insert(key.clone()) {
            return Err(InputError::DuplicateKey { line, key });
        }
        rows.push(InputRow { key, request });
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
        return format!("Emulated answer to: {}", prompt_words(prompt));
    }
    let schema = get("responseJsonSchema", "response_json_schema")
        .or_else(|| get("responseSchema", "response_schema"));
    let value = match schema {
        Some(schema) => instance(schema, prompt),
        None => json!({"answer": prompt_words(prompt)}),
    };
    value.to_string()
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
) -> Option<(Value, Outcome)> {
    let prompt = prompt_text(&row.request);
    let prompt_tokens = token_count(&prompt).max(1);
    let usage = |candidate_tokens: u64| {
        let mut u = json!({"promptTokenCount": prompt_tokens});
        if candidate_tokens > 0 {
            u["candidatesTokenCount"] = json!(candidate_tokens);
        }
        u["totalTokenCount"] = json!(prompt_tokens + candidate_tokens);
        u
    };
    let text_response = |text: &str| {
        let tokens = token_count(text);
        json!({
            "candidates": [{
                "content": {"parts": [{"text": text}], "role": "model"},
                "finishReason": "STOP",
                "index": 0
            }],
            "usageMetadata": usage(tokens),
            "modelVersion": model_version
        })
    };
    let safety_ratings = json!([
        {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": true},
        {"category": "HARM_CATEGORY_HARASSMENT", "probability": "NEGLIGIBLE"}
    ]);
    let (body, outcome) = match verdict {
        RowVerdict::Answer => (
            json!({"response": text_response(&answer_text(&row.request, &prompt))}),
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
                "usageMetadata": usage(0),
                "modelVersion": model_version
            }}),
            Outcome::Safety,
        ),
        RowVerdict::PromptBlocked => (
            json!({"response": {
                "promptFeedback": {"blockReason": "SAFETY", "safetyRatings": safety_ratings},
                "usageMetadata": usage(0),
                "modelVersion": model_version
            }}),
            Outcome::PromptBlocked,
        ),
        RowVerdict::Error(code) => (
            json!({"error": error_object(code, &row_error_message(code))}),
            Outcome::Error { code },
        ),
        RowVerdict::Missing => return None,
    };
    let mut line = json!({"key": row.key});
    if let (Value::Object(line), Value::Object(body)) = (&mut line, body) {
        line.extend(body);
    }
    Some((line, outcome))
}

fn row_error_message(code: u16) -> String {
    match code {
        429 => "Resource has been exhausted (e.g. check quota).".to_owned(),
        500 => "An internal error has occurred. Please retry.".to_owned(),
        503 => "The model is overloaded. Please try again later.".to_owned(),
        400 => "Request contains an invalid argument.".to_owned(),
        other => format!("emulated error {other}"),
    }
}

/// The output of a processed batch: the JSONL bytes (shuffled by `seed`)
/// and each row's outcome in input order.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchOutput {
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
    mut decide: impl FnMut(&InputRow, &str) -> RowVerdict,
) -> BatchOutput {
    let mut lines = Vec::with_capacity(rows.len());
    let mut outcomes = Vec::with_capacity(rows.len());
    let (mut successful, mut failed) = (0, 0);
    for row in rows {
        let prompt = prompt_text(&row.request);
        let verdict = decide(row, &prompt);
        match answer_row(row, verdict, model_version) {
            Some((line, outcome)) => {
                if line.get("error").is_some() {
                    failed += 1;
                } else {
                    successful += 1;
                }
                lines.push(line.to_string());
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
    for line in shuffled(lines, seed) {
        jsonl.extend_from_slice(line.as_bytes());
        jsonl.push(b'\n');
    }
    BatchOutput {
        jsonl,
        outcomes,
        successful,
        failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(key: &str, request: Value) -> InputRow {
        InputRow {
            key: key.into(),
            request,
        }
    }

    fn user(text: &str) -> Value {
        json!({"contents": [{"role": "user", "parts": [{"text": text}]}]})
    }

    #[test]
    fn parses_jsonl_and_refuses_bad_lines() {
        let good = b"{\"key\":\"a\",\"request\":{\"contents\":[]}}\n\n{\"key\":\"b\",\"request\":{\"contents\":[]}}\n";
        let rows = parse_input(good).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1].key, "b");
        assert!(matches!(
            parse_input(b"not json"),
            Err(InputError::NotJson { line: 1, .. })
        ));
        assert_eq!(
            parse_input(b"{\"request\":{\"contents\":[]}}"),
            Err(InputError::MissingKey { line: 1 })
        );
        assert_eq!(
            parse_input(b"{\"key\":\"a\"}"),
            Err(InputError::MissingRequest { line: 1 })
        );
        assert_eq!(
            parse_input(b"{\"key\":\"a\",\"request\":{}}"),
            Err(InputError::MissingContents { line: 1 })
        );
        assert_eq!(parse_input(b"\n"), Err(InputError::Empty));
        assert!(matches!(
            parse_input(b"{\"key\":\"a\",\"request\":{\"contents\":[]}}\n{\"key\":\"a\",\"request\":{\"contents\":[]}}"),
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

    #[test]
    fn each_verdict_has_its_shape() {
        let r = row("k", user("hello world, how are you"));
        let (line, outcome) = answer_row(&r, RowVerdict::Answer, "m").unwrap();
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

        let (line, outcome) = answer_row(&r, RowVerdict::Safety, "m").unwrap();
        assert_eq!(outcome, Outcome::Safety);
        assert_eq!(line["response"]["candidates"][0]["finishReason"], "SAFETY");
        assert!(line["response"]["candidates"][0].get("content").is_none());
        assert!(
            line["response"]["usageMetadata"]
                .get("candidatesTokenCount")
                .is_none()
        );

        let (line, _) = answer_row(&r, RowVerdict::PromptBlocked, "m").unwrap();
        assert!(line["response"].get("candidates").is_none());
        assert_eq!(line["response"]["promptFeedback"]["blockReason"], "SAFETY");

        let (line, _) = answer_row(&r, RowVerdict::EmptyText, "m").unwrap();
        assert_eq!(
            line["response"]["candidates"][0]["content"]["parts"][0]["text"],
            ""
        );

        let (line, _) = answer_row(&r, RowVerdict::InvalidJson, "m").unwrap();
        let text = line["response"]["candidates"][0]["content"]["parts"][0]["text"]
            .as_str()
            .unwrap();
        assert!(serde_json::from_str::<Value>(text).is_err());

        let (line, outcome) = answer_row(&r, RowVerdict::Error(429), "m").unwrap();
        assert_eq!(outcome, Outcome::Error { code: 429 });
        assert_eq!(line["error"]["status"], "RESOURCE_EXHAUSTED");
        assert!(line.get("response").is_none());

        assert!(answer_row(&r, RowVerdict::Missing, "m").is_none());
    }

    #[test]
    fn output_is_shuffled_deterministically_and_counts_lines() {
        let rows: Vec<InputRow> = (0..10).map(|i| row(&format!("k{i}"), user("q"))).collect();
        let decide = |r: &InputRow, _: &str| match r.key.as_str() {
            "k3" => RowVerdict::Missing,
            "k4" => RowVerdict::Error(503),
            _ => RowVerdict::Answer,
        };
        let a = build_output(&rows, "m", 42, decide);
        let b = build_output(&rows, "m", 42, decide);
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
}
