//! The classifier: a failure as the worker observed it, in; a verdict
//! (retryable or permanent, the budget it counts against, and the rule that
//! decided) out. Ledger overrides are tried first, then the built-in rules in
//! a fixed order. Unknown failures are retryable: the attempt cap is the
//! brake (seed 000: "when in doubt, lean to the side that recovers the row").

use crate::status::Budget;
use std::time::Duration;

/// What the worker saw go wrong with one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// An error answer: an output line's error, an HTTP error, a timeout.
    ProviderError,
    /// A response arrived without usable text.
    EmptyResponse,
    /// A response arrived but fails to parse or to match the row's schema.
    InvalidOutput,
    /// The response or the prompt was blocked.
    Blocked,
    /// The row was absent from a finished job's output.
    MissingFromOutput,
    /// A file the row references could not be read for good (missing,
    /// unreadable, not the bytes it was enrolled with, too large for the
    /// provider): the worker never sent the row.
    MediaUnreadable,
    /// A file the row references could not be read this time (a network
    /// error, a 5xx of its store): the worker never sent the row.
    MediaUnavailable,
    /// A synchronous call went out and its answer was lost (timeout, cut
    /// connection, a 5xx after the provider may have done the work): no
    /// provider can say what it answered, so the attempt is counted.
    AnswerLost,
}

/// The facts of one failure. Strings may be empty.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Failure {
    pub kind: Option<FailureKind>,
    /// HTTP-like status code, 0 when none.
    pub http_code: u32,
    /// Canonical status name, e.g. `RESOURCE_EXHAUSTED`.
    pub status: String,
    pub message: String,
    pub finish_reason: String,
    pub block_reason: String,
    /// The provider asked for this much patience.
    pub retry_delay: Option<Duration>,
}

/// Retryable or permanent: the classifier's two answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Severity {
    Retryable,
    Permanent,
}

/// The rule that produced a verdict. Its text form is what users see
/// (`permanent_by_rule`, `ListRows` filters).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Rule {
    Success,
    HttpTransient,
    HttpPermanent,
    StatusTransient,
    StatusPermanent,
    SafetyMessage,
    FinishReasonBlocked,
    FinishReasonMaxTokens,
    FinishReasonOther,
    PromptBlocked,
    EmptyResponse,
    InvalidOutput,
    MissingFromOutput,
    MediaUnreadable,
    MediaUnavailable,
    AnswerLost,
    JobFailed,
    LeaseExpired,
    UnknownRetryable,
    Exhausted(Budget),
    Override(String),
}

impl Rule {
    pub fn name(&self) -> String {
        match self {
            Rule::Success => "success".into(),
            Rule::HttpTransient => "http_transient".into(),
            Rule::HttpPermanent => "http_permanent".into(),
            Rule::StatusTransient => "status_transient".into(),
            Rule::StatusPermanent => "status_permanent".into(),
            Rule::SafetyMessage => "safety_message".into(),
            Rule::FinishReasonBlocked => "finish_reason_blocked".into(),
            Rule::FinishReasonMaxTokens => "finish_reason_max_tokens".into(),
            Rule::FinishReasonOther => "finish_reason_other".into(),
            Rule::PromptBlocked => "prompt_blocked".into(),
            Rule::EmptyResponse => "empty_response".into(),
            Rule::InvalidOutput => "invalid_output".into(),
            Rule::MissingFromOutput => "missing_from_output".into(),
            Rule::MediaUnreadable => "media_unreadable".into(),
            Rule::MediaUnavailable => "media_unavailable".into(),
            Rule::AnswerLost => "answer_lost".into(),
            Rule::JobFailed => "job_failed".into(),
            Rule::LeaseExpired => "lease_expired".into(),
            Rule::UnknownRetryable => "unknown_retryable".into(),
            Rule::Exhausted(b) => format!("{}_attempts_exhausted", b.as_str()),
            Rule::Override(name) => format!("override:{name}"),
        }
    }
}

