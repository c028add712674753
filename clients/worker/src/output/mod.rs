//! Reading a finished batch's output: lines matched to rows by `key`
//! (output order is not input order), and each line turned into the row's
//! outcome. The worker reports facts (text, finish reason, block reason,
//! error code and status); the server's classifier decides what they mean.
//! Pure: no I/O.
//!
//! - an `error` object → PROVIDER_ERROR with its code and `status`: a
//!   `google.rpc.Status` (gRPC `code`, no `status`) as `grpc_code`, the REST
//!   shape (HTTP `code` and `status`) as `http_code` (the server decides
//!   what each means);
//! - `promptFeedback.blockReason` or a blocking finish reason → BLOCKED;
//! - a finish reason other than STOP (MAX_TOKENS, OTHER, LANGUAGE, …) →
//!   INVALID_OUTPUT with the reason (EMPTY_RESPONSE without text), in text
//!   mode too: the answer was cut short;
//! - no text → EMPTY_RESPONSE (with the finish reason, if any);
//! - text that is not JSON or fails the row's schema → INVALID_OUTPUT;
//! - otherwise the parsed JSON is the result.
//!
//! Every outcome carries the line's `usageMetadata`, so tokens spent on
//! failures are counted too. Rows absent from the output are not reported
//! here: FinishJob turns them into `missing_from_output`.

use std::collections::{HashMap, HashSet};

use serde_json::Value;
use tally_proto::v1 as pb;

pub mod anthropic;
pub mod openai;

/// Finish reasons that mean the answer was withheld (as the design's
/// classifier lists them, plus image safety).
const BLOCKING_FINISH_REASONS: [&str; 6] = [
    "SAFETY",
    "RECITATION",
    "BLOCKLIST",
    "PROHIBITED_CONTENT",
    "SPII",
    "IMAGE_SAFETY",
];

/// Longest message kept in a failure (the server keeps 2 KiB).
const MAX_MESSAGE: usize = 2048;

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

/// What a batch's `batchStats` says its output holds (successful plus
/// failed requests), when it says (counts are JSON strings, zeros left
/// out), and whether that differs from `lines` found: `Some(expected)`
/// on a mismatch.
pub fn stats_mismatch(resource: &Value, lines: u64) -> Option<u64> {
    let stats = resource["metadata"]["batchStats"]
        .as_object()
        .or_else(|| resource["batchStats"].as_object())?;
    let count = |name: &str| -> u64 {
        match &stats.get(name) {
            Some(Value::String(s)) => s.parse().unwrap_or(0),
            Some(Value::Number(n)) => n.as_u64().unwrap_or(0),
            _ => 0,
        }
    };
    let expected = count("successfulRequestCount") + count("failedRequestCount");
    (expected != lines).then_some(expected)
}

/// The key prefix of a golden row's line in a batch.
pub use crate::tags::GOLDEN_PREFIX;

/// A golden line's answer: its text, or why it has none.
fn golden_answer(key: &str, line: &Value) -> pb::GoldenAnswer {
    let response = &line["response"];
    let text: String = response["candidates"][0]["content"]["parts"]
        .as_array()
        .map(|parts| parts.iter().filter_map(|p| p["text"].as_str()).collect())
        .unwrap_or_default();
    let error = if let Some(e) = line.get("error") {
        format!("provider error: {}", str_at(e, "message"))
    } else if text.is_empty() {
        "no answer text".to_owned()
    } else {
        String::new()
    };
    pb::GoldenAnswer {
        key: key.to_owned(),
        text: text.chars().take(64 * 1024 / 4).collect(),
        model_version: str_at(response, "modelVersion").chars().take(256).collect(),
        error: error.chars().take(MAX_MESSAGE).collect(),
    }
}

