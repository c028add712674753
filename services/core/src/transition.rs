//! The row state machine. A row's status, its failed attempts per budget and
//! its total attempts, plus an event, give the next state and the attempt to
//! record, or a refusal. The store reads rows, calls [`step`] for each, and
//! writes the results in one set-based statement guarded by the state it
//! read; so the rules live here, once, tested without a database.
//!
//! SUCCEEDED is left only by `Reanswer`, which nothing but an explicit ask
//! sends (see [`Event::Reanswer`]). No budget's count ever exceeds
//! its cap: a retryable failure that reaches the cap ends PERMANENT with rule
//! `<budget>_attempts_exhausted`.

use crate::classify::{Classification, Failure, FailureKind, Override, Rule, Severity, classify};
use crate::policy::Policy;
use crate::status::{Budget, PerBudget, RowStatus};
use std::time::Duration;

/// What the state machine needs to know about a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowState {
    pub status: RowStatus,
    /// Failed attempts per budget since the last redrive.
    pub failures: PerBudget,
    /// Every attempt ever, successes included.
    pub total: u32,
}

impl RowState {
    pub const fn new_pending() -> Self {
        Self {
            status: RowStatus::Pending,
            failures: PerBudget::new(0, 0, 0),
            total: 0,
        }
    }
}

/// What a worker reported for one row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Success,
    Failure(Failure),
}

/// Everything that can happen to a row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A claim takes the row.
    Claim,
    /// The holding claim reports an outcome.
    Report(Outcome),
    /// The holding claim gives the row back unworked.
    Release,
    /// The holding claim's lease ran out. `counted`: false when the row was
    /// provably never sent (its job never left PREPARING).
    LeaseExpired { counted: bool },
    /// The job carrying the row failed, expired or was cancelled as a whole.
    JobFailed,
    /// The row was absent from a finished job's output.
    MissingFromOutput,
    /// A dependency became PERMANENT or BLOCKED.
    DependencyFailed,
    /// An operator redrives the row.
    Redrive,
    /// The dependency that blocked the row was redriven.
    Unblock,
    /// The row is asked again although it SUCCEEDED: an operator's redrive
    /// that includes succeeded rows, or (where the ledger asks for it) a
    /// dependency whose answer the row used answered differently. Its old
    /// result is kept beside the new one, never overwritten.
    Reanswer,
}

/// The attempt an event records in the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRecord {
    /// SUCCEEDED, RETRYABLE or PERMANENT.
    pub outcome: RowStatus,
    pub rule: Rule,
    /// The budget a failure counted against; `None` for a success.
    pub budget: Option<Budget>,
}

/// The row after an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub status: RowStatus,
    pub failures: PerBudget,
    pub total: u32,
    /// The attempt to record, if the event was an attempt.
    pub attempt: Option<AttemptRecord>,
    /// For RETRYABLE: how long before the row is claimable again.
    pub retry_after: Option<Duration>,
    /// The rule to show on the row (latest verdict), when it changes.
    pub rule: Option<Rule>,
}

/// Why an event does not apply to a row in its current status. The store
/// turns these into STALE (or DUPLICATE) answers; nothing is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("event does not apply to a {status} row")]
pub struct Refused {
    pub status: RowStatus,
}

/// Per-call inputs that are not row state: the ledger's policy, its
/// overrides (converted once), and a jitter sample in `[0, 1)`.
pub struct Context<'a> {
    pub policy: &'a Policy,
    pub overrides: &'a [Override],
    pub jitter: f64,
}

/// The rule a BLOCKED row records (`rows.rule`), and the error it shows.
pub const BLOCKED_RULE: &str = "dependency_failed";
pub const BLOCKED_MESSAGE: &str = "a dependency is PERMANENT or BLOCKED";

/// The rule a row re-run because a dependency answered differently records
/// (`rows.rule`), and the error it shows until it is answered again.
pub const DEPENDENCY_CHANGED_RULE: &str = "dependency_changed";
pub const DEPENDENCY_CHANGED_MESSAGE: &str =
    "a dependency it used answered differently; asked again";
