//! Gemini's fault plan: its row and batch ("job") fault kinds, create
//! refusals and file faults, on the shared vocabulary and engine of
//! `emulator_kit::rules` and `emulator_kit::sections` (see that crate's
//! README). Pure; nothing here reads a clock. `faults.example.json` beside
//! the manifest shows every section (`jobs` and `create_429` are the older
//! names of `batches` and `rate_limit`, and still parse).
//!
//! A `transient` row fault errs the first `times` times a key is
//! *processed* (its batch ran, under this plan), across batches; a row of
//! a batch that failed, expired or was cancelled was not processed.

use emulator_kit::rules::{self, BatchRules, RowRules, RuleError};
pub use emulator_kit::rules::{ListOrder, LostAnswer, LostMode, RowMatch};
use emulator_kit::sections::RateLimitSection;
pub use emulator_kit::sections::{EnqueuedTokens, SharedFaults, SharedSections};
use emulator_kit::times::Fired;
pub use emulator_kit::times::Times;
use serde::{Deserialize, Serialize};

/// Faults to inject, as written in JSON. Every section is optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FaultPlan {
    /// Per-row rules; the first rule that matches a row decides its fault.
    pub rows: Vec<RowRule>,
    /// Per-batch rules; the first rule that matches and still has uses left
    /// decides the batch's fate.
    #[serde(rename = "batches", alias = "jobs")]
    pub jobs: Vec<JobRule>,
    /// The sections every emulator takes; Gemini's `rate_limit` answers
    /// `batchGenerateContent` with HTTP 429 RESOURCE_EXHAUSTED.
    #[serde(flatten)]
    pub shared: SharedSections<RateLimit>,
    /// The project's enqueued-token quota per model, as the provider keeps
    /// it by tier: a create whose input tokens, with those of the model's
    /// batches not yet finished, pass `limit` answers HTTP 429.
    pub enqueued_tokens: Option<EnqueuedTokens>,
    /// The project's daily create quota: after `creates` batches were
    /// made under this plan, every create answers 429 with a QuotaFailure
    /// naming a per-day quota (and the RetryInfo the provider sends with
    /// it, which does not mean the quota is back by then).
    pub daily_quota: Option<DailyQuota>,
    /// The project cannot be billed: every create is refused, 403
    /// PERMISSION_DENIED or 400 FAILED_PRECONDITION (the provider documents
    /// neither for batch creates; it answers both elsewhere).
    pub billing: Option<Billing>,
    /// The model behind an alias changes at a time: batches of `model`
    /// answered from `from_unix_ms` on name `model_version` in
    /// `modelVersion` and answer the same requests differently (what a
    /// `-latest` alias moving to a new model looks like).
    pub model_change: Option<ModelChange>,
    /// The next `times` upload finalizes answer HTTP 200 with an error body.
    pub finalize_error_body: Option<FinalizeErrorBody>,
    /// How per-line errors are written (default: as the provider does).
    pub row_errors: RowErrorFormat,
    /// The next `times` downloads of a generated file answer `code` (403 or
    /// 404: not downloadable yet, or any more).
    pub output_unavailable: Option<OutputUnavailable>,
    /// The next `times` finalizes of an `application/jsonl` upload answer
    /// 200 with a 400 "Unsupported MIME type" error body.
    pub mime_refusal: Option<Times>,
    /// Files (uploaded and generated) are gone this long after they were
    /// made (the provider keeps them 48 hours); 0 keeps them.
    pub file_ttl_ms: u64,
    /// The order `batches.list` pages through batches in. The provider
    /// documents none, so every order is allowed.
    pub list_order: ListOrder,
    /// Creates are refused with this error (every time, or the next
    /// `times`): any status the provider may answer.
    pub create_refusal: Option<CreateRefusal>,
    /// Uploads (the start of a Files API resumable upload: batch input
    /// and media alike) are refused with this error, every time or the
    /// next `times`, and store nothing. Without a `message`, a 403 says
    /// Google's "The caller does not have permission" (the API answers a
    /// key or project refused for a method so; it documents no upload
    /// refusal).
    pub upload_refusal: Option<CreateRefusal>,
}

