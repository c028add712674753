//! Plain records the store takes and returns. The server converts them to
//! and from `tally.v1` messages; nothing here knows about protobuf.

use chrono::{DateTime, Utc};
use std::time::Duration;
use tally_core::pause::PauseReason;
use tally_core::policy::{Policy, Price};
use tally_core::status::{Budget, PerBudget, RowStatus};
use tally_core::transition::Outcome;
use uuid::Uuid;

pub type Time = DateTime<Utc>;

#[derive(Debug, Clone)]
pub struct LedgerRecord {
    pub id: i64,
    /// The ledger id (the last segment of its name).
    pub name: String,
    pub policy: Policy,
    pub etag: i64,
    pub create_time: Time,
    pub update_time: Time,
    /// Set while the ledger is being deleted (DELETING); `None` for a live
    /// ledger. Work paths never see a deleting ledger.
    pub deletion: Option<Deletion>,
    /// Set while the ledger is paused (see `tally_core::pause`).
    pub pause: Option<Pause>,
}

/// A ledger's pause: why, who, when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pause {
    pub reason: PauseReason,
    /// Free text given with the pause (an operator's reason, or what the
    /// server saw).
    pub message: String,
    /// Who paused it (the caller's name, or `system`).
    pub actor: String,
    pub time: Time,
}

/// A ledger being deleted: when, how, and how far its purge has come.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deletion {
    pub delete_time: Time,
    /// Deleted with force (live claims expired, open jobs abandoned).
    pub forced: bool,
    /// Rows the ledger had when it was deleted; `None` until the purge's
    /// first step has counted them.
    pub rows_total: Option<i64>,
    /// Rows removed so far.
    pub rows_purged: i64,
    pub claims_expired: i32,
    pub jobs_abandoned: i32,
}

/// One row to enroll, validated by the caller.
#[derive(Debug, Clone, Default)]
pub struct NewRow {
    pub key: String,
    pub payload: String,
    pub depends_on: Vec<String>,
    /// Names for some of `depends_on` in the prompt (key to name).
    pub dependency_names: std::collections::HashMap<String, String>,
    pub prompt_name: String,
    pub prompt_version: String,
    /// As given; empty takes the ledger's model.
    pub model: String,
    pub content_hash: [u8; 16],
}