/// The rule a row an operator asked again records until it is answered.
pub const REANSWER_RULE: &str = "reanswer";

/// Applies one event to one row.
pub fn step(row: RowState, event: &Event, ctx: &Context<'_>) -> Result<Transition, Refused> {
    use RowStatus::{Blocked, Pending, Permanent, Retryable, Running, Succeeded};
    let refuse = Err(Refused { status: row.status });
    match (row.status, event) {
        // Asked again: fresh budgets, the attempts made kept.
        (Permanent | Blocked, Event::Redrive) | (Succeeded, Event::Reanswer) => Ok(Transition {
            status: Pending,
            failures: PerBudget::default(),
            total: row.total,
            attempt: None,
            retry_after: None,
            rule: None,
        }),
        (Succeeded, _) => refuse,
        (Pending | Retryable, Event::Claim) => Ok(unchanged(row, Running)),
        (Running, Event::Report(Outcome::Success)) => Ok(Transition {
            status: Succeeded,
            failures: row.failures,
            total: row.total + 1,
            attempt: Some(AttemptRecord {
                outcome: Succeeded,
                rule: Rule::Success,
                budget: None,
            }),
            retry_after: None,
            rule: Some(Rule::Success),
        }),
        (Running, Event::Report(Outcome::Failure(f))) => {
            Ok(settle(row, classify(f, ctx.overrides), f.retry_delay, ctx))
        }
        (Running, Event::Release | Event::LeaseExpired { counted: false }) => Ok(unchanged(
            row,
            if row.total == 0 { Pending } else { Retryable },
        )),
        (Running, Event::LeaseExpired { counted: true }) => Ok(settle(
            row,
            Classification {
                severity: Severity::Retryable,
                budget: Budget::Infra,
                rule: Rule::LeaseExpired,
            },
            None,
            ctx,
        )),
        (Running, Event::JobFailed) => Ok(settle(
            row,
            Classification {
                severity: Severity::Retryable,
                budget: Budget::Infra,
                rule: Rule::JobFailed,
            },
            None,
            ctx,
        )),
        (Running, Event::MissingFromOutput) => {
            let missing = Failure {
                kind: Some(FailureKind::MissingFromOutput),
                ..Failure::default()
            };
            Ok(settle(row, classify(&missing, ctx.overrides), None, ctx))
        }
        (Pending | Retryable | Blocked, Event::DependencyFailed) => Ok(unchanged(row, Blocked)),
        (Blocked, Event::Unblock) => Ok(unchanged(row, Pending)),
        (
            Pending | Retryable | Permanent | Blocked,
            Event::Report(_)
            | Event::Release
            | Event::LeaseExpired { .. }
            | Event::JobFailed
            | Event::MissingFromOutput,
        )
        | (Running | Permanent | Blocked, Event::Claim)
        | (Running | Permanent, Event::DependencyFailed)
        | (Pending | Running | Retryable, Event::Redrive)
        | (Pending | Running | Retryable | Permanent, Event::Unblock)
        | (Pending | Running | Retryable | Permanent | Blocked, Event::Reanswer) => refuse,
    }
}

fn unchanged(row: RowState, status: RowStatus) -> Transition {
    Transition {
        status,
        failures: row.failures,
        total: row.total,
        attempt: None,
        retry_after: None,
        rule: None,
    }
}