/// A refusal (of a create, or of an upload) with any status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateRefusal {
    /// The HTTP status (400..=599).
    pub code: u16,
    /// The error's `status`; default the canonical name of `code`.
    #[serde(default)]
    pub status: Option<String>,
    /// The error's message; default a generic one.
    #[serde(default)]
    pub message: Option<String>,
    /// How many creates are refused; absent: every one.
    #[serde(default)]
    pub times: Option<u32>,
}

/// The output-unavailable fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputUnavailable {
    pub times: u32,
    #[serde(default = "default_unavailable_code")]
    pub code: u16,
}

fn default_unavailable_code() -> u16 {
    404
}

/// The shape of an output line's `error`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RowErrorFormat {
    /// `google.rpc.Status`: a gRPC canonical `code` and a `message`, no
    /// `status` (what the provider writes).
    #[default]
    Grpc,
    /// The REST error shape: the HTTP `code` and the `status` name.
    Http,
}

/// One per-row rule. Its counted fault (`transient`) carries its own
/// `times`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RowRule {
    #[serde(rename = "match")]
    pub matcher: RowMatch,
    pub fault: RowFault,
}

impl rules::RowRule for RowRule {
    fn matcher(&self) -> &RowMatch {
        &self.matcher
    }
    fn times(&self) -> Option<u32> {
        match self.fault {
            RowFault::Transient { times, .. } => Some(times),
            RowFault::Safety
            | RowFault::PromptBlocked
            | RowFault::EmptyText
            | RowFault::InvalidJson
            | RowFault::Missing
            | RowFault::MaxTokens
            | RowFault::Recitation
            | RowFault::OtherFinish
            | RowFault::PermanentError { .. } => None,
        }
    }
}

/// What happens to a matching row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum RowFault {
    /// A candidate with `finishReason: SAFETY` and no text.
    Safety,
    /// No candidates; `promptFeedback.blockReason: SAFETY`.
    PromptBlocked,
    /// The first `times` times the key is processed, an error line with
    /// `code` (429 RESOURCE_EXHAUSTED, 503 UNAVAILABLE, 500 INTERNAL, …);
    /// later it is answered normally.
    Transient { code: u16, times: u32 },
    /// A candidate with `finishReason: STOP` and empty text.
    EmptyText,
    /// Text that is not valid JSON (`not json {`).
    InvalidJson,
    /// The key is left out of the output file.
    Missing,
    /// `finishReason: MAX_TOKENS`: thinking used up the output budget, the
    /// text is cut short (not valid JSON).
    MaxTokens,
    /// `finishReason: RECITATION`, no content.
    Recitation,
    /// `finishReason: OTHER` with partial text.
    OtherFinish,
    /// An error line with `code` (default 400 INVALID_ARGUMENT), every time.
    PermanentError {
        #[serde(default = "default_permanent_code")]
        code: u16,
    },
}

fn default_permanent_code() -> u16 {
    400
}

/// One per-batch rule; `times` defaults to 1, so a retried job succeeds.
pub type JobRule = rules::BatchRule<JobMatch, JobFault>;

/// Which batches a job rule applies to. Every field given must match.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JobMatch {
    /// The n-th batch created by this emulator, 1-based.
    pub nth: Option<u64>,
    /// A substring of the batch's displayName.
    pub display_name_contains: Option<String>,
}

impl rules::BatchMatch for JobMatch {
    /// The batch's displayName.
    type Batch<'a> = &'a str;
    fn nth(&self) -> Option<u64> {
        self.nth
    }
    fn holds(&self, display_name: &&str) -> bool {
        self.display_name_contains
            .as_deref()
            .is_none_or(|s| display_name.contains(s))
    }
}

/// What happens to a matching batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum JobFault {
    /// PENDING → RUNNING → BATCH_STATE_FAILED with an operation error.
    Failed {
        #[serde(default = "default_failed_message")]
        message: String,
        /// The first half of the rows were answered before it failed: the
        /// batch names a responses file holding them.
        #[serde(default)]
        partial: bool,
    },
    /// PENDING → BATCH_STATE_EXPIRED without ever running.
    Expired,
    /// Never leaves PENDING until cancelled.
    StaysPending,
}

