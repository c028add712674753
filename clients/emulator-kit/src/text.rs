//! The text of a request as the emulators read it: every string of its
//! prompt fields (plain strings, `text` parts, nested `content`), a crude
//! but stable token estimate of it, and the seeded answer text of a request
//! without a response schema. Pure.

use serde_json::Value;

use crate::mix::{Mix, hash_str};
use crate::schema_instance::prompt_words;

/// The text under `keys` of `body` (e.g. `system`, `messages`), one line
/// per string found.
pub fn text_of(body: &Value, keys: &[&str]) -> String {
    let mut out = Vec::new();
    for key in keys {
        if let Some(v) = body.get(*key) {
            collect_text(v, &mut out);
        }
    }
    out.join("\n")
}

fn collect_text(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|i| collect_text(i, out)),
        Value::Object(obj) => {
            if let Some(t) = obj.get("text").and_then(Value::as_str) {
                out.push(t.to_owned());
            }
            if let Some(c) = obj.get("content") {
                collect_text(c, out);
            }
        }
        _ => {}
    }
}

/// A crude but stable token count: four tokens for every three words, at
/// least one.
pub fn tokens(text: &str) -> u64 {
    (text.split_whitespace().count() as u64 * 4)
        .div_ceil(3)
        .max(1)
}

/// The answer to a prompt without a response schema: a seeded number and
/// the prompt's first words, so a test can tell which prompt it answers.
pub fn seeded_answer(prompt: &str, seed: u64) -> String {
    let n = Mix::new(seed ^ hash_str(prompt)).next_u64();
    format!("Emulated answer {n:016x}: {}", prompt_words(prompt))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // Invariant: strings, text parts and nested content are all read, in
    // order, under the given keys only.
    #[test]
    fn reads_strings_parts_and_nested_content() {
        let body = json!({
            "system": "be brief",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "hello"},
                    {"type": "tool_result", "content": [{"type": "text", "text": "42"}]}]},
                {"role": "assistant", "content": "hi"}
            ],
            "other": "ignored"
        });
        assert_eq!(
            text_of(&body, &["system", "messages"]),
            "be brief\nhello\n42\nhi"
        );
        assert_eq!(tokens("one two three"), 4);
        assert_eq!(tokens(""), 1);
        let a = seeded_answer("hello there", 3);
        assert_eq!(a, seeded_answer("hello there", 3));
        assert_ne!(a, seeded_answer("hello there", 4));
        assert!(a.contains("hello there"), "{a}");
    }
}
