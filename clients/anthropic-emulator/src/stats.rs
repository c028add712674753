//! Counters, the per-custom_id submission history and the model each
//! custom_id last ran on, for tests' invariants ("no request was paid for
//! twice", "this row ran on that model") and `GET /_emulator/stats`.

use std::collections::BTreeMap;

use emulator_kit::submissions::Submissions;
use serde::Serialize;

use crate::error::ErrorType;

/// A snapshot of what the emulator has seen and done.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// Batches made by `POST /v1/messages/batches` (including those whose
    /// answer was lost).
    pub batches_created: u64,
    /// Creates refused (a fault's 401/402/403/429/529, or a 400/413).
    pub create_rejections: u64,
    /// Creates that made a batch and lost the answer.
    pub create_answers_lost: u64,
    /// Batches that ended canceled (by a cancel, or the `canceled` fault).
    pub batches_canceled: u64,
    /// Batches that ended expired (at the horizon, or the `expired` fault).
    pub batches_expired: u64,
    pub batches_deleted: u64,
    /// GETs of an existing batch answered 404 by the fault.
    pub gets_not_found: u64,
    /// Results streams served.
    pub results_downloads: u64,
    /// Per custom_id, the `params.model` of its latest submission.
    pub models: BTreeMap<String, String>,
    /// Every submission of each custom_id, in batch creation order.
    pub submissions: Submissions<Outcome>,
    /// The synchronous endpoint's counters.
    pub online: emulator_kit::online::OnlineStats,
    /// Every API request taken, whatever it was answered (a refused key,
    /// an unknown route, a refusal too): the calls a client made, where
    /// the other counters see only those that got that far.
    pub requests: emulator_kit::requests::RequestStats,
}

/// One custom_id sent in one batch, and what became of it.
pub type Submission = emulator_kit::submissions::Submission<Outcome>;

/// What the emulator answered for one submitted request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outcome {
    /// The batch has not ended.
    Pending,
    /// `succeeded`, `stop_reason: "end_turn"`.
    Succeeded,
    /// `succeeded`, `stop_reason: "max_tokens"`.
    MaxTokens,
    /// `succeeded`, `stop_reason: "refusal"`.
    Refusal,
    /// `succeeded` with text that is not valid JSON.
    InvalidJson,
    /// `succeeded` with no content.
    EmptyContent,
    /// `errored` with this error (not billed).
    Errored { error: ErrorType },
    /// `canceled`: never sent to the model.
    Canceled,
    /// `expired`: never sent to the model.
    Expired,
}

impl Outcome {
    /// Whether the request was answered with a message (billed).
    pub fn answered(self) -> bool {
        match self {
            Outcome::Succeeded
            | Outcome::MaxTokens
            | Outcome::Refusal
            | Outcome::InvalidJson
            | Outcome::EmptyContent => true,
            Outcome::Pending | Outcome::Errored { .. } | Outcome::Canceled | Outcome::Expired => {
                false
            }
        }
    }
}

emulator_kit::submission_queries!(Stats, Outcome, |o| o.answered());

impl Stats {
    /// The model `custom_id` was last submitted with.
    pub fn model_of(&self, custom_id: &str) -> Option<&str> {
        self.models.get(custom_id).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(outcome: Outcome) -> Submission {
        Submission {
            batch: "msgbatch_x".into(),
            outcome,
        }
    }

    // Invariant: only a request sent again after a billed answer counts as
    // paid twice (an errored one may be retried); outcomes serialize tagged.
    #[test]
    fn finds_requests_paid_twice() {
        let mut s = Stats::default();
        s.submissions.insert(
            "ok".into(),
            vec![sub(Outcome::Expired), sub(Outcome::Succeeded)],
        );
        s.submissions.insert(
            "twice".into(),
            vec![sub(Outcome::Refusal), sub(Outcome::Pending)],
        );
        s.submissions.insert(
            "retried".into(),
            vec![
                sub(Outcome::Errored {
                    error: ErrorType::Api,
                }),
                sub(Outcome::Succeeded),
            ],
        );
        assert_eq!(s.resubmitted_after_success(), vec!["twice".to_owned()]);
        assert_eq!(s.last_outcome("ok"), Some(Outcome::Succeeded));
        assert_eq!(
            serde_json::to_value(Outcome::Errored {
                error: ErrorType::Overloaded
            })
            .unwrap(),
            serde_json::json!({"kind": "errored", "error": "overloaded_error"})
        );
    }
}
