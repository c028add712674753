//! One line of an enroll file → one `RowInput`, checked locally (key
//! characters, payload is a JSON object) so a bad line is reported with its
//! line number before anything after it is sent.
//!
//! A line is a JSON object:
//! `{"key": "...", "payload": {...}, "depends_on": ["..."], "prompt": {"name": "...", "version": "..."}, "model": "..."}`
//! - `key`, or `key_parts: ["..", ..]` to derive it (`tally_core::keys::derive_key`);
//! - `payload` (a JSON object, sent in a canonical form: keys sorted, no
//!   spaces, so re-sending an unchanged file is ALREADY_PRESENT), or
//!   `payload_text` (the exact text to send, must hold a JSON object);
//! - `depends_on` keys, and/or `depends_on_parts: [[..], ..]` derived like
//!   `key_parts`; `dependency_names: {"<key>": "<name>"}` names some of them
//!   for the prompt (`deps.<name>`);
//! - `prompt` as `{"name", "version"}` or `"name@version"`; `model`.
//!
//! Unknown fields are refused, so a typo (`dependson`) is not silently
//! dropped.

use serde::Deserialize;
use serde_json::Value;
use tally_core::keys::{derive_key, validate_key};
use tally_core::payload::validate_object;
use tally_proto::v1 as pb;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    key: Option<String>,
    key_parts: Option<Vec<String>>,
    payload: Option<Value>,
    payload_text: Option<String>,
    #[serde(default)]
    depends_on: Vec<String>,
    #[serde(default)]
    depends_on_parts: Vec<Vec<String>>,
    #[serde(default)]
    dependency_names: std::collections::HashMap<String, String>,
    prompt: Option<PromptField>,
    #[serde(default)]
    model: String,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum PromptField {
    Text(String),
    Object(PromptObject),
}

/// `{"name", "version"}`; another field (`vesion`) is refused too.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PromptObject {
    name: String,
    version: String,
}

/// Parses `name@version`.
pub fn parse_prompt_ref(text: &str) -> Result<pb::PromptRef, String> {
    match text.split_once('@') {
        Some((name, version)) if !name.is_empty() && !version.is_empty() => Ok(pb::PromptRef {
            name: name.to_string(),
            version: version.to_string(),
        }),
        _ => Err(format!("prompt {text:?} must look like name@version")),
    }
}

