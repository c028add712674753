//! The backlog refresher: every `--backlog-interval`, reads each ledger's
//! backlog from the store ([`Store::backlog`]: estimates and index probes,
//! never a count of rows) into the gauges `tally_ledger_rows`,
//! `tally_ledger_rows_held`, `tally_ledger_oldest_runnable_age_seconds`,
//! `tally_jobs_open` and `tally_ledger_paused`; and each consumer's lag
//! ([`Store::consumer_lags`]) into `tally_consumer_lag_rows`,
//! `tally_consumer_lag_seconds`, `tally_consumer_in_flight` and
//! `tally_consumer_dead_letters`. A scrape only reads the gauges.
//!
//! Each refresh replaces the previous one's series, so a ledger or a status
//! that disappears stops being exported. Every replica refreshes; the
//! figures are the same on each (aggregate them with `max`, not `sum`).

use crate::metrics::{
    ConsumerLabels, JobLabels, LedgerLabels, LedgerStatus, Metrics, PausedLabels, ProviderModel,
    SpendLabels, SpendTokenLabels, job_state_label, status_label,
};
use std::time::Duration;
use tally_core::status::RowStatus;
use tally_store::Store;
use tally_store::backlog::Backlog;
use tally_store::consumers::ConsumerRecord;
use tally_store::spend::SpendView;
use tokio_util::sync::CancellationToken;

/// Runs until `stop` fires; the first refresh is immediate.
pub async fn run(store: Store, every: Duration, metrics: Metrics, stop: CancellationToken) {
    loop {
        let mark = metrics.forget_mark();
        match store.backlog().await {
            Ok(b) => publish(&metrics, &b, mark),
            Err(e) => tracing::warn!(error = %e, "reading the backlog for /metrics failed"),
        }
        match store.consumer_lags().await {
            Ok(c) => publish_consumers(&metrics, &c, mark),
            Err(e) => tracing::warn!(error = %e, "reading consumers' lag for /metrics failed"),
        }
        if !crate::tasks::every::wait(every, &stop).await {
            return;
        }
    }
}

/// Replaces the backlog gauges with `b`, read after `mark`
/// ([`Metrics::forget_mark`]): a ledger deleted through this replica since
/// (its series forgotten) is left out, not brought back at zero.
pub fn publish(metrics: &Metrics, b: &Backlog, mark: u64) {
    metrics.ledger_rows.clear();
    metrics.ledger_rows_held.clear();
    metrics.oldest_runnable_age.clear();
    metrics.jobs_open.clear();
    metrics.jobs_create_unresolved.clear();
    metrics.ledger_paused.clear();
    metrics.ledger_spend_usd.clear();
    metrics.ledger_spend_tokens.clear();
    for l in &b.ledgers {
        if l.deleting {
            // Its purge is under way (through whichever replica): none of
            // its series stays, so a ledger made again under its name
            // starts from nothing.
            metrics.forget_ledger(&l.name);
            continue;
        }
        if metrics.forgotten_since(&l.name, mark) {
            continue;
        }
        let ledger = || l.name.clone();
        metrics.ledger_seen(&l.name);
        for status in RowStatus::ALL {
            // Stored statuses only: no stored row is RUNNING.
            if status == RowStatus::Running {
                continue;
            }
            let n = l
                .estimated
                .iter()
                .filter(|(s, _)| *s == status)
                .map(|(_, n)| n)
                .sum();
            metrics
                .ledger_rows
                .get_or_create(&LedgerStatus {
                    ledger: ledger(),
                    status: status_label(status),
                })
                .set(n);
        }
        metrics
            .ledger_rows_held
            .get_or_create(&LedgerLabels::of(&l.name))
            .set(l.held);
        let age = match (l.oldest_ready, b.now) {
            (Some(ready), Some(now)) => ((now - ready).as_seconds_f64()).max(0.0),
            _ => 0.0,
        };
        metrics
            .oldest_runnable_age
            .get_or_create(&LedgerLabels::of(&l.name))
            .set(age);
        if let Some(reason) = l.paused {
            metrics
                .ledger_paused
                .get_or_create(&PausedLabels {
                    ledger: ledger(),
                    reason: reason.as_str(),
                })
                .set(1);
        }
        if let Some(s) = &l.spend {
            publish_spend(metrics, &l.name, s);
        }
        if l.create_unresolved > 0 {
            metrics
                .jobs_create_unresolved
                .get_or_create(&LedgerLabels::of(&l.name))
                .set(l.create_unresolved);
        }
        for (state, n) in &l.jobs_open {
            metrics
                .jobs_open
                .get_or_create(&JobLabels {
                    ledger: ledger(),
                    state: job_state_label(*state),
                })
                .set(*n);
        }
    }
    publish_provider(metrics, b);
    metrics.prune_forgotten(mark);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    metrics.backlog_refreshed.set(now);
}