impl NewRow {
    /// The row's model, or `default` (the ledger's) when none was given.
    pub fn model_or<'a>(&'a self, default: &'a str) -> &'a str {
        if self.model.is_empty() {
            default
        } else {
            &self.model
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnrollOutcome {
    Enrolled,
    AlreadyPresent,
    Conflict,
}

#[derive(Debug, Clone, Default)]
pub struct ClaimRequest {
    pub max_rows: i64,
    /// `None`: the ledger's lease.
    pub lease: Option<Duration>,
    pub worker: String,
    pub request_id: Option<String>,
    pub model: Option<String>,
    /// Only rows of this provider's models (`tally_core::provider`); `None`:
    /// any provider.
    pub provider: Option<String>,
    /// `None`: no byte limit (the row count alone).
    pub bytes: Option<ByteBudget>,
    /// The caller makes a job (a provider batch) of the claim at once, and
    /// the job's report reads its rows under the claim's lock: the rows are
    /// not remembered for a report through this process (`claim_cache`).
    pub for_job: bool,
    /// The lane the rows will be sent in (the ledger must allow it).
    pub lane: tally_core::lane::Lane,
    /// Only rows whose depth is in this band (inclusive), as routing to
    /// the lane decides (`forecast`); `None`: every depth.
    pub depths: Option<(i32, i32)>,
}

/// How many bytes of rows one claim may hand out: rows are taken, oldest
/// ready first, while their sizes (key, payload, prompt and model bytes plus
/// `row_overhead` each) add up to at most `max_bytes`; the first row always
/// is. Rows past the cut stay runnable, never claimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteBudget {
    pub max_bytes: i64,
    pub row_overhead: i32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimState {
    Active,
    Done,
    Expired,
}

impl ClaimState {
    /// The stored code (equal to the `tally.v1.ClaimState` number).
    pub const fn code(self) -> i16 {
        match self {
            ClaimState::Active => 1,
            ClaimState::Done => 2,
            ClaimState::Expired => 3,
        }
    }

    pub fn from_code(code: i16) -> ClaimState {
        match code {
            2 => ClaimState::Done,
            3 => ClaimState::Expired,
            _ => ClaimState::Active,
        }
    }
}

#[derive(Debug, Clone)]
pub struct ClaimRecord {
    pub token: Uuid,
    pub ledger: String,
    pub worker: String,
    pub model: String,
    pub create_time: Time,
    pub expire_time: Time,
    pub state: ClaimState,
    pub row_count: i32,
    pub held: i32,
    /// The job's public id, if a job was made from the claim.
    pub job: Option<String>,
    pub lane: tally_core::lane::Lane,
}

#[derive(Debug, Clone)]
pub struct ClaimedRow {
    pub key: String,
    pub payload: String,
    pub prompt_name: String,
    pub prompt_version: String,
    pub model: String,
    pub failures: PerBudget,
    pub total: u32,
    /// Whether the row depends on others (their results are read for it).
    pub has_dependencies: bool,
    /// Its dependencies' results, in key order, for its prompt.
    pub dependencies: Vec<DependencyResult>,
}

/// A dependency's result as a claim gives it to a dependant.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct DependencyResult {
    pub key: String,
    /// The name the dependant gave it ('' for none).
    pub name: String,
    pub result: String,
    /// Hex SHA-256 of `result`.
    pub result_hash: String,
}

#[derive(Debug, Clone)]
pub struct ClaimGrant {
    pub claim: ClaimRecord,
    pub rows: Vec<ClaimedRow>,
    /// Claimable rows left out because they did not fit the byte budget
    /// (they stay runnable); 0 when the claim was not cut short.
    pub held_back: i64,
}

pub use tally_core::usage::Usage;

/// One reported outcome, validated by the caller.
#[derive(Debug, Clone)]
pub struct ReportItem {
    pub key: String,
    pub outcome: Outcome,
    /// The result JSON (successes only).
    pub result: Option<String>,
    /// The provider's own answer (a JSON object), kept with a success.
    pub response: Option<String>,
    pub usage: Usage,
    /// The provider's request id and the tier it granted (synchronous
    /// lanes), kept with the attempt.
    pub request_id: Option<String>,
    pub tier: Option<String>,
    /// The model version the provider said answered (kept with the answer
    /// in the result cache).
    pub model_version: Option<String>,
    /// Set only by SettleFromCache: where the cached answer came from.
    pub cached: Option<CachedFrom>,
}

/// Where an answer served from the result cache came from, recorded with the
/// attempt it answered (`attempts.cached`, JSON).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CachedFrom {
    /// `ledgers/{ledger}/rows/{key}` and the attempt that answered.
    pub row: String,
    pub attempt: i32,
    /// What that attempt cost.
    pub cost_usd: f64,
    /// When it answered, in milliseconds since the Unix epoch.
    pub answer_ms: i64,
    pub model_version: String,
    /// The model alias it was cached under, and its provider.
    pub model: String,
    pub provider: String,
}

/// A report's answer for one row (decided in `tally_core::report`).
pub use tally_core::report::Verdict;

#[derive(Debug, Clone)]
pub struct RowVerdict {
    pub key: String,
    pub verdict: Verdict,
    pub rule: String,
    pub budget: Option<Budget>,
    pub next_attempt_time: Option<Time>,
    pub failures: PerBudget,
    pub total: u32,
}

#[derive(Debug, Clone, Default)]
pub struct ReportSummary {
    pub verdicts: Vec<RowVerdict>,
    pub held: i32,
    /// The reporting claim's model (empty when the claim was not found):
    /// what the outcomes' tokens were spent on.
    pub model: String,
    /// The ledger's price of that model, if it has one.
    pub price: Option<Price>,
}

/// The usage of the reported items that became attempts (not STALE or
/// DUPLICATE: those were not written). `verdicts` answer `items` in order.
pub fn attempted_usage(items: &[ReportItem], verdicts: &[RowVerdict]) -> Usage {
    let mut sum = Usage::default();
    for (item, v) in items.iter().zip(verdicts) {
        if matches!(v.verdict, Verdict::Stale | Verdict::Duplicate) {
            continue;
        }
        let u = &item.usage;
        sum.input = sum.input.saturating_add(u.input);
        sum.output = sum.output.saturating_add(u.output);
        sum.thinking = sum.thinking.saturating_add(u.thinking);
        sum.cached = sum.cached.saturating_add(u.cached);
        sum.cache_write = sum.cache_write.saturating_add(u.cache_write);
    }
    sum
}

/// Conditions on rows (all set ones must hold).
#[derive(Debug, Clone, Default)]
pub struct RowFilter {
    pub statuses: Vec<RowStatus>,
    pub rule: Option<String>,
    pub model: Option<String>,
    pub prompt_name: Option<String>,
    pub prompt_version: Option<String>,
    /// A job's public id: the rows whose latest job it is.
    pub job: Option<String>,
    /// A job's public id: the rows the job was made with.
    pub in_job: Option<String>,
    /// Rows served from the result cache an answer cached before golden
    /// rows last saw its model drift.
    pub stale_cache: bool,
    /// Rows answered from a dependency's result that has changed since.
    pub inputs_changed: bool,
}

#[derive(Debug, Clone)]
pub struct AttemptInfo {
    pub number: i32,
    pub claim: Option<Uuid>,
    pub job: Option<String>,
    pub batch: Option<String>,
    pub model: String,
    pub prompt_name: String,
    pub prompt_version: String,
    pub outcome: RowStatus,
    pub rule: String,
    pub budget: Option<Budget>,
    pub usage: Usage,
    pub error: String,
    pub actor: String,
    pub time: Time,
    pub lane: tally_core::lane::Lane,
    pub request_id: String,
    pub tier: String,
    /// At the ledger's price for its model and lane (0 without one).
    pub cost_usd: f64,
    /// Answered from the result cache: from where.
    pub cached: Option<CachedFrom>,
}

#[derive(Debug, Clone)]
pub struct RowRecord {
    pub ledger: String,
    pub key: String,
    /// `None` in the basic view.
    pub payload: Option<String>,
    pub depends_on: Vec<String>,
    pub prompt_name: String,
    pub prompt_version: String,
    pub model: String,
    pub status: RowStatus,
    pub failures: PerBudget,
    pub total: u32,
    pub rule: String,
    pub last_error: String,
    pub result: Option<String>,
    /// The provider's own answer that succeeded, when a worker kept it.
    pub response: Option<String>,
    pub usage: Usage,
    pub claim: Option<Uuid>,
    pub job: Option<String>,
    pub next_attempt_time: Option<Time>,
    pub create_time: Time,
    pub update_time: Time,
    pub unmet_deps: i32,
    /// The version of the row's latest final result (or of its next, while
    /// it is not final): see `tally_core::delivery`.
    pub result_version: i32,
    /// Filled by `get_row` and the full view.
    pub history: Vec<AttemptInfo>,
    /// Older attempts left out of `history` to bound the answer (see
    /// `rows::HISTORY_BYTES`).
    pub history_omitted: i64,
    /// Its dependencies as its prompt used them, in key order (filled by
    /// `get_row` and the full view).
    pub inputs: Vec<DependencyInput>,
    /// Results it had before it was asked again, newest first (GetRow
    /// only, at most [`crate::rows::SUPERSEDED_SHOWN`]), and how many more.
    pub superseded: Vec<SupersededResult>,
    pub superseded_omitted: i64,
}

/// A dependency as a row's prompt used it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DependencyInput {
    pub key: String,
    /// The name the row gave it ('' for none).
    pub name: String,
    /// Hex SHA-256 of the result the row's latest claim was given; empty
    /// until the row was claimed.
    pub used_hash: String,
    /// The dependency answered differently after the row used it, and the
    /// row was not asked again.
    pub changed: bool,
}

