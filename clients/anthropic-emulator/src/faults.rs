//! Anthropic's fault plan: its row and batch fault kinds and its create
//! refusals, on the shared vocabulary and engine of `emulator_kit::rules`
//! (see that crate's README). Pure; `faults.example.json` beside the
//! manifest shows every section.
//!
//! A row rule's `times` counts the processings of a request (its batch
//! ended with it run, not canceled or expired), across batches. Create
//! refusals and the other counted faults apply to the next `times` calls,
//! or to every call without `times`.

use emulator_kit::rules::{self, BatchRules, NthMatch, RowRules, RuleError, check_share};
pub use emulator_kit::rules::{ListOrder, LostAnswer, LostMode, RowMatch, share_of};
use emulator_kit::sections::RateLimitSection;
pub use emulator_kit::sections::{SharedFaults, SharedSections};
use emulator_kit::times::Fired;
pub use emulator_kit::times::Times;
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
    /// The sections every emulator takes; Anthropic's `rate_limit`
    /// answers 429 `rate_limit_error` with `retry-after` and the
    /// `anthropic-ratelimit-requests-*` headers.
    #[serde(flatten)]
    pub shared: SharedSections<RateLimit>,
    /// The next `times` creates answer as an account over its monthly spend
    /// cap: 429 `rate_limit_error` with `error.details.error_code` and no
    /// `retry-after`; or, for `organization_on_hold`, as an organization
    /// disabled: 400 `invalid_request_error` with that `error_code` (the
    /// SDK types it `OrganizationOnHoldError`, a `BadRequestError`).
    pub spend_limit: Option<SpendLimit>,
    /// Creates answer 529 `overloaded_error`.
    pub overloaded: Option<Times>,
    /// The share (0 to 1) of an expired batch's requests, first in request
    /// order, that finished before the horizon; the rest are `expired`.
    pub finished_on_expiry: f64,
    /// The order `GET /v1/messages/batches` pages in (newest first, as
    /// documented, by default).
    pub list_order: Option<ListOrder>,
    /// `request_counts` move while a batch is `in_progress`: its requests
    /// are answered one by one over its `in_progress` time (processing
    /// falls, succeeded and errored rise), as the API reference's example
    /// shows; by default they stay `processing` until it ends, as the
    /// SDK's field docs say.
    pub moving_counts: bool,
    /// Overrides the configured time an ended batch's results stay
    /// available (29 days after creation): then `archived_at` is set and
    /// its results answer 404.
    pub archive_after_ms: Option<u64>,
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

impl RateLimitSection for RateLimit {
    fn times(&self) -> u32 {
        self.times
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpendLimit {
    pub times: u32,
    /// `enforced_spend_limit_reached` (the default) or
    /// `contract_spend_limit_reached` (429s), or `organization_on_hold`
    /// (a 400).
    #[serde(default = "enforced")]
    pub error_code: String,
}

fn enforced() -> String {
    "enforced_spend_limit_reached".into()
}

/// A row rule with Anthropic's row faults.
pub type RowRule = rules::Row<RowFault>;

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

/// Anthropic batches carry nothing to match but their `nth`.
pub type BatchMatch = NthMatch;

/// A batch rule with Anthropic's batch faults.
pub type BatchRule = rules::BatchRule<BatchMatch, BatchFault>;

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

/// Why a plan does not compile.
pub type FaultPlanError = RuleError;

impl FaultPlan {
    /// Parses the JSON form (the bin's `--faults` file).
    pub fn from_json(text: &str) -> Result<Self, String> {
        serde_json::from_str(text).map_err(|e| e.to_string())
    }
}

/// A create refused by the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    Unauthorized,
    Billing,
    Forbidden,
    /// Over the spend cap (or on hold): the `error_code` it names.
    SpendLimited(String),
    RateLimited(RateLimit),
    Overloaded,
}

/// The plan compiled, with its counters.
#[derive(Debug)]
pub struct Faults {
    plan: FaultPlan,
    rows: RowRules<RowRule>,
    batches: BatchRules<BatchMatch, BatchFault>,
    unauthorized: Fired,
    billing: Fired,
    forbidden: Fired,
    spend_limits: Fired,
    overloaded: Fired,
    /// The sections every emulator takes, with their counters.
    pub shared: SharedFaults<RateLimit>,
}

impl Faults {
    pub fn compile(plan: FaultPlan) -> Result<Self, FaultPlanError> {
        check_share("finished_on_expiry", plan.finished_on_expiry)?;
        Ok(Self {
            rows: RowRules::compile(plan.rows.clone())?,
            batches: BatchRules::compile(plan.batches.clone())?,
            shared: SharedFaults::compile(plan.shared.clone())?,
            plan,
            unauthorized: Fired::default(),
            billing: Fired::default(),
            forbidden: Fired::default(),
            spend_limits: Fired::default(),
            overloaded: Fired::default(),
        })
    }

    pub fn plan(&self) -> &FaultPlan {
        &self.plan
    }

    /// The fault of one request being processed now (counts the
    /// processing).
    pub fn decide_row(&mut self, custom_id: &str, prompt: &str) -> Option<RowFault> {
        self.rows
            .decide(custom_id, prompt)
            .map(|rule| rule.fault.clone())
    }

    /// The fault of the `nth` batch created (uses one of the rule's uses).
    pub fn decide_batch(&mut self, nth: u64) -> Option<BatchFault> {
        self.batches.decide(nth, &()).cloned()
    }

    /// The refusal of this create, if one is due (the first due in the
    /// order 401, 402, 403, 429 over the spend cap, 429, 529).
    pub fn take_refusal(&mut self) -> Option<Refusal> {
        let plan = &self.plan;
        if self.unauthorized.take_section(plan.unauthorized) {
            return Some(Refusal::Unauthorized);
        }
        if self.billing.take_section(plan.billing) {
            return Some(Refusal::Billing);
        }
        if self.forbidden.take_section(plan.forbidden) {
            return Some(Refusal::Forbidden);
        }
        if let Some(sl) = &plan.spend_limit
            && self.spend_limits.take(Some(sl.times))
        {
            return Some(Refusal::SpendLimited(sl.error_code.clone()));
        }
        if let Some(rl) = self.shared.take_rate_limit() {
            return Some(Refusal::RateLimited(rl));
        }
        if self.overloaded.take_section(plan.overloaded) {
            return Some(Refusal::Overloaded);
        }
        None
    }
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
            f.decide_row("a-flaky-1", ""),
            Some(RowFault::Errored {
                error: ErrorType::Api,
                message: None
            })
        );
        assert_eq!(f.decide_row("a-flaky-1", ""), None);
        assert_eq!(f.decide_row("r1", ""), Some(RowFault::Refusal));
        assert_eq!(f.decide_row("r1", ""), Some(RowFault::Refusal));
        assert_eq!(f.decide_row("cut", ""), Some(RowFault::MaxTokens));
        assert_eq!(f.decide_row("fine", ""), None);
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
            "overloaded": {}
        }));
        assert_eq!(f.take_refusal(), Some(Refusal::Unauthorized));
        assert!(
            matches!(f.take_refusal(), Some(Refusal::RateLimited(rl)) if rl.retry_after_secs == 3 && rl.requests_limit == 50)
        );
        assert!(matches!(f.take_refusal(), Some(Refusal::RateLimited(_))));
        assert_eq!(f.take_refusal(), Some(Refusal::Overloaded));
        assert_eq!(f.take_refusal(), Some(Refusal::Overloaded));
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
            finished_on_expiry: 1.5,
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
}