impl Rule {
    /// The `(verdict, rule)` pairs a report can answer from the built-in
    /// rules (overrides aside): each rule with the severity the classifier
    /// gives it, and the exhausted-budget rules, which are PERMANENT. Used
    /// to create metric series before their first increment.
    pub fn reported_verdicts() -> Vec<(&'static str, String)> {
        use Severity::{Permanent, Retryable};
        let mut out: Vec<(&'static str, String)> = [
            (Permanent, Rule::FinishReasonBlocked),
            (Permanent, Rule::FinishReasonMaxTokens),
            (Retryable, Rule::FinishReasonOther),
            (Permanent, Rule::FinishReasonOther),
            (Permanent, Rule::PromptBlocked),
            (Retryable, Rule::EmptyResponse),
            (Retryable, Rule::InvalidOutput),
            (Retryable, Rule::MissingFromOutput),
            (Permanent, Rule::MediaUnreadable),
            (Retryable, Rule::MediaUnavailable),
            (Retryable, Rule::AnswerLost),
            (Retryable, Rule::HttpTransient),
            (Permanent, Rule::HttpPermanent),
            (Retryable, Rule::StatusTransient),
            (Permanent, Rule::StatusPermanent),
            (Permanent, Rule::SafetyMessage),
            (Retryable, Rule::UnknownRetryable),
            (Retryable, Rule::JobFailed),
            (Retryable, Rule::LeaseExpired),
        ]
        .into_iter()
        .map(|(severity, rule)| (severity.verdict(), rule.name()))
        .collect();
        out.extend(
            Budget::ALL
                .into_iter()
                .map(|b| ("PERMANENT", Rule::Exhausted(b).name())),
        );
        out
    }
}

impl Severity {
    /// The report verdict of this severity (`RETRYABLE`, `PERMANENT`).
    pub const fn verdict(self) -> &'static str {
        match self {
            Severity::Retryable => "RETRYABLE",
            Severity::Permanent => "PERMANENT",
        }
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

/// The classifier's answer for one failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classification {
    pub severity: Severity,
    pub budget: Budget,
    pub rule: Rule,
}

impl Classification {
    fn new(severity: Severity, budget: Budget, rule: Rule) -> Self {
        Self {
            severity,
            budget,
            rule,
        }
    }
}

/// A ledger's own rule: every set field must match; then its verdict wins.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Override {
    pub name: String,
    pub http_code: u32,
    pub status: String,
    /// Case-insensitive substring of the message.
    pub message_contains: String,
    pub finish_reason: String,
    pub kind: Option<FailureKind>,
    pub severity: Option<Severity>,
    pub budget: Option<Budget>,
}

impl Override {
    /// An override that names no condition would match everything; policy
    /// validation rejects it, and it never matches here.
    pub fn has_condition(&self) -> bool {
        self.http_code != 0
            || !self.status.is_empty()
            || !self.message_contains.is_empty()
            || !self.finish_reason.is_empty()
            || self.kind.is_some()
    }

    fn matches(&self, f: &Failure) -> bool {
        self.has_condition()
            && (self.http_code == 0 || self.http_code == f.http_code)
            && (self.status.is_empty() || self.status.eq_ignore_ascii_case(&f.status))
            && (self.message_contains.is_empty()
                || f.message
                    .to_ascii_lowercase()
                    .contains(&self.message_contains.to_ascii_lowercase()))
            && (self.finish_reason.is_empty()
                || self.finish_reason.eq_ignore_ascii_case(&f.finish_reason))
            && (self.kind.is_none() || self.kind == f.kind)
    }
}

/// 529 is Anthropic's `overloaded_error`; 413 its `request_too_large`.
const HTTP_TRANSIENT: [u32; 7] = [408, 429, 500, 502, 503, 504, 529];
const HTTP_PERMANENT: [u32; 5] = [400, 403, 404, 413, 422];
/// Every canonical status but OK is in exactly one of these two sets (a
/// test checks it): the gRPC codes of per-line errors are never unknown.
const STATUS_TRANSIENT: [&str; 7] = [
    "CANCELLED",
    "UNKNOWN",
    "DEADLINE_EXCEEDED",
    "RESOURCE_EXHAUSTED",
    "ABORTED",
    "INTERNAL",
    "UNAVAILABLE",
];
const STATUS_PERMANENT: [&str; 9] = [
    "INVALID_ARGUMENT",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "FAILED_PRECONDITION",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

/// The canonical status name of a gRPC code (`google.rpc.Code`), `None`
/// for OK and for numbers that are not codes.
pub fn grpc_status_name(code: u32) -> Option<&'static str> {
    Some(match code {
        1 => "CANCELLED",
        2 => "UNKNOWN",
        3 => "INVALID_ARGUMENT",
        4 => "DEADLINE_EXCEEDED",
        5 => "NOT_FOUND",
        6 => "ALREADY_EXISTS",
        7 => "PERMISSION_DENIED",
        8 => "RESOURCE_EXHAUSTED",
        9 => "FAILED_PRECONDITION",
        10 => "ABORTED",
        11 => "OUT_OF_RANGE",
        12 => "UNIMPLEMENTED",
        13 => "INTERNAL",
        14 => "UNAVAILABLE",
        15 => "DATA_LOSS",
        16 => "UNAUTHENTICATED",
        _ => return None,
    })
}

