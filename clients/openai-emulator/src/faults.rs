//! OpenAI's fault plan: its row and batch fault kinds and its create
//! refusals, on the shared vocabulary and engine of `emulator_kit::rules`
//! (see that crate's README). Pure; `faults.example.json` beside the
//! manifest shows every section.
//!
//! A row rule's `times` counts the processings of a custom_id (its batch
//! ran under this plan), across batches. A batch rule matches `nth`, the
//! batch's metadata and its lines' model.

use std::collections::BTreeMap;

use emulator_kit::rules::{self, BatchRules, RowRules, RuleError};
pub use emulator_kit::rules::{ListOrder, LostAnswer, LostMode, RowMatch};
pub use emulator_kit::sections::{EnqueuedTokens, RateLimit, SharedFaults, SharedSections};
use emulator_kit::times::Fired;
pub use emulator_kit::times::Times;
use serde::{Deserialize, Serialize};

/// Faults to inject, as written in JSON.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FaultPlan {
    pub rows: Vec<RowRule>,
    pub batches: Vec<BatchRule>,
    /// The sections every emulator takes; OpenAI's `rate_limit` answers
    /// 429 `rate_limit_exceeded` with a `retry-after` header.
    #[serde(flatten)]
    pub shared: SharedSections<RateLimit>,
    /// Creates answer 429 `insufficient_quota` (every time, or the next
    /// `times`).
    pub insufficient_quota: Option<Times>,
    /// The organisation's enqueued-token limit per model: a batch whose
    /// input tokens, with those of the model's unfinished batches, pass it
    /// fails at validation with `token_limit_exceeded` (its
    /// `retry_after_secs` is unused).
    pub enqueued_tokens: Option<EnqueuedTokens>,
    /// Each new batch is absent from lists for a further share of this,
    /// drawn per batch: lists fill out of creation order (a batch made
    /// later may be listed before one made earlier).
    pub list_lag_spread_ms: u64,
    /// A just-uploaded file is not yet visible to creates: a create naming
    /// it answers 400 `invalid_request_error` ("Cannot find file …"),
    /// while `GET /v1/files/{id}` finds it.
    pub file_visibility_lag: Option<FileVisibilityLag>,
    /// Overrides the configured list order.
    pub list_order: Option<ListOrder>,
    /// What cancelling a batch that already finished answers.
    pub cancel_finished: CancelFinished,
    /// Uploads (`POST /v1/files`) refused with this error: the next
    /// `times`, or every one without `times`. None stores a file.
    pub upload_refused: Option<UploadRefusal>,
    /// The files an account may store, in bytes (uploads and batch output
    /// alike): an upload that would pass it answers the 400 users report
    /// for a full storage. Absent: no limit (the API's project limit is
    /// 2.5 TB).
    pub storage_limit_bytes: Option<u64>,
    /// The largest file an upload may carry (default the API's 512 MB): a
    /// larger one answers 413 "File is too large".
    pub upload_max_bytes: Option<u64>,
    /// Batch output and error files expire this long after they are made
    /// (`expires_at` set; then every call naming them answers 404), as a
    /// create's `output_expires_after` makes them expire, on a test's
    /// clock.
    pub output_expiry_ms: Option<u64>,
}

/// An upload refused as the API refuses a call: `status`, `type`, `code`
/// and `message` of its error (by default the 403 `request_forbidden`
/// users report from a region the API does not serve).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UploadRefusal {
    #[serde(default = "forbidden")]
    pub status: u16,
    #[serde(default = "request_forbidden", rename = "type")]
    pub kind: String,
    #[serde(default = "unsupported_region")]
    pub code: Option<String>,
    #[serde(default = "region_message")]
    pub message: String,
    #[serde(default)]
    pub times: Option<u32>,
}

fn forbidden() -> u16 {
    403
}
fn request_forbidden() -> String {
    "request_forbidden".into()
}
fn unsupported_region() -> Option<String> {
    Some("unsupported_country_region_territory".into())
}
fn region_message() -> String {
    "Country, region, or territory not supported".into()
}