/// A result a row had before it was asked again.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SupersededResult {
    pub result_version: i32,
    pub result: Option<String>,
    /// `reanswer` or `dependency_changed`.
    pub rule: String,
    pub reason: String,
    pub actor: String,
    pub supersede_time: Time,
}

/// A page of [`Store::list_rows`](crate::Store::list_rows).
#[derive(Debug, Clone)]
pub struct RowsPage {
    pub rows: Vec<RowRecord>,
    /// The page ended at its byte limit before its count: more rows follow
    /// the last one even though fewer than the count came back.
    pub cut: bool,
}

#[derive(Debug, Clone, Default)]
pub struct ModelUsage {
    pub model: String,
    pub lane: tally_core::lane::Lane,
    pub attempts: i64,
    pub usage: Usage,
}

#[derive(Debug, Clone, Default)]
pub struct LedgerSummary {
    pub counts: tally_core::summary::LedgerCounts,
    /// Failed attempts per budget, and every attempt.
    pub failures: [i64; 3],
    pub attempts_total: i64,
    pub usage: Usage,
    pub by_model: Vec<ModelUsage>,
    pub permanent_by_rule: Vec<(String, i64)>,
    pub active_jobs: i64,
    /// SUCCEEDED rows answered from a dependency result changed since.
    pub inputs_changed: i64,
    /// Moves whenever a row's content changes ([`tally_core::summary::content_etag`]).
    pub content_etag: String,
}