/// Finish reasons that withhold the answer for what it (or the prompt) is:
/// Gemini's text ones and their image counterparts (python-genai 3.6.1
/// `FinishReason`: IMAGE_SAFETY, IMAGE_PROHIBITED_CONTENT,
/// IMAGE_RECITATION); OpenAI's `content_filter`; Anthropic's `refusal`
/// stop reason. A retry would be refused the same way.
const BLOCKING_FINISH_REASONS: [&str; 10] = [
    "SAFETY",
    "RECITATION",
    "BLOCKLIST",
    "PROHIBITED_CONTENT",
    "SPII",
    "IMAGE_SAFETY",
    "IMAGE_PROHIBITED_CONTENT",
    "IMAGE_RECITATION",
    "CONTENT_FILTER",
    "REFUSAL",
];
const BLOCKING_WORDS: [&str; 3] = ["safety", "blocked", "recitation"];
/// Finish reasons that mean "the answer ended normally" (or says nothing):
/// Gemini's `STOP`, OpenAI's `stop`, Anthropic's `end_turn` and
/// `stop_sequence`.
const COMPLETE_FINISH_REASONS: [&str; 5] = [
    "",
    "STOP",
    "FINISH_REASON_UNSPECIFIED",
    "END_TURN",
    "STOP_SEQUENCE",
];
/// Finish reasons that cut an answer short the same way on every retry
/// (the output budget, thinking included: Gemini's `MAX_TOKENS`, OpenAI's
/// `length`, Anthropic's `max_tokens`; an unsupported language): a retry
/// would pay for the same truncation. A ledger override can say otherwise
/// (e.g. after raising the output budget).
const REPEATING_FINISH_REASONS: [&str; 3] = ["MAX_TOKENS", "LENGTH", "LANGUAGE"];
/// The repeating finish reasons that are the output budget.
const BUDGET_FINISH_REASONS: [&str; 2] = ["MAX_TOKENS", "LENGTH"];

/// Whether a finish reason withholds the answer for what it (or the
/// prompt) is, at any provider (case-insensitive). The one list: workers
/// report such an answer as blocked, and the classifier makes it PERMANENT.
pub fn withholds_answer(finish: &str) -> bool {
    BLOCKING_FINISH_REASONS
        .iter()
        .any(|r| r.eq_ignore_ascii_case(finish.trim()))
}

/// Whether a finish reason says the answer ended normally (or says
/// nothing), at any provider (case-insensitive).
pub fn ends_normally(finish: &str) -> bool {
    COMPLETE_FINISH_REASONS
        .iter()
        .any(|r| r.eq_ignore_ascii_case(finish.trim()))
}

