//! A batch as data: its states and the `Batch` JSON of `types/batch.py`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use crate::input::LineError;

/// The batch states of the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Validating,
    Failed,
    InProgress,
    Finalizing,
    Completed,
    Expired,
    Cancelling,
    Cancelled,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Validating => "validating",
            Status::Failed => "failed",
            Status::InProgress => "in_progress",
            Status::Finalizing => "finalizing",
            Status::Completed => "completed",
            Status::Expired => "expired",
            Status::Cancelling => "cancelling",
            Status::Cancelled => "cancelled",
        }
    }

    pub fn is_terminal(self) -> bool {
        match self {
            Status::Failed | Status::Completed | Status::Expired | Status::Cancelled => true,
            Status::Validating | Status::InProgress | Status::Finalizing | Status::Cancelling => {
                false
            }
        }
    }

    /// The webhook event type of a terminal state.
    pub fn event_type(self) -> Option<&'static str> {
        match self {
            Status::Completed => Some("batch.completed"),
            Status::Failed => Some("batch.failed"),
            Status::Expired => Some("batch.expired"),
            Status::Cancelled => Some("batch.cancelled"),
            Status::Validating | Status::InProgress | Status::Finalizing | Status::Cancelling => {
                None
            }
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    pub total: u64,
    pub completed: u64,
    pub failed: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

#[derive(Debug, Clone)]
pub struct Batch {
    pub id: String,
    pub seq: u64,
    pub endpoint: String,
    pub input_file_id: String,
    pub metadata: Option<BTreeMap<String, String>>,
    /// The create's `output_expires_after.seconds`: its output and error
    /// files expire this long after they are made.
    pub output_expires_after: Option<i64>,
    pub model: Option<String>,
    pub status: Status,
    pub created_at: i64,
    /// When it appears in lists (the list-lag fault), in ms.
    pub listed_from_ms: i64,
    pub in_progress_at: Option<i64>,
    pub finalizing_at: Option<i64>,
    pub completed_at: Option<i64>,
    pub failed_at: Option<i64>,
    pub expired_at: Option<i64>,
    pub cancelling_at: Option<i64>,
    pub cancelled_at: Option<i64>,
    pub errors: Vec<LineError>,
    pub output_file_id: Option<String>,
    pub error_file_id: Option<String>,
    pub counts: Counts,
    pub usage: Usage,
}

/// How many of a running batch's `n` requests are answered `elapsed_ms`
/// into its `in_progress` time: request `i` at `(i + 1) / n` of the way,
/// the last one left for the batch's end (so `request_counts` move while
/// it is in progress, and one held there shows all but one answered).
pub fn answered_by(n: usize, elapsed_ms: i64, in_progress: Duration) -> usize {
    let whole = in_progress.as_millis().max(1);
    let elapsed = u128::try_from(elapsed_ms.max(0)).unwrap_or(0);
    let due = usize::try_from(elapsed.saturating_mul(n as u128) / whole).unwrap_or(usize::MAX);
    due.min(n.saturating_sub(1))
}

/// The completion window: 24 hours.
pub const WINDOW_SECS: i64 = 24 * 3600;

impl Batch {
    /// Moves to `to` at `now`, stamping its `*_at`.
    pub fn transition(&mut self, to: Status, now: i64) {
        self.status = to;
        let stamp = match to {
            Status::Validating => return,
            Status::InProgress => &mut self.in_progress_at,
            Status::Finalizing => &mut self.finalizing_at,
            Status::Completed => &mut self.completed_at,
            Status::Failed => &mut self.failed_at,
            Status::Expired => &mut self.expired_at,
            Status::Cancelling => &mut self.cancelling_at,
            Status::Cancelled => &mut self.cancelled_at,
        };
        *stamp = Some(now);
    }

    pub fn to_json(&self) -> Value {
        let errors =
            (!self.errors.is_empty()).then(|| json!({"object": "list", "data": self.errors}));
        json!({
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "model": self.model,
            "errors": errors,
            "input_file_id": self.input_file_id,
            "completion_window": "24h",
            "status": self.status.as_str(),
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": self.created_at,
            "in_progress_at": self.in_progress_at,
            "expires_at": self.created_at + WINDOW_SECS,
            "finalizing_at": self.finalizing_at,
            "completed_at": self.completed_at,
            "failed_at": self.failed_at,
            "expired_at": self.expired_at,
            "cancelling_at": self.cancelling_at,
            "cancelled_at": self.cancelled_at,
            "request_counts": {"total": self.counts.total, "completed": self.counts.completed, "failed": self.counts.failed},
            "usage": {
                "input_tokens": self.usage.input_tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": self.usage.output_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": self.usage.input_tokens + self.usage.output_tokens,
            },
            "metadata": self.metadata,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Invariant: requests are answered evenly over the in-progress time,
    // never all of them before the batch's end, never more as time runs
    // backwards; a batch of one shows none answered until its end.
    #[test]
    fn requests_are_answered_evenly_all_but_the_last() {
        let whole = Duration::from_millis(1000);
        let due: Vec<usize> = [-5, 0, 249, 250, 500, 999, 1000, 60_000]
            .iter()
            .map(|&ms| answered_by(4, ms, whole))
            .collect();
        assert_eq!(due, vec![0, 0, 0, 1, 2, 3, 3, 3]);
        assert_eq!(answered_by(1, 60_000, whole), 0);
        assert_eq!(answered_by(0, 60_000, whole), 0);
        assert_eq!(answered_by(4, 1, Duration::ZERO), 3);
    }
}