/// A failed attempt: count it against its budget; retryable below the cap,
/// permanent at it.
fn settle(
    row: RowState,
    c: Classification,
    requested_delay: Option<Duration>,
    ctx: &Context<'_>,
) -> Transition {
    let failures = row.failures.bumped(c.budget);
    let used = failures.get(c.budget);
    let cap = ctx.policy.caps.per_budget().get(c.budget);
    let (status, rule, retry_after) = match c.severity {
        Severity::Permanent => (RowStatus::Permanent, c.rule, None),
        Severity::Retryable if used >= cap => {
            (RowStatus::Permanent, Rule::Exhausted(c.budget), None)
        }
        Severity::Retryable => (
            RowStatus::Retryable,
            c.rule,
            Some(
                ctx.policy
                    .backoff
                    .delay_honouring(used, ctx.jitter, requested_delay),
            ),
        ),
    };
    Transition {
        status,
        failures,
        total: row.total + 1,
        attempt: Some(AttemptRecord {
            outcome: status,
            rule: rule.clone(),
            budget: Some(c.budget),
        }),
        retry_after,
        rule: Some(rule),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Caps;
    use proptest::prelude::*;

    fn ctx(policy: &Policy) -> Context<'_> {
        Context {
            policy,
            overrides: &[],
            jitter: 0.5,
        }
    }

    fn http(code: u32) -> Event {
        Event::Report(Outcome::Failure(Failure {
            http_code: code,
            ..Failure::default()
        }))
    }

    fn running() -> RowState {
        RowState {
            status: RowStatus::Running,
            ..RowState::new_pending()
        }
    }

    /// The statuses `step` accepts `event` from, and what it moves them to.
    fn moved_by(event: &Event) -> Vec<(RowStatus, RowStatus)> {
        let p = Policy::default();
        RowStatus::ALL
            .into_iter()
            .filter_map(|s| {
                let row = RowState {
                    status: s,
                    ..RowState::new_pending()
                };
                step(row, event, &ctx(&p)).ok().map(|t| (s, t.status))
            })
            .collect()
    }

    #[test]
    fn the_named_status_sets_are_the_ones_the_state_machine_moves() {
        // Invariant: the sets the store binds into SQL (claimable, blockable,
        // redrivable) are exactly the statuses this table moves for their
        // event, so SQL cannot disagree with the state machine.
        use RowStatus::{Blocked, Pending, Running};
        let from = |pairs: Vec<(RowStatus, RowStatus)>| -> Vec<RowStatus> {
            pairs
                .into_iter()
                .filter(|(a, b)| a != b)
                .map(|(a, _)| a)
                .collect()
        };
        let claimed = moved_by(&Event::Claim);
        assert!(
            claimed
                .iter()
                .all(|&(_, to)| to == RowStatus::HELD && to == Running)
        );
        assert_eq!(from(claimed), RowStatus::CLAIMABLE);
        let blocked = moved_by(&Event::DependencyFailed);
        assert!(blocked.iter().all(|&(_, to)| to == Blocked));
        assert_eq!(from(blocked), RowStatus::BLOCKABLE);
        let redriven = moved_by(&Event::Redrive);
        assert!(redriven.iter().all(|&(_, to)| to == Pending));
        assert_eq!(from(redriven), RowStatus::REDRIVABLE);
        let reanswered = moved_by(&Event::Reanswer);
        assert!(reanswered.iter().all(|&(_, to)| to == Pending));
        assert_eq!(from(reanswered), RowStatus::REANSWERABLE);
        for s in RowStatus::ALL {
            assert_eq!(
                s.is_reanswerable(),
                RowStatus::REANSWERABLE.contains(&s),
                "{s}"
            );
            assert_eq!(s.is_claimable(), RowStatus::CLAIMABLE.contains(&s), "{s}");
            assert_eq!(s.is_redrivable(), RowStatus::REDRIVABLE.contains(&s), "{s}");
            assert_eq!(
                s.fails_dependants(),
                RowStatus::FAILS_DEPENDANTS.contains(&s),
                "{s}"
            );
        }
        // A row enrolled behind a failed dependency starts where
        // DependencyFailed would have put it; otherwise where a redrive does.
        assert_eq!(RowStatus::enrolled(true), Blocked);
        assert_eq!(RowStatus::enrolled(false), Pending);
    }

    #[test]
    fn a_success_is_stored_and_counted() {
        let p = Policy::default();
        let t = step(running(), &Event::Report(Outcome::Success), &ctx(&p)).unwrap();
        assert_eq!(t.status, RowStatus::Succeeded);
        assert_eq!(t.total, 1);
        assert_eq!(t.failures, PerBudget::default());
        assert_eq!(t.attempt.unwrap().rule, Rule::Success);
    }

    #[test]
    fn transient_failures_retry_until_the_cap_then_end_permanent() {
        let p = Policy::default();
        let mut row = running();
        let mut statuses = Vec::new();
        for _ in 0..4 {
            let t = step(row, &http(503), &ctx(&p)).unwrap();
            statuses.push((t.status, t.rule.clone().unwrap().name()));
            row = RowState {
                status: RowStatus::Running,
                failures: t.failures,
                total: t.total,
            };
            if t.status == RowStatus::Permanent {
                break;
            }
        }
        assert_eq!(
            statuses,
            [
                (RowStatus::Retryable, "http_transient".into()),
                (RowStatus::Retryable, "http_transient".into()),
                (RowStatus::Retryable, "http_transient".into()),
                (RowStatus::Permanent, "provider_attempts_exhausted".into()),
            ]
        );
        assert_eq!(row.failures.provider, 4);
    }

    #[test]
    fn content_failures_are_permanent_at_once_with_the_default_budget_of_one() {
        let p = Policy::default();
        let empty = Event::Report(Outcome::Failure(Failure {
            kind: Some(FailureKind::EmptyResponse),
            ..Failure::default()
        }));
        let t = step(running(), &empty, &ctx(&p)).unwrap();
        assert_eq!(t.status, RowStatus::Permanent);
        assert_eq!(t.rule.unwrap().name(), "content_attempts_exhausted");
    }

    #[test]
    fn a_retry_delay_from_the_provider_is_honoured() {
        let p = Policy::default();
        let e = Event::Report(Outcome::Failure(Failure {
            http_code: 429,
            retry_delay: Some(Duration::from_secs(600)),
            ..Failure::default()
        }));
        let t = step(running(), &e, &ctx(&p)).unwrap();
        assert_eq!(t.retry_after, Some(Duration::from_secs(600)));
    }

    #[test]
    fn release_and_uncounted_expiry_record_no_attempt() {
        let p = Policy::default();
        for e in [Event::Release, Event::LeaseExpired { counted: false }] {
            let t = step(running(), &e, &ctx(&p)).unwrap();
            assert_eq!(
                (t.status, t.total, t.attempt),
                (RowStatus::Pending, 0, None)
            );
        }
        let tried = RowState {
            total: 2,
            ..running()
        };
        assert_eq!(
            step(tried, &Event::Release, &ctx(&p)).unwrap().status,
            RowStatus::Retryable
        );
    }

    #[test]
    fn counted_expiry_and_job_failure_use_the_infra_budget() {
        let p = Policy {
            caps: Caps {
                infra: 2,
                ..Caps::default()
            },
            ..Policy::default()
        };
        let t = step(running(), &Event::LeaseExpired { counted: true }, &ctx(&p)).unwrap();
        assert_eq!((t.status, t.failures.infra), (RowStatus::Retryable, 1));
        let again = RowState {
            status: RowStatus::Running,
            failures: t.failures,
            total: t.total,
        };
        let t = step(again, &Event::JobFailed, &ctx(&p)).unwrap();
        assert_eq!(t.status, RowStatus::Permanent);
        assert_eq!(t.rule.unwrap().name(), "infra_attempts_exhausted");
    }

    #[test]
    fn redrive_renews_budgets_but_keeps_the_total() {
        let p = Policy::default();
        let row = RowState {
            status: RowStatus::Permanent,
            failures: PerBudget::new(4, 0, 1),
            total: 5,
        };
        let t = step(row, &Event::Redrive, &ctx(&p)).unwrap();
        assert_eq!(
            (t.status, t.failures, t.total),
            (RowStatus::Pending, PerBudget::default(), 5)
        );
    }

    #[test]
    fn reports_for_rows_not_running_are_refused() {
        let p = Policy::default();
        for status in [
            RowStatus::Pending,
            RowStatus::Retryable,
            RowStatus::Permanent,
            RowStatus::Blocked,
        ] {
            let row = RowState {
                status,
                ..RowState::new_pending()
            };
            assert_eq!(
                step(row, &Event::Report(Outcome::Success), &ctx(&p)),
                Err(Refused { status })
            );
        }
    }

    fn any_event() -> impl Strategy<Value = Event> {
        prop_oneof![
            Just(Event::Claim),
            Just(Event::Report(Outcome::Success)),
            (0u32..600, 0u8..5).prop_map(|(code, kind)| {
                Event::Report(Outcome::Failure(Failure {
                    http_code: code,
                    kind: match kind {
                        0 => None,
                        1 => Some(FailureKind::EmptyResponse),
                        2 => Some(FailureKind::InvalidOutput),
                        3 => Some(FailureKind::Blocked),
                        _ => Some(FailureKind::ProviderError),
                    },
                    ..Failure::default()
                }))
            }),
            Just(Event::Release),
            any::<bool>().prop_map(|counted| Event::LeaseExpired { counted }),
            Just(Event::JobFailed),
            Just(Event::MissingFromOutput),
            Just(Event::DependencyFailed),
            Just(Event::Redrive),
            Just(Event::Unblock),
            Just(Event::Reanswer),
        ]
    }

    fn any_status() -> impl Strategy<Value = RowStatus> {
        proptest::sample::select(RowStatus::ALL.to_vec())
    }

    proptest! {
        #[test]
        fn only_a_reanswer_takes_a_succeeded_row_anywhere(
            events in proptest::collection::vec(any_event(), 0..40),
        ) {
            // A re-answer keeps the attempts made (the old answer cost them)
            // and renews the budgets, as a redrive does.
            let p = Policy::default();
            let row = RowState { status: RowStatus::Succeeded, failures: PerBudget::new(1, 0, 0), total: 2 };
            for e in &events {
                let got = step(row, e, &ctx(&p));
                if *e == Event::Reanswer {
                    let t = got.unwrap();
                    prop_assert_eq!(t.status, RowStatus::Pending);
                    prop_assert_eq!(t.total, 2);
                    prop_assert_eq!(t.failures, PerBudget::default());
                    prop_assert!(t.attempt.is_none());
                } else {
                    prop_assert_eq!(got, Err(Refused { status: RowStatus::Succeeded }));
                }
            }
        }

        #[test]
        fn budgets_never_exceed_their_caps_and_only_a_reanswer_leaves_success(
            provider in 1u32..6, content in 1u32..4, infra in 1u32..4,
            start in any_status(),
            events in proptest::collection::vec(any_event(), 0..80),
        ) {
            let p = Policy { caps: Caps { provider, content, infra }, ..Policy::default() };
            let caps = p.caps.per_budget();
            let mut row = RowState { status: start, ..RowState::new_pending() };
            let mut attempts = 0u32;
            for e in &events {
                let before = row;
                match step(row, e, &ctx(&p)) {
                    Ok(t) => {
                        prop_assert!(before.status != RowStatus::Succeeded || *e == Event::Reanswer);
                        attempts += u32::from(t.attempt.is_some());
                        if t.status == RowStatus::Retryable && t.attempt.is_some() {
                            prop_assert!(t.retry_after.is_some());
                        }
                        row = RowState { status: t.status, failures: t.failures, total: t.total };
                    }
                    Err(r) => prop_assert_eq!(r.status, before.status),
                }
                for b in Budget::ALL {
                    prop_assert!(row.failures.get(b) <= caps.get(b), "{:?} over cap: {:?}", b, row);
                }
                if row.status == RowStatus::Retryable {
                    for b in Budget::ALL {
                        prop_assert!(row.failures.get(b) < caps.get(b));
                    }
                }
            }
            prop_assert_eq!(row.total, attempts);
        }
    }
}
