//! A report's judgement: what each reported outcome does to its row, and
//! what the worker is told. The store loads the rows a report names (from
//! its claim cache or under the claim's lock), calls [`judge`] once, and
//! writes what it says; nothing about a report is decided anywhere else.
//!
//! For each item, in order:
//! - no such row: STALE `unknown_key`;
//! - a key already named earlier in the same report, or a row this claim's
//!   own report settled last: DUPLICATE `already_reported` (a worker's
//!   retry of a report that went through);
//! - a row the claim holds while the claim is not live (expired, done):
//!   STALE `lease_lost`;
//! - a row the claim does not hold: STALE `not_held`;
//! - otherwise the row, RUNNING under the claim, goes through the row state
//!   machine ([`transition::step`] with [`Event::Report`]), which gives the
//!   verdict (SUCCEEDED, RETRYABLE or PERMANENT), the new counters, the
//!   rule, the attempt to record and, for RETRYABLE, the backoff.
//!
//! STALE and DUPLICATE write nothing; their answers carry the row's counters
//! as loaded.

use crate::classify::{Failure, FailureKind, Override};
use crate::policy::Policy;
use crate::status::{Budget, PerBudget, RowStatus};
use crate::transition::{self, Context, Event, Outcome, RowState, Transition};
use std::collections::HashSet;
use std::time::Duration;

/// Longest error message kept per attempt.
pub const MAX_ERROR_CHARS: usize = 2048;

/// A report's answer for one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Succeeded,
    Retryable,
    Permanent,
    /// The claim may not settle the row (any more); nothing was written.
    Stale,
    /// The row was already reported by this claim; nothing was written.
    Duplicate,
}

impl Verdict {
    /// The verdict of a row a report left in `status`; `None` for a status
    /// no report leaves a row in.
    pub const fn of_settled(status: RowStatus) -> Option<Verdict> {
        match status {
            RowStatus::Succeeded => Some(Verdict::Succeeded),
            RowStatus::Retryable => Some(Verdict::Retryable),
            RowStatus::Permanent => Some(Verdict::Permanent),
            RowStatus::Pending | RowStatus::Running | RowStatus::Blocked => None,
        }
    }
}

/// The reporting claim, as the store found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimView {
    /// ACTIVE and within its lease: it may settle the rows it holds.
    pub live: bool,
}

/// A reported row, as the store loaded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowView {
    /// The row's id: handed back in [`Settle`], and the seed of its jitter.
    pub id: i64,
    /// Failed attempts per budget since the last redrive, as stored.
    pub failures: PerBudget,
    /// Every attempt ever, as stored.
    pub total: u32,
    /// The reporting claim holds the row.
    pub held: bool,
    /// The reporting claim's own report settled the row last.
    pub reported_by_claim: bool,
}

/// Why a report leaves a row as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unchanged {
    /// No row has the key.
    UnknownKey,
    /// Named earlier in the same report, or settled by this claim's report.
    AlreadyReported,
    /// The claim holds the row but is no longer live.
    LeaseLost,
    /// The claim does not hold the row.
    NotHeld,
}

impl Unchanged {
    pub const fn verdict(self) -> Verdict {
        match self {
            Unchanged::AlreadyReported => Verdict::Duplicate,
            Unchanged::UnknownKey | Unchanged::LeaseLost | Unchanged::NotHeld => Verdict::Stale,
        }
    }

    /// The rule the answer names.
    pub const fn rule(self) -> &'static str {
        match self {
            Unchanged::UnknownKey => "unknown_key",
            Unchanged::AlreadyReported => "already_reported",
            Unchanged::LeaseLost => "lease_lost",
            Unchanged::NotHeld => "not_held",
        }
    }
}

/// A held row's report, decided: write `transition` to row `id` (and record
/// its attempt), answer `verdict`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settle {
    pub id: i64,
    /// SUCCEEDED, RETRYABLE or PERMANENT: the transition's status.
    pub verdict: Verdict,
    /// From RUNNING; it always records an attempt.
    pub transition: Transition,
    /// The outcome in one line, for `last_error` and the attempt (empty for
    /// a success).
    pub error: String,
}

