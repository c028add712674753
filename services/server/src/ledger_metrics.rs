//! What the ledger handlers count: rows enrolled, claimed and reported (by
//! ledger, verdict and rule), and the time each of ClaimRows,
//! ReportOutcomes and EnrollRows spends in the store. One place, so the
//! handlers stay one line per count.

use crate::metrics::{CallLabels, LedgerLabels, LedgerStatus, Metrics, VerdictLabels};
use std::future::Future;
use std::time::Instant;
use tally_store::types::{RowVerdict, Verdict};

/// The label a report verdict is counted under.
pub const fn verdict_label(v: Verdict) -> &'static str {
    match v {
        Verdict::Succeeded => "SUCCEEDED",
        Verdict::Retryable => "RETRYABLE",
        Verdict::Permanent => "PERMANENT",
        Verdict::Stale => "STALE",
        Verdict::Duplicate => "DUPLICATE",
    }
}

impl Metrics {
    /// Runs a store call, timing it under `call` (successes and failures
    /// alike: a slow failure is as slow as a slow success).
    pub async fn timed<T>(&self, call: &'static str, f: impl Future<Output = T>) -> T {
        let start = Instant::now();
        let out = f.await;
        self.call_duration
            .get_or_create(&CallLabels { call })
            .observe(start.elapsed().as_secs_f64());
        out
    }

    pub fn rows_enrolled_in(&self, ledger: &str, n: u64) {
        self.ledger_seen(ledger);
        if n > 0 {
            self.rows_enrolled
                .get_or_create(&LedgerLabels::of(ledger))
                .inc_by(n);
        }
    }

    pub fn rows_claimed_in(&self, ledger: &str, n: u64) {
        self.ledger_seen(ledger);
        if n > 0 {
            self.rows_claimed
                .get_or_create(&LedgerLabels::of(ledger))
                .inc_by(n);
        }
    }

    /// Counts a report's verdicts by status, and by verdict and rule.
    pub fn report_verdicts(&self, ledger: &str, verdicts: &[RowVerdict]) {
        self.ledger_seen(ledger);
        let mut by_status = [0u64; 5];
        let mut by_rule: Vec<(&'static str, &str, u64)> = Vec::new();
        for v in verdicts {
            let status = verdict_label(v.verdict);
            by_status[v.verdict as usize] += 1;
            match by_rule
                .iter_mut()
                .find(|(s, r, _)| *s == status && *r == v.rule)
            {
                Some(entry) => entry.2 += 1,
                None => by_rule.push((status, &v.rule, 1)),
            }
        }
        for (verdict, n) in [
            Verdict::Succeeded,
            Verdict::Retryable,
            Verdict::Permanent,
            Verdict::Stale,
            Verdict::Duplicate,
        ]
        .into_iter()
        .map(|v| (v, by_status[v as usize]))
        {
            if n > 0 {
                self.rows_reported
                    .get_or_create(&LedgerStatus {
                        ledger: ledger.to_string(),
                        status: verdict_label(verdict),
                    })
                    .inc_by(n);
            }
        }
        for (verdict, rule, n) in by_rule {
            self.row_verdicts
                .get_or_create(&VerdictLabels {
                    ledger: ledger.to_string(),
                    verdict,
                    rule: rule.to_string(),
                })
                .inc_by(n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(verdict: Verdict, rule: &str) -> RowVerdict {
        RowVerdict {
            key: "k".into(),
            verdict,
            rule: rule.into(),
            budget: None,
            next_attempt_time: None,
            failures: Default::default(),
            total: 0,
        }
    }

    /// A report's verdicts add up by status and by (verdict, rule), and
    /// the ledger's other series exist at zero.
    #[test]
    fn report_verdicts_are_counted_by_status_and_rule() {
        let m = Metrics::new();
        m.report_verdicts(
            "l",
            &[
                verdict(Verdict::Succeeded, "success"),
                verdict(Verdict::Permanent, "http_permanent"),
                verdict(Verdict::Permanent, "http_permanent"),
                verdict(Verdict::Stale, "not_held"),
            ],
        );
        let status = |status| {
            m.rows_reported
                .get_or_create(&LedgerStatus {
                    ledger: "l".into(),
                    status,
                })
                .get()
        };
        assert_eq!(status("SUCCEEDED"), 1);
        assert_eq!(status("PERMANENT"), 2);
        assert_eq!(status("STALE"), 1);
        assert_eq!(status("RETRYABLE"), 0);
        let rule = |verdict, rule: &str| {
            m.row_verdicts
                .get_or_create(&VerdictLabels {
                    ledger: "l".into(),
                    verdict,
                    rule: rule.into(),
                })
                .get()
        };
        assert_eq!(rule("PERMANENT", "http_permanent"), 2);
        assert_eq!(rule("STALE", "not_held"), 1);
    }
}