/// Replaces the consumer gauges with `consumers` (read after `mark`, as
/// [`publish`]).
pub fn publish_consumers(metrics: &Metrics, consumers: &[ConsumerRecord], mark: u64) {
    metrics.consumer_lag_rows.clear();
    metrics.consumer_lag_seconds.clear();
    metrics.consumer_in_flight.clear();
    metrics.consumer_dead_letters.clear();
    for c in consumers {
        if metrics.forgotten_since(&c.ledger, mark) {
            continue;
        }
        metrics.consumer_seen(&c.ledger, &c.name);
        let labels = ConsumerLabels {
            ledger: c.ledger.clone(),
            consumer: c.name.clone(),
        };
        let age = c
            .oldest_unacked
            .map_or(0.0, |t| (c.now - t).as_seconds_f64().max(0.0));
        metrics
            .consumer_lag_rows
            .get_or_create(&labels)
            .set(c.lag_rows);
        metrics.consumer_lag_seconds.get_or_create(&labels).set(age);
        metrics
            .consumer_in_flight
            .get_or_create(&labels)
            .set(c.in_flight);
        metrics
            .consumer_dead_letters
            .get_or_create(&labels)
            .set(c.dead_letters);
    }
}

/// What is at the provider per model, its limits, and cool-downs.
fn publish_provider(metrics: &Metrics, b: &Backlog) {
    metrics.provider_batches.clear();
    metrics.provider_enqueued_tokens.clear();
    metrics.provider_enqueued_tokens_limit.clear();
    metrics.model_cooldown.clear();
    metrics.provider_max_batches.set(i64::from(b.max_batches));
    for m in &b.models {
        let model = || ProviderModel {
            model: m.model.clone(),
        };
        metrics
            .provider_batches
            .get_or_create(&model())
            .set(m.batches);
        metrics
            .provider_enqueued_tokens
            .get_or_create(&model())
            .set(m.enqueued_tokens);
        metrics
            .provider_enqueued_tokens_limit
            .get_or_create(&model())
            .set(m.enqueued_tokens_limit);
        if m.cooldown_secs > 0.0 {
            metrics
                .model_cooldown
                .get_or_create(&model())
                .set(m.cooldown_secs);
        }
    }
}