/// Parses one non-blank line. The error says what is wrong, without the
/// line number (the caller knows it).
pub fn parse_line(text: &str) -> Result<pb::RowInput, String> {
    let line: Line = serde_json::from_str(text).map_err(|e| format!("not a valid row: {e}"))?;
    let key = match (line.key, line.key_parts) {
        (Some(k), None) => k,
        (None, Some(parts)) if !parts.is_empty() => derive_key(&parts),
        (None, Some(_)) => return Err("key_parts must not be empty".into()),
        (Some(_), Some(_)) => return Err("give key or key_parts, not both".into()),
        (None, None) => return Err("missing key (or key_parts)".into()),
    };
    validate_key(&key).map_err(|e| format!("key {key:?}: {e}"))?;
    let payload = match (line.payload, line.payload_text) {
        (Some(Value::Object(map)), None) => {
            serde_json::to_string(&Value::Object(map)).map_err(|e| e.to_string())?
        }
        (Some(other), None) => {
            return Err(format!(
                "payload must be a JSON object, got {}",
                kind_of(&other)
            ));
        }
        (None, Some(text)) => text,
        (Some(_), Some(_)) => return Err("give payload or payload_text, not both".into()),
        (None, None) => return Err("missing payload (or payload_text)".into()),
    };
    validate_object(&payload).map_err(|e| e.to_string())?;
    let mut depends_on = line.depends_on;
    for parts in &line.depends_on_parts {
        if parts.is_empty() {
            return Err("depends_on_parts entries must not be empty".into());
        }
        depends_on.push(derive_key(parts));
    }
    for d in &depends_on {
        validate_key(d).map_err(|e| format!("depends_on {d:?}: {e}"))?;
        if *d == key {
            return Err(format!("row {key:?} depends on itself"));
        }
    }
    let prompt = match line.prompt {
        None => None,
        Some(PromptField::Text(t)) => Some(parse_prompt_ref(&t)?),
        Some(PromptField::Object(PromptObject { name, version })) => {
            if name.is_empty() || version.is_empty() {
                return Err("prompt needs a name and a version".into());
            }
            Some(pb::PromptRef { name, version })
        }
    };
    for (d, name) in &line.dependency_names {
        if !depends_on.contains(d) {
            return Err(format!(
                "dependency_names names {d:?}, which is not in depends_on"
            ));
        }
        tally_core::deps::validate_name(name)
            .map_err(|e| format!("dependency_names[{d:?}]: {e}"))?;
    }
    Ok(pb::RowInput {
        key,
        payload,
        depends_on,
        prompt,
        model: line.model,
        dependency_names: line.dependency_names,
    })
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The enrolment vectors shared with the Python client
    /// (`tests/vectors/enroll.json`): each line gives exactly its row, byte
    /// for byte, or is refused with its message.
    #[test]
    fn every_enroll_vector_gives_its_row_or_its_refusal() {
        let doc: Value =
            serde_json::from_str(include_str!("../../../tests/vectors/enroll.json")).unwrap();
        let cases = doc["cases"].as_array().expect("cases");
        assert!(cases.len() >= 30, "the vectors cover every rule");
        let mut failures = Vec::new();
        for case in cases {
            let name = case["name"].as_str().expect("name");
            let line = case["line_text"].as_str().expect("line_text");
            match (parse_line(line), case.get("expect"), case.get("error")) {
                (Ok(row), Some(expect), None) => {
                    let prompt = row
                        .prompt
                        .as_ref()
                        .map_or(Value::Null, |p| format!("{}@{}", p.name, p.version).into());
                    let mut got = serde_json::json!({
                        "key": row.key,
                        "payload": row.payload,
                        "depends_on": row.depends_on,
                        "prompt": prompt,
                        "model": row.model,
                    });
                    if !row.dependency_names.is_empty() {
                        got["dependency_names"] = serde_json::json!(row.dependency_names);
                    }
                    if &got != expect {
                        failures.push(format!("{name}: got {got}, expected {expect}"));
                    }
                }
                (Err(e), None, Some(want)) => {
                    let want = want.as_str().expect("error is a string").to_lowercase();
                    if !e.to_lowercase().contains(&want) {
                        failures.push(format!("{name}: error {e:?} lacks {want:?}"));
                    }
                }
                (Ok(row), None, Some(_)) => {
                    failures.push(format!("{name}: accepted as {row:?} instead of refused"))
                }
                (Err(e), Some(_), None) => failures.push(format!("{name}: refused: {e}")),
                _ => panic!("{name}: a case has expect or error, not both"),
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn a_full_line() {
        let r = parse_line(
            r#"{"key": "r2", "payload": {"z": 1, "a": [true]}, "depends_on": ["r1"], "prompt": {"name": "page_ocr", "version": "v2"}, "model": "gemini-2.5-flash"}"#,
        )
        .unwrap();
        assert_eq!(r.key, "r2");
        assert_eq!(
            r.payload, r#"{"a":[true],"z":1}"#,
            "canonical: sorted, compact"
        );
        assert_eq!(r.depends_on, vec!["r1"]);
        let p = r.prompt.unwrap();
        assert_eq!((p.name.as_str(), p.version.as_str()), ("page_ocr", "v2"));
        assert_eq!(r.model, "gemini-2.5-flash");
    }

    #[test]
    fn payload_text_is_sent_verbatim() {
        let r = parse_line(r#"{"key": "a", "payload_text": "{ \"b\" : 2 }"}"#).unwrap();
        assert_eq!(r.payload, r#"{ "b" : 2 }"#);
        assert!(
            parse_line(r#"{"key": "a", "payload_text": "[1]"}"#)
                .unwrap_err()
                .contains("JSON object")
        );
    }

    #[test]
    fn keys_derive_from_parts() {
        let r = parse_line(
            r#"{"key_parts": ["reviews", "42"], "payload": {}, "depends_on_parts": [["reviews", "41"]], "prompt": "p@v1"}"#,
        )
        .unwrap();
        assert_eq!(r.key, derive_key(&["reviews", "42"]));
        assert_eq!(r.depends_on, vec![derive_key(&["reviews", "41"])]);
        assert_eq!(r.prompt.unwrap().version, "v1");
    }

    #[test]
    fn bad_lines_say_why() {
        let cases = [
            ("not json", "not a valid row"),
            (r#"{"payload": {}}"#, "missing key"),
            (r#"{"key": "a b", "payload": {}}"#, "may only contain"),
            (r#"{"key": "a"}"#, "missing payload"),
            (r#"{"key": "a", "payload": [1]}"#, "got an array"),
            (
                r#"{"key": "a", "payload": {}, "dependson": []}"#,
                "unknown field",
            ),
            (
                r#"{"key": "a", "key_parts": ["x"], "payload": {}}"#,
                "not both",
            ),
            (
                r#"{"key": "a", "payload": {}, "depends_on": ["a"]}"#,
                "itself",
            ),
            (
                r#"{"key": "a", "payload": {}, "prompt": "noversion"}"#,
                "name@version",
            ),
            (
                r#"{"key": "a", "payload": {}, "depends_on": ["x/y"]}"#,
                "depends_on",
            ),
        ];
        for (line, expected) in cases {
            let err = parse_line(line).unwrap_err();
            assert!(err.contains(expected), "{line}: {err}");
        }
    }
}
