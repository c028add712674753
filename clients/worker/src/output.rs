//! Reading a finished batch's output, whatever the provider: lines matched
//! to rows by their request id (output order is not input order), each
//! turned into the row's outcome by the provider's [`Decode`], and answer
//! text judged the same way for every provider ([`judge_text`]). The worker
//! reports facts (text, finish reason, block reason, error code and
//! status); the server's classifier decides what they mean. Pure: no I/O.
//!
//! Rows absent from the output are not reported here: FinishJob turns them
//! into `missing_from_output`.

use std::collections::{HashMap, HashSet};

use serde_json::Value;
use tally_proto::v1 as pb;

/// Longest message kept in a failure (the server keeps 2 KiB).
pub(crate) const MAX_MESSAGE: usize = 2048;

/// What one row's answer must look like.
#[derive(Clone, Copy)]
pub struct Expect<'a> {
    /// The compiled response schema, when the row's prompt has one.
    pub schema: Option<&'a jsonschema::Validator>,
    /// Whether the request asked for JSON (`responseMimeType:
    /// application/json`): then an answer that is not JSON is invalid
    /// output; otherwise the text is the result, stored as a JSON string.
    pub json: bool,
}

/// The output matched to the job's rows.
#[derive(Debug, Default, Clone)]
pub struct Matched {
    /// One per row found in the output, in output order.
    pub outcomes: Vec<pb::RowOutcome>,
    /// Keys in the output that the job does not hold (or seen twice).
    pub unexpected: Vec<String>,
    /// Lines that are not JSON objects with a string `key`.
    pub unreadable: usize,
    /// Answers to the job's golden rows (`#golden/{key}` lines).
    pub golden: Vec<pb::GoldenAnswer>,
    /// Keys of rows the provider never ran (OpenAI's `batch_expired`,
    /// `batch_cancelled` lines): not reported; FinishJob names them so they
    /// go back without an attempt.
    pub unanswered: Vec<String>,
}

impl Matched {
    /// Lines the output held, whatever they were.
    pub fn lines(&self) -> u64 {
        (self.outcomes.len()
            + self.unexpected.len()
            + self.unreadable
            + self.golden.len()
            + self.unanswered.len()) as u64
    }
}

/// The key prefix of a golden row's line in a batch.
pub use crate::tags::GOLDEN_PREFIX;

/// How one provider's output lines read: where a line names its request,
/// and what a line says of its row or golden row.
pub trait Decode: Send + Sync {
    /// The field of a line naming its request.
    fn id_field(&self) -> &'static str;

    /// The outcome of the line `line` (parsed from `raw`) for the row
    /// `key`; `None` for a request the provider never ran (the batch
    /// expired or was cancelled first): FinishJob returns that row.
    fn outcome(
        &self,
        key: &str,
        line: &Value,
        raw: &str,
        expect: &Expect<'_>,
    ) -> Option<pb::RowOutcome>;

    /// A golden line's answer: its text, or why it has none.
    fn golden(&self, key: &str, line: &Value) -> pb::GoldenAnswer;
}

/// Matches output lines to `expected` rows by key with `decode` and turns
/// each into an outcome. A key seen twice keeps its first line.
pub fn match_output(
    jsonl: &[u8],
    expected: &HashMap<String, Expect<'_>>,
    decode: &dyn Decode,
) -> Matched {
    let mut m = Matcher::of(expected, decode);
    for raw in jsonl.split(|&b| b == b'\n') {
        m.line(raw);
    }
    m.finish()
}

impl crate::jsonl::LineSink for Matcher<'_, '_> {
    fn reset(&mut self) {
        Matcher::reset(self);
    }
    fn line(&mut self, line: &[u8]) {
        Matcher::line(self, line);
    }
    fn too_long(&mut self) {
        Matcher::too_long(self);
    }
}