fn default_failed_message() -> String {
    "batch failed: internal error while processing the batch".to_owned()
}

/// The daily-quota fault.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DailyQuota {
    pub creates: u64,
    #[serde(default = "default_daily_retry")]
    pub retry_after_secs: u64,
    #[serde(default = "default_daily_quota_id")]
    pub quota_id: String,
}

fn default_daily_retry() -> u64 {
    30
}

fn default_daily_quota_id() -> String {
    "GenerateRequestsPerDayPerProjectPerModel".to_owned()
}

/// The model-change fault.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelChange {
    pub model: String,
    #[serde(default)]
    pub from_unix_ms: i64,
    pub model_version: String,
}

/// The billing fault: the HTTP code of the refusal (403 or 400).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Billing {
    #[serde(default = "default_billing_code")]
    pub code: u16,
}

fn default_billing_code() -> u16 {
    403
}

/// The `rate_limit` section (older name `create_429`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    pub times: u32,
    /// The `RetryInfo.retryDelay` in the error body, in seconds (default 1).
    #[serde(default = "one_u64")]
    pub retry_after_secs: u64,
    /// Also send a `Retry-After` header. The provider documents only the
    /// body's `RetryInfo`; a proxy in front of it may add the header.
    #[serde(default)]
    pub retry_after_header: bool,
}

impl RateLimitSection for RateLimit {
    fn times(&self) -> u32 {
        self.times
    }
}

fn one_u64() -> u64 {
    1
}

/// The finalize-error-body fault.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FinalizeErrorBody {
    pub times: u32,
    /// The `code` inside the error body (default 500 INTERNAL).
    #[serde(default = "default_finalize_code")]
    pub code: u16,
}

fn default_finalize_code() -> u16 {
    500
}

/// A plan that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FaultPlanError {
    #[error(transparent)]
    Rules(#[from] RuleError),
    #[error("row rule {index}: error code {code} is not an HTTP error code (400..=599)")]
    BadCode { index: usize, code: u16 },
    #[error("{section}: code {code} is not an HTTP error code (400..=599)")]
    BadRefusalCode { section: &'static str, code: u16 },
}

impl FaultPlan {
    /// Parses a plan from JSON text.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let plan: FaultPlan = serde_json::from_str(text).map_err(|e| e.to_string())?;
        Faults::compile(plan.clone()).map_err(|e| e.to_string())?;
        Ok(plan)
    }
}

/// The decision for one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowVerdict {
    Answer,
    Safety,
    MaxTokens,
    Recitation,
    OtherFinish,
    PromptBlocked,
    Error(u16),
    EmptyText,
    InvalidJson,
    Missing,
}

/// A compiled plan with its counters.
#[derive(Debug)]
pub struct Faults {
    plan: FaultPlan,
    rows: RowRules<RowRule>,
    jobs: BatchRules<JobMatch, JobFault>,
    /// The sections every emulator takes, with their counters.
    pub shared: SharedFaults<RateLimit>,
    /// Batches made under this plan (the daily quota counts them).
    created: u64,
    finalize_errors: Fired,
    downloads_refused: Fired,
    mime_refused: Fired,
    refusals: Fired,
    upload_refusals: Fired,
}

impl Faults {
    pub fn compile(plan: FaultPlan) -> Result<Self, FaultPlanError> {
        for (index, rule) in plan.rows.iter().enumerate() {
            let code = match rule.fault {
                RowFault::Transient { code, .. } | RowFault::PermanentError { code } => Some(code),
                RowFault::Safety
                | RowFault::MaxTokens
                | RowFault::Recitation
                | RowFault::OtherFinish
                | RowFault::PromptBlocked
                | RowFault::EmptyText
                | RowFault::InvalidJson
                | RowFault::Missing => None,
            };
            if let Some(code) = code
                && !(400..=599).contains(&code)
            {
                return Err(FaultPlanError::BadCode { index, code });
            }
        }
        for (section, refusal) in [
            ("create_refusal", &plan.create_refusal),
            ("upload_refusal", &plan.upload_refusal),
        ] {
            if let Some(refusal) = refusal
                && !(400..=599).contains(&refusal.code)
            {
                let code = refusal.code;
                return Err(FaultPlanError::BadRefusalCode { section, code });
            }
        }
        Ok(Self {
            rows: RowRules::compile(plan.rows.clone())?,
            jobs: BatchRules::compile(plan.jobs.clone())?,
            shared: SharedFaults::compile(plan.shared.clone())?,
            plan,
            created: 0,
            finalize_errors: Fired::default(),
            downloads_refused: Fired::default(),
            mime_refused: Fired::default(),
            refusals: Fired::default(),
            upload_refusals: Fired::default(),
        })
    }

