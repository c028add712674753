//! What the ledger handlers count: rows enrolled, claimed and reported (by
//! ledger, verdict and rule), and the time each of ClaimRows,
//! ReportOutcomes and EnrollRows spends in the store. One place, so the
//! handlers stay one line per count.

use crate::metrics::{
    CallLabels, LedgerLabels, LedgerStatus, Metrics, ModelLabels, TOKEN_KINDS, TokenLabels,
    VerdictLabels,
};
use std::future::Future;
use std::time::Instant;
use tally_store::types::{ReportItem, ReportSummary, RowVerdict, Verdict, attempted_usage};

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

    /// A SettleFromCache: rows settled from the cache, lookups that missed,
    /// and what the hits cost when first answered.
    pub fn cache_lookups_in(&self, ledger: &str, hits: u64, misses: u64, saved_usd: f64) {
        let l = LedgerLabels::of(ledger);
        self.cache_hits.get_or_create(&l).inc_by(hits);
        self.cache_misses.get_or_create(&l).inc_by(misses);
        if saved_usd.is_finite() && saved_usd > 0.0 {
            self.cache_saved.get_or_create(&l).inc_by(saved_usd);
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

    /// Counts the tokens and estimated cost of a report's outcomes that
    /// became attempts (not STALE or DUPLICATE: those were not written),
    /// under the claim's model. `items` and `summary.verdicts` are in the
    /// same order, one verdict per item.
    pub fn report_usage(&self, ledger: &str, items: &[ReportItem], summary: &ReportSummary) {
        let sum = attempted_usage(items, &summary.verdicts);
        if sum.is_zero() || summary.model.is_empty() {
            return;
        }
        for (kind, n) in
            TOKEN_KINDS
                .into_iter()
                .zip([sum.input, sum.output, sum.thinking, sum.cached])
        {
            if n > 0 {
                self.count_tokens(
                    TokenLabels {
                        ledger: ledger.to_string(),
                        model: summary.model.clone(),
                        kind,
                    },
                    n as u64,
                );
            }
        }
        let labels = ModelLabels {
            ledger: ledger.to_string(),
            model: summary.model.clone(),
        };
        match &summary.price {
            Some(p) => self.count_cost(labels, p.cost_of(&sum)),
            None => self.count_unpriced(labels),
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
            self.count_verdicts(
                VerdictLabels {
                    ledger: ledger.to_string(),
                    verdict,
                    rule: rule.to_string(),
                },
                n,
            );
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

    /// Tokens and cost are counted only for outcomes that became attempts
    /// (a STALE or DUPLICATE report spent nothing new), under the claim's
    /// model, priced by the ledger's price; without a price the report is
    /// counted as unpriced instead of at zero cost.
    #[test]
    fn report_usage_counts_attempts_only_under_the_claims_model() {
        let m = Metrics::new();
        let item = |key: &str, input, output| ReportItem {
            key: key.into(),
            outcome: tally_core::transition::Outcome::Success,
            result: None,
            response: None,
            usage: tally_store::types::Usage {
                input,
                output,
                thinking: 0,
                cached: 0,
                cache_write: 0,
            },
            request_id: None,
            tier: None,
            model_version: None,
            cached: None,
        };
        let items = [item("a", 1_000_000, 10), item("b", 7, 7)];
        let mut summary = ReportSummary {
            verdicts: vec![
                verdict(Verdict::Succeeded, "success"),
                verdict(Verdict::Stale, "not_held"),
            ],
            held: 0,
            model: "flash".into(),
            price: Some(tally_core::policy::Price {
                model: "flash".into(),
                input_per_million: 0.5,
                output_per_million: 2.0,
                cached_input_per_million: 0.0,
                thinking_per_million: 0.0,
                lane: tally_core::lane::Lane::Batch,
            }),
        };
        m.report_usage("l", &items, &summary);
        let tokens = |kind| {
            m.tokens
                .get_or_create(&TokenLabels {
                    ledger: "l".into(),
                    model: "flash".into(),
                    kind,
                })
                .get()
        };
        assert_eq!(tokens("input"), 1_000_000);
        assert_eq!(tokens("output"), 10);
        let labels = ModelLabels {
            ledger: "l".into(),
            model: "flash".into(),
        };
        let cost = m.estimated_cost.get_or_create(&labels).get();
        assert!((cost - (0.5 + 10.0 * 2.0 / 1e6)).abs() < 1e-12, "{cost}");
        summary.price = None;
        m.report_usage("l", &items, &summary);
        assert_eq!(m.unpriced_reports.get_or_create(&labels).get(), 1);
        assert_eq!(tokens("input"), 2_000_000);
    }
}