/// The largest file the API takes (512 MB).
pub const UPLOAD_MAX_BYTES: u64 = 512 * 1024 * 1024;

/// How long an uploaded file stays invisible to `POST /v1/batches`: its
/// first `creates` creates, and every create within `ms` of its upload
/// (either may be 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FileVisibilityLag {
    pub creates: u32,
    pub ms: u64,
}

/// Why an upload is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UploadRefused {
    /// The plan's `upload_refused`.
    Plan(UploadRefusal),
    /// Larger than `max` bytes.
    TooLarge { max: u64 },
    /// The account's files would pass `limit` bytes.
    StorageFull { limit: u64 },
}

/// What `POST /v1/batches/{id}/cancel` answers for a batch that finished
/// (the API reference does not say).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CancelFinished {
    /// 409 `invalid_request_error`.
    #[default]
    Conflict,
    /// 400 `invalid_request_error`.
    BadRequest,
    /// 200 with the batch as it is.
    Unchanged,
}

/// A row rule with OpenAI's row faults.
pub type RowRule = rules::Row<RowFault>;

/// What happens to one row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum RowFault {
    /// `response.status_code` = `status` with an error body (error file).
    HttpError {
        status: u16,
        #[serde(default)]
        code: Option<String>,
        #[serde(default = "server_error", rename = "type")]
        kind: String,
        #[serde(default = "http_error_message")]
        message: String,
    },
    /// `response: null, error: {code, message}` (error file).
    LineError {
        code: String,
        #[serde(default = "line_error_message")]
        message: String,
    },
    /// `finish_reason: "length"`, the answer cut short.
    Length,
    /// `finish_reason: "content_filter"`, no content.
    ContentFilter,
    /// `message.refusal` set, `content` null.
    Refusal,
    /// Content that is not valid JSON (for a schema: not an instance).
    InvalidJson,
    /// A success whose text is not the usual answer to the request, as a
    /// model sampling above temperature 0 answers the same request again
    /// differently (with `times: 1`, the first ask differs from the later).
    Resampled,
    /// In neither the output nor the error file.
    Missing,
}

/// A batch rule with OpenAI's batch faults.
pub type BatchRule = rules::BatchRule<BatchMatch, BatchFault>;

/// Which batches a rule is for; every given field must match.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BatchMatch {
    /// The nth batch created (1-based).
    pub nth: Option<u64>,
    /// Every pair is in the batch's metadata.
    pub metadata_contains: BTreeMap<String, String>,
    /// The model of the batch's lines.
    pub model: Option<String>,
}

/// What a batch rule's match fields are checked against.
#[derive(Debug, Clone, Copy)]
pub struct BatchFacts<'a> {
    pub metadata: &'a BTreeMap<String, String>,
    pub model: &'a str,
}

impl rules::BatchMatch for BatchMatch {
    type Batch<'a> = BatchFacts<'a>;
    fn nth(&self) -> Option<u64> {
        self.nth
    }
    fn holds(&self, batch: &BatchFacts<'_>) -> bool {
        self.model.as_deref().is_none_or(|want| want == batch.model)
            && self
                .metadata_contains
                .iter()
                .all(|(k, v)| batch.metadata.get(k) == Some(v))
    }
}

/// What happens to one batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum BatchFault {
    /// Fails at validation with these errors (default one `invalid_request`).
    Failed {
        #[serde(default)]
        errors: Vec<LineErrorSpec>,
    },
    /// Expires after answering its first `answered` rows; the rest are
    /// `batch_expired` lines of the error file.
    Expired {
        #[serde(default)]
        answered: usize,
    },
    StaysValidating,
    StaysInProgress,
    /// Fails at validation with `token_limit_exceeded`.
    TokenLimitExceeded,
}

