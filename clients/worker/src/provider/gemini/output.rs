//! Gemini batch output lines, to outcomes. Pure.
//!
//! A line is `{key, response | error}`:
//!
//! - an `error` object → PROVIDER_ERROR with its code and `status`: a
//!   `google.rpc.Status` (gRPC `code`, no `status`) as `grpc_code`, the REST
//!   shape (HTTP `code` and `status`) as `http_code` (the server decides
//!   what each means);
//! - `promptFeedback.blockReason` → BLOCKED; otherwise the first
//!   candidate's text (thought parts left out) is judged like every
//!   provider's ([`judge_text`]).
//!
//! Every outcome carries the line's `usageMetadata`, so tokens spent on
//! failures are counted too.

use serde_json::Value;
use tally_proto::v1 as pb;

use crate::output::{Expect, MAX_MESSAGE, judge_text, str_at, truncate, version_at};

/// What a batch's `batchStats` says its output holds (successful plus
/// failed requests), when it says (counts are JSON strings, zeros left
/// out).
pub fn expected_lines(resource: &Value) -> Option<u64> {
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
    Some(count("successfulRequestCount") + count("failedRequestCount"))
}

/// A golden line's answer: its text, or why it has none.
pub fn golden_answer(key: &str, line: &Value) -> pb::GoldenAnswer {
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
        model_version: version_at(response, "modelVersion"),
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
pub(crate) fn error_codes(error: &Value) -> Vec<String> {
    let Some(details) = error.get("details").and_then(Value::as_array) else {
        return Vec::new();
    };
    // QuotaFailure's quota ids, then ErrorInfo's reasons (API_KEY_INVALID).
    let quotas = details
        .iter()
        .filter_map(|d| d.get("violations")?.as_array())
        .flatten()
        .filter_map(|v| v.get("quotaId")?.as_str());
    let reasons = details.iter().filter_map(|d| d.get("reason")?.as_str());
    quotas
        .chain(reasons)
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
    let text: String = candidate
        .and_then(|c| c.get("content"))
        .and_then(|c| c.get("parts"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|p| p.get("thought").and_then(Value::as_bool) != Some(true))
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .collect();
    judge_text(text, finish, expect)
}

fn usage(meta: &Value) -> pb::Usage {
    let n = |k: &str| meta.get(k).and_then(Value::as_i64).unwrap_or(0);
    pb::Usage {
        input_tokens: n("promptTokenCount"),
        output_tokens: n("candidatesTokenCount"),
        thinking_tokens: n("thoughtsTokenCount"),
        cached_tokens: n("cachedContentTokenCount"),
        cache_write_tokens: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::match_output;
    use pb::row_outcome::Outcome;
    use serde_json::json;
    use std::collections::HashMap;

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
        let m = match_output(jsonl.as_bytes(), &expected, &super::super::GeminiWire);
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
        let m = match_output(jsonl.as_bytes(), &expected, &super::super::GeminiWire);
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
        let m = match_output(jsonl.as_bytes(), &expected, &super::super::GeminiWire);
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
        let m = match_output(jsonl.as_bytes(), &HashMap::new(), &super::super::GeminiWire);
        assert!(m.outcomes.is_empty() && m.unexpected.is_empty());
        assert_eq!(m.golden.len(), 2);
        assert_eq!(m.golden[0].key, "g1");
        assert_eq!(m.golden[0].text, r#"{"label": "pos"}"#);
        assert_eq!(m.golden[0].model_version, "m-2");
        assert!(m.golden[0].error.is_empty());
        assert_eq!(m.golden[1].error, "provider error: boom");
    }

    // Invariant: batchStats (strings, zeros omitted) say how many lines the
    // output holds; without them there is nothing to compare.
    #[test]
    fn batch_stats_say_how_many_lines_the_output_holds() {
        let r = json!({"metadata": {"batchStats": {"requestCount": "5", "successfulRequestCount": "4", "failedRequestCount": "1"}}});
        assert_eq!(expected_lines(&r), Some(5));
        let zeros_omitted = json!({"metadata": {"batchStats": {"requestCount": "2", "successfulRequestCount": "2"}}});
        assert_eq!(expected_lines(&zeros_omitted), Some(2));
        assert_eq!(
            expected_lines(&json!({"metadata": {}})),
            None,
            "no stats: nothing to compare"
        );
    }
}