    pub fn plan(&self) -> &FaultPlan {
        &self.plan
    }

    /// Decides the fate of one row being processed, and counts the
    /// processing (transient faults count processings per key).
    pub fn decide_row(&mut self, key: &str, prompt: &str) -> RowVerdict {
        let Some(rule) = self.rows.decide(key, prompt) else {
            return RowVerdict::Answer;
        };
        match rule.fault {
            RowFault::Safety => RowVerdict::Safety,
            RowFault::MaxTokens => RowVerdict::MaxTokens,
            RowFault::Recitation => RowVerdict::Recitation,
            RowFault::OtherFinish => RowVerdict::OtherFinish,
            RowFault::PromptBlocked => RowVerdict::PromptBlocked,
            RowFault::Transient { code, .. } | RowFault::PermanentError { code } => {
                RowVerdict::Error(code)
            }
            RowFault::EmptyText => RowVerdict::EmptyText,
            RowFault::InvalidJson => RowVerdict::InvalidJson,
            RowFault::Missing => RowVerdict::Missing,
        }
    }

    /// Decides the fate of the `nth` batch (1-based), using up one of the
    /// matching rule's `times`.
    pub fn decide_job(&mut self, nth: u64, display_name: &str) -> Option<JobFault> {
        self.jobs.decide(nth, &display_name).cloned()
    }

    /// The refusal this create meets, if any (and counts it).
    pub fn take_create_refusal(&mut self) -> Option<CreateRefusal> {
        let refusal = self.plan.create_refusal.as_ref()?;
        self.refusals.take(refusal.times).then(|| refusal.clone())
    }

    /// The refusal this upload meets, if any (and counts it).
    pub fn take_upload_refusal(&mut self) -> Option<CreateRefusal> {
        let refusal = self.plan.upload_refusal.as_ref()?;
        self.upload_refusals
            .take(refusal.times)
            .then(|| refusal.clone())
    }

    /// The order of batch lists.
    pub fn list_order(&self) -> ListOrder {
        self.plan.list_order
    }

    /// The enqueued-token quota, if the plan sets one.
    pub fn enqueued_tokens(&self) -> Option<EnqueuedTokens> {
        self.plan.enqueued_tokens
    }

    /// The daily create quota, when this plan's creates used it up.
    pub fn daily_quota_used_up(&self) -> Option<&DailyQuota> {
        self.plan
            .daily_quota
            .as_ref()
            .filter(|q| self.created >= q.creates)
    }

    /// Counts a batch made under this plan.
    pub fn note_created(&mut self) {
        self.created += 1;
    }

    /// The version answering for `model` at `now_unix_ms`, when the plan
    /// changed the model behind it by then.
    pub fn model_changed(&self, model: &str, now_unix_ms: i64) -> Option<&str> {
        self.plan
            .model_change
            .as_ref()
            .filter(|c| {
                c.model.trim_start_matches("models/") == model && now_unix_ms >= c.from_unix_ms
            })
            .map(|c| c.model_version.as_str())
    }

    /// The billing refusal, if the plan sets one.
    pub fn billing(&self) -> Option<Billing> {
        self.plan.billing
    }

    /// If this download of a generated file is refused, the code.
    pub fn take_output_unavailable(&mut self) -> Option<u16> {
        let fault = self.plan.output_unavailable?;
        self.downloads_refused
            .take(Some(fault.times))
            .then_some(fault.code)
    }

