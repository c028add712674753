//! The shared conversion vectors (`tests/vectors/formats.json`): every case
//! must convert to exactly its expected row, or fail with its expected
//! message. The Python client checks the same file.

use super::{InputFormat, Target, convert, convert_for};
use serde_json::Value;

const VECTORS: &str = include_str!("../../../../tests/vectors/formats.json");

fn format_of(name: &str) -> InputFormat {
    match name {
        "openai" => InputFormat::Openai,
        "anthropic" => InputFormat::Anthropic,
        other => panic!("unknown format {other:?} in the vectors"),
    }
}

/// Each vector's line converts to its expected key, model and payload (as
/// JSON values), or to an error containing its expected text.
#[test]
fn every_vector_converts_as_written() {
    let doc: Value = serde_json::from_str(VECTORS).expect("vectors are JSON");
    let cases = doc["cases"].as_array().expect("cases");
    assert!(
        cases.len() >= 20,
        "the vectors cover every mapping and error"
    );
    let mut failures = Vec::new();
    for case in cases {
        let name = case["name"].as_str().expect("name");
        let format = format_of(case["format"].as_str().expect("format"));
        let line = match case.get("line_text") {
            Some(t) => t.as_str().expect("line_text is a string").to_string(),
            None => case["line"].to_string(),
        };
        let ledger_model = case["ledger_model"].as_str().unwrap_or("gemini-2.5-flash");
        let got = convert_for(format, &line, &Target::of(ledger_model));
        match (case.get("expect"), case.get("error"), got) {
            (Some(expect), None, Ok(row)) => {
                let payload: Value = serde_json::from_str(&row.payload).unwrap();
                let dropped = row.dropped_model.map_or(Value::Null, Value::String);
                if row.key != expect["key"]
                    || row.model != expect["model"]
                    || dropped != expect["dropped_model"]
                    || payload != expect["payload"]
                {
                    failures.push(format!(
                        "{name}: got key {:?} model {:?} dropped {dropped} payload {payload}",
                        row.key, row.model
                    ));
                }
            }
            (Some(_), None, Err(e)) => failures.push(format!("{name}: unexpected error {e}")),
            (None, Some(want), Err(e)) => {
                let want = want.as_str().expect("error is a string");
                if !e.contains(want) {
                    failures.push(format!("{name}: error {e:?} lacks {want:?}"));
                }
            }
            (None, Some(_), Ok(row)) => failures.push(format!(
                "{name}: converted to {} instead of failing",
                row.payload
            )),
            _ => panic!("{name}: a case has expect or error, not both"),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The payload is canonical (keys sorted, compact), so enrolling the same
/// file twice is ALREADY_PRESENT, not CONFLICT.
#[test]
fn payloads_are_canonical() {
    let line = r#"{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"temperature":1,"messages":[{"role":"user","content":"x"}]}}"#;
    let row = convert(InputFormat::Openai, line).unwrap();
    assert_eq!(
        row.payload,
        r#"{"contents":[{"parts":[{"text":"x"}],"role":"user"}],"generationConfig":{"temperature":1}}"#
    );
}