/// Matches output lines to `expected` rows by key and turns each into an
/// outcome. A key seen twice keeps its first line.
pub fn match_output(jsonl: &[u8], expected: &HashMap<String, Expect<'_>>) -> Matched {
    let mut m = Matcher::new(expected);
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

/// The shape of a provider's output lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Gemini: `{key, response | error}`.
    Gemini,
    /// OpenAI: `{custom_id, response: {status_code, body} | null, error}`
    /// ([`openai`]).
    OpenAi,
    /// Anthropic: `{custom_id, result: {type, message | error}}`
    /// ([`anthropic`]), custom_ids made from the keys
    /// ([`crate::tags::RequestIds`]).
    Anthropic,
}

impl Format {
    /// The field holding a line's row key.
    fn key_field(self) -> &'static str {
        match self {
            Format::Gemini => "key",
            Format::OpenAi | Format::Anthropic => "custom_id",
        }
    }

    /// The output format of `api`'s batches.
    pub fn of(api: tally_core::provider::Api) -> Self {
        match api {
            tally_core::provider::Api::Gemini => Format::Gemini,
            tally_core::provider::Api::OpenAi => Format::OpenAi,
            tally_core::provider::Api::Anthropic => Format::Anthropic,
        }
    }
}

/// [`match_output`] one line at a time, for an output read as a stream
/// (several files in turn: a batch's output and error files).
pub struct Matcher<'e, 'v> {
    expected: &'e HashMap<String, Expect<'v>>,
    seen: HashSet<String>,
    out: Matched,
    format: Format,
    /// What the files read whole hold ([`Matcher::file_done`]).
    base: Option<(HashSet<String>, Matched)>,
    /// The key of each request id, where ids are not the keys.
    keys: Option<HashMap<String, String>>,
}

impl<'e, 'v> Matcher<'e, 'v> {
    pub fn new(expected: &'e HashMap<String, Expect<'v>>) -> Self {
        Self::of(expected, Format::Gemini)
    }