/// One entry of a batch's `errors.data`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LineErrorSpec {
    pub code: String,
    pub message: String,
    #[serde(default)]
    pub param: Option<String>,
    #[serde(default)]
    pub line: Option<u64>,
}

fn server_error() -> String {
    "server_error".into()
}
fn http_error_message() -> String {
    "The server had an error while processing your request. Sorry about that!".into()
}
fn line_error_message() -> String {
    "This request could not be executed.".into()
}

/// Why a plan does not compile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FaultPlanError {
    #[error(transparent)]
    Rules(#[from] RuleError),
    #[error("row rule {index}: http_error status must be 400..=599, got {status}")]
    BadStatus { index: usize, status: u16 },
    #[error("upload_refused: status must be 400..=599, got {0}")]
    BadUploadStatus(u16),
}

impl FaultPlan {
    /// Parses the JSON form (the bin's `--faults` file).
    pub fn from_json(text: &str) -> Result<Self, String> {
        serde_json::from_str(text).map_err(|e| e.to_string())
    }
}

/// The plan compiled, with its counters.
#[derive(Debug)]
pub struct Faults {
    plan: FaultPlan,
    rows: RowRules<RowRule>,
    batches: BatchRules<BatchMatch, BatchFault>,
    /// The sections every emulator takes, with their counters.
    pub shared: SharedFaults<RateLimit>,
    quota_refusals: Fired,
    upload_refusals: Fired,
    /// Per file, the creates already refused as not visible.
    invisible: BTreeMap<String, u32>,
}

impl Faults {
    pub fn compile(plan: FaultPlan) -> Result<Self, FaultPlanError> {
        for (index, rule) in plan.rows.iter().enumerate() {
            if let RowFault::HttpError { status, .. } = rule.fault
                && !(400..=599).contains(&status)
            {
                return Err(FaultPlanError::BadStatus { index, status });
            }
        }
        if let Some(refusal) = &plan.upload_refused
            && !(400..=599).contains(&refusal.status)
        {
            return Err(FaultPlanError::BadUploadStatus(refusal.status));
        }
        Ok(Self {
            rows: RowRules::compile(plan.rows.clone())?,
            batches: BatchRules::compile(plan.batches.clone())?,
            shared: SharedFaults::compile(plan.shared.clone())?,
            plan,
            quota_refusals: Fired::default(),
            upload_refusals: Fired::default(),
            invisible: BTreeMap::new(),
        })
    }

    pub fn plan(&self) -> &FaultPlan {
        &self.plan
    }

    /// The fault of one row being processed now (counts the processing).
    pub fn decide_row(&mut self, custom_id: &str, prompt: &str) -> Option<RowFault> {
        self.rows
            .decide(custom_id, prompt)
            .map(|rule| rule.fault.clone())
    }

    /// The fault of the `nth` batch created (uses one of the rule's uses).
    pub fn decide_batch(
        &mut self,
        nth: u64,
        metadata: &BTreeMap<String, String>,
        model: &str,
    ) -> Option<BatchFault> {
        self.batches
            .decide(nth, &BatchFacts { metadata, model })
            .cloned()
    }

    pub fn take_insufficient_quota(&mut self) -> bool {
        self.quota_refusals
            .take_section(self.plan.insufficient_quota)
    }

    /// The refusal of this upload of `bytes` bytes while the account
    /// stores `stored` bytes, if one is due (the plan's refusal first,
    /// counted; then the file's size; then the storage).
    pub fn take_upload_refusal(&mut self, bytes: u64, stored: u64) -> Option<UploadRefused> {
        if let Some(refusal) = &self.plan.upload_refused
            && self.upload_refusals.take(refusal.times)
        {
            return Some(UploadRefused::Plan(refusal.clone()));
        }
        let max = self.plan.upload_max_bytes.unwrap_or(UPLOAD_MAX_BYTES);
        if bytes > max {
            return Some(UploadRefused::TooLarge { max });
        }
        match self.plan.storage_limit_bytes {
            Some(limit) if stored.saturating_add(bytes) > limit => {
                Some(UploadRefused::StorageFull { limit })
            }
            _ => None,
        }
    }

