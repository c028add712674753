//! The fault plan (serde JSON) and its pure, deterministic matching.
//!
//! [`FaultPlan`] is what users write; [`Faults`] is the plan compiled
//! (regexes) with its counters. Replacing the plan starts the counters
//! afresh. Nothing here does I/O or reads a clock. Every section is
//! optional; `faults.example.json` beside the manifest shows each one.
//!
//! Row rules: the first rule matching a request's custom_id decides; with
//! `times`, it applies to the first `times` times that custom_id is
//! *processed* (its batch ended with it run, not canceled or expired),
//! across batches. Batch rules: `nth` counts every batch created (1-based);
//! the first matching rule with uses left (`times`, default 1) applies and
//! uses one up. Create refusals and the other counted faults apply to the
//! next `times` calls, or to every call without `times`.

use std::collections::HashMap;

use emulator_kit::times::Fired;
pub use emulator_kit::times::Times;
use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::error::ErrorType;

/// Faults to inject, as written in JSON.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FaultPlan {
    pub rows: Vec<RowRule>,
    pub batches: Vec<BatchRule>,
    /// Creates answer 401 `authentication_error`.
    pub unauthorized: Option<Times>,
    /// Creates answer 402 `billing_error`.
    pub billing: Option<Times>,
    /// Creates answer 403 `permission_error`.
    pub forbidden: Option<Times>,
    /// The next `times` creates answer 429 `rate_limit_error` with
    /// `retry-after` and the `anthropic-ratelimit-requests-*` headers.
    pub rate_limit: Option<RateLimit>,
    /// Creates answer 529 `overloaded_error`.
    pub overloaded: Option<Times>,
    /// The next `times` creates make the batch, then lose the answer.
    pub create_answer_lost: Option<LostAnswer>,
    /// The next `times` GETs of an existing batch answer 404.
    pub get_not_found: Option<Times>,
    /// A new batch is absent from lists for this long (GET finds it).
    pub list_lag_ms: u64,
    /// The share (0 to 1) of a canceled batch's requests, first in request
    /// order, that still finish (the docs: requests already processing may
    /// complete); the rest are `canceled`.
    pub finished_on_cancel: f64,
    /// The share (0 to 1) of an expired batch's requests, first in request
    /// order, that finished before the horizon; the rest are `expired`.
    pub finished_on_expiry: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    pub times: u32,
    #[serde(default = "one")]
    pub retry_after_secs: u64,
    /// `anthropic-ratelimit-requests-limit`.
    #[serde(default = "fifty")]
    pub requests_limit: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LostAnswer {
    #[serde(default = "one_u32")]
    pub times: u32,
    #[serde(default)]
    pub mode: LostMode,
}

/// How a create's answer is lost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LostMode {
    /// 500 `api_error` (the SDK retries it: a second batch is made).
    #[default]
    Status500,
    /// The connection is cut before the body (headers of a 200 may arrive).
    Drop,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RowRule {
    #[serde(rename = "match")]
    pub matches: RowMatch,
    pub fault: RowFault,
    /// Applies to the first `times` processings of each matching request:
    /// of each custom_id, or, when `custom_id_regex` has a capture group,
    /// of each text its first group captures (a client that derives
    /// custom_ids per batch sends one request under several).
    #[serde(default)]
    pub times: Option<u32>,
}

/// Which requests a rule is for; every given field must match.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RowMatch {
    pub custom_id: Option<String>,
    pub custom_id_contains: Option<String>,
    pub custom_id_regex: Option<String>,
}

/// What happens to one request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum RowFault {
    /// An `errored` result with this error (`api_error` and
    /// `overloaded_error` are transient; `invalid_request_error` is not).
    Errored {
        error: ErrorType,
        #[serde(default)]
        message: Option<String>,
    },
    /// `succeeded` with `stop_reason: "max_tokens"`, the text cut short.
    MaxTokens,
    /// `succeeded` with `stop_reason: "refusal"` and no content.
    Refusal,
    /// `succeeded` with text that is not valid JSON (for a schema: not an
    /// instance).
    InvalidJson,
    /// `succeeded` with `content: []`.
    EmptyContent,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchRule {
    #[serde(rename = "match")]
    pub matches: BatchMatch,
    pub fault: BatchFault,
    #[serde(default = "one_u32")]
    pub times: u32,
}