/// [`match_output`] one line at a time, for an output read as a stream
/// (several files in turn: a batch's output and error files).
pub struct Matcher<'e, 'v> {
    decode: &'e dyn Decode,
    expected: &'e HashMap<String, Expect<'v>>,
    seen: HashSet<String>,
    out: Matched,
    /// What the files read whole hold ([`Matcher::file_done`]).
    base: Option<(HashSet<String>, Matched)>,
    /// The key of each request id, where ids are not the keys.
    keys: Option<HashMap<String, String>>,
}

impl<'e, 'v> Matcher<'e, 'v> {
    /// A matcher of lines `decode` reads.
    pub fn of(expected: &'e HashMap<String, Expect<'v>>, decode: &'e dyn Decode) -> Self {
        Self {
            decode,
            expected,
            seen: HashSet::new(),
            out: Matched::default(),
            base: None,
            keys: None,
        }
    }

    /// Reads request ids as keys through `keys` (every id of the job's
    /// rows and golden rows; `None`: the ids are the keys).
    pub fn with_keys(mut self, keys: Option<HashMap<String, String>>) -> Self {
        self.keys = keys;
        self
    }

    /// Forgets every line taken since the last finished file (a download
    /// started again).
    pub fn reset(&mut self) {
        match &self.base {
            Some((seen, out)) => {
                self.seen = seen.clone();
                self.out = out.clone();
            }
            None => {
                self.seen.clear();
                self.out = Matched::default();
            }
        }
    }

    /// One file was read whole: a retried download of the next one starts
    /// from here, not from nothing.
    pub fn file_done(&mut self) {
        self.base = Some((self.seen.clone(), self.out.clone()));
    }

    /// One line of the output (without its newline).
    pub fn line(&mut self, raw: &[u8]) {
        let raw = String::from_utf8_lossy(raw);
        if raw.trim().is_empty() {
            return;
        }
        let Ok(line) = serde_json::from_str::<Value>(&raw) else {
            self.out.unreadable += 1;
            return;
        };
        let Some(id) = line.get(self.decode.id_field()).and_then(Value::as_str) else {
            self.out.unreadable += 1;
            return;
        };
        let golden;
        let key = match &self.keys {
            Some(keys) => match keys.get(id) {
                Some(key) => key.as_str(),
                None => match crate::tags::golden_key(id) {
                    Some(g) => {
                        golden = g;
                        golden.as_str()
                    }
                    None => {
                        self.out.unexpected.push(id.to_string());
                        return;
                    }
                },
            },
            None => id,
        };
        if let Some(golden) = key.strip_prefix(GOLDEN_PREFIX) {
            if self.seen.insert(key.to_string()) {
                self.out.golden.push(self.decode.golden(golden, &line));
            }
            return;
        }
        match self.expected.get(key) {
            Some(expect) if self.seen.insert(key.to_string()) => {
                match self.decode.outcome(key, &line, &raw, expect) {
                    Some(o) => self.out.outcomes.push(o),
                    // Never run: not an answer; FinishJob returns the row.
                    None => {
                        self.seen.remove(key);
                        self.out.unanswered.push(key.to_string());
                    }
                }
            }
            Some(_) | None => self.out.unexpected.push(key.to_string()),
        }
    }

    /// A line longer than the reader keeps: unreadable.
    pub fn too_long(&mut self) {
        self.out.unreadable += 1;
    }

    pub fn finish(self) -> Matched {
        self.out
    }
}