#[derive(Debug, Clone)]
pub enum RedriveTarget {
    Keys(Vec<String>),
    Filter(RowFilter),
}

#[derive(Debug, Clone, Default)]
pub struct RedriveResult {
    pub redriven: i64,
    pub unblocked: i64,
    /// SUCCEEDED rows asked again (with `include_succeeded`).
    pub reanswered: i64,
    /// SUCCEEDED rows that used, directly or not, an answer of a row asked
    /// again: re-run where the ledger re-runs dependants and the answer
    /// changes, marked `changed` otherwise.
    pub dependants_at_risk: i64,
    /// Up to 100 of those.
    pub at_risk_keys: Vec<String>,
    /// What asking the rows again costs at the ledger's prices (each one's
    /// last successful attempt again), with the dependants at risk where
    /// the ledger re-runs them.
    pub estimated_cost_usd: f64,
    pub skipped: i64,
    pub sample_keys: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct PromptRecord {
    pub prompt_id: String,
    pub version: String,
    pub template: String,
    pub response_schema: String,
    pub system_instruction: String,
    pub sha256: String,
    pub create_time: Time,
    /// Template variables that are media references.
    pub media: Vec<String>,
}

/// A job as the store returns it.
#[derive(Debug, Clone)]
pub struct JobRecord {
    /// Internal id (event and page positions).
    pub id: i64,
    /// The job id of its name.
    pub public_id: String,
    pub ledger: String,
    /// The claim fencing the job's reports now.
    pub claim: Uuid,
    pub state: tally_core::job::JobState,
    /// The batch's final state, once FinishJob reported it.
    pub final_state: Option<tally_core::job::FinalState>,
    pub model: String,
    pub owner: String,
    pub batch: Option<String>,
    pub input_file: String,
    pub output_file: String,
    pub error: String,
    pub adoptions: i32,
    pub counts: tally_core::summary::JobCounts,
    /// Rows the job still holds (0 once closed).
    pub unreported: i32,
    pub create_time: Time,
    pub submit_time: Option<Time>,
    pub end_time: Option<Time>,
    pub update_time: Time,
    /// The owner's lease (the claim's expiry); `None` once closed.
    pub lease_expire_time: Option<Time>,
    /// When the batch create was first attempted (MarkCreating).
    pub create_attempt_time: Option<Time>,
    /// The provider account its worker named in CreateJob ('' by default).
    pub provider_account: String,
    /// Why its lost create cannot be resolved within the search's bound,
    /// while that is so (FlagCreateUnresolved), and since when.
    pub create_unresolved: Option<String>,
    pub create_unresolved_time: Option<Time>,
    /// The golden rows this job carries: set only by CreateJob (see
    /// [`crate::golden`]).
    pub golden: Vec<GoldenRow>,
    /// Set only in FinishJob's answer, when this call closed the job (a
    /// repeated FinishJob answers the same job with it unset): what the
    /// server's batch turnaround histogram counts once per job.
    pub closed_now: bool,
}

impl JobRecord {
    /// Closed jobs never change again.
    pub fn is_closed(&self) -> bool {
        self.end_time.is_some()
    }

