//! Ledger alerts: when a ledger's PERMANENT count reaches its review
//! threshold an alert goes out once, then once a day while it stays there;
//! falling below re-arms it. This module decides (from the stored state and
//! a fresh count) and writes the alert's JSON; the store makes the decision
//! stick exactly once across replicas, the server delivers it.

use crate::backoff::Backoff;
use crate::policy::Policy;
use crate::summary::{LedgerCounts, ledger_line};
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};
use std::time::Duration;

/// How often an alert repeats while the count stays at or above the
/// threshold.
pub const REMINDER_EVERY: Duration = Duration::from_secs(24 * 3600);

/// How many example keys an alert carries.
pub const EXAMPLE_KEYS: usize = 5;

/// Delivery tries before an alert is given up (about five hours in all with
/// [`SEND_BACKOFF`]).
pub const MAX_TRIES: i32 = 15;

/// Delay between delivery tries: 1s doubling to an hour, ±20%.
pub const SEND_BACKOFF: Backoff = Backoff {
    initial: Duration::from_secs(1),
    max: Duration::from_secs(3600),
    multiplier: 2.0,
    jitter: 0.2,
};

/// Whether a ledger's policy asks for alerts.
pub fn enabled(policy: &Policy) -> bool {
    policy.review_threshold > 0 && !policy.alert_url.is_empty()
}

/// Why an alert is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlertKind {
    /// The count just reached the threshold.
    Crossed,
    /// It is still at or above it, a day after the last alert.
    Reminder,
}

impl AlertKind {
    pub const fn as_str(self) -> &'static str {
        match self {
            AlertKind::Crossed => "threshold_crossed",
            AlertKind::Reminder => "daily_reminder",
        }
    }
}

/// What to do after counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Nothing,
    /// Queue an alert of this kind (and record it).
    Send(AlertKind),
    /// The count fell below the threshold: the next crossing alerts again.
    Rearm,
}

/// `above`: whether the last recorded state was at or above the threshold;
/// `since_last`: how long ago the last alert was queued (`None`: never).
pub fn decide(
    threshold: u64,
    permanent: u64,
    above: bool,
    since_last: Option<Duration>,
) -> Decision {
    let now_above = threshold > 0 && permanent >= threshold;
    match (above, now_above) {
        (false, true) => Decision::Send(AlertKind::Crossed),
        (true, false) => Decision::Rearm,
        (true, true) if since_last.is_none_or(|d| d >= REMINDER_EVERY) => {
            Decision::Send(AlertKind::Reminder)
        }
        (true, true) | (false, false) => Decision::Nothing,
    }
}

/// What an alert reports.
#[derive(Debug, Clone)]
pub struct AlertFacts<'a> {
    /// The ledger id.
    pub ledger: &'a str,
    pub kind: AlertKind,
    pub threshold: u64,
    pub counts: &'a LedgerCounts,
    /// PERMANENT rows by rule, largest first.
    pub permanent_by_rule: &'a [(String, i64)],
    pub example_keys: &'a [String],
    pub time: DateTime<Utc>,
}

/// The alert's JSON body.
pub fn body(f: &AlertFacts<'_>) -> Value {
    let c = f.counts;
    let by_rule: serde_json::Map<String, Value> = f
        .permanent_by_rule
        .iter()
        .map(|(rule, n)| (rule.clone(), json!(n)))
        .collect();
    json!({
        "type": "tally.ledger.review_threshold",
        "reason": f.kind.as_str(),
        "ledger": crate::names::ledger_name(f.ledger),
        "review_threshold": f.threshold,
        "permanent": c.permanent,
        "counts": {
            "total": c.total(),
            "pending": c.pending,
            "running": c.running,
            "retryable": c.retryable,
            "succeeded": c.succeeded,
            "permanent": c.permanent,
            "blocked": c.blocked,
        },
        "permanent_by_rule": by_rule,
        "example_keys": f.example_keys,
        "summary_line": ledger_line(c),
        "time": f.time.to_rfc3339_opts(SecondsFormat::Secs, true),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = REMINDER_EVERY;

    #[test]
    fn a_crossing_sends_once_then_daily_then_rearms() {
        assert_eq!(decide(3, 2, false, None), Decision::Nothing);
        assert_eq!(
            decide(3, 3, false, None),
            Decision::Send(AlertKind::Crossed)
        );
        assert_eq!(
            decide(3, 9, true, Some(Duration::from_secs(60))),
            Decision::Nothing
        );
        assert_eq!(
            decide(3, 9, true, Some(DAY)),
            Decision::Send(AlertKind::Reminder)
        );
        assert_eq!(decide(3, 2, true, Some(DAY)), Decision::Rearm);
        assert_eq!(
            decide(3, 4, false, Some(Duration::from_secs(1))),
            Decision::Send(AlertKind::Crossed)
        );
    }

    #[test]
    fn a_zero_threshold_never_alerts() {
        assert_eq!(decide(0, 100, false, None), Decision::Nothing);
        assert_eq!(decide(0, 100, true, None), Decision::Rearm);
        assert!(!enabled(&Policy::default()));
        let p = Policy {
            review_threshold: 1,
            alert_url: "http://x".into(),
            ..Policy::default()
        };
        assert!(enabled(&p));
    }

    #[test]
    fn the_body_names_the_ledger_counts_rules_and_examples() {
        let counts = LedgerCounts {
            succeeded: 5,
            permanent: 3,
            ..LedgerCounts::default()
        };
        let rules = [("http_permanent".to_string(), 2), ("safety".to_string(), 1)];
        let keys = ["a".to_string(), "b".to_string()];
        let b = body(&AlertFacts {
            ledger: "nightly",
            kind: AlertKind::Crossed,
            threshold: 3,
            counts: &counts,
            permanent_by_rule: &rules,
            example_keys: &keys,
            time: DateTime::from_timestamp(1_700_000_000, 0).unwrap(),
        });
        assert_eq!(b["ledger"], "ledgers/nightly");
        assert_eq!(b["reason"], "threshold_crossed");
        assert_eq!(b["counts"]["total"], 8);
        assert_eq!(b["permanent_by_rule"]["http_permanent"], 2);
        assert_eq!(b["example_keys"][1], "b");
        assert_eq!(b["time"], "2023-11-14T22:13:20Z");
    }

    #[test]
    fn delivery_backs_off_to_an_hour() {
        assert_eq!(SEND_BACKOFF.delay(1, 0.5), Duration::from_secs(1));
        assert_eq!(SEND_BACKOFF.delay(30, 0.5), Duration::from_secs(3600));
    }
}