/// A capped ledger's spent, reserved and cap, in each measure it limits
/// (spent and reserved in all three).
fn publish_spend(metrics: &Metrics, ledger: &str, s: &SpendView) {
    let usd = |kind, v: f64| {
        metrics
            .ledger_spend_usd
            .get_or_create(&SpendLabels {
                ledger: ledger.to_string(),
                kind,
            })
            .set(v);
    };
    usd("spent", s.spent.cost_usd);
    usd("reserved", s.reserved.cost_usd);
    if s.cap.max_cost_usd > 0.0 {
        usd("cap", s.cap.max_cost_usd);
    }
    for (measure, spent, reserved, cap) in [
        (
            "input",
            s.spent.input_tokens,
            s.reserved.input_tokens,
            s.cap.max_input_tokens,
        ),
        (
            "output",
            s.spent.output_tokens,
            s.reserved.output_tokens,
            s.cap.max_output_tokens,
        ),
    ] {
        let tokens = |kind, v: i64| {
            metrics
                .ledger_spend_tokens
                .get_or_create(&SpendTokenLabels {
                    ledger: ledger.to_string(),
                    measure,
                    kind,
                })
                .set(v);
        };
        tokens("spent", spent);
        tokens("reserved", reserved);
        if cap > 0 {
            tokens("cap", cap);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tally_core::pause::PauseReason;
    use tally_store::backlog::LedgerBacklog;

    /// A refresh replaces the last one: a ledger gone from the backlog is
    /// gone from the gauges; statuses without an estimate read 0; the
    /// oldest runnable age is now minus the oldest ready time.
    #[test]
    fn a_refresh_replaces_the_previous_series() {
        let m = Metrics::new();
        let now = chrono::Utc::now();
        let ledger = |name: &str| LedgerBacklog {
            name: name.into(),
            estimated: vec![(RowStatus::Pending, 7)],
            held: 2,
            oldest_ready: Some(now - chrono::TimeDelta::seconds(30)),
            jobs_open: vec![(tally_core::job::JobState::Running, 1)],
            create_unresolved: 1,
            paused: None,
            deleting: false,
            spend: None,
        };
        let mut b = Backlog {
            ledgers: vec![ledger("a"), ledger("b")],
            now: Some(now),
            ..Default::default()
        };
        publish(&m, &b, m.forget_mark());
        let rows = |l: &str, status| {
            m.ledger_rows
                .get(&LedgerStatus {
                    ledger: l.into(),
                    status,
                })
                .map(|g| g.get())
        };
        assert_eq!(rows("a", "PENDING"), Some(7));
        assert_eq!(rows("a", "SUCCEEDED"), Some(0));
        assert_eq!(rows("a", "RUNNING"), None);
        let age = m
            .oldest_runnable_age
            .get(&LedgerLabels::of("a"))
            .map(|g| g.get());
        assert_eq!(age, Some(30.0));
        b.ledgers.pop();
        publish(&m, &b, m.forget_mark());
        assert_eq!(rows("b", "PENDING"), None);
        assert!(m.ledger_rows_held.get(&LedgerLabels::of("b")).is_none());
        assert!(m.ledger_rows_held.get(&LedgerLabels::of("a")).is_some());
        let unresolved = |l: &str| {
            m.jobs_create_unresolved
                .get(&LedgerLabels::of(l))
                .map(|g| g.get())
        };
        assert_eq!((unresolved("a"), unresolved("b")), (Some(1), None));
        let job = |ledger: &str| JobLabels {
            ledger: ledger.into(),
            state: "RUNNING",
        };
        assert!(m.jobs_open.get(&job("b")).is_none());
        assert!(m.jobs_open.get(&job("a")).is_some());
    }

    /// Issue 34: every pause reason has its alert and is listed with
    /// `tally_ledger_paused` in deploy/README.md.
    #[test]
    fn every_pause_reason_has_an_alert_and_is_documented() {
        let alerts = include_str!("../../../../deploy/helm/tally/files/alerts.yaml");
        let readme = include_str!("../../../../deploy/README.md");
        let row = readme
            .lines()
            .find(|l| l.starts_with("| `tally_ledger_paused` |"))
            .expect("deploy/README.md lists tally_ledger_paused");
        for reason in PauseReason::ALL {
            let r = reason.as_str();
            let expr = format!("(tally_ledger_paused{{reason=\"{r}\"}}) > 0");
            assert!(alerts.contains(&expr), "no alert for pause reason {r}");
            assert!(row.contains(&format!("`{r}`")), "{r} not in {row}");
        }
    }

    /// A DELETING ledger (deleted through any replica) has no gauges, and
    /// its counters on this replica are gone too.
    #[test]
    fn a_deleting_ledger_loses_every_series() {
        let m = Metrics::new();
        m.rows_enrolled_in("d", 3);
        let ledger = |deleting| LedgerBacklog {
            name: "d".into(),
            estimated: vec![(RowStatus::Pending, 3)],
            deleting,
            ..Default::default()
        };
        publish(
            &m,
            &Backlog {
                ledgers: vec![ledger(false)],
                ..Default::default()
            },
            m.forget_mark(),
        );
        assert!(m.ledger_rows_held.get(&LedgerLabels::of("d")).is_some());
        publish(
            &m,
            &Backlog {
                ledgers: vec![ledger(true)],
                ..Default::default()
            },
            m.forget_mark(),
        );
        assert!(m.ledger_rows_held.get(&LedgerLabels::of("d")).is_none());
        assert!(m.rows_enrolled.get(&LedgerLabels::of("d")).is_none());
        assert!(!m.render().contains("ledger=\"d\""), "{}", m.render());
    }

    /// A ledger deleted through this replica while a refresh was reading
    /// the backlog (read live, published after the delete) stays gone: the
    /// refresh leaves it out instead of bringing its series back at zero
    /// until the next one. A ledger made again under the name later, and
    /// read after that, is published as any other.
    #[test]
    fn a_ledger_deleted_during_a_read_does_not_come_back() {
        let m = Metrics::new();
        m.rows_enrolled_in("d", 3);
        let b = Backlog {
            ledgers: vec![LedgerBacklog {
                name: "d".into(),
                estimated: vec![(RowStatus::Pending, 3)],
                ..Default::default()
            }],
            ..Default::default()
        };
        let mark = m.forget_mark();
        // DeleteLedger through this replica, between the read and the
        // publish.
        m.forget_ledger("d");
        publish(&m, &b, mark);
        assert!(!m.render().contains("ledger=\"d\""), "{}", m.render());

        publish(&m, &b, m.forget_mark());
        assert!(m.ledger_rows_held.get(&LedgerLabels::of("d")).is_some());
        assert_eq!(
            m.rows_enrolled.get(&LedgerLabels::of("d")).map(|c| c.get()),
            Some(0),
            "a new ledger under the name starts from nothing"
        );
    }

    /// `tally_ledger_paused{ledger,reason}` is 1 for a paused ledger and
    /// absent for an active one, and a resume (the next refresh) removes
    /// it.
    #[test]
    fn a_paused_ledger_has_a_paused_series_until_resumed() {
        let m = Metrics::new();
        let ledger = |name: &str, paused| LedgerBacklog {
            name: name.into(),
            paused,
            ..Default::default()
        };
        let paused = |l: &str, reason| {
            m.ledger_paused
                .get(&PausedLabels {
                    ledger: l.into(),
                    reason,
                })
                .map(|g| g.get())
        };
        let mut b = Backlog {
            ledgers: vec![ledger("a", Some(PauseReason::Operator)), ledger("b", None)],
            ..Default::default()
        };
        publish(&m, &b, m.forget_mark());
        assert_eq!(paused("a", "operator"), Some(1));
        assert_eq!(paused("b", "operator"), None);
        b.ledgers[0].paused = None;
        publish(&m, &b, m.forget_mark());
        assert_eq!(paused("a", "operator"), None);
    }

    /// A capped ledger exports spent, reserved and the cap of each measure
    /// it limits (no cap series for a measure without a limit); a ledger
    /// whose cap is removed stops exporting them at the next refresh.
    #[test]
    fn a_capped_ledger_exports_its_spend() {
        use tally_core::spend::{Amount, SpendCap};
        let m = Metrics::new();
        let spend = SpendView {
            cap: SpendCap {
                max_cost_usd: 50.0,
                max_output_tokens: 9000,
                ..SpendCap::default()
            },
            spent: Amount {
                cost_usd: 12.5,
                input_tokens: 700,
                output_tokens: 300,
            },
            reserved: Amount {
                cost_usd: 2.0,
                input_tokens: 40,
                output_tokens: 100,
            },
        };
        let mut b = Backlog {
            ledgers: vec![LedgerBacklog {
                name: "a".into(),
                spend: Some(spend),
                ..Default::default()
            }],
            ..Default::default()
        };
        publish(&m, &b, m.forget_mark());
        let usd = |kind| {
            m.ledger_spend_usd
                .get(&SpendLabels {
                    ledger: "a".into(),
                    kind,
                })
                .map(|g| g.get())
        };
        let tokens = |measure, kind| {
            m.ledger_spend_tokens
                .get(&SpendTokenLabels {
                    ledger: "a".into(),
                    measure,
                    kind,
                })
                .map(|g| g.get())
        };
        assert_eq!(usd("spent"), Some(12.5));
        assert_eq!(usd("reserved"), Some(2.0));
        assert_eq!(usd("cap"), Some(50.0));
        assert_eq!(tokens("output", "cap"), Some(9000));
        assert_eq!(tokens("input", "cap"), None, "no input limit");
        assert_eq!(tokens("input", "spent"), Some(700));
        b.ledgers[0].spend = None;
        publish(&m, &b, m.forget_mark());
        assert_eq!(usd("spent"), None);
    }

    // Invariant: each model in flight exports its batches, tokens and
    // limit; a cool-down shows only while it runs; a refresh without the
    // model drops its series.
    #[test]
    fn provider_quotas_per_model() {
        use tally_store::admission::ModelInFlight;
        let m = Metrics::new();
        let mut b = Backlog {
            models: vec![
                ModelInFlight {
                    model: "flash".into(),
                    batches: 3,
                    enqueued_tokens: 1200,
                    cooldown_secs: 0.0,
                    enqueued_tokens_limit: 3_000_000,
                },
                ModelInFlight {
                    model: "pro".into(),
                    cooldown_secs: 12.5,
                    ..Default::default()
                },
            ],
            max_batches: 100,
            ..Default::default()
        };
        publish(&m, &b, m.forget_mark());
        let of = |model: &str| ProviderModel {
            model: model.into(),
        };
        assert_eq!(
            m.provider_batches.get(&of("flash")).map(|g| g.get()),
            Some(3)
        );
        assert_eq!(
            m.provider_enqueued_tokens
                .get(&of("flash"))
                .map(|g| g.get()),
            Some(1200)
        );
        assert_eq!(
            m.provider_enqueued_tokens_limit
                .get(&of("flash"))
                .map(|g| g.get()),
            Some(3_000_000)
        );
        assert!(m.model_cooldown.get(&of("flash")).is_none());
        assert_eq!(
            m.model_cooldown.get(&of("pro")).map(|g| g.get()),
            Some(12.5)
        );
        assert_eq!(m.provider_max_batches.get(), 100);
        b.models.clear();
        publish(&m, &b, m.forget_mark());
        assert!(m.provider_batches.get(&of("flash")).is_none());
        assert!(m.model_cooldown.get(&of("pro")).is_none());
    }
}
