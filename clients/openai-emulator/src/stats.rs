//! Counters and the per-custom_id submission history, for tests'
//! invariants ("no row was paid for twice") and `GET /_emulator/stats`.

use std::collections::BTreeMap;

use emulator_kit::online::OnlineStats;
use emulator_kit::submissions::Submissions;
use serde::Serialize;

/// A snapshot of what the emulator has seen and done.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// Batches made by `POST /v1/batches` (including those whose answer
    /// was lost).
    pub batches_created: u64,
    /// Creates refused (rate limit, insufficient quota, bad request).
    pub create_rejections: u64,
    /// Of those, creates refused because their input file was not yet
    /// visible (`file_visibility_lag`).
    pub creates_file_not_visible: u64,
    /// Batches the account held at start (`seed_batches`).
    pub batches_seeded: u64,
    /// Pages of `GET /v1/batches` answered.
    pub batch_list_pages: u64,
    /// Files uploaded.
    pub uploads: u64,
    /// Calls to a path or method the API has not (answered 404 "Invalid
    /// URL"), as from a client at a wrong base URL.
    pub unknown_routes: u64,
    /// Uploads refused (`upload_refused`, a file too large, a full
    /// storage): nothing stored.
    pub upload_rejections: u64,
    pub files_deleted: u64,
    /// Batches that reached `cancelled`.
    pub batches_cancelled: u64,
    /// Batches that reached `failed` (validation, faults, token limit).
    pub batches_failed: u64,
    /// Batches failed with `token_limit_exceeded`.
    pub token_limit_failures: u64,
    /// Creates that made a batch and lost the answer.
    pub create_answers_lost: u64,
    /// GETs of an existing batch answered 404 by the fault.
    pub gets_not_found: u64,
    /// Webhook deliveries answered 2xx (a duplicate counts twice).
    pub webhooks_sent: u64,
    pub webhooks_failed: u64,
    pub webhooks_abandoned: u64,
    /// Per custom_id, the SHA-256 (hex) of every image or file its
    /// requests carried, each time it was processed.
    pub media: BTreeMap<String, Vec<String>>,
    /// Every submission of each custom_id, in batch creation order.
    pub submissions: Submissions<Outcome>,
    /// The synchronous endpoints' counters.
    pub online: OnlineStats,
    /// Every API request taken, whatever it was answered (a refused key,
    /// an unknown route, a refusal too): the calls a client made, where
    /// the other counters see only those that got that far.
    pub requests: emulator_kit::requests::RequestStats,
    /// Synchronous requests answered (the work done, its answer lost or
    /// not), by endpoint: `/v1/chat/completions`, `/v1/responses`.
    pub online_by_endpoint: BTreeMap<String, u64>,
}

/// One custom_id sent in one batch, and what became of it.
pub type Submission = emulator_kit::submissions::Submission<Outcome>;

/// What the emulator answered for one submitted row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outcome {
    /// The batch has not finished.
    Pending,
    /// `status_code` 200, a normal answer.
    Success,
    /// 200 with `finish_reason: "length"`.
    Length,
    /// 200 with `finish_reason: "content_filter"`.
    ContentFilter,
    /// 200 with a refusal.
    Refusal,
    /// 200 with content that is not valid JSON.
    InvalidJson,
    /// A non-2xx `response.status_code` (error file).
    HttpError { status: u16 },
    /// `error: {code, message}` (error file).
    LineError,
    /// In neither file.
    Missing,
    /// The batch failed (validation): the row never ran.
    NotRun,
    /// `batch_expired` line: never ran.
    Expired,
    /// `batch_cancelled` line: never ran.
    Cancelled,
}

impl Outcome {
    /// Whether the row was answered with status 200 (billed).
    pub fn answered(self) -> bool {
        match self {
            Outcome::Success
            | Outcome::Length
            | Outcome::ContentFilter
            | Outcome::Refusal
            | Outcome::InvalidJson => true,
            Outcome::Pending
            | Outcome::HttpError { .. }
            | Outcome::LineError
            | Outcome::Missing
            | Outcome::NotRun
            | Outcome::Expired
            | Outcome::Cancelled => false,
        }
    }
}

emulator_kit::submission_queries!(Stats, Outcome, |o| o.answered());

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(outcome: Outcome) -> Submission {
        Submission {
            batch: "batch_x".into(),
            outcome,
        }
    }

    #[test]
    fn finds_rows_paid_twice() {
        let mut s = Stats::default();
        s.submissions.insert(
            "ok".into(),
            vec![sub(Outcome::Expired), sub(Outcome::Success)],
        );
        s.submissions.insert(
            "twice".into(),
            vec![sub(Outcome::Refusal), sub(Outcome::Pending)],
        );
        assert_eq!(s.resubmitted_after_success(), vec!["twice".to_owned()]);
        assert_eq!(s.last_outcome("ok"), Some(Outcome::Success));
        assert_eq!(
            serde_json::to_value(Outcome::HttpError { status: 500 }).unwrap(),
            serde_json::json!({"kind": "http_error", "status": 500})
        );
    }
}
