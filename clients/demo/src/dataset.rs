//! The demo's sample dataset and the faults the emulator injects into it.
//! Pure and deterministic: the same rows every run, so a second run enrolls
//! nothing new.

use serde_json::json;

/// The prompt every row is rendered with.
pub const PROMPT_ID: &str = "summarize";
pub const PROMPT_VERSION: &str = "v1";
pub const TEMPLATE: &str =
    "Summarise the article \"{{ title }}\" ({{ words }} words) in one sentence.";
pub const SCHEMA: &str =
    r#"{"type":"object","required":["summary"],"properties":{"summary":{"type":"string"}}}"#;

/// One row to enroll.
#[derive(Debug, Clone, PartialEq)]
pub struct SampleRow {
    pub key: String,
    pub payload: String,
    pub depends_on: Vec<String>,
}

/// What each group of keys is made to go through, for the closing table.
pub const GROUPS: &[(&str, usize, &str)] = &[
    ("article-", 160, "answered first time"),
    ("flaky-", 12, "429 twice, then answered (retried)"),
    ("busy-", 8, "503 once, then answered (retried)"),
    ("unsafe-", 4, "blocked for safety -> PERMANENT"),
    ("nsfw-", 3, "prompt blocked -> PERMANENT"),
    ("empty-", 3, "empty answer -> PERMANENT (invalid output)"),
    (
        "garbled-",
        3,
        "answer not valid for the schema -> PERMANENT",
    ),
    ("bad-", 3, "provider 400 -> PERMANENT"),
    (
        "lost-",
        2,
        "missing from every output -> PERMANENT after the infra budget",
    ),
    (
        "chapter-",
        4,
        "chapter-1 blocked for safety; chapters 2-4 wait on it -> BLOCKED",
    ),
];

/// Every row of the dataset, in enrollment order (dependencies first).
pub fn rows() -> Vec<SampleRow> {
    let mut out = Vec::new();
    for &(prefix, n, _) in GROUPS {
        for i in 1..=n {
            let key = format!("{prefix}{i}");
            let depends_on = if prefix == "chapter-" && i > 1 {
                vec![format!("{prefix}{}", i - 1)]
            } else {
                Vec::new()
            };
            let payload = json!({
                "title": format!("{} {i}", prefix.trim_end_matches('-')),
                "words": 300 + 17 * i,
            })
            .to_string();
            out.push(SampleRow {
                key,
                payload,
                depends_on,
            });
        }
    }
    out
}

/// The emulator's fault plan for [`rows`]: per key prefix, plus one whole
/// batch that fails (its rows come back and succeed on the next attempt).
pub fn faults() -> gemini_emulator::faults::FaultPlan {
    serde_json::from_value(json!({
        "rows": [
            {"match": {"key_prefix": "flaky-"}, "fault": {"kind": "transient", "code": 429, "times": 2}},
            {"match": {"key_prefix": "busy-"}, "fault": {"kind": "transient", "code": 503, "times": 1}},
            {"match": {"key_prefix": "unsafe-"}, "fault": {"kind": "safety"}},
            {"match": {"key_prefix": "nsfw-"}, "fault": {"kind": "prompt_blocked"}},
            {"match": {"key_prefix": "empty-"}, "fault": {"kind": "empty_text"}},
            {"match": {"key_prefix": "garbled-"}, "fault": {"kind": "invalid_json"}},
            {"match": {"key_prefix": "bad-"}, "fault": {"kind": "permanent_error", "code": 400}},
            {"match": {"key_prefix": "lost-"}, "fault": {"kind": "missing"}},
            {"match": {"key": "chapter-1"}, "fault": {"kind": "safety"}}
        ],
        "jobs": [
            {"match": {"nth": 2}, "fault": {"kind": "failed", "message": "the provider lost the batch"}}
        ],
        "create_429": {"times": 1, "retry_after_secs": 1}
    }))
    .expect("the demo's fault plan is valid")
}