/// The answer in `text`, ended by `finish`, as the row's expectation takes
/// it: the result, or why it is none. Every provider's answer text is
/// judged here: a finish reason that withholds the answer is BLOCKED (the
/// one list, core's), one that does not end it normally leaves it
/// incomplete.
// The failure is the outcome itself, as in `answer`.
#[allow(clippy::result_large_err)]
pub(crate) fn judge_text(
    text: String,
    finish: &str,
    expect: &Expect<'_>,
) -> Result<String, pb::Failure> {
    if tally_core::classify::withholds_answer(finish) {
        return Err(pb::Failure {
            kind: pb::FailureKind::Blocked as i32,
            finish_reason: finish.to_string(),
            message: format!("answer withheld: finish reason {finish}"),
            ..Default::default()
        });
    }
    if !tally_core::classify::ends_normally(finish) {
        // Cut short (MAX_TOKENS: the output budget, thinking included) or
        // ended abnormally (OTHER, LANGUAGE, …): not an answer, even in text
        // mode. The server's rules (and the ledger's overrides) decide
        // whether a retry can help.
        let kind = if text.trim().is_empty() {
            pb::FailureKind::EmptyResponse
        } else {
            pb::FailureKind::InvalidOutput
        };
        return Err(pb::Failure {
            kind: kind as i32,
            finish_reason: finish.to_string(),
            message: format!("the answer is incomplete: finish reason {finish}"),
            ..Default::default()
        });
    }
    if text.trim().is_empty() {
        return Err(pb::Failure {
            kind: pb::FailureKind::EmptyResponse as i32,
            finish_reason: finish.to_string(),
            message: "the answer has no text".into(),
            ..Default::default()
        });
    }
    if !expect.json {
        return Ok(Value::String(text).to_string());
    }
    let invalid = |message: String| pb::Failure {
        kind: pb::FailureKind::InvalidOutput as i32,
        finish_reason: finish.to_string(),
        message: truncate(&message),
        ..Default::default()
    };
    let value: Value = serde_json::from_str(text.trim())
        .map_err(|e| invalid(format!("the answer is not JSON: {e}")))?;
    if let Some(schema) = expect.schema {
        let errors: Vec<String> = schema
            .iter_errors(&value)
            .take(3)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        if !errors.is_empty() {
            return Err(invalid(format!(
                "the answer does not match the schema: {}",
                errors.join("; ")
            )));
        }
    }
    Ok(value.to_string())
}

pub(crate) fn str_at<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// The model version an answer names at `key` of `v` (`modelVersion`,
/// `model`), at most 256 bytes (as tally takes it); empty when none.
pub(crate) fn version_at(v: Option<&Value>, key: &str) -> String {
    let s = v.map(|v| str_at(v, key)).unwrap_or_default();
    let mut end = s.len().min(256);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].chars().filter(|c| !c.is_control()).collect()
}

pub(crate) fn truncate(s: &str) -> String {
    if s.len() <= MAX_MESSAGE {
        return s.to_string();
    }
    let mut end = MAX_MESSAGE;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const JSON: Expect<'static> = Expect {
        schema: None,
        json: true,
    };

    #[test]
    fn long_messages_are_truncated_on_a_char_boundary() {
        let s = "é".repeat(MAX_MESSAGE);
        let t = truncate(&s);
        assert!(t.len() <= MAX_MESSAGE && t.chars().all(|c| c == 'é'));
    }

    // Invariant: one list of finish reasons withholds an answer at every
    // provider, whatever its case; a reason that does not end the answer
    // normally leaves it incomplete, with or without text.
    #[test]
    fn finish_reasons_are_judged_alike_at_every_provider() {
        let kind = |finish: &str, text: &str| match judge_text(text.into(), finish, &JSON) {
            Ok(_) => None,
            Err(f) => Some(f.kind()),
        };
        for blocked in [
            "SAFETY",
            "content_filter",
            "refusal",
            "IMAGE_PROHIBITED_CONTENT",
        ] {
            assert_eq!(
                kind(blocked, "{}"),
                Some(pb::FailureKind::Blocked),
                "{blocked}"
            );
        }
        for normal in ["STOP", "stop", "end_turn", "stop_sequence", ""] {
            assert_eq!(kind(normal, "{}"), None, "{normal}");
        }
        assert_eq!(kind("length", "{"), Some(pb::FailureKind::InvalidOutput));
        assert_eq!(kind("MAX_TOKENS", ""), Some(pb::FailureKind::EmptyResponse));
    }
}
