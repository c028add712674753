//! A Message Batch as data: its processing states, its request counts and
//! the `MessageBatch` JSON of the SDK's `types/messages/message_batch.py`
//! (RFC 3339 times; `results_url` an absolute URL on the emulator, null
//! until the batch ends). Pure.

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};

use crate::stats::Outcome;

/// `processing_status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    InProgress,
    Canceling,
    Ended,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::InProgress => "in_progress",
            Status::Canceling => "canceling",
            Status::Ended => "ended",
        }
    }
}

/// `request_counts`: every request `processing` until the batch ends, then
/// each in its final tally.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub processing: u64,
    pub succeeded: u64,
    pub errored: u64,
    pub canceled: u64,
    pub expired: u64,
}

impl Counts {
    /// Counts one request's final outcome (a processing one stays so).
    pub fn tally(&mut self, outcome: Outcome) {
        let slot = match outcome {
            Outcome::Pending => &mut self.processing,
            Outcome::Succeeded
            | Outcome::MaxTokens
            | Outcome::Refusal
            | Outcome::InvalidJson
            | Outcome::EmptyContent => &mut self.succeeded,
            Outcome::Errored { .. } => &mut self.errored,
            Outcome::Canceled => &mut self.canceled,
            Outcome::Expired => &mut self.expired,
        };
        *slot += 1;
    }
}

#[derive(Debug, Clone)]
pub struct Batch {
    pub id: String,
    /// Creation order, for lists.
    pub seq: u64,
    pub status: Status,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub cancel_initiated_at: Option<DateTime<Utc>>,
    pub ended_at: Option<DateTime<Utc>>,
    /// When it appears in lists (the list-lag fault).
    pub listed_from: DateTime<Utc>,
    pub counts: Counts,
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

impl Batch {
    /// A new batch of `requests` requests, all processing.
    pub fn new(
        id: String,
        seq: u64,
        requests: u64,
        now: DateTime<Utc>,
        expires_at: DateTime<Utc>,
        listed_from: DateTime<Utc>,
    ) -> Batch {
        Batch {
            id,
            seq,
            status: Status::InProgress,
            created_at: now,
            expires_at,
            cancel_initiated_at: None,
            ended_at: None,
            listed_from,
            counts: Counts {
                processing: requests,
                ..Counts::default()
            },
        }
    }

    /// `{base_url}/v1/messages/batches/{id}/results`.
    pub fn results_url(&self, base_url: &str) -> String {
        format!("{base_url}/v1/messages/batches/{}/results", self.id)
    }

    /// When it was archived by `now`, its results kept `kept` after its
    /// creation: only an ended batch is, at that time or at its end if
    /// later.
    pub fn archived_at(&self, kept: Duration, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let ended = self.ended_at?;
        let at = chrono::Duration::from_std(kept)
            .ok()
            .and_then(|d| self.created_at.checked_add_signed(d))?
            .max(ended);
        (at <= now).then_some(at)
    }

    /// Its JSON; `archived_at` as [`Batch::archived_at`] says.
    pub fn to_json(&self, base_url: &str, archived_at: Option<DateTime<Utc>>) -> Value {
        let c = self.counts;
        json!({
            "id": self.id,
            "type": "message_batch",
            "processing_status": self.status.as_str(),
            "request_counts": {
                "processing": c.processing,
                "succeeded": c.succeeded,
                "errored": c.errored,
                "canceled": c.canceled,
                "expired": c.expired,
            },
            "ended_at": self.ended_at.map(rfc3339),
            "created_at": rfc3339(self.created_at),
            "expires_at": rfc3339(self.expires_at),
            "archived_at": archived_at.map(rfc3339),
            "cancel_initiated_at": self.cancel_initiated_at.map(rfc3339),
            "results_url": (self.status == Status::Ended).then(|| self.results_url(base_url)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Invariant: a batch in progress names no results_url and counts every
    // request processing; an ended one names its absolute results URL.
    #[test]
    fn json_has_the_sdks_shape() {
        let now = DateTime::parse_from_rfc3339("2024-08-20T18:37:24.100435Z")
            .unwrap()
            .with_timezone(&Utc);
        let mut b = Batch::new("msgbatch_01x".into(), 1, 3, now, now, now);
        let j = b.to_json("http://127.0.0.1:1", None);
        assert_eq!(j["processing_status"], "in_progress");
        assert_eq!(j["created_at"], "2024-08-20T18:37:24.100435Z");
        assert!(j["results_url"].is_null() && j["ended_at"].is_null());
        assert_eq!(j["request_counts"]["processing"], 3);
        b.status = Status::Ended;
        b.ended_at = Some(now);
        let j = b.to_json("http://127.0.0.1:1", None);
        assert_eq!(
            j["results_url"],
            "http://127.0.0.1:1/v1/messages/batches/msgbatch_01x/results"
        );
        assert!(j["archived_at"].is_null());
    }

    // Invariant: only an ended batch is archived, once its results' time
    // has passed, and never before it ended.
    #[test]
    fn a_batch_is_archived_once_ended_and_its_results_time_passed() {
        let t0 = DateTime::parse_from_rfc3339("2024-08-20T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let day = Duration::from_secs(24 * 3600);
        let at = |d: u64| t0 + chrono::Duration::days(d as i64);
        let mut b = Batch::new("msgbatch_01x".into(), 1, 1, t0, t0, t0);
        assert_eq!(b.archived_at(29 * day, at(40)), None, "still in progress");
        b.status = Status::Ended;
        b.ended_at = Some(at(1));
        assert_eq!(b.archived_at(29 * day, at(28)), None);
        assert_eq!(b.archived_at(29 * day, at(30)), Some(at(29)));
        assert_eq!(
            b.archived_at(Duration::ZERO, at(2)),
            Some(at(1)),
            "not before it ended"
        );
        let j = b.to_json("http://127.0.0.1:1", b.archived_at(29 * day, at(30)));
        assert_eq!(j["archived_at"], "2024-09-18T00:00:00.000000Z");
    }
}
