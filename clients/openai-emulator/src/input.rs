//! Reading a batch's input file as the API validates it: JSONL lines
//! `{custom_id, method: "POST", url, body}`, unique custom_ids, every url the
//! batch's endpoint, one model, at most 50,000 lines and 200 MB. Problems
//! become the batch's `errors.data` entries (`{code, message, param,
//! line}`, lines 1-based), as the API reports them on a `failed` batch. Pure.

use std::collections::HashSet;

use serde::Serialize;
use serde_json::Value;

pub const MAX_LINES: usize = 50_000;
pub const MAX_BYTES: usize = 200 * 1024 * 1024;

/// One request line.
#[derive(Debug, Clone, PartialEq)]
pub struct InputRow {
    pub line: u64,
    pub custom_id: String,
    pub body: Value,
}

/// One entry of a failed batch's `errors.data`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LineError {
    pub code: String,
    pub message: String,
    pub param: Option<String>,
    pub line: Option<u64>,
}

impl LineError {
    pub fn new(
        code: &str,
        message: impl Into<String>,
        param: Option<&str>,
        line: Option<u64>,
    ) -> Self {
        Self {
            code: code.to_owned(),
            message: message.into(),
            param: param.map(str::to_owned),
            line,
        }
    }
}

/// A valid input file: its rows and their one model.
#[derive(Debug, Clone, PartialEq)]
pub struct Input {
    pub rows: Vec<InputRow>,
    pub model: String,
}

/// Validates `bytes` as the input of a batch for `endpoint`.
pub fn parse(bytes: &[u8], endpoint: &str) -> Result<Input, Vec<LineError>> {
    if bytes.len() > MAX_BYTES {
        return Err(vec![LineError::new(
            "file_too_large",
            format!("The input file is larger than the maximum of {MAX_BYTES} bytes."),
            None,
            None,
        )]);
    }
    let text = String::from_utf8_lossy(bytes);
    let mut rows = Vec::new();
    let mut seen = HashSet::new();
    let mut model: Option<String> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = i as u64 + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let fail = |code: &str, message: String, param: Option<&str>| {
            Err(vec![LineError::new(code, message, param, Some(line))])
        };
        let Ok(Value::Object(obj)) = serde_json::from_str::<Value>(raw) else {
            return fail(
                "invalid_json_line",
                "This line is not parseable as valid JSON.".into(),
                None,
            );
        };
        let Some(custom_id) = obj.get("custom_id").and_then(Value::as_str) else {
            return fail(
                "missing_required_parameter",
                "Missing required parameter: 'custom_id'.".into(),
                Some("custom_id"),
            );
        };
        if obj.get("method").and_then(Value::as_str) != Some("POST") {
            return fail(
                "invalid_method",
                "The method of each request must be POST.".into(),
                Some("method"),
            );
        }
        let url = obj.get("url").and_then(Value::as_str).unwrap_or_default();
        if url != endpoint {
            return fail(
                "url_mismatch",
                format!(
                    "The URL provided for this request does not match the batch endpoint {endpoint}."
                ),
                Some("url"),
            );
        }
        let Some(body) = obj.get("body").filter(|b| b.is_object()) else {
            return fail(
                "missing_required_parameter",
                "Missing required parameter: 'body'.".into(),
                Some("body"),
            );
        };
        let this_model = body
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or_default();
        match &model {
            None => model = Some(this_model.to_owned()),
            Some(m) if m != this_model => {
                return fail(
                    "model_mismatch",
                    "The model provided for this request does not match the model of the other requests in the batch.".into(),
                    Some("body.model"),
                );
            }
            Some(_) => {}
        }
        if !seen.insert(custom_id.to_owned()) {
            return fail(
                "duplicate_custom_id",
                format!("The custom_id '{custom_id}' is used more than once in the input file."),
                Some("custom_id"),
            );
        }
        rows.push(InputRow {
            line,
            custom_id: custom_id.to_owned(),
            body: body.clone(),
        });
        if rows.len() > MAX_LINES {
            return fail(
                "too_many_tasks",
                format!("The input file has more than the maximum of {MAX_LINES} requests."),
                None,
            );
        }
    }
    match model {
        Some(model) => Ok(Input { rows, model }),
        None => Err(vec![LineError::new(
            "empty_file",
            "The input file is empty. Please provide a file with at least one request.",
            None,
            None,
        )]),
    }
}

/// The line of the first row naming `model` (for a `model_not_found` error).
pub fn first_line(input: &Input) -> Option<u64> {
    input.rows.first().map(|r| r.line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const EP: &str = "/v1/chat/completions";

    fn line(id: &str, model: &str) -> String {
        json!({"custom_id": id, "method": "POST", "url": EP, "body": {"model": model, "messages": []}}).to_string()
    }

    fn code_of(text: &str) -> (String, Option<u64>) {
        let e = parse(text.as_bytes(), EP).unwrap_err().remove(0);
        (e.code, e.line)
    }

    // Invariant: each rule of the input format fails the batch naming the
    // first offending line, with the code the API documents.
    #[test]
    fn each_input_rule_names_its_line() {
        let ok = format!("{}\n{}\n", line("a", "gpt-4o"), line("b", "gpt-4o"));
        let input = parse(ok.as_bytes(), EP).unwrap();
        assert_eq!(input.rows.len(), 2);
        assert_eq!(input.model, "gpt-4o");
        assert_eq!(
            code_of(&format!("{}\nnot json", line("a", "m"))),
            ("invalid_json_line".into(), Some(2))
        );
        assert_eq!(
            code_of(&format!("{}\n{}", line("a", "m"), line("a", "m"))),
            ("duplicate_custom_id".into(), Some(2))
        );
        assert_eq!(
            code_of(&format!("{}\n{}", line("a", "m"), line("b", "n"))),
            ("model_mismatch".into(), Some(2))
        );
        let other = line("a", "m").replace(EP, "/v1/embeddings");
        assert_eq!(code_of(&other), ("url_mismatch".into(), Some(1)));
        assert_eq!(code_of(""), ("empty_file".into(), None));
        let many: String = (0..=MAX_LINES)
            .map(|i| line(&i.to_string(), "m") + "\n")
            .collect();
        assert_eq!(code_of(&many).0, "too_many_tasks");
    }
}