    /// A matcher of `format` lines.
    pub fn of(expected: &'e HashMap<String, Expect<'v>>, format: Format) -> Self {
        Self {
            expected,
            seen: HashSet::new(),
            out: Matched::default(),
            format,
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
        let Some(id) = line.get(self.format.key_field()).and_then(Value::as_str) else {
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
                self.out.golden.push(match self.format {
                    Format::Gemini => golden_answer(golden, &line),
                    Format::OpenAi => openai::golden_answer(golden, &line),
                    Format::Anthropic => anthropic::golden_answer(golden, &line),
                });
            }
            return;
        }
        match self.expected.get(key) {
            Some(expect) if self.seen.insert(key.to_string()) => match self.format {
                Format::Gemini => self.out.outcomes.push(outcome(key, &line, expect)),
                Format::OpenAi | Format::Anthropic => {
                    let got = match self.format {
                        Format::Anthropic => anthropic::outcome(key, &line, expect),
                        _ => openai::outcome(key, &line, &raw, expect),
                    };
                    match got {
                        Some(o) => self.out.outcomes.push(o),
                        // Never run (the batch expired or was cancelled
                        // first): not an answer; FinishJob returns the row.
                        None => {
                            self.seen.remove(key);
                            self.out.unanswered.push(key.to_string());
                        }
                    }
                }
            },
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

/// The outcome of one output line.
pub fn outcome(key: &str, line: &Value, expect: &Expect<'_>) -> pb::RowOutcome {
    let response = line.get("response");
    let usage = response.and_then(|r| r.get("usageMetadata")).map(usage);
    let result = match line.get("error") {
        Some(error) => Err(provider_error(error)),
        None => match response {
            None => Err(pb::Failure {
                kind: pb::FailureKind::EmptyResponse as i32,
                message: "output line has neither `response` nor `error`".into(),
                ..Default::default()
            }),
            Some(r) => answer(r, expect),
        },
    };
    pb::RowOutcome {
        key: key.to_string(),
        outcome: Some(match result {
            Ok(value) => pb::row_outcome::Outcome::Result(value),
            Err(failure) => pb::row_outcome::Outcome::Failure(failure),
        }),
        usage,
        ..Default::default()
    }
}

/// An output line's `error`. The provider writes a `google.rpc.Status`: a
/// gRPC canonical `code` (3 is INVALID_ARGUMENT, not an HTTP code) and no
/// `status` name. A `status` name marks the REST shape, whose `code` is
/// HTTP. A code above 16 cannot be a gRPC code, so it is HTTP either way.
fn provider_error(error: &Value) -> pb::Failure {
    let code = error
        .get("code")
        .and_then(Value::as_i64)
        .and_then(|c| i32::try_from(c).ok())
        .unwrap_or(0);
    let status = str_at(error, "status").to_string();
    let (http_code, grpc_code) = if status.is_empty() && (1..=16).contains(&code) {
        (0, code)
    } else {
        (code.max(0), 0)
    };
    pb::Failure {
        kind: pb::FailureKind::ProviderError as i32,
        http_code,
        grpc_code,
        status,
        message: truncate(str_at(error, "message")),
        retry_delay: retry_delay(error),
        ..Default::default()
    }
}

/// `google.rpc.RetryInfo` among the error's details (`"retryDelay": "5s"`):
/// in per-line errors and in the body of an HTTP error alike.
pub(crate) fn retry_delay(error: &Value) -> Option<prost_types::Duration> {
    let details = error.get("details")?.as_array()?;
    details.iter().find_map(|d| {
        let text = d.get("retryDelay")?.as_str()?;
        let secs: f64 = text.strip_suffix('s')?.parse().ok()?;
        (secs.is_finite() && secs >= 0.0).then(|| prost_types::Duration {
            seconds: secs.trunc() as i64,
            nanos: (secs.fract() * 1e9) as i32,
        })
    })
}

/// The `quotaId`s of a `google.rpc.QuotaFailure` among the error's
/// details (`"violations": [{"quotaId": "…PerDay…"}]`), at most 16.
pub(crate) fn quota_ids(error: &Value) -> Vec<String> {
    let Some(details) = error.get("details").and_then(Value::as_array) else {
        return Vec::new();
    };
    details
        .iter()
        .filter_map(|d| d.get("violations")?.as_array())
        .flatten()
        .filter_map(|v| v.get("quotaId")?.as_str())
        .take(16)
        .map(|id| id.chars().take(256).collect())
        .collect()
}

// The failure is the outcome itself (built once per row), not an error
// passed up a call chain: boxing it would buy nothing.
#[allow(clippy::result_large_err)]
fn answer(response: &Value, expect: &Expect<'_>) -> Result<String, pb::Failure> {
    let block_reason = response
        .get("promptFeedback")
        .map(|f| str_at(f, "blockReason"))
        .unwrap_or_default();
    if !block_reason.is_empty() && block_reason != "BLOCK_REASON_UNSPECIFIED" {
        return Err(pb::Failure {
            kind: pb::FailureKind::Blocked as i32,
            block_reason: block_reason.to_string(),
            message: format!("prompt blocked: {block_reason}"),
            ..Default::default()
        });
    }
    let candidate = response
        .get("candidates")
        .and_then(Value::as_array)
        .and_then(|c| c.first());
    let finish = candidate
        .map(|c| str_at(c, "finishReason"))
        .unwrap_or_default();
    if BLOCKING_FINISH_REASONS.contains(&finish) {
        return Err(pb::Failure {
            kind: pb::FailureKind::Blocked as i32,
            finish_reason: finish.to_string(),
            message: format!("answer withheld: finish reason {finish}"),
            ..Default::default()
        });
    }
    let text: String = candidate
        .and_then(|c| c.get("content"))
        .and_then(|c| c.get("parts"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|p| p.get("thought").and_then(Value::as_bool) != Some(true))
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .collect();
    let complete = matches!(finish, "" | "STOP" | "FINISH_REASON_UNSPECIFIED");
    judge_text(text, finish, complete, expect)
}

/// The answer in `text`, ended by `finish` (`complete`: normally), as the
/// row's expectation takes it: the result, or why it is none. Every
/// provider's answer text is judged here.
// The failure is the outcome itself, as in `answer`.
#[allow(clippy::result_large_err)]
pub(crate) fn judge_text(
    text: String,
    finish: &str,
    complete: bool,
    expect: &Expect<'_>,
) -> Result<String, pb::Failure> {
    if !complete {
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

pub(crate) fn usage(meta: &Value) -> pb::Usage {
    let n = |k: &str| meta.get(k).and_then(Value::as_i64).unwrap_or(0);
    pb::Usage {
        input_tokens: n("promptTokenCount"),
        output_tokens: n("candidatesTokenCount"),
        thinking_tokens: n("thoughtsTokenCount"),
        cached_tokens: n("cachedContentTokenCount"),
        cache_write_tokens: 0,
    }
}

pub(crate) fn str_at<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
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
    use pb::row_outcome::Outcome;
    use serde_json::json;

    fn failure(o: &pb::RowOutcome) -> &pb::Failure {
        match &o.outcome {
            Some(Outcome::Failure(f)) => f,
            other => panic!("expected a failure, got {other:?}"),
        }
    }

    fn text_line(key: &str, text: &str, finish: &str) -> String {
        json!({"key": key, "response": {
            "candidates": [{"content": {"parts": [{"text": text}], "role": "model"}, "finishReason": finish}],
            "usageMetadata": {"promptTokenCount": 7, "candidatesTokenCount": 3, "totalTokenCount": 10}
        }})
        .to_string()
    }

    /// Lines are matched by key whatever their order; every fault kind
    /// becomes the outcome the server needs to classify it; keys the job
    /// does not hold and unreadable lines are set aside, not reported.
    /// A request that did not ask for JSON.
    const PLAIN_TEXT: Expect<'static> = Expect {
        schema: None,
        json: false,
    };

    /// The same expectation for each of `keys`.
    fn expect_all<'a>(keys: &[&str], e: Expect<'a>) -> HashMap<String, Expect<'a>> {
        keys.iter().map(|k| (k.to_string(), e)).collect()
    }

    #[test]
    fn every_kind_of_line_becomes_its_outcome() {
        let schema = jsonschema::validator_for(&json!({
            "type": "object", "required": ["summary"],
            "properties": {"summary": {"type": "string"}}
        }))
        .unwrap();
        let lines = [
            text_line("ok", r#"{"summary": "fine"}"#, "STOP"),
            text_line("schema", r#"{"other": 1}"#, "STOP"),
            text_line("notjson", "not json {", "STOP"),
            text_line("empty", "", "STOP"),
            json!({"key": "safety", "response": {"candidates": [{"finishReason": "SAFETY"}],
                   "usageMetadata": {"promptTokenCount": 5}}})
            .to_string(),
            json!({"key": "blocked", "response": {"promptFeedback": {"blockReason": "SAFETY"},
                   "usageMetadata": {"promptTokenCount": 4}}})
            .to_string(),
            json!({"key": "e429", "error": {"code": 429, "message": "slow", "status": "RESOURCE_EXHAUSTED",
                   "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1.5s"}]}})
            .to_string(),
            json!({"key": "e400", "error": {"code": 400, "message": "bad", "status": "INVALID_ARGUMENT"}})
                .to_string(),
            json!({"key": "stranger", "response": {}}).to_string(),
            text_line("ok", r#"{"summary": "second copy"}"#, "STOP"),
            "garbage".to_string(),
            String::new(),
        ];
        let jsonl = lines.join("\n");
        let keys = [
            "ok", "schema", "notjson", "empty", "safety", "blocked", "e429", "e400", "absent",
        ];
        let expected = expect_all(
            &keys,
            Expect {
                schema: Some(&schema),
                json: true,
            },
        );
        let m = match_output(jsonl.as_bytes(), &expected);
        assert_eq!(m.unexpected, vec!["stranger".to_string(), "ok".to_string()]);
        assert_eq!(m.unreadable, 1);
        let by: HashMap<&str, &pb::RowOutcome> =
            m.outcomes.iter().map(|o| (o.key.as_str(), o)).collect();
        assert_eq!(by.len(), 8, "absent is not reported");

        match &by["ok"].outcome {
            Some(Outcome::Result(r)) => assert_eq!(r, r#"{"summary":"fine"}"#),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            by["ok"].usage,
            Some(pb::Usage {
                input_tokens: 7,
                output_tokens: 3,
                ..Default::default()
            })
        );
        let kind = |k: &str| failure(by[k]).kind();
        assert_eq!(kind("schema"), pb::FailureKind::InvalidOutput);
        assert_eq!(kind("notjson"), pb::FailureKind::InvalidOutput);
        assert_eq!(kind("empty"), pb::FailureKind::EmptyResponse);
        assert_eq!(kind("safety"), pb::FailureKind::Blocked);
        assert_eq!(failure(by["safety"]).finish_reason, "SAFETY");
        assert_eq!(by["safety"].usage.unwrap().input_tokens, 5);
        assert_eq!(kind("blocked"), pb::FailureKind::Blocked);
        assert_eq!(failure(by["blocked"]).block_reason, "SAFETY");
        let e = failure(by["e429"]);
        assert_eq!(
            (e.kind(), e.http_code, e.status.as_str()),
            (pb::FailureKind::ProviderError, 429, "RESOURCE_EXHAUSTED")
        );
        assert_eq!(
            e.retry_delay,
            Some(prost_types::Duration {
                seconds: 1,
                nanos: 500_000_000
            })
        );
        assert_eq!(failure(by["e400"]).http_code, 400);
        assert_eq!(by["e400"].usage, None);
    }

    /// Without a schema any JSON answer is a result; thought parts are not
    /// part of the answer.
    #[test]
    fn without_a_schema_any_json_is_a_result() {
        let line = json!({"key": "k", "response": {"candidates": [{"content": {"parts": [
            {"text": "thinking...", "thought": true}, {"text": "[1, 2]"}]}, "finishReason": "STOP"}]}});
        let o = outcome(
            "k",
            &line,
            &Expect {
                schema: None,
                json: true,
            },
        );
        assert_eq!(o.outcome, Some(Outcome::Result("[1,2]".into())));
    }

    /// A request that did not ask for JSON gets its text back as the
    /// result (a JSON string), not an invalid-output failure.
    #[test]
    fn a_plain_text_answer_is_the_result_when_json_was_not_asked_for() {
        let line = json!({"key": "k", "response": {"candidates": [{"content": {"parts": [
            {"text": "Hello \"there\""}]}, "finishReason": "STOP"}]}});
        let plain = Expect {
            schema: None,
            json: false,
        };
        assert_eq!(
            outcome("k", &line, &plain).outcome,
            Some(Outcome::Result(r#""Hello \"there\"""#.into()))
        );
        let json = Expect {
            schema: None,
            json: true,
        };
        assert!(matches!(
            outcome("k", &line, &json).outcome,
            Some(Outcome::Failure(_))
        ));
    }

    #[test]
    fn long_messages_are_truncated_on_a_char_boundary() {
        let s = "é".repeat(MAX_MESSAGE);
        let t = truncate(&s);
        assert!(t.len() <= MAX_MESSAGE && t.chars().all(|c| c == 'é'));
    }

    #[test]
    fn grpc_status_lines_report_a_grpc_code_not_an_http_one() {
        // Invariant: `{"code": 3}` without a status is INVALID_ARGUMENT, never
        // "HTTP 3"; a code that cannot be gRPC stays HTTP.
        let expected = expect_all(&["g3", "g1", "h503"], PLAIN_TEXT);
        let jsonl = [
            json!({"key": "g3", "error": {"code": 3, "message": "Request contains an invalid argument."}}),
            json!({"key": "g1", "error": {"code": 1, "message": "The operation was cancelled."}}),
            json!({"key": "h503", "error": {"code": 503, "message": "overloaded"}}),
        ]
        .map(|l| l.to_string())
        .join("\n");
        let m = match_output(jsonl.as_bytes(), &expected);
        let by: HashMap<&str, &pb::Failure> = m
            .outcomes
            .iter()
            .map(|o| (o.key.as_str(), failure(o)))
            .collect();
        assert_eq!((by["g3"].grpc_code, by["g3"].http_code), (3, 0));
        assert_eq!((by["g1"].grpc_code, by["g1"].http_code), (1, 0));
        assert_eq!((by["h503"].grpc_code, by["h503"].http_code), (0, 503));
        assert_eq!(by["g3"].status, "");
    }

    #[test]
    fn an_answer_cut_short_is_a_failure_with_its_finish_reason() {
        let expected = expect_all(&["max", "other", "thought"], PLAIN_TEXT);
        let jsonl = [
            text_line("max", "half an ans", "MAX_TOKENS"),
            text_line("other", "partial", "OTHER"),
            text_line("thought", "", "MAX_TOKENS"),
        ]
        .join("\n");
        let m = match_output(jsonl.as_bytes(), &expected);
        let by: HashMap<&str, &pb::Failure> = m
            .outcomes
            .iter()
            .map(|o| (o.key.as_str(), failure(o)))
            .collect();
        assert_eq!(by["max"].kind(), pb::FailureKind::InvalidOutput);
        assert_eq!(by["max"].finish_reason, "MAX_TOKENS");
        assert_eq!(by["other"].finish_reason, "OTHER");
        assert_eq!(by["thought"].kind(), pb::FailureKind::EmptyResponse);
    }

    // Invariant: golden lines are answers apart from the rows: never an
    // outcome, never unexpected; their text, model version or error kept.
    #[test]
    fn golden_lines_are_kept_apart() {
        let jsonl = concat!(
            r##"{"key": "#golden/g1", "response": {"candidates": [{"content": {"parts": [{"text": "{\"label\": \"pos\"}"}]}, "finishReason": "STOP"}], "modelVersion": "m-2"}}"##,
            "\n",
            r##"{"key": "#golden/g2", "error": {"code": 13, "message": "boom"}}"##,
            "\n",
        );
        let m = match_output(jsonl.as_bytes(), &HashMap::new());
        assert!(m.outcomes.is_empty() && m.unexpected.is_empty());
        assert_eq!(m.golden.len(), 2);
        assert_eq!(m.golden[0].key, "g1");
        assert_eq!(m.golden[0].text, r#"{"label": "pos"}"#);
        assert_eq!(m.golden[0].model_version, "m-2");
        assert!(m.golden[0].error.is_empty());
        assert_eq!(m.golden[1].error, "provider error: boom");
    }

    // Invariant: batchStats (strings, zeros omitted) are compared with the
    // lines found; only a difference is reported.
    #[test]
    fn batch_stats_are_compared_with_the_lines_found() {
        let r = json!({"metadata": {"batchStats": {"requestCount": "5", "successfulRequestCount": "4", "failedRequestCount": "1"}}});
        assert_eq!(stats_mismatch(&r, 5), None);
        assert_eq!(stats_mismatch(&r, 3), Some(5));
        let zeros_omitted = json!({"metadata": {"batchStats": {"requestCount": "2", "successfulRequestCount": "2"}}});
        assert_eq!(stats_mismatch(&zeros_omitted, 2), None);
        assert_eq!(
            stats_mismatch(&json!({"metadata": {}}), 7),
            None,
            "no stats: nothing to compare"
        );
    }
}