/// What a report does to one row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    Settle(Settle),
    /// Nothing is written; the answer carries the row's counters as loaded
    /// (zero for an unknown key).
    Unchanged {
        reason: Unchanged,
        failures: PerBudget,
        total: u32,
    },
}

impl Judgement {
    pub fn verdict(&self) -> Verdict {
        match self {
            Judgement::Settle(s) => s.verdict,
            Judgement::Unchanged { reason, .. } => reason.verdict(),
        }
    }

    /// The rule the answer names.
    pub fn rule(&self) -> String {
        match self {
            Judgement::Settle(s) => s.transition.rule.as_ref().map(|r| r.name()),
            Judgement::Unchanged { reason, .. } => Some(reason.rule().to_owned()),
        }
        .unwrap_or_default()
    }

    /// The budget the attempt counted against (a settled failure only).
    pub fn budget(&self) -> Option<Budget> {
        match self {
            Judgement::Settle(s) => s.transition.attempt.as_ref().and_then(|a| a.budget),
            Judgement::Unchanged { .. } => None,
        }
    }

    /// The row's failures per budget after the report.
    pub fn failures(&self) -> PerBudget {
        match self {
            Judgement::Settle(s) => s.transition.failures,
            Judgement::Unchanged { failures, .. } => *failures,
        }
    }

    /// The row's attempts after the report.
    pub fn total(&self) -> u32 {
        match self {
            Judgement::Settle(s) => s.transition.total,
            Judgement::Unchanged { total, .. } => *total,
        }
    }

    /// RETRYABLE: how long before the row may be claimed again.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Judgement::Settle(s) => s.transition.retry_after,
            Judgement::Unchanged { .. } => None,
        }
    }
}

/// The row state machine answered a held row's report with something no
/// report may do (refused it, left it neither settled nor retryable, or
/// recorded no attempt): a bug, never a worker's mistake.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the report of held row {key} {what}")]
pub struct Broken {
    pub key: String,
    pub what: String,
}

/// Judges a report: one [`Judgement`] per item, in order. `row` finds a
/// row by key (`None`: no such row); `jitter(id, total)` is the backoff's
/// jitter sample in `[0, 1)` for a row with that id and attempt count.
pub fn judge<'a>(
    items: impl IntoIterator<Item = (&'a str, &'a Outcome)>,
    row: impl Fn(&str) -> Option<RowView>,
    claim: ClaimView,
    policy: &Policy,
    overrides: &[Override],
    jitter: impl Fn(i64, u32) -> f64,
) -> Result<Vec<Judgement>, Broken> {
    let items = items.into_iter();
    let mut seen = HashSet::with_capacity(items.size_hint().0);
    let mut out = Vec::with_capacity(items.size_hint().0);
    for (key, outcome) in items {
        let first_mention = seen.insert(key);
        let Some(r) = row(key) else {
            out.push(Judgement::Unchanged {
                reason: Unchanged::UnknownKey,
                failures: PerBudget::default(),
                total: 0,
            });
            continue;
        };
        let reason = if r.held && claim.live && first_mention {
            let ctx = Context {
                policy,
                overrides,
                jitter: jitter(r.id, r.total),
            };
            out.push(Judgement::Settle(settle(key, &r, outcome, &ctx)?));
            continue;
        } else if !first_mention || r.reported_by_claim {
            Unchanged::AlreadyReported
        } else if r.held {
            Unchanged::LeaseLost
        } else {
            Unchanged::NotHeld
        };
        out.push(Judgement::Unchanged {
            reason,
            failures: r.failures,
            total: r.total,
        });
    }
    Ok(out)
}

/// A held row's report through the row state machine: the row is RUNNING
/// under the claim (its stored status is still the one it was claimed with).
fn settle(key: &str, r: &RowView, outcome: &Outcome, ctx: &Context<'_>) -> Result<Settle, Broken> {
    let broken = |what: String| Broken {
        key: key.to_owned(),
        what,
    };
    let running = RowState {
        status: RowStatus::Running,
        failures: r.failures,
        total: r.total,
    };
    let t = transition::step(running, &Event::Report(outcome.clone()), ctx)
        .map_err(|refused| broken(format!("was refused: {refused}")))?;
    let verdict =
        Verdict::of_settled(t.status).ok_or_else(|| broken(format!("left it {}", t.status)))?;
    if t.attempt.is_none() {
        return Err(broken("recorded no attempt".into()));
    }
    Ok(Settle {
        id: r.id,
        verdict,
        transition: t,
        error: describe(outcome),
    })
}

