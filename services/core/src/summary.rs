//! The one-line summaries operators read (seed 004: "emit a one-line summary
//! every run, loud only on anomaly").

use crate::pause::PauseReason;

/// Row counts of a ledger.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LedgerCounts {
    pub pending: i64,
    pub running: i64,
    pub retryable: i64,
    pub succeeded: i64,
    pub permanent: i64,
    pub blocked: i64,
}

impl LedgerCounts {
    pub fn total(&self) -> i64 {
        self.pending
            + self.running
            + self.retryable
            + self.succeeded
            + self.permanent
            + self.blocked
    }

    /// Every row is SUCCEEDED, PERMANENT or BLOCKED.
    pub fn is_settled(&self) -> bool {
        self.pending + self.running + self.retryable == 0
    }
}

/// What the rows of one stored status add up to, for a ledger's content
/// etag.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatusTotals {
    /// The stored status code.
    pub status: i16,
    pub rows: i64,
    /// Attempts made (one per reported outcome and rescue).
    pub attempts: i64,
    /// Failures counted against the budgets (a redrive resets them).
    pub failures: i64,
}

/// The content etag of a ledger: a digest of its rows' totals by stored
/// status and of its newest row, so it moves on every write that changes
/// what an export holds: an enrollment (a new row), an outcome or a rescue
/// (an attempt), a redrive (budgets renewed, a status moved), a row
/// blocked. `totals` in any order.
pub fn content_etag(totals: &[StatusTotals], newest_row: i64) -> String {
    use sha2::{Digest, Sha256};
    let mut sorted = totals.to_vec();
    sorted.sort_by_key(|t| t.status);
    let mut h = Sha256::new();
    h.update(b"tally.content.v1");
    h.update(newest_row.to_be_bytes());
    for t in sorted {
        h.update(t.status.to_be_bytes());
        h.update(t.rows.to_be_bytes());
        h.update(t.attempts.to_be_bytes());
        h.update(t.failures.to_be_bytes());
    }
    let digest = h.finalize();
    format!("c1-{}", hex::encode(&digest[..12]))
}

/// `succeeded=… retryable=… permanent=… blocked=… pending=… running=…`.
pub fn ledger_line(c: &LedgerCounts) -> String {
    format!(
        "succeeded={} retryable={} permanent={} blocked={} pending={} running={}",
        c.succeeded, c.retryable, c.permanent, c.blocked, c.pending, c.running
    )
}

/// The summary line of a ledger: [`ledger_line`], led by
/// `PAUSED reason=<reason>` while the ledger is paused (the one state a
/// reader of the line must not miss: rows wait and nothing is claimed).
pub fn ledger_state_line(c: &LedgerCounts, paused: Option<PauseReason>) -> String {
    match paused {
        None => ledger_line(c),
        Some(reason) => format!("PAUSED reason={reason} {}", ledger_line(c)),
    }
}

/// Row counts of a job.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JobCounts {
    pub rows: i64,
    pub succeeded: i64,
    pub retryable: i64,
    pub permanent: i64,
    pub missing: i64,
}

/// `done=… retryable=… permanent=… missing=…` (`missing` rows are also
/// counted in `retryable`).
pub fn job_line(c: &JobCounts) -> String {
    format!(
        "done={} retryable={} permanent={} missing={}",
        c.succeeded, c.retryable, c.permanent, c.missing
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Invariant: the content etag moves with every total (a new row, an
    /// attempt, a redrive's renewed budget, a status moved) and not with
    /// the order the totals come in.
    #[test]
    fn the_content_etag_moves_with_every_total() {
        let t = |status, rows, attempts, failures| StatusTotals {
            status,
            rows,
            attempts,
            failures,
        };
        let base = [t(1, 10, 0, 0), t(5, 2, 8, 8)];
        let e = content_etag(&base, 12);
        assert_eq!(e, content_etag(&[base[1], base[0]], 12));
        assert!(e.starts_with("c1-") && e.len() == 27, "{e}");
        let moved = [
            content_etag(&base, 13),
            content_etag(&[t(1, 11, 0, 0), base[1]], 12),
            content_etag(&[base[0], t(5, 2, 9, 8)], 12),
            content_etag(&[base[0], t(5, 2, 8, 0)], 12),
            content_etag(&[t(1, 11, 0, 0), t(5, 1, 8, 8)], 12),
        ];
        for m in moved {
            assert_ne!(m, e);
        }
    }

    #[test]
    fn lines() {
        let c = LedgerCounts {
            succeeded: 5,
            retryable: 1,
            permanent: 2,
            blocked: 3,
            pending: 4,
            running: 0,
        };
        assert_eq!(
            ledger_line(&c),
            "succeeded=5 retryable=1 permanent=2 blocked=3 pending=4 running=0"
        );
        assert!(!c.is_settled());
        // Invariant: an active ledger's line is the plain counts; a paused
        // one's leads with PAUSED and its reason, then the same counts.
        assert_eq!(ledger_state_line(&c, None), ledger_line(&c));
        assert_eq!(
            ledger_state_line(&c, Some(PauseReason::SpendCap)),
            format!("PAUSED reason=spend_cap {}", ledger_line(&c))
        );
        assert_eq!(c.total(), 15);
        let j = JobCounts {
            rows: 10,
            succeeded: 7,
            retryable: 2,
            permanent: 1,
            missing: 1,
        };
        assert_eq!(job_line(&j), "done=7 retryable=2 permanent=1 missing=1");
    }
}