    /// Whether this finalize of an `application/jsonl` upload is refused.
    pub fn take_mime_refusal(&mut self) -> bool {
        self.mime_refused.take_section(self.plan.mime_refusal)
    }

    /// How long files live, if they expire.
    pub fn file_ttl(&self) -> Option<chrono::Duration> {
        (self.plan.file_ttl_ms > 0).then(|| {
            chrono::Duration::milliseconds(i64::try_from(self.plan.file_ttl_ms).unwrap_or(i64::MAX))
        })
    }

    /// If a finalize should answer 200 with an error body, the error code.
    pub fn take_finalize_error(&mut self) -> Option<u16> {
        let fault = self.plan.finalize_error_body.as_ref()?;
        self.finalize_errors
            .take(Some(fault.times))
            .then_some(fault.code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(json: &str) -> Faults {
        Faults::compile(serde_json::from_str(json).unwrap()).unwrap()
    }

    #[test]
    fn first_matching_row_rule_wins() {
        let mut f = plan(
            r#"{"rows": [
                {"match": {"key": "a"}, "fault": {"kind": "safety"}},
                {"match": {"key_prefix": "a"}, "fault": {"kind": "missing"}},
                {"match": {"key_regex": "^b\\d+$"}, "fault": {"kind": "empty_text"}},
                {"match": {"prompt_contains": "forbidden"}, "fault": {"kind": "prompt_blocked"}},
                {"match": {"key": "z", "prompt_contains": "x"}, "fault": {"kind": "invalid_json"}}
            ]}"#,
        );
        assert_eq!(f.decide_row("a", ""), RowVerdict::Safety);
        assert_eq!(f.decide_row("ab", ""), RowVerdict::Missing);
        assert_eq!(f.decide_row("b12", ""), RowVerdict::EmptyText);
        assert_eq!(f.decide_row("b12c", ""), RowVerdict::Answer);
        assert_eq!(
            f.decide_row("c", "a forbidden word"),
            RowVerdict::PromptBlocked
        );
        assert_eq!(f.decide_row("z", "y"), RowVerdict::Answer);
        assert_eq!(f.decide_row("z", "x"), RowVerdict::InvalidJson);
    }