/// An outcome as one line for `last_error` and the attempts history: empty
/// for a success, at most [`MAX_ERROR_CHARS`] characters.
pub fn describe(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Success => String::new(),
        Outcome::Failure(f) => describe_failure(f),
    }
}

fn describe_failure(f: &Failure) -> String {
    let mut parts: Vec<String> = Vec::new();
    if f.http_code != 0 {
        parts.push(f.http_code.to_string());
    }
    if !f.status.is_empty() {
        parts.push(f.status.clone());
    }
    if !f.finish_reason.is_empty() {
        parts.push(format!("finish reason {}", f.finish_reason));
    }
    if !f.block_reason.is_empty() {
        parts.push(format!("prompt blocked: {}", f.block_reason));
    }
    if let Some(kind) = f.kind {
        let what = match kind {
            FailureKind::ProviderError => None,
            FailureKind::EmptyResponse => Some("empty response"),
            FailureKind::InvalidOutput => Some("invalid output"),
            FailureKind::Blocked => Some("blocked"),
            FailureKind::MissingFromOutput => Some("missing from output"),
            FailureKind::MediaUnreadable => Some("media unreadable"),
            FailureKind::MediaUnavailable => Some("media unavailable"),
            FailureKind::AnswerLost => Some("answer lost"),
        };
        parts.extend(what.map(String::from));
    }
    let head = parts.join(" ");
    let line = match (head.is_empty(), f.message.is_empty()) {
        (true, true) => "failed".to_string(),
        (false, true) => head,
        (true, false) => f.message.clone(),
        (false, false) => format!("{head}: {}", f.message),
    };
    line.chars().take(MAX_ERROR_CHARS).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::Severity;
    use crate::policy::Caps;
    use std::cell::RefCell;
    use std::collections::HashMap;

    const LIVE: ClaimView = ClaimView { live: true };
    const EXPIRED: ClaimView = ClaimView { live: false };

    /// A row the reporting claim holds, with `total` earlier attempts of
    /// which `failures` failed.
    fn held(id: i64, failures: PerBudget, total: u32) -> RowView {
        RowView {
            id,
            failures,
            total,
            held: true,
            reported_by_claim: false,
        }
    }

    fn fresh(id: i64) -> RowView {
        held(id, PerBudget::default(), 0)
    }

    fn failure(f: Failure) -> Outcome {
        Outcome::Failure(f)
    }

    fn http(code: u32) -> Outcome {
        failure(Failure {
            http_code: code,
            ..Failure::default()
        })
    }

    /// Judges `items` against `rows` with jitter 0.5 (none).
    fn run(
        items: &[(&str, Outcome)],
        rows: &[(&str, RowView)],
        claim: ClaimView,
        policy: &Policy,
        overrides: &[Override],
    ) -> Vec<Judgement> {
        let rows: HashMap<&str, RowView> = rows.iter().copied().collect();
        judge(
            items.iter().map(|(k, o)| (*k, o)),
            |k| rows.get(k).copied(),
            claim,
            policy,
            overrides,
            |_, _| 0.5,
        )
        .unwrap()
    }

    fn one(outcome: Outcome, row: RowView, policy: &Policy) -> Judgement {
        run(&[("k", outcome)], &[("k", row)], LIVE, policy, &[])
            .pop()
            .unwrap()
    }

    fn settled(j: &Judgement) -> &Settle {
        match j {
            Judgement::Settle(s) => s,
            Judgement::Unchanged { reason, .. } => panic!("unchanged: {reason:?}"),
        }
    }

    fn answer(j: &Judgement) -> (Verdict, String) {
        (j.verdict(), j.rule())
    }

    fn unchanged(reason: Unchanged) -> (Verdict, String) {
        (reason.verdict(), reason.rule().to_owned())
    }

    /// A key with no row is STALE `unknown_key`, writes nothing and answers
    /// zero counters, even when named twice.
    #[test]
    fn an_unknown_key_is_stale_and_writes_nothing() {
        let p = Policy::default();
        let out = run(
            &[("nope", Outcome::Success), ("nope", Outcome::Success)],
            &[],
            LIVE,
            &p,
            &[],
        );
        for j in &out {
            assert_eq!(
                j,
                &Judgement::Unchanged {
                    reason: Unchanged::UnknownKey,
                    failures: PerBudget::default(),
                    total: 0
                }
            );
            assert_eq!(answer(j), (Verdict::Stale, "unknown_key".into()));
        }
    }

    /// Invariant 1 within one report: a key named twice settles once; the
    /// second mention is DUPLICATE `already_reported` with the counters as
    /// loaded, whatever its outcome says.
    #[test]
    fn a_key_named_twice_in_one_report_settles_once() {
        let p = Policy::default();
        let row = held(7, PerBudget::new(1, 0, 0), 2);
        let out = run(
            &[("k", Outcome::Success), ("k", http(503))],
            &[("k", row)],
            LIVE,
            &p,
            &[],
        );
        assert_eq!(settled(&out[0]).verdict, Verdict::Succeeded);
        assert_eq!(
            out[1],
            Judgement::Unchanged {
                reason: Unchanged::AlreadyReported,
                failures: PerBudget::new(1, 0, 0),
                total: 2
            }
        );
        assert_eq!(answer(&out[1]), unchanged(Unchanged::AlreadyReported));
        assert_eq!(out[1].verdict(), Verdict::Duplicate);
    }

    /// Invariant 1 across reports: a row this claim's report already
    /// settled (no longer held, last settled by this claim) is DUPLICATE,
    /// so a worker's retry of a report that went through changes nothing.
    #[test]
    fn a_row_this_claim_already_reported_is_a_duplicate() {
        let p = Policy::default();
        let row = RowView {
            held: false,
            reported_by_claim: true,
            ..held(1, PerBudget::default(), 1)
        };
        let j = one(Outcome::Success, row, &p);
        assert_eq!(answer(&j), (Verdict::Duplicate, "already_reported".into()));
        assert_eq!((j.total(), j.budget(), j.retry_after()), (1, None, None));
    }

    /// Invariant 3: a claim that is not live settles nothing, not even the
    /// rows it still holds: STALE `lease_lost`. A second mention is still a
    /// DUPLICATE (the same answer as when the claim was live).
    #[test]
    fn a_claim_that_lost_its_lease_settles_nothing() {
        let p = Policy::default();
        let out = run(
            &[("a", Outcome::Success), ("a", Outcome::Success)],
            &[("a", fresh(1))],
            EXPIRED,
            &p,
            &[],
        );
        assert_eq!(answer(&out[0]), (Verdict::Stale, "lease_lost".into()));
        assert_eq!(
            answer(&out[1]),
            (Verdict::Duplicate, "already_reported".into())
        );
        assert!(out.iter().all(|j| matches!(j, Judgement::Unchanged { .. })));
    }

    /// Invariant 3: a row the claim does not hold (released, rescued, or
    /// another claim's) is STALE `not_held`, whether or not the claim is
    /// live.
    #[test]
    fn a_row_the_claim_does_not_hold_is_stale() {
        let p = Policy::default();
        let other = RowView {
            held: false,
            ..held(3, PerBudget::new(0, 0, 1), 1)
        };
        for claim in [LIVE, EXPIRED] {
            let out = run(&[("k", Outcome::Success)], &[("k", other)], claim, &p, &[]);
            assert_eq!(
                out,
                [Judgement::Unchanged {
                    reason: Unchanged::NotHeld,
                    failures: PerBudget::new(0, 0, 1),
                    total: 1
                }]
            );
            assert_eq!(answer(&out[0]), (Verdict::Stale, "not_held".into()));
        }
    }

    /// A success of a held row is SUCCEEDED `success`: one more attempt,
    /// failures kept, no budget, no backoff, no error text.
    #[test]
    fn a_success_settles_the_row() {
        let p = Policy::default();
        let j = one(Outcome::Success, held(9, PerBudget::new(2, 0, 1), 3), &p);
        let s = settled(&j);
        assert_eq!(s.id, 9);
        assert_eq!(s.transition.status, RowStatus::Succeeded);
        assert_eq!(answer(&j), (Verdict::Succeeded, "success".into()));
        assert_eq!((j.failures(), j.total()), (PerBudget::new(2, 0, 1), 4));
        assert_eq!((j.budget(), j.retry_after()), (None, None));
        assert_eq!(s.error, "");
        assert_eq!(
            s.transition.attempt.as_ref().map(|a| a.outcome),
            Some(RowStatus::Succeeded)
        );
    }

    /// A transient provider failure below its cap is RETRYABLE: counted
    /// against the provider budget, with a backoff, and the error kept.
    #[test]
    fn a_transient_failure_below_the_cap_is_retryable_with_a_backoff() {
        let p = Policy::default();
        let j = one(http(503), held(1, PerBudget::new(1, 0, 0), 1), &p);
        assert_eq!(answer(&j), (Verdict::Retryable, "http_transient".into()));
        assert_eq!(j.budget(), Some(Budget::Provider));
        assert_eq!((j.failures(), j.total()), (PerBudget::new(2, 0, 0), 2));
        assert_eq!(j.retry_after(), Some(p.backoff.delay(2, 0.5)));
        assert_eq!(settled(&j).error, "503");
    }

    /// No budget's count exceeds its cap: the retryable failure that
    /// reaches the cap is PERMANENT `<budget>_attempts_exhausted`, with no
    /// backoff.
    #[test]
    fn the_failure_that_reaches_a_cap_is_permanent() {
        let p = Policy::default();
        let cap = p.caps.provider;
        let j = one(
            http(503),
            held(1, PerBudget::new(cap - 1, 0, 0), cap - 1),
            &p,
        );
        assert_eq!(
            answer(&j),
            (Verdict::Permanent, "provider_attempts_exhausted".into())
        );
        assert_eq!((j.failures().provider, j.retry_after()), (cap, None));
        assert_eq!(j.budget(), Some(Budget::Provider));
    }

    /// A permanent failure class is PERMANENT at once, whatever is left of
    /// its budget, and counts against it.
    #[test]
    fn a_permanent_failure_is_permanent_at_once() {
        let p = Policy::default();
        let j = one(http(400), fresh(1), &p);
        assert_eq!(answer(&j), (Verdict::Permanent, "http_permanent".into()));
        assert_eq!(
            (j.budget(), j.failures().provider),
            (Some(Budget::Provider), 1)
        );
        assert_eq!(j.retry_after(), None);
    }

    /// Each budget a report can count against (content by the built-in
    /// rules, infra through an override) is RETRYABLE below its cap and
    /// PERMANENT `<budget>_attempts_exhausted` at it.
    #[test]
    fn each_budget_retries_below_its_cap_and_ends_permanent_at_it() {
        let p = Policy {
            caps: Caps {
                provider: 4,
                content: 2,
                infra: 2,
            },
            ..Policy::default()
        };
        let to_infra = Override {
            name: "ours".into(),
            http_code: 599,
            severity: Some(Severity::Retryable),
            budget: Some(Budget::Infra),
            ..Override::default()
        };
        let empty = failure(Failure {
            kind: Some(FailureKind::EmptyResponse),
            ..Failure::default()
        });
        for (budget, outcome, rule, overrides) in [
            (Budget::Content, empty, "empty_response", vec![]),
            (Budget::Infra, http(599), "override:ours", vec![to_infra]),
        ] {
            let mut row = fresh(1);
            let mut answers = Vec::new();
            for _ in 0..2 {
                let out = run(
                    &[("k", outcome.clone())],
                    &[("k", row)],
                    LIVE,
                    &p,
                    &overrides,
                );
                let j = &out[0];
                assert_eq!(j.budget(), Some(budget));
                answers.push(answer(j));
                row = held(1, j.failures(), j.total());
            }
            let exhausted = format!("{}_attempts_exhausted", budget.as_str());
            assert_eq!(
                answers,
                [
                    (Verdict::Retryable, rule.into()),
                    (Verdict::Permanent, exhausted)
                ],
                "{budget:?}"
            );
            assert_eq!(row.failures.get(budget), 2);
        }
    }

    /// The backoff honours a longer delay the provider asked for, and its
    /// jitter is sampled for the row's id and its attempts so far.
    #[test]
    fn the_backoff_honours_the_provider_and_jitters_by_row() {
        let p = Policy::default();
        let asked = Duration::from_secs(3 * 3600);
        let slow = failure(Failure {
            http_code: 429,
            retry_delay: Some(asked),
            ..Failure::default()
        });
        assert_eq!(one(slow, fresh(1), &p).retry_after(), Some(asked));

        let sampled = RefCell::new(Vec::new());
        let out = judge(
            [("k", &http(503))],
            |_| Some(held(42, PerBudget::new(1, 0, 0), 5)),
            LIVE,
            &p,
            &[],
            |id, total| {
                sampled.borrow_mut().push((id, total));
                0.0
            },
        )
        .unwrap();
        assert_eq!(sampled.into_inner(), [(42, 5)]);
        assert_eq!(out[0].retry_after(), Some(p.backoff.delay(2, 0.0)));
        assert_ne!(p.backoff.delay(2, 0.0), p.backoff.delay(2, 0.5));
    }

    /// Answers come back one per item, in the items' order, with every
    /// branch in one report.
    #[test]
    fn one_judgement_per_item_in_order() {
        let p = Policy::default();
        let others = RowView {
            held: false,
            ..fresh(2)
        };
        let out = run(
            &[
                ("held", Outcome::Success),
                ("ghost", Outcome::Success),
                ("other", Outcome::Success),
                ("held", Outcome::Success),
                ("fails", http(400)),
            ],
            &[("held", fresh(1)), ("other", others), ("fails", fresh(3))],
            LIVE,
            &p,
            &[],
        );
        let verdicts: Vec<_> = out.iter().map(Judgement::verdict).collect();
        use Verdict::{Duplicate, Permanent, Stale, Succeeded};
        assert_eq!(verdicts, [Succeeded, Stale, Stale, Duplicate, Permanent]);
        let ids: Vec<_> = out
            .iter()
            .filter_map(|j| match j {
                Judgement::Settle(s) => Some(s.id),
                Judgement::Unchanged { .. } => None,
            })
            .collect();
        assert_eq!(ids, [1, 3]);
    }

    /// Every settled verdict is the transition's status, and its attempt
    /// records that status and the rule shown on the row.
    #[test]
    fn a_settled_row_records_the_attempt_it_answers() {
        let p = Policy::default();
        for outcome in [Outcome::Success, http(503), http(400)] {
            let j = one(outcome, fresh(1), &p);
            let s = settled(&j);
            let a = s.transition.attempt.as_ref().unwrap();
            assert_eq!(Verdict::of_settled(a.outcome), Some(s.verdict));
            assert_eq!(Some(&a.rule), s.transition.rule.as_ref());
        }
    }

    /// The error line names the code, status, finish and block reasons and
    /// the kind before the message, and is cut to its bound.
    #[test]
    fn a_failure_is_described_in_one_bounded_line() {
        assert_eq!(describe(&Outcome::Success), "");
        assert_eq!(describe(&failure(Failure::default())), "failed");
        let f = Failure {
            http_code: 500,
            status: "INTERNAL".into(),
            finish_reason: "OTHER".into(),
            kind: Some(FailureKind::InvalidOutput),
            message: "boom".into(),
            ..Failure::default()
        };
        assert_eq!(
            describe(&failure(f)),
            "500 INTERNAL finish reason OTHER invalid output: boom"
        );
        let long = failure(Failure {
            message: "é".repeat(MAX_ERROR_CHARS + 10),
            ..Failure::default()
        });
        assert_eq!(describe(&long).chars().count(), MAX_ERROR_CHARS);
    }
}