    /// `done=… retryable=… permanent=… missing=…`.
    pub fn summary(&self) -> String {
        tally_core::summary::job_line(&self.counts)
    }
}

/// What FinishJob reports.
#[derive(Debug, Clone)]
pub struct FinishRequest {
    pub final_state: tally_core::job::FinalState,
    pub output_file: String,
    pub error: String,
    /// Keys of rows the provider says never ran: back without an attempt.
    pub not_run: Vec<String>,
}

/// A job handed to a new owner by AdoptJobs.
#[derive(Debug, Clone)]
pub struct AdoptedJob {
    pub job: JobRecord,
    pub claim: ClaimRecord,
    /// Keys the job still holds.
    pub keys: Vec<String>,
}

/// One worker process as the worker reads it (see `holders`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerProcess {
    pub host: String,
    pub boot_id: String,
    pub pid: i64,
    pub start_ticks: i64,
}

/// An open job whose holder's lease still runs.
#[derive(Debug, Clone)]
pub struct HeldJob {
    pub public_id: String,
    pub state: tally_core::job::JobState,
    pub owner: String,
    pub process: Option<WorkerProcess>,
    pub lease_expire_time: Time,
}

#[derive(Debug, Clone, Default)]
pub struct AdoptResult {
    pub adopted: Vec<AdoptedJob>,
    /// PREPARING jobs whose rows went back to runnable.
    pub released_jobs: i64,
}

/// What [`crate::Store::rescue_expired`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rescued {
    /// Rows of expired claims without a job, counted as an infra attempt.
    pub rows: usize,
    /// PREPARING jobs abandoned (their rows released without an attempt).
    pub abandoned_jobs: usize,
    pub released_rows: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobEventKind {
    Created,
    StateChanged,
    Progress,
    Adopted,
    /// The ledger was paused (an event about the ledger, not a job).
    LedgerPaused,
    /// The ledger was resumed (an event about the ledger, not a job).
    LedgerResumed,
}

impl JobEventKind {
    /// The stored code (equal to `tally.v1.JobEventType`).
    pub const fn code(self) -> i16 {
        match self {
            JobEventKind::Created => 1,
            JobEventKind::StateChanged => 2,
            JobEventKind::Progress => 3,
            JobEventKind::Adopted => 4,
            JobEventKind::LedgerPaused => 5,
            JobEventKind::LedgerResumed => 6,
        }
    }

    pub const fn from_code(code: i16) -> Option<JobEventKind> {
        match code {
            1 => Some(JobEventKind::Created),
            2 => Some(JobEventKind::StateChanged),
            3 => Some(JobEventKind::Progress),
            4 => Some(JobEventKind::Adopted),
            5 => Some(JobEventKind::LedgerPaused),
            6 => Some(JobEventKind::LedgerResumed),
            _ => None,
        }
    }

    /// Whether the event is about the ledger itself (it carries no job).
    pub const fn is_ledger_event(self) -> bool {
        match self {
            JobEventKind::LedgerPaused | JobEventKind::LedgerResumed => true,
            JobEventKind::Created
            | JobEventKind::StateChanged
            | JobEventKind::Progress
            | JobEventKind::Adopted => false,
        }
    }
}