/// The same groups on OpenAI's Batch API (`--provider openai`), as OpenAI
/// answers them: `unsafe-` and `chapter-1` are content-filtered, `nsfw-`
/// refused, `empty-` cut at the token limit, 429 and 503 as the request's
/// own status; the second batch expires with 20 rows answered (the rest
/// never ran: they come back without an attempt and succeed later).
pub fn openai_faults() -> openai_emulator::FaultPlan {
    let http = |status: u16, code: &str, kind: &str| json!({"kind": "http_error", "status": status, "code": code, "type": kind, "message": format!("{code} (demo fault)")});
    serde_json::from_value(json!({
        "rows": [
            {"match": {"custom_id_prefix": "flaky-"}, "fault": http(429, "rate_limit_exceeded", "requests"), "times": 2},
            {"match": {"custom_id_prefix": "busy-"}, "fault": http(503, "server_error", "server_error"), "times": 1},
            {"match": {"custom_id_prefix": "unsafe-"}, "fault": {"kind": "content_filter"}},
            {"match": {"custom_id_prefix": "nsfw-"}, "fault": {"kind": "refusal"}},
            {"match": {"custom_id_prefix": "empty-"}, "fault": {"kind": "length"}},
            {"match": {"custom_id_prefix": "garbled-"}, "fault": {"kind": "invalid_json"}},
            {"match": {"custom_id_prefix": "bad-"}, "fault": http(400, "invalid_value", "invalid_request_error")},
            {"match": {"custom_id_prefix": "lost-"}, "fault": {"kind": "missing"}},
            {"match": {"custom_id": "chapter-1"}, "fault": {"kind": "content_filter"}}
        ],
        "batches": [
            {"match": {"nth": 2}, "fault": {"kind": "expired", "answered": 20}}
        ],
        "rate_limit": {"times": 1, "retry_after_secs": 1}
    }))
    .expect("the demo's OpenAI fault plan is valid")
}

/// The same groups as Anthropic answers them: every request has a
/// result, so a row lost from the output is an `api_error` every time;
/// a request's custom_id is `{job mark}-{key}`, so each rule captures the
/// key (its `times` count the row, whatever job sends it).
pub fn anthropic_faults() -> anthropic_emulator::FaultPlan {
    let key = |prefix: &str| json!({"custom_id_regex": format!("^[0-9a-f]{{12}}-({prefix}.*)$")});
    let errored = |error: &str| json!({"kind": "errored", "error": error, "message": format!("{error} (demo fault)")});
    serde_json::from_value(json!({
        "rows": [
            {"match": key("flaky-"), "fault": errored("rate_limit_error"), "times": 2},
            {"match": key("busy-"), "fault": errored("overloaded_error"), "times": 1},
            {"match": key("unsafe-"), "fault": {"kind": "refusal"}},
            {"match": key("nsfw-"), "fault": {"kind": "refusal"}},
            {"match": key("empty-"), "fault": {"kind": "max_tokens"}},
            {"match": key("garbled-"), "fault": {"kind": "invalid_json"}},
            {"match": key("bad-"), "fault": errored("invalid_request_error")},
            {"match": key("lost-"), "fault": errored("api_error")},
            {"match": {"custom_id_regex": "^[0-9a-f]{12}-chapter-1$"}, "fault": {"kind": "refusal"}}
        ],
        "batches": [
            {"match": {"nth": 2}, "fault": {"kind": "expired", "finished": 20}}
        ],
        "rate_limit": {"times": 1, "retry_after_secs": 1}
    }))
    .expect("the demo's Anthropic fault plan is valid")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn keys_are_unique_and_dependencies_come_first() {
        let rows = rows();
        let mut seen = HashSet::new();
        for r in &rows {
            for d in &r.depends_on {
                assert!(
                    seen.contains(d),
                    "{} depends on {d}, not enrolled before it",
                    r.key
                );
            }
            assert!(seen.insert(r.key.clone()), "{} twice", r.key);
        }
        assert_eq!(rows.len(), GROUPS.iter().map(|g| g.1).sum::<usize>());
    }

    #[test]
    fn the_same_rows_every_time() {
        assert_eq!(rows(), rows());
    }

    #[test]
    fn every_faulty_group_has_a_rule_and_the_plan_parses() {
        let plan = faults();
        let openai = openai_faults();
        let anthropic = anthropic_faults();
        for &(prefix, _, _) in GROUPS {
            if prefix == "article-" || prefix == "chapter-" {
                continue;
            }
            assert!(
                plan.rows
                    .iter()
                    .any(|r| r.matcher.key_prefix.as_deref() == Some(prefix)),
                "no fault rule for {prefix}"
            );
            assert!(
                openai
                    .rows
                    .iter()
                    .any(|r| r.matcher.key_prefix.as_deref() == Some(prefix)),
                "no OpenAI fault rule for {prefix}"
            );
            let captured = format!("-({prefix}.*)$");
            assert!(
                anthropic.rows.iter().any(|r| r
                    .matcher
                    .key_regex
                    .as_deref()
                    .is_some_and(|re| re.ends_with(&captured))),
                "no Anthropic fault rule for {prefix}"
            );
        }
    }
}