    /// Whether a create naming `file`, uploaded `age_ms` ago, finds it not
    /// yet visible (counts the create if so).
    pub fn take_file_invisible(&mut self, file: &str, age_ms: i64) -> bool {
        let Some(lag) = self.plan.file_visibility_lag else {
            return false;
        };
        let refused = self.invisible.entry(file.to_owned()).or_default();
        let young = u64::try_from(age_ms).unwrap_or(0) < lag.ms;
        if *refused < lag.creates || young {
            *refused += 1;
            return true;
        }
        false
    }

    /// How much longer than `list_lag_ms` the batch of sequence `seq` is
    /// left out of lists.
    pub fn list_lag_spread(&self, seq: u64, seed: u64) -> u64 {
        match self.plan.list_lag_spread_ms {
            0 => 0,
            spread => emulator_kit::mix::Mix::new(seed ^ seq).next_u64() % spread,
        }
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
    // processings of each custom_id, so a row errs then succeeds.
    #[test]
    fn row_rules_match_in_order_and_wear_out() {
        let mut f = plan(json!({"rows": [
            {"match": {"custom_id_prefix": "flaky-"}, "fault": {"kind": "http_error", "status": 500}, "times": 1},
            {"match": {"custom_id_regex": "^r\\d$"}, "fault": {"kind": "refusal"}},
            {"match": {"prompt_contains": "cut"}, "fault": {"kind": "length"}}
        ]}));
        assert!(matches!(
            f.decide_row("flaky-1", ""),
            Some(RowFault::HttpError { status: 500, .. })
        ));
        assert_eq!(f.decide_row("flaky-1", ""), None);
        assert_eq!(f.decide_row("r1", ""), Some(RowFault::Refusal));
        assert_eq!(f.decide_row("r1", ""), Some(RowFault::Refusal));
        assert_eq!(f.decide_row("x", "please cut"), Some(RowFault::Length));
        assert_eq!(f.decide_row("x", "fine"), None);
    }

    #[test]
    fn batch_rules_match_nth_metadata_and_model_once_each() {
        let mut f = plan(json!({"batches": [
            {"match": {"nth": 2}, "fault": {"kind": "stays_validating"}},
            {"match": {"metadata_contains": {"job": "j1"}, "model": "gpt-4o"}, "fault": {"kind": "expired", "answered": 1}, "times": 2}
        ]}));
        let none = BTreeMap::new();
        let j1 = BTreeMap::from([("job".to_string(), "j1".to_string())]);
        assert_eq!(f.decide_batch(1, &none, "gpt-4o"), None);
        assert_eq!(
            f.decide_batch(2, &none, "gpt-4o"),
            Some(BatchFault::StaysValidating)
        );
        assert_eq!(f.decide_batch(2, &none, "gpt-4o"), None);
        assert_eq!(f.decide_batch(3, &j1, "gpt-4o-mini"), None);
        assert!(f.decide_batch(3, &j1, "gpt-4o").is_some());
        assert!(f.decide_batch(4, &j1, "gpt-4o").is_some());
        assert_eq!(f.decide_batch(5, &j1, "gpt-4o"), None);
    }

    #[test]
    fn counted_refusals_wear_out() {
        let mut f = plan(json!({
            "rate_limit": {"times": 1, "retry_after_secs": 3},
            "insufficient_quota": {"times": 1},
            "enqueued_tokens": 100
        }));
        assert_eq!(
            f.shared.take_rate_limit().map(|r| r.retry_after_secs),
            Some(3)
        );
        assert_eq!(f.shared.take_rate_limit(), None);
        assert!(f.take_insufficient_quota());
        assert!(!f.take_insufficient_quota());
        assert_eq!(f.plan().enqueued_tokens.map(|t| t.limit), Some(100));
    }

    // Invariant: a file stays invisible for its first `creates` creates
    // (counted per file) and while younger than `ms`; then it is found.
    #[test]
    fn files_turn_visible_after_their_creates_or_their_age() {
        let mut f = plan(json!({"file_visibility_lag": {"creates": 2}}));
        assert!(f.take_file_invisible("file-a", 10_000));
        assert!(f.take_file_invisible("file-a", 10_000));
        assert!(!f.take_file_invisible("file-a", 10_000));
        assert!(f.take_file_invisible("file-b", 10_000), "counted per file");
        let mut f = plan(json!({"file_visibility_lag": {"ms": 500}}));
        assert!(f.take_file_invisible("file-a", 100));
        assert!(!f.take_file_invisible("file-a", 600));
        assert!(!plan(json!({})).take_file_invisible("file-a", 0));
    }

    // Invariant: the per-batch lag is drawn below the spread, the same for
    // the same batch, and differs between batches (lists fill out of
    // order).
    #[test]
    fn the_list_lag_spread_is_drawn_per_batch() {
        let f = plan(json!({"list_lag_spread_ms": 1000}));
        let lags: Vec<u64> = (1..=20).map(|seq| f.list_lag_spread(seq, 7)).collect();
        assert!(lags.iter().all(|l| *l < 1000));
        assert_eq!(f.list_lag_spread(3, 7), lags[2]);
        assert!(lags.windows(2).any(|w| w[0] > w[1]), "{lags:?}");
        assert_eq!(plan(json!({})).list_lag_spread(3, 7), 0);
    }

    // Invariant: an upload is refused by the plan (as often as its
    // `times` says), then for its size, then for the storage it would
    // fill; an upload within every limit is not.
    #[test]
    fn uploads_are_refused_by_the_plan_size_and_storage() {
        let mut f = plan(json!({
            "upload_refused": {"times": 1},
            "upload_max_bytes": 100,
            "storage_limit_bytes": 250
        }));
        match f.take_upload_refusal(10, 0) {
            Some(UploadRefused::Plan(r)) => {
                assert_eq!((r.status, r.kind.as_str()), (403, "request_forbidden"));
                assert_eq!(
                    r.code.as_deref(),
                    Some("unsupported_country_region_territory")
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(f.take_upload_refusal(10, 0), None, "times: 1 is spent");
        assert_eq!(
            f.take_upload_refusal(101, 0),
            Some(UploadRefused::TooLarge { max: 100 })
        );
        assert_eq!(f.take_upload_refusal(100, 150), None);
        assert_eq!(
            f.take_upload_refusal(100, 151),
            Some(UploadRefused::StorageFull { limit: 250 })
        );
        let mut every =
            plan(json!({"upload_refused": {"status": 401, "code": null, "message": "no"}}));
        assert!((0..5).all(|_| every.take_upload_refusal(1, 0).is_some()));
        assert_eq!(
            plan(json!({})).take_upload_refusal(UPLOAD_MAX_BYTES + 1, 0),
            Some(UploadRefused::TooLarge {
                max: UPLOAD_MAX_BYTES
            })
        );
        let bad: FaultPlan =
            serde_json::from_value(json!({"upload_refused": {"status": 200}})).unwrap();
        assert!(matches!(
            Faults::compile(bad),
            Err(FaultPlanError::BadUploadStatus(200))
        ));
    }

    #[test]
    fn the_example_plan_compiles() {
        let plan = FaultPlan::from_json(include_str!("../faults.example.json")).unwrap();
        Faults::compile(plan).unwrap();
    }

    #[test]
    fn bad_plans_are_refused() {
        let bad: FaultPlan = serde_json::from_value(json!({"rows": [
            {"match": {"custom_id_regex": "("}, "fault": {"kind": "missing"}}]}))
        .unwrap();
        assert!(matches!(
            Faults::compile(bad),
            Err(FaultPlanError::Rules(RuleError::BadRegex { .. }))
        ));
        assert!(FaultPlan::from_json(r#"{"nope": 1}"#).is_err());
    }
}