/// One entry of the job event log.
#[derive(Debug, Clone)]
pub struct JobEventRecord {
    pub seq: i64,
    pub kind: JobEventKind,
    /// Who caused it (the caller's name, or `system`).
    pub actor: String,
    pub time: Time,
    /// The ledger id the event is about.
    pub ledger: String,
    /// The job as of the event; `None` for ledger events.
    pub job: Option<JobRecord>,
    /// The pause, for [`JobEventKind::LedgerPaused`].
    pub pause: Option<Pause>,
}

/// A named run lock.
#[derive(Debug, Clone)]
pub struct LockRecord {
    /// The lock id (without `locks/`).
    pub name: String,
    pub owner: String,
    /// The owner token: only set in the answer to the acquire that took it.
    pub token: Option<Uuid>,
    pub acquire_time: Time,
    pub expire_time: Time,
}

#[derive(Debug, Clone)]
pub struct LockAttempt {
    pub acquired: bool,
    pub lock: LockRecord,
}

/// An alert waiting to be delivered.
#[derive(Debug, Clone)]
pub struct OutboxAlert {
    pub id: i64,
    pub ledger: String,
    pub msg_id: String,
    pub kind: String,
    pub url: String,
    pub body: String,
    /// Tries so far, this one included.
    pub tries: i32,
}

/// Who makes a job: the provider account its worker sends to and the team
/// (principal) asking. Admission and cool-downs are kept per account; the
/// team's share of an account's quota per team.
#[derive(Debug, Clone, Copy, Default)]
pub struct JobOrigin<'a> {
    pub account: &'a str,
    pub team: &'a str,
}

/// What MarkCreating records besides the input file: the batch's estimated
/// tokens (`None` keeps CreateJob's estimate) and the media uploads it
/// references (by SHA-256).
#[derive(Debug, Clone, Copy, Default)]
pub struct CreateAttempt<'a> {
    pub estimated_tokens: Option<i64>,
    pub media: &'a [String],
}

/// A file a worker uploaded to the provider for rows' media.
#[derive(Debug, Clone, PartialEq)]
pub struct MediaUploadRecord {
    pub provider_account: String,
    pub sha256: String,
    pub file: String,
    pub uri: String,
    pub mime_type: String,
    pub size_bytes: i64,
    pub expire_time: Time,
    pub create_time: Time,
    /// An open job's batch references it (read only).
    pub in_use: bool,
}

/// What MarkNotCreated records: why, and what the refusal does beyond
/// giving the rows back.
#[derive(Debug, Clone, Copy, Default)]
pub struct NotCreated<'a> {
    /// Recorded as the job's error.
    pub reason: &'a str,
    /// A 429: the model cools down for every worker of the job's provider
    /// account this long. Only for a job that attempted its create.
    pub cooldown: Option<std::time::Duration>,
    /// A refusal waiting does not fix (daily quota, billing, model, any
    /// other): the job's ledger is paused with this reason. Only for a job
    /// that attempted its create.
    pub pause: Option<tally_core::pause::PauseReason>,
    /// The batch exists but the provider refused it before running any
    /// request (a FAILED job): its rows go back all the same.
    pub batch_refused: bool,
}

/// One golden row as stored (and as CreateJob hands it to the worker).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GoldenRow {
    pub key: String,
    pub payload: String,
    pub prompt_name: String,
    pub prompt_version: String,
    /// The expected answer (JSON).
    pub expected: serde_json::Value,
    /// JSON pointers to compare; empty: the whole answer.
    pub fields: Vec<String>,
}

impl GoldenRow {
    pub fn expect(&self) -> tally_core::golden::Expect {
        if self.fields.is_empty() {
            tally_core::golden::Expect::Exact(self.expected.clone())
        } else {
            tally_core::golden::Expect::Fields(
                self.fields
                    .iter()
                    .map(|f| {
                        let want = self
                            .expected
                            .pointer(f)
                            .cloned()
                            .unwrap_or(serde_json::Value::Null);
                        (f.clone(), want)
                    })
                    .collect(),
            )
        }
    }
}
