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
