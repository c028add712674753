//! Counters and the per-key submission history, for tests' invariants (e.g.
//! "no key was submitted again after it was answered successfully") and for
//! the demo's `GET /_emulator/stats`.

use std::collections::BTreeMap;

use emulator_kit::submissions::Submissions;
use serde::Serialize;

/// A snapshot of what the emulator has seen and done.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// Batches accepted by `batchGenerateContent`.
    pub batches_created: u64,
    /// `batchGenerateContent` calls answered 429 (the `rate_limit` fault, or
    /// over the `enqueued_tokens` quota).
    pub create_rejections: u64,
    /// Files finalized (uploads that produced a file).
    pub uploads: u64,
    /// Upload starts refused (the `upload_refusal` fault, or over the
    /// storage quota): nothing stored.
    pub upload_rejections: u64,
    /// Finalize calls answered 200 with an error body by the fault.
    pub finalize_errors: u64,
    /// Files deleted by clients.
    pub files_deleted: u64,
    /// Batches deleted by clients (they ran on).
    pub batches_deleted: u64,
    /// Creates that made a batch but answered 500 (the fault).
    pub create_answers_lost: u64,
    /// GETs of an existing batch answered 404 (the `get_not_found` fault).
    pub gets_not_found: u64,
    /// Per row key, the SHA-256 (hex) of every media file its requests
    /// carried, each time it was processed (inline or by file reference).
    pub media: BTreeMap<String, Vec<String>>,
    /// Per SHA-256 (hex) of the bytes, how many uploads (finalized, not
    /// input JSONL) carried them.
    pub media_uploads: BTreeMap<String, u64>,
    /// Downloads refused by the output-unavailable fault.
    pub downloads_refused: u64,
    /// `application/jsonl` finalizes refused by the MIME fault.
    pub mime_refusals: u64,
    /// Files found past the plan's TTL (and dropped).
    pub files_expired: u64,
    /// Every submission of each row key, in batch creation order.
    pub submissions: Submissions<Outcome>,
    /// Webhook deliveries answered 2xx (a duplicate counts twice).
    pub webhooks_sent: u64,
    /// Webhook delivery attempts that failed (non-2xx or no connection).
    pub webhooks_failed: u64,
    /// Webhook deliveries given up after the last retry.
    pub webhooks_abandoned: u64,
    /// The synchronous endpoint's counters.
    pub online: emulator_kit::online::OnlineStats,
    /// Every API request taken, whatever it was answered (a refused key,
    /// an unknown route, a refusal too): the calls a client made, where
    /// the other counters see only those that got that far.
    pub requests: emulator_kit::requests::RequestStats,
}

/// One row key sent in one batch, and what became of it.
pub type Submission = emulator_kit::submissions::Submission<Outcome>;

/// What the emulator answered for one submitted row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outcome {
    /// The batch has not finished yet.
    Pending,
    /// A valid answer.
    Success,
    /// An error line with this HTTP-like code.
    Error {
        code: u16,
    },
    /// A candidate with `finishReason: SAFETY`.
    Safety,
    /// A candidate cut short or withheld by this finish reason (MAX_TOKENS,
    /// RECITATION, OTHER).
    Finish {
        reason: &'static str,
    },
    /// No candidates; `promptFeedback.blockReason: SAFETY`.
    PromptBlocked,
    /// A candidate with empty text.
    Empty,
    /// Text that is not valid JSON for the schema.
    Invalid,
    /// Left out of the output file.
    Missing,
    /// The whole batch failed, expired or was cancelled.
    JobFailed,
    JobExpired,
    JobCancelled,
}

emulator_kit::submission_queries!(Stats, Outcome, |o| *o == Outcome::Success);

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(outcome: Outcome) -> Submission {
        Submission {
            batch: "batches/x".into(),
            outcome,
        }
    }

    #[test]
    fn finds_keys_resubmitted_after_success() {
        let mut stats = Stats::default();
        stats.submissions.insert(
            "ok".into(),
            vec![sub(Outcome::Error { code: 429 }), sub(Outcome::Success)],
        );
        stats.submissions.insert(
            "twice".into(),
            vec![sub(Outcome::Success), sub(Outcome::Pending)],
        );
        assert_eq!(stats.resubmitted_after_success(), vec!["twice".to_owned()]);
        assert_eq!(stats.submission_count("ok"), 2);
        assert_eq!(stats.last_outcome("ok"), Some(Outcome::Success));
        assert_eq!(stats.last_outcome("nope"), None);
    }

    #[test]
    fn outcomes_serialize_with_a_kind_tag() {
        let v = serde_json::to_value(Outcome::Error { code: 503 }).unwrap();
        assert_eq!(v, serde_json::json!({"kind": "error", "code": 503}));
    }
}