/// Classifies one failure. Overrides first, in order; then the built-in
/// rules: blocking signals, unusable content, missing rows, codes, message
/// words, and finally unknown (retryable).
pub fn classify(failure: &Failure, overrides: &[Override]) -> Classification {
    use Severity::{Permanent, Retryable};
    if let Some(o) = overrides.iter().find(|o| o.matches(failure)) {
        let severity = o.severity.unwrap_or(Permanent);
        let budget = o.budget.unwrap_or(match severity {
            Retryable | Permanent => Budget::Provider,
        });
        return Classification::new(severity, budget, Rule::Override(o.name.clone()));
    }
    let finish = failure.finish_reason.trim();
    if withholds_answer(finish) {
        return Classification::new(Permanent, Budget::Content, Rule::FinishReasonBlocked);
    }
    if REPEATING_FINISH_REASONS
        .iter()
        .any(|r| r.eq_ignore_ascii_case(finish))
    {
        let rule = if BUDGET_FINISH_REASONS
            .iter()
            .any(|r| r.eq_ignore_ascii_case(finish))
        {
            Rule::FinishReasonMaxTokens
        } else {
            Rule::FinishReasonOther
        };
        return Classification::new(Permanent, Budget::Content, rule);
    }
    if !ends_normally(finish) && failure.kind != Some(FailureKind::ProviderError) {
        // OTHER, MALFORMED_FUNCTION_CALL, …: unusual, may pass.
        return Classification::new(Retryable, Budget::Content, Rule::FinishReasonOther);
    }
    let block_reason = failure.block_reason.trim();
    if !block_reason.is_empty() && !block_reason.eq_ignore_ascii_case("BLOCK_REASON_UNSPECIFIED") {
        return Classification::new(Permanent, Budget::Content, Rule::PromptBlocked);
    }
    match failure.kind {
        Some(FailureKind::Blocked) => {
            return Classification::new(Permanent, Budget::Content, Rule::FinishReasonBlocked);
        }
        Some(FailureKind::EmptyResponse) => {
            return Classification::new(Retryable, Budget::Content, Rule::EmptyResponse);
        }
        Some(FailureKind::InvalidOutput) => {
            return Classification::new(Retryable, Budget::Content, Rule::InvalidOutput);
        }
        Some(FailureKind::MissingFromOutput) => {
            return Classification::new(Retryable, Budget::Provider, Rule::MissingFromOutput);
        }
        // The row's own input: no retry reads another file.
        Some(FailureKind::MediaUnreadable) => {
            return Classification::new(Permanent, Budget::Content, Rule::MediaUnreadable);
        }
        // Our side (the media store): an infra attempt, retried.
        Some(FailureKind::MediaUnavailable) => {
            return Classification::new(Retryable, Budget::Infra, Rule::MediaUnavailable);
        }
        // The provider may have done (and billed) the work: a provider
        // attempt, retried within its budget.
        Some(FailureKind::AnswerLost) => {
            return Classification::new(Retryable, Budget::Provider, Rule::AnswerLost);
        }
        Some(FailureKind::ProviderError) | None => {}
    }
    if HTTP_TRANSIENT.contains(&failure.http_code) {
        return Classification::new(Retryable, Budget::Provider, Rule::HttpTransient);
    }
    if HTTP_PERMANENT.contains(&failure.http_code) {
        return Classification::new(Permanent, Budget::Provider, Rule::HttpPermanent);
    }
    let status = failure.status.trim();
    if STATUS_TRANSIENT
        .iter()
        .any(|s| s.eq_ignore_ascii_case(status))
    {
        return Classification::new(Retryable, Budget::Provider, Rule::StatusTransient);
    }
    if STATUS_PERMANENT
        .iter()
        .any(|s| s.eq_ignore_ascii_case(status))
    {
        return Classification::new(Permanent, Budget::Provider, Rule::StatusPermanent);
    }
    let message = failure.message.to_ascii_lowercase();
    if BLOCKING_WORDS.iter().any(|w| message.contains(w)) {
        return Classification::new(Permanent, Budget::Content, Rule::SafetyMessage);
    }
    Classification::new(Retryable, Budget::Provider, Rule::UnknownRetryable)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(http_code: u32) -> Failure {
        Failure {
            kind: Some(FailureKind::ProviderError),
            http_code,
            ..Failure::default()
        }
    }

    fn verdict(f: &Failure) -> (Severity, Budget, String) {
        let c = classify(f, &[]);
        (c.severity, c.budget, c.rule.name())
    }

    #[test]
    fn transient_http_codes_are_retryable_on_the_provider_budget() {
        for c in HTTP_TRANSIENT {
            assert_eq!(
                verdict(&code(c)),
                (
                    Severity::Retryable,
                    Budget::Provider,
                    "http_transient".into()
                ),
                "code {c}"
            );
        }
    }

    #[test]
    fn permanent_http_codes_are_permanent() {
        for c in HTTP_PERMANENT {
            assert_eq!(verdict(&code(c)).0, Severity::Permanent, "code {c}");
            assert_eq!(verdict(&code(c)).2, "http_permanent");
        }
    }

    #[test]
    fn every_grpc_code_has_a_verdict_and_none_is_unknown() {
        // Invariant: a per-line google.rpc.Status is never re-sent as
        // "unknown": each of the 16 codes is transient or permanent, by name.
        let permanent = [3, 5, 6, 7, 9, 11, 12, 15, 16];
        for code in 1..=16 {
            let name = grpc_status_name(code).expect("a canonical code");
            let f = Failure {
                kind: Some(FailureKind::ProviderError),
                status: name.into(),
                ..Default::default()
            };
            let (severity, _, rule) = verdict(&f);
            if permanent.contains(&code) {
                assert_eq!(
                    (severity, rule.as_str()),
                    (Severity::Permanent, "status_permanent"),
                    "{name}"
                );
            } else {
                assert_eq!(
                    (severity, rule.as_str()),
                    (Severity::Retryable, "status_transient"),
                    "{name}"
                );
            }
        }
        assert_eq!(grpc_status_name(0), None);
        assert_eq!(grpc_status_name(17), None);
    }

    #[test]
    fn grpc_status_names_classify_like_their_codes() {
        for s in STATUS_TRANSIENT {
            let f = Failure {
                status: s.to_lowercase(),
                ..Failure::default()
            };
            assert_eq!(verdict(&f).2, "status_transient", "{s}");
        }
        for s in STATUS_PERMANENT {
            let f = Failure {
                status: s.into(),
                ..Failure::default()
            };
            assert_eq!(verdict(&f).2, "status_permanent", "{s}");
        }
    }

    #[test]
    fn blocking_finish_reasons_and_block_reasons_are_permanent() {
        // The image finish reasons are refusals like their text ones (not
        // unknown reasons to retry).
        for r in [
            "IMAGE_SAFETY",
            "IMAGE_PROHIBITED_CONTENT",
            "IMAGE_RECITATION",
        ] {
            assert!(BLOCKING_FINISH_REASONS.contains(&r), "{r}");
        }
        for r in BLOCKING_FINISH_REASONS {
            let f = Failure {
                finish_reason: r.into(),
                ..Failure::default()
            };
            assert_eq!(verdict(&f).2, "finish_reason_blocked", "{r}");
            assert_eq!(verdict(&f).0, Severity::Permanent);
        }
        let f = Failure {
            block_reason: "SAFETY".into(),
            ..Failure::default()
        };
        assert_eq!(verdict(&f).2, "prompt_blocked");
        let unspecified = Failure {
            block_reason: "BLOCK_REASON_UNSPECIFIED".into(),
            ..Failure::default()
        };
        assert_eq!(verdict(&unspecified).2, "unknown_retryable");
    }

    // Invariant: each provider's own words for the same ending get the
    // same verdict: a refusal is permanent, the output budget repeats, a
    // normal end is no failure of its own.
    #[test]
    fn every_providers_finish_reasons_mean_the_same() {
        let f = |reason: &str, kind| Failure {
            kind: Some(kind),
            finish_reason: reason.into(),
            ..Failure::default()
        };
        for blocked in ["content_filter", "refusal", "SAFETY"] {
            assert_eq!(
                verdict(&f(blocked, FailureKind::Blocked)).2,
                "finish_reason_blocked",
                "{blocked}"
            );
        }
        for budget in ["length", "max_tokens", "MAX_TOKENS"] {
            assert_eq!(
                verdict(&f(budget, FailureKind::InvalidOutput)),
                (
                    Severity::Permanent,
                    Budget::Content,
                    "finish_reason_max_tokens".into()
                ),
                "{budget}"
            );
        }
        for complete in ["stop", "end_turn", "stop_sequence", "STOP"] {
            assert_eq!(
                verdict(&f(complete, FailureKind::InvalidOutput)).2,
                "invalid_output",
                "{complete}"
            );
        }
    }

    #[test]
    fn a_stop_finish_reason_is_not_a_block() {
        let f = Failure {
            kind: Some(FailureKind::EmptyResponse),
            finish_reason: "STOP".into(),
            ..Failure::default()
        };
        assert_eq!(
            verdict(&f),
            (
                Severity::Retryable,
                Budget::Content,
                "empty_response".into()
            )
        );
    }

    #[test]
    fn unusable_content_counts_against_the_content_budget() {
        let f = Failure {
            kind: Some(FailureKind::InvalidOutput),
            ..Failure::default()
        };
        assert_eq!(
            verdict(&f),
            (
                Severity::Retryable,
                Budget::Content,
                "invalid_output".into()
            )
        );
    }

    #[test]
    fn missing_rows_are_provider_transients() {
        let f = Failure {
            kind: Some(FailureKind::MissingFromOutput),
            ..Failure::default()
        };
        assert_eq!(
            verdict(&f),
            (
                Severity::Retryable,
                Budget::Provider,
                "missing_from_output".into()
            )
        );
    }

    #[test]
    fn safety_words_in_the_message_are_permanent_but_codes_come_first() {
        let f = Failure {
            message: "Response was Blocked by policy".into(),
            ..Failure::default()
        };
        assert_eq!(verdict(&f).2, "safety_message");
        let quota = Failure {
            http_code: 429,
            message: "quota blocked for now".into(),
            ..Failure::default()
        };
        assert_eq!(verdict(&quota).2, "http_transient");
    }

    #[test]
    fn unknown_failures_are_retryable() {
        assert_eq!(
            verdict(&code(418)),
            (
                Severity::Retryable,
                Budget::Provider,
                "unknown_retryable".into()
            )
        );
        assert_eq!(verdict(&Failure::default()).2, "unknown_retryable");
    }

    #[test]
    fn overrides_win_in_order_and_name_their_rule() {
        let overrides = vec![
            Override {
                name: "teapot".into(),
                http_code: 418,
                severity: Some(Severity::Permanent),
                ..Override::default()
            },
            Override {
                name: "flaky-safety".into(),
                finish_reason: "SAFETY".into(),
                severity: Some(Severity::Retryable),
                budget: Some(Budget::Content),
                ..Override::default()
            },
        ];
        let c = classify(&code(418), &overrides);
        assert_eq!(
            (c.severity, c.rule.name()),
            (Severity::Permanent, "override:teapot".into())
        );
        let safety = Failure {
            finish_reason: "safety".into(),
            ..Failure::default()
        };
        let c = classify(&safety, &overrides);
        assert_eq!(
            (c.severity, c.budget, c.rule.name()),
            (
                Severity::Retryable,
                Budget::Content,
                "override:flaky-safety".into()
            )
        );
    }

    #[test]
    fn an_override_without_conditions_never_matches() {
        let o = Override {
            name: "everything".into(),
            severity: Some(Severity::Permanent),
            ..Override::default()
        };
        assert!(!o.has_condition());
        assert_eq!(classify(&code(503), &[o]).rule.name(), "http_transient");
    }

    #[test]
    fn override_message_match_is_case_insensitive_and_all_fields_must_hold() {
        let o = Override {
            name: "quota".into(),
            http_code: 429,
            message_contains: "DAILY QUOTA".into(),
            severity: Some(Severity::Permanent),
            ..Override::default()
        };
        let hit = Failure {
            http_code: 429,
            message: "daily quota exceeded".into(),
            ..Failure::default()
        };
        let miss = Failure {
            http_code: 503,
            message: "daily quota exceeded".into(),
            ..Failure::default()
        };
        assert_eq!(
            classify(&hit, std::slice::from_ref(&o)).rule.name(),
            "override:quota"
        );
        assert_eq!(classify(&miss, &[o]).rule.name(), "http_transient");
    }

    #[test]
    fn finish_reasons_that_repeat_are_permanent_others_retry_overrides_win() {
        // Invariant: a truncation that a retry would pay for again is not
        // retried unless the ledger says so.
        let f = |finish: &str, kind| Failure {
            kind: Some(kind),
            finish_reason: finish.into(),
            ..Default::default()
        };
        let max = f("MAX_TOKENS", FailureKind::InvalidOutput);
        assert_eq!(
            verdict(&max),
            (
                Severity::Permanent,
                Budget::Content,
                "finish_reason_max_tokens".into()
            )
        );
        assert_eq!(
            verdict(&f("MAX_TOKENS", FailureKind::EmptyResponse)).2,
            "finish_reason_max_tokens",
            "thinking used the whole budget"
        );
        assert_eq!(
            verdict(&f("LANGUAGE", FailureKind::InvalidOutput)),
            (
                Severity::Permanent,
                Budget::Content,
                "finish_reason_other".into()
            )
        );
        assert_eq!(
            verdict(&f("OTHER", FailureKind::InvalidOutput)),
            (
                Severity::Retryable,
                Budget::Content,
                "finish_reason_other".into()
            )
        );
        assert_eq!(
            verdict(&f("STOP", FailureKind::EmptyResponse)).2,
            "empty_response"
        );
        let retry_max = Override {
            name: "bigger-budget".into(),
            finish_reason: "MAX_TOKENS".into(),
            severity: Some(Severity::Retryable),
            ..Default::default()
        };
        let c = classify(&max, &[retry_max]);
        assert_eq!(
            (c.severity, c.rule.name()),
            (Severity::Retryable, "override:bigger-budget".to_string())
        );
    }
}