/// Which batches a rule is for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BatchMatch {
    /// The nth batch created (1-based); absent, any batch.
    pub nth: Option<u64>,
}

/// What happens to one batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum BatchFault {
    /// Ends `expired` when it would have ended, its first `finished`
    /// requests answered, the rest `expired`.
    Expired {
        #[serde(default)]
        finished: usize,
    },
    /// Ends as if canceled when it would have ended (`cancel_initiated_at`
    /// set), its first `finished` requests answered, the rest `canceled`.
    Canceled {
        #[serde(default)]
        finished: usize,
    },
    /// Never ends on its own: it expires at the horizon (or is canceled).
    StaysInProgress,
}

fn one() -> u64 {
    1
}
fn fifty() -> u64 {
    50
}
fn one_u32() -> u32 {
    1
}

/// Why a plan does not compile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FaultPlanError {
    #[error("row rule {index}: bad custom_id_regex: {message}")]
    BadRegex { index: usize, message: String },
    #[error("{field} must be a share from 0 to 1")]
    BadShare { field: &'static str },
}

impl FaultPlan {
    /// Parses the JSON form (the bin's `--faults` file).
    pub fn from_json(text: &str) -> Result<Self, String> {
        serde_json::from_str(text).map_err(|e| e.to_string())
    }
}

/// A create refused by the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    Unauthorized,
    Billing,
    Forbidden,
    RateLimited(RateLimit),
    Overloaded,
}

/// The plan compiled, with its counters.
#[derive(Debug)]
pub struct Faults {
    plan: FaultPlan,
    regexes: Vec<Option<Regex>>,
    processed: HashMap<String, u32>,
    batch_uses: Vec<u32>,
    unauthorized: Fired,
    billing: Fired,
    forbidden: Fired,
    rate_limits: Fired,
    overloaded: Fired,
    lost: Fired,
    not_found: Fired,
}

impl Faults {
    pub fn compile(plan: FaultPlan) -> Result<Self, FaultPlanError> {
        for (field, share) in [
            ("finished_on_cancel", plan.finished_on_cancel),
            ("finished_on_expiry", plan.finished_on_expiry),
        ] {
            if !(0.0..=1.0).contains(&share) {
                return Err(FaultPlanError::BadShare { field });
            }
        }
        let mut regexes = Vec::with_capacity(plan.rows.len());
        for (index, rule) in plan.rows.iter().enumerate() {
            let regex = match &rule.matches.custom_id_regex {
                Some(r) => Some(Regex::new(r).map_err(|e| FaultPlanError::BadRegex {
                    index,
                    message: e.to_string(),
                })?),
                None => None,
            };
            regexes.push(regex);
        }
        Ok(Self {
            batch_uses: vec![0; plan.batches.len()],
            plan,
            regexes,
            processed: HashMap::new(),
            unauthorized: Fired::default(),
            billing: Fired::default(),
            forbidden: Fired::default(),
            rate_limits: Fired::default(),
            overloaded: Fired::default(),
            lost: Fired::default(),
            not_found: Fired::default(),
        })
    }

    pub fn plan(&self) -> &FaultPlan {
        &self.plan
    }

    /// The fault of one request being processed now (counts the
    /// processing).
    pub fn decide_row(&mut self, custom_id: &str) -> Option<RowFault> {
        let (rule, regex) = self
            .plan
            .rows
            .iter()
            .zip(&self.regexes)
            .find(|(rule, regex)| row_matches(&rule.matches, regex.as_ref(), custom_id))?;
        let counted = regex
            .as_ref()
            .and_then(|r| r.captures(custom_id)?.get(1))
            .map_or(custom_id, |g| g.as_str());
        let seen = self.processed.entry(counted.to_owned()).or_insert(0);
        let nth = *seen;
        *seen += 1;
        rule.times
            .is_none_or(|t| nth < t)
            .then(|| rule.fault.clone())
    }