    #[test]
    fn transient_faults_fire_the_first_n_times_per_key() {
        let mut f = plan(
            r#"{"rows": [{"match": {"key_prefix": "t"}, "fault": {"kind": "transient", "code": 503, "times": 2}},
                         {"match": {"key": "p"}, "fault": {"kind": "permanent_error"}}]}"#,
        );
        assert_eq!(f.decide_row("t1", ""), RowVerdict::Error(503));
        assert_eq!(f.decide_row("t2", ""), RowVerdict::Error(503));
        assert_eq!(f.decide_row("t1", ""), RowVerdict::Error(503));
        assert_eq!(f.decide_row("t1", ""), RowVerdict::Answer);
        assert_eq!(f.decide_row("t2", ""), RowVerdict::Error(503));
        assert_eq!(f.decide_row("t2", ""), RowVerdict::Answer);
        assert_eq!(f.decide_row("p", ""), RowVerdict::Error(400));
        assert_eq!(f.decide_row("p", ""), RowVerdict::Error(400));
    }

    #[test]
    fn job_rules_are_used_up() {
        let mut f = plan(
            r#"{"jobs": [
                {"match": {"nth": 2}, "fault": {"kind": "expired"}},
                {"match": {"display_name_contains": "night"}, "fault": {"kind": "failed"}, "times": 2},
                {"match": {"display_name_contains": "hold"}, "fault": {"kind": "stays_pending"}}
            ]}"#,
        );
        assert_eq!(f.decide_job(1, "day"), None);
        assert_eq!(f.decide_job(2, "nightly"), Some(JobFault::Expired));
        assert!(matches!(
            f.decide_job(3, "nightly"),
            Some(JobFault::Failed { .. })
        ));
        assert!(matches!(
            f.decide_job(4, "nightly"),
            Some(JobFault::Failed { .. })
        ));
        assert_eq!(f.decide_job(5, "nightly"), None);
        assert_eq!(f.decide_job(6, "hold-1"), Some(JobFault::StaysPending));
        assert_eq!(f.decide_job(7, "hold-1"), None);
    }

    #[test]
    fn counted_create_and_finalize_faults() {
        let mut f = plan(
            r#"{"create_429": {"times": 1, "retry_after_secs": 3},
                "finalize_error_body": {"times": 1}}"#,
        );
        assert_eq!(
            f.shared
                .take_rate_limit()
                .map(|c| (c.retry_after_secs, c.retry_after_header)),
            Some((3, false))
        );
        assert_eq!(f.shared.take_rate_limit(), None);
        assert_eq!(f.take_finalize_error(), Some(500));
        assert_eq!(f.take_finalize_error(), None);
        let mut gone = plan(r#"{"output_unavailable": {"times": 2, "code": 403}}"#);
        assert_eq!(gone.take_output_unavailable(), Some(403));
        assert_eq!(gone.take_output_unavailable(), Some(403));
        assert_eq!(gone.take_output_unavailable(), None);
        let mut mime = plan(r#"{"mime_refusal": {"times": 1}}"#);
        assert!(mime.take_mime_refusal());
        assert!(!mime.take_mime_refusal());
    }

    // Invariant: the model changes for that model only, from that time on.
    #[test]
    fn the_model_behind_an_alias_changes_at_a_time() {
        let f = plan(
            r#"{"model_change": {"model": "models/flash-latest", "from_unix_ms": 1000, "model_version": "flash-2"}}"#,
        );
        assert_eq!(f.model_changed("flash-latest", 999), None);
        assert_eq!(f.model_changed("flash-latest", 1000), Some("flash-2"));
        assert_eq!(f.model_changed("pro", 5000), None);
    }

    #[test]
    fn the_example_plan_parses() {
        let plan = FaultPlan::from_json(include_str!("../faults.example.json")).unwrap();
        assert_eq!(plan.rows.len(), 7);
        assert_eq!(plan.jobs[1].times, 2);
        assert_eq!(plan.jobs[2].times, 1);
        let mut f = Faults::compile(plan).unwrap();
        assert_eq!(f.decide_row("e-12", ""), RowVerdict::EmptyText);
    }

    // Invariant: the older section names parse to the same plan as the
    // shared ones, and a plan is written back with the shared names.
    #[test]
    fn older_section_names_still_parse() {
        let old = FaultPlan::from_json(
            r#"{"jobs": [{"match": {"nth": 1}, "fault": {"kind": "expired"}}],
                "create_429": {"times": 1}}"#,
        )
        .unwrap();
        let new = FaultPlan::from_json(
            r#"{"batches": [{"match": {"nth": 1}, "fault": {"kind": "expired"}}],
                "rate_limit": {"times": 1}}"#,
        )
        .unwrap();
        assert_eq!(old, new);
        let written = serde_json::to_value(&new).unwrap();
        assert!(written.get("batches").is_some() && written.get("rate_limit").is_some());
        assert_eq!(FaultPlan::from_json(&written.to_string()).unwrap(), new);
    }

    #[test]
    fn bad_plans_are_refused() {
        let bad_regex: FaultPlan = serde_json::from_str(
            r#"{"rows": [{"match": {"key_regex": "("}, "fault": {"kind": "missing"}}]}"#,
        )
        .unwrap();
        assert!(matches!(
            Faults::compile(bad_regex),
            Err(FaultPlanError::Rules(RuleError::BadRegex { index: 0, .. }))
        ));
        assert!(
            FaultPlan::from_json(
                r#"{"rows": [{"match": {}, "fault": {"kind": "transient", "code": 200, "times": 1}}]}"#
            )
            .is_err()
        );
        assert!(FaultPlan::from_json(r#"{"rowz": []}"#).is_err());
        assert!(
            FaultPlan::from_json(
                r#"{"jobs": [{"match": {"nth": 0}, "fault": {"kind": "expired"}}]}"#
            )
            .is_err()
        );
        assert_eq!(FaultPlan::from_json("{}").unwrap(), FaultPlan::default());
    }
}