    /// The fault of the `nth` batch created (uses one of the rule's uses).
    pub fn decide_batch(&mut self, nth: u64) -> Option<BatchFault> {
        let index = self.plan.batches.iter().enumerate().position(|(i, rule)| {
            self.batch_uses[i] < rule.times && rule.matches.nth.is_none_or(|n| n == nth)
        })?;
        self.batch_uses[index] += 1;
        Some(self.plan.batches[index].fault.clone())
    }

    /// The refusal of this create, if one is due (the first due in the
    /// order 401, 402, 403, 429, 529).
    pub fn take_refusal(&mut self) -> Option<Refusal> {
        let plan = &self.plan;
        if plan
            .unauthorized
            .is_some_and(|t| self.unauthorized.take(t.times))
        {
            return Some(Refusal::Unauthorized);
        }
        if plan.billing.is_some_and(|t| self.billing.take(t.times)) {
            return Some(Refusal::Billing);
        }
        if plan.forbidden.is_some_and(|t| self.forbidden.take(t.times)) {
            return Some(Refusal::Forbidden);
        }
        if let Some(rl) = plan.rate_limit
            && self.rate_limits.take(Some(rl.times))
        {
            return Some(Refusal::RateLimited(rl));
        }
        if plan
            .overloaded
            .is_some_and(|t| self.overloaded.take(t.times))
        {
            return Some(Refusal::Overloaded);
        }
        None
    }

    pub fn take_lost_answer(&mut self) -> Option<LostMode> {
        let lost = self.plan.create_answer_lost?;
        self.lost.take(Some(lost.times)).then_some(lost.mode)
    }

    pub fn take_get_not_found(&mut self) -> bool {
        self.plan
            .get_not_found
            .is_some_and(|t| self.not_found.take(t.times))
    }
}

fn row_matches(m: &RowMatch, regex: Option<&Regex>, custom_id: &str) -> bool {
    m.custom_id.as_deref().is_none_or(|c| c == custom_id)
        && m.custom_id_contains
            .as_deref()
            .is_none_or(|s| custom_id.contains(s))
        && regex.is_none_or(|r| r.is_match(custom_id))
}

/// How many of `n` requests a share finishes (rounded down).
pub fn share_of(share: f64, n: usize) -> usize {
    ((share * n as f64).floor() as usize).min(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn plan(v: serde_json::Value) -> Faults {
        Faults::compile(serde_json::from_value(v).unwrap()).unwrap()
    }

    // Invariant: the first matching rule decides; `times` counts the
    // processings of each custom_id, so a request errs then succeeds.
    #[test]
    fn row_rules_match_in_order_and_wear_out() {
        let mut f = plan(json!({"rows": [
            {"match": {"custom_id_contains": "flaky"}, "fault": {"kind": "errored", "error": "api_error"}, "times": 1},
            {"match": {"custom_id_regex": "^r\\d$"}, "fault": {"kind": "refusal"}},
            {"match": {"custom_id": "cut"}, "fault": {"kind": "max_tokens"}}
        ]}));
        assert_eq!(
            f.decide_row("a-flaky-1"),
            Some(RowFault::Errored {
                error: ErrorType::Api,
                message: None
            })
        );
        assert_eq!(f.decide_row("a-flaky-1"), None);
        assert_eq!(f.decide_row("r1"), Some(RowFault::Refusal));
        assert_eq!(f.decide_row("r1"), Some(RowFault::Refusal));
        assert_eq!(f.decide_row("cut"), Some(RowFault::MaxTokens));
        assert_eq!(f.decide_row("fine"), None);
    }

    // Invariant: with a capture group in its regex, a rule's `times`
    // counts the captured text, whichever custom_id carries it.
    #[test]
    fn times_count_the_captured_request_across_custom_ids() {
        let plan: FaultPlan = serde_json::from_value(serde_json::json!({"rows": [
            {"match": {"custom_id_regex": "^[0-9a-f]{4}-(flaky-.*)$"},
             "fault": {"kind": "errored", "error": "api_error"}, "times": 1}]}))
        .unwrap();
        let mut f = Faults::compile(plan).unwrap();
        assert!(f.decide_row("aaaa-flaky-1").is_some());
        assert!(
            f.decide_row("bbbb-flaky-1").is_none(),
            "the same request again"
        );
        assert!(f.decide_row("bbbb-flaky-2").is_some());
        assert!(f.decide_row("bbbb-steady-1").is_none());
    }

    // Invariant: a batch rule applies to its nth batch only, `times` times.
    #[test]
    fn batch_rules_match_nth_and_wear_out() {
        let mut f = plan(json!({"batches": [
            {"match": {"nth": 2}, "fault": {"kind": "stays_in_progress"}},
            {"match": {}, "fault": {"kind": "expired", "finished": 1}, "times": 2}
        ]}));
        assert_eq!(f.decide_batch(1), Some(BatchFault::Expired { finished: 1 }));
        assert_eq!(f.decide_batch(2), Some(BatchFault::StaysInProgress));
        assert_eq!(f.decide_batch(3), Some(BatchFault::Expired { finished: 1 }));
        assert_eq!(f.decide_batch(4), None);
    }

    // Invariant: create refusals fire in a fixed order, each as often as
    // its `times` says (every time without it).
    #[test]
    fn counted_refusals_wear_out() {
        let mut f = plan(json!({
            "unauthorized": {"times": 1},
            "rate_limit": {"times": 2, "retry_after_secs": 3},
            "overloaded": {},
            "create_answer_lost": {"mode": "drop"},
            "get_not_found": {"times": 1}
        }));
        assert_eq!(f.take_refusal(), Some(Refusal::Unauthorized));
        assert!(
            matches!(f.take_refusal(), Some(Refusal::RateLimited(rl)) if rl.retry_after_secs == 3 && rl.requests_limit == 50)
        );
        assert!(matches!(f.take_refusal(), Some(Refusal::RateLimited(_))));
        assert_eq!(f.take_refusal(), Some(Refusal::Overloaded));
        assert_eq!(f.take_refusal(), Some(Refusal::Overloaded));
        assert_eq!(f.take_lost_answer(), Some(LostMode::Drop));
        assert_eq!(f.take_lost_answer(), None);
        assert!(f.take_get_not_found());
        assert!(!f.take_get_not_found());
    }

    // Invariant: faults.example.json (the README's reference) is a valid plan.
    #[test]
    fn the_example_plan_compiles() {
        let plan = FaultPlan::from_json(include_str!("../faults.example.json")).unwrap();
        assert!(!plan.rows.is_empty() && !plan.batches.is_empty());
        Faults::compile(plan).unwrap();
    }

    // Invariant: a bad regex, a share outside 0..=1, an unknown field or
    // error type are refused, never half-applied.
    #[test]
    fn bad_plans_are_refused() {
        let bad: FaultPlan = serde_json::from_value(json!({"rows": [
            {"match": {"custom_id_regex": "("}, "fault": {"kind": "refusal"}}]}))
        .unwrap();
        assert!(matches!(
            Faults::compile(bad),
            Err(FaultPlanError::BadRegex { .. })
        ));
        let bad = FaultPlan {
            finished_on_cancel: 1.5,
            ..FaultPlan::default()
        };
        assert!(matches!(
            Faults::compile(bad),
            Err(FaultPlanError::BadShare { .. })
        ));
        assert!(FaultPlan::from_json(r#"{"nope": 1}"#).is_err());
        assert!(
            FaultPlan::from_json(
                r#"{"rows": [{"match": {}, "fault": {"kind": "errored", "error": "nope"}}]}"#
            )
            .is_err()
        );
    }

    // Invariant: a share never finishes more requests than it says.
    #[test]
    fn shares_round_down() {
        assert_eq!(share_of(0.5, 5), 2);
        assert_eq!(share_of(1.0, 5), 5);
        assert_eq!(share_of(0.0, 5), 0);
    }
}
