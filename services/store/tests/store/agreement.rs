//! The store agrees with core's row state machine, pair by pair.
//!
//! Invariant: for every row status and every event of
//! `tally_core::transition`, carrying the event out through the store's
//! writer for it leaves the row as `transition::step` says. Where `step`
//! accepts the pair, the row as the store shows it afterwards (`get_row`)
//! has `step`'s status, failures per budget and total attempts, the rule
//! `step` gives it, and the attempt `step` records (if any) as the newest in
//! its history. Where `step` refuses, the store refuses too (its answer says
//! so: nothing claimed, STALE or DUPLICATE, nothing released, only other
//! rows settled, the redrive skipped) or has no way to say it, and the row
//! does not change.
//!
//! Each pair gets a ledger of its own, built through the public API only:
//! `r` is the row under test and depends on `d` and `e`; `by` is a
//! bystander, claimed first by a claim that stays live, whose claim carries
//! an event aimed at `r` when no claim holds `r`. [`plan`] is the table:
//! how `r` reaches the status ([`Reach`]), and what the store must do
//! ([`Expect`]); [`apply`] is the writer each event goes through.

use crate::common;

use common::*;
use std::collections::{BTreeSet, HashSet};
use std::time::{Duration, Instant};
use tally_core::classify::Failure;
use tally_core::job::FinalState;
use tally_core::policy::Policy;
use tally_core::status::{PerBudget, RowStatus};
use tally_core::transition::{self, Context, Event, Outcome, Refused, RowState, Transition};
use tally_store::Store;
use tally_store::types::{
    FinishRequest, RedriveResult, RedriveTarget, ReportItem, Rescued, RowFilter, RowRecord, Time,
    Usage, Verdict,
};
use uuid::Uuid;

/// Retries claimable at once; a provider budget of two, so a row's second
/// transient failure ends PERMANENT at the cap.
fn policy() -> Policy {
    let mut p = fast_policy();
    p.caps.provider = 2;
    p
}

/// An outcome by HTTP code: 200 is a success.
fn http(code: u32) -> Outcome {
    if code == 200 {
        return Outcome::Success;
    }
    Outcome::Failure(Failure {
        http_code: code,
        message: format!("http {code}"),
        ..Failure::default()
    })
}

/// The events of core's table: a report as a success, a retryable failure
/// (503) and a permanent one (400); both kinds of lease expiry.
fn events() -> Vec<Event> {
    vec![
        Event::Claim,
        Event::Report(http(200)),
        Event::Report(http(503)),
        Event::Report(http(400)),
        Event::Release,
        Event::LeaseExpired { counted: true },
        Event::LeaseExpired { counted: false },
        Event::JobFailed,
        Event::MissingFromOutput,
        Event::DependencyFailed,
        Event::Redrive,
        Event::Unblock,
        Event::Reanswer,
    ]
}

/// How many variants `Event` has: [`label`] matches each of them, so a new
/// one stops this file compiling until the table covers it.
const EVENT_VARIANTS: usize = 10;

/// An event's name (the tail of its pair's ledger id).
fn label(event: &Event) -> String {
    match event {
        Event::Claim => "claim".into(),
        Event::Report(Outcome::Success) => "report-success".into(),
        Event::Report(Outcome::Failure(f)) => format!("report-{}", f.http_code),
        Event::Release => "release".into(),
        Event::LeaseExpired { counted: true } => "lease-expired-counted".into(),
        Event::LeaseExpired { counted: false } => "lease-expired-uncounted".into(),
        Event::JobFailed => "job-failed".into(),
        Event::MissingFromOutput => "missing-from-output".into(),
        Event::DependencyFailed => "dependency-failed".into(),
        Event::Redrive => "redrive".into(),
        Event::Unblock => "unblock".into(),
        Event::Reanswer => "reanswer".into(),
    }
}

/// How `r` gets to the status of its pair. Every reach first settles `r`'s
/// dependencies `d` and `e` through the claim that took them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reach {
    /// `d` and `e` SUCCEEDED: `r` is claimable.
    Pending,
    /// `d` SUCCEEDED, `e` still held by its claim: `r` waits for `e`.
    PendingBehindHeld,
    /// Claimed, failed once retryably (503), claimed again and held: one
    /// provider failure and one attempt, so a second failure meets the cap.
    Running,
    /// Claimed and failed once retryably (503).
    Retryable,
    /// Claimed and reported a success.
    Succeeded,
    /// Claimed and failed permanently (400).
    Permanent,
    /// `d` failed permanently (400) while `e` is still held.
    Blocked,
}

/// What a claim of `r` does with it on the way to its status.
#[derive(Debug, Clone, Copy)]
enum Visit {
    /// Reports this HTTP code (200: a success).
    Report(u32),
    /// Keeps holding it.
    Hold,
}

impl Reach {
    fn of(status: RowStatus, event: &Event) -> Reach {
        match status {
            // The only way to fail a dependency is to settle it, so it must
            // still be held.
            RowStatus::Pending if *event == Event::DependencyFailed => Reach::PendingBehindHeld,
            RowStatus::Pending => Reach::Pending,
            RowStatus::Running => Reach::Running,
            RowStatus::Retryable => Reach::Retryable,
            RowStatus::Succeeded => Reach::Succeeded,
            RowStatus::Permanent => Reach::Permanent,
            RowStatus::Blocked => Reach::Blocked,
        }
    }

    /// The status `r` shows once reached.
    fn status(self) -> RowStatus {
        match self {
            Reach::Pending | Reach::PendingBehindHeld => RowStatus::Pending,
            Reach::Running => RowStatus::Running,
            Reach::Retryable => RowStatus::Retryable,
            Reach::Succeeded => RowStatus::Succeeded,
            Reach::Permanent => RowStatus::Permanent,
            Reach::Blocked => RowStatus::Blocked,
        }
    }

    /// The code `d` is reported with, and whether `e` stays held.
    fn dependencies(self) -> (u32, bool) {
        match self {
            Reach::PendingBehindHeld => (200, true),
            Reach::Blocked => (400, true),
            Reach::Pending
            | Reach::Running
            | Reach::Retryable
            | Reach::Succeeded
            | Reach::Permanent => (200, false),
        }
    }

    /// `r`'s claims, in order.
    fn visits(self) -> &'static [Visit] {
        match self {
            Reach::Pending | Reach::PendingBehindHeld | Reach::Blocked => &[],
            Reach::Running => &[Visit::Report(503), Visit::Hold],
            Reach::Retryable => &[Visit::Report(503)],
            Reach::Succeeded => &[Visit::Report(200)],
            Reach::Permanent => &[Visit::Report(400)],
        }
    }
}

/// What the store must do with a pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// `step` accepts: the writer moves `r` as `step` says.
    Moves,
    /// `step` refuses, and the store refuses or cannot say it, for the
    /// reason given: its answer says it did not act on `r`, and `r` is
    /// unchanged.
    Refused(&'static str),
    /// `step` accepts, but the store never has a row in this status when
    /// the event can happen, for the reason given: the nearest call is
    /// refused and `r` is unchanged.
    Unreachable(&'static str),
}

const HELD_ROWS_ARE_NOT_QUEUED: &str = "a held row is off the runnable queue until its claim \
     settles it: another claim takes nothing";
const ONLY_QUEUED_ROWS_ARE_CLAIMED: &str = "a claim takes only queued rows (PENDING or \
     RETRYABLE, every dependency SUCCEEDED, not held): it takes nothing";
const ONLY_THE_HOLDER_REPORTS: &str = "only the claim holding a row may report it: through \
     the claims that held it before the answer is DUPLICATE, through another claim STALE";
const ONLY_HELD_ROWS_ARE_RELEASED: &str = "a release gives back rows its claim holds: through \
     another claim it releases nothing";
const NO_LEASE_HOLDS_IT: &str = "no way to say it: a lease is a claim's and no claim holds the \
     row; the bystander's lease runs out and rescue settles the bystander only";
const NO_JOB_HOLDS_IT: &str = "no way to say it: a job ends for the rows it holds and no job \
     holds the row; finishing the bystander's job settles the bystander only";
const DEPENDENCIES_SUCCEEDED: &str = "a dependant fails only when a dependency settles \
     PERMANENT, and a row is claimed only once every dependency SUCCEEDED, which never \
     changes: reporting the dependency again is DUPLICATE";
const NOT_REDRIVABLE: &str = "redrive skips rows neither PERMANENT nor BLOCKED (a held row is \
     stored PENDING or RETRYABLE): it is skipped";
const NOT_REANSWERABLE: &str = "a redrive that includes succeeded rows asks again only \
     SUCCEEDED ones: a filter on SUCCEEDED passes this row over";
const NOTHING_BLOCKS_IT: &str = "a row is unblocked by a redrive of a failed dependency, and \
     only a BLOCKED row has one: this row's dependencies SUCCEEDED, the redrive skips them";

/// The table: for each pair, how `r` gets there and what the store must do.
fn plan(status: RowStatus, event: &Event) -> (Reach, Expect) {
    use Expect::{Moves, Refused, Unreachable};
    use RowStatus::{Blocked, Pending, Permanent, Retryable, Running, Succeeded};
    let only_held = |why| match status {
        Running => Moves,
        Pending | Retryable | Succeeded | Permanent | Blocked => Refused(why),
    };
    let expect = match event {
        Event::Claim => match status {
            Pending | Retryable => Moves,
            Running => Refused(HELD_ROWS_ARE_NOT_QUEUED),
            Succeeded | Permanent | Blocked => Refused(ONLY_QUEUED_ROWS_ARE_CLAIMED),
        },
        Event::Report(_) => only_held(ONLY_THE_HOLDER_REPORTS),
        Event::Release => only_held(ONLY_HELD_ROWS_ARE_RELEASED),
        Event::LeaseExpired { .. } => only_held(NO_LEASE_HOLDS_IT),
        Event::JobFailed | Event::MissingFromOutput => only_held(NO_JOB_HOLDS_IT),
        Event::DependencyFailed => match status {
            Pending | Blocked => Moves,
            // Core would block a RETRYABLE row; the store never has one
            // whose dependency can still fail.
            Retryable => Unreachable(DEPENDENCIES_SUCCEEDED),
            Running | Succeeded | Permanent => Refused(DEPENDENCIES_SUCCEEDED),
        },
        Event::Redrive => match status {
            Permanent | Blocked => Moves,
            Pending | Running | Retryable | Succeeded => Refused(NOT_REDRIVABLE),
        },
        Event::Unblock => match status {
            Blocked => Moves,
            Pending | Running | Retryable | Succeeded | Permanent => Refused(NOTHING_BLOCKS_IT),
        },
        Event::Reanswer => match status {
            Succeeded => Moves,
            Pending | Running | Retryable | Permanent | Blocked => Refused(NOT_REANSWERABLE),
        },
    };
    (Reach::of(status, event), expect)
}

/// A ledger with `r` in the status its pair starts from.
struct Case {
    ledger: String,
    ledger_id: i64,
    /// A live claim holding `by` only.
    bystander: Uuid,
    /// The claim that took `d` and `e`.
    deps: Uuid,
    /// The dependency that claim still holds, if any.
    held_dep: Option<&'static str>,
    /// Every claim that has held `r`, oldest first.
    r_claims: Vec<Uuid>,
    /// The claim holding `r` now, if any.
    holder: Option<Uuid>,
}

impl Case {
    /// The claim an event aimed at `r` goes through: the one holding it, or
    /// else the bystander's.
    fn fence(&self) -> Uuid {
        self.holder.unwrap_or(self.bystander)
    }
}

/// Makes ledger `ledger` and brings its row `r` to `to`.
async fn reach(store: &Store, ledger: &str, to: Reach) -> Case {
    let ledger_id = store.create_ledger(ledger, &policy()).await.unwrap().id;
    store.enroll(ledger, &[row("by", &[])]).await.unwrap();
    let bystander = claim_exactly(store, ledger, &["by"]).await;
    let rows = [row("d", &[]), row("e", &[]), row("r", &["d", "e"])];
    store.enroll(ledger, &rows).await.unwrap();
    let deps = claim_exactly(store, ledger, &["d", "e"]).await;
    let (d_code, e_held) = to.dependencies();
    report(store, ledger, deps, "d", &http(d_code)).await;
    if !e_held {
        report(store, ledger, deps, "e", &http(200)).await;
    }
    let mut r_claims = Vec::new();
    let mut holder = None;
    for visit in to.visits() {
        let token = claim_exactly(store, ledger, &["r"]).await;
        r_claims.push(token);
        match visit {
            Visit::Report(code) => {
                report(store, ledger, token, "r", &http(*code)).await;
            }
            Visit::Hold => holder = Some(token),
        }
    }
    let shown = store.get_row(ledger, "r").await.unwrap().status;
    assert_eq!(shown, to.status(), "{ledger}: r did not reach {to:?}");
    Case {
        ledger: ledger.into(),
        ledger_id,
        bystander,
        deps,
        held_dep: e_held.then_some("e"),
        r_claims,
        holder,
    }
}

/// Claims what is runnable in `ledger`, which must be exactly `keys`.
async fn claim_exactly(store: &Store, ledger: &str, keys: &[&str]) -> Uuid {
    let grant = claim(store, ledger, 10).await.expect("rows to claim");
    let mut taken: Vec<&str> = grant.rows.iter().map(|r| r.key.as_str()).collect();
    taken.sort();
    assert_eq!(taken, keys, "{ledger}: claimed");
    grant.claim.token
}

/// Reports `outcome` for `key` through claim `token`; answers its verdict.
async fn report(store: &Store, ledger: &str, token: Uuid, key: &str, outcome: &Outcome) -> Verdict {
    let item = ReportItem {
        key: key.into(),
        outcome: outcome.clone(),
        result: matches!(outcome, Outcome::Success).then(|| format!("{{\"ok\": \"{key}\"}}")),
        response: None,
        usage: Usage::default(),
        request_id: None,
        tier: None,
        model_version: None,
        cached: None,
    };
    let summary = store.report(ledger, token, &[item], "w").await.unwrap();
    summary.verdicts[0].verdict
}

async fn redrive(store: &Store, ledger: &str, keys: &[&str]) -> RedriveResult {
    let target = RedriveTarget::Keys(keys.iter().map(|k| k.to_string()).collect());
    store
        .redrive(ledger, &target, false, false, "op", "agreement")
        .await
        .unwrap()
}

/// Shortens claim `token`'s lease to a millisecond and waits, polling the
/// database's clock (the one rescue reads), until it has run out.
async fn run_out(store: &Store, ledger: &str, token: Uuid) {
    let claim = store
        .extend_claim(ledger, token, Some(Duration::from_millis(1)))
        .await
        .unwrap();
    let give_up = Instant::now() + Duration::from_secs(10);
    loop {
        let over: bool = sqlx::query_scalar("SELECT now() >= $1")
            .bind(claim.expire_time)
            .fetch_one(store.pool())
            .await
            .unwrap();
        if over {
            return;
        }
        assert!(
            Instant::now() < give_up,
            "{ledger}: the lease never ran out"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Carries `event` out on `r` through the store's writer for it. Answers
/// whether the writer's own answer says the event reached `r`, when its
/// answer can say so.
async fn apply(store: &Store, case: &Case, event: &Event) -> Option<bool> {
    let ledger = case.ledger.as_str();
    let fence = case.fence();
    match event {
        Event::Claim => {
            let grant = claim(store, ledger, 10).await;
            Some(grant.is_some_and(|g| g.rows.iter().any(|r| r.key == "r")))
        }
        Event::Report(outcome) => {
            let fences: Vec<Uuid> = match case.holder {
                Some(holder) => vec![holder],
                None => case.r_claims.iter().copied().chain([fence]).collect(),
            };
            let mut reached = false;
            for token in fences {
                let verdict = report(store, ledger, token, "r", outcome).await;
                reached |= !matches!(verdict, Verdict::Stale | Verdict::Duplicate);
            }
            Some(reached)
        }
        Event::Release => {
            let keys = ["r".to_string()];
            let (released, _) = store
                .release_claim(ledger, fence, Some(&keys), "w")
                .await
                .unwrap();
            Some(released == 1)
        }
        Event::LeaseExpired { counted } => {
            // Uncounted: the claim's job never left PREPARING, so its rows
            // were provably never sent.
            if !counted {
                store.create_job(ledger, fence, "w").await.unwrap();
            }
            run_out(store, ledger, fence).await;
            let rescued = store.rescue_expired(Some(case.ledger_id)).await.unwrap();
            let fence_rows = if *counted {
                Rescued {
                    rows: 1,
                    ..Rescued::default()
                }
            } else {
                Rescued {
                    abandoned_jobs: 1,
                    released_rows: 1,
                    ..Rescued::default()
                }
            };
            assert_eq!(rescued, fence_rows, "{ledger}: rescued");
            None
        }
        Event::JobFailed | Event::MissingFromOutput => {
            let final_state = if *event == Event::JobFailed {
                FinalState::Failed
            } else {
                FinalState::Succeeded
            };
            assert_eq!(&final_state.row_event(), event);
            let job = store.create_job(ledger, fence, "w").await.unwrap();
            let batch = format!("batches/{ledger}");
            store
                .mark_submitted(ledger, &job.public_id, fence, &batch, "files/in", "w")
                .await
                .unwrap();
            let finish = FinishRequest {
                final_state,
                output_file: String::new(),
                error: String::new(),
                not_run: Vec::new(),
            };
            let done = store
                .finish_job(ledger, &job.public_id, fence, &finish, "w")
                .await
                .unwrap();
            assert_eq!(done.counts.rows, 1, "{ledger}: the job's rows");
            None
        }
        Event::DependencyFailed => {
            // The held dependency, or else `d` again through the claim
            // that settled it.
            let dep = case.held_dep.unwrap_or("d");
            let verdict = report(store, ledger, case.deps, dep, &http(400)).await;
            Some(verdict == Verdict::Permanent)
        }
        Event::Redrive => {
            // With its dependencies: a BLOCKED row redriven alone is blocked
            // again by the one that still fails (Redrive, then
            // DependencyFailed: see the test below).
            let done = redrive(store, ledger, &["r", "d", "e"]).await;
            Some(done.sample_keys.iter().any(|k| k == "r"))
        }
        Event::Unblock => {
            let done = redrive(store, ledger, &["d", "e"]).await;
            Some(done.unblocked == 1)
        }
        Event::Reanswer => {
            // Every SUCCEEDED row of the ledger, `r`'s dependencies too when
            // they are (the guard keeps them while `r` is queued or held).
            let target = RedriveTarget::Filter(RowFilter {
                statuses: vec![RowStatus::Succeeded],
                ..RowFilter::default()
            });
            let done = store
                .redrive(ledger, &target, false, true, "op", "agreement")
                .await
                .unwrap();
            Some(done.sample_keys.iter().any(|k| k == "r"))
        }
    }
}

/// Core's step with the ledgers' policy.
fn step(row: RowState, event: &Event) -> Result<Transition, Refused> {
    let policy = policy();
    let overrides = policy.overrides();
    let ctx = Context {
        policy: &policy,
        overrides: &overrides,
        jitter: 0.5,
    };
    transition::step(row, event, &ctx)
}

/// The row as core sees it: as the store shows it.
fn state(row: &RowRecord) -> RowState {
    RowState {
        status: row.status,
        failures: row.failures,
        total: row.total,
    }
}

/// What `get_row` shows of a row that any write would change.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    status: RowStatus,
    failures: PerBudget,
    total: u32,
    rule: String,
    last_error: String,
    attempts: usize,
    update_time: Time,
}

fn seen(row: &RowRecord) -> Seen {
    Seen {
        status: row.status,
        failures: row.failures,
        total: row.total,
        rule: row.rule.clone(),
        last_error: row.last_error.clone(),
        attempts: row.history.len(),
        update_time: row.update_time,
    }
}

/// Where `after` is not what `t` makes of `before`.
fn differences(before: &RowRecord, after: &RowRecord, t: &Transition) -> Vec<String> {
    let mut out = Vec::new();
    let store = (after.status, after.failures, after.total);
    let core = (t.status, t.failures, t.total);
    if store != core {
        out.push(format!(
            "store shows (status, failures, total) {store:?}, core {core:?}"
        ));
    }
    if let Some(rule) = t.rule.as_ref().map(|r| r.name())
        && after.rule != rule
    {
        out.push(format!("store shows rule {:?}, core {rule:?}", after.rule));
    }
    let recorded = after.history.len() as i64 - before.history.len() as i64;
    let newest = after
        .history
        .last()
        .map(|a| (a.outcome, a.rule.clone(), a.budget));
    let attempt = t
        .attempt
        .as_ref()
        .map(|a| (a.outcome, a.rule.name(), a.budget));
    match attempt {
        None if recorded != 0 => out.push(format!("store recorded {recorded} attempts, core none")),
        Some(a) if recorded != 1 || newest.as_ref() != Some(&a) => out.push(format!(
            "store recorded {recorded} attempts, newest {newest:?}; core one, {a:?}"
        )),
        None | Some(_) => {}
    }
    out
}

/// Reaches `status` in a ledger of its own, applies `event`, and answers
/// how the store disagrees with core, if it does.
async fn check_pair(store: &Store, status: RowStatus, event: &Event) -> Vec<String> {
    let (to, expect) = plan(status, event);
    let ledger = format!("{status}-{}", label(event));
    let case = reach(store, &ledger, to).await;
    let before = store.get_row(&ledger, "r").await.unwrap();
    let core = step(state(&before), event);
    let said = apply(store, &case, event).await;
    let after = store.get_row(&ledger, "r").await.unwrap();
    let verdict = match (&expect, &core) {
        (Expect::Moves, Ok(t)) => {
            format!("moves to {} {:?} total {}", t.status, t.failures, t.total)
        }
        (Expect::Refused(_), _) => "refused: unchanged".into(),
        (Expect::Unreachable(_), _) => "unreachable: unchanged".into(),
        (Expect::Moves, Err(_)) => "refused by core".into(),
    };
    println!("{ledger:<36} {:<18} {verdict}", format!("{to:?}"));
    let mut out = match (expect, &core) {
        (Expect::Moves, Ok(t)) => {
            let mut out = differences(&before, &after, t);
            if said == Some(false) {
                out.push("the writer's answer says it did not reach the row".into());
            }
            out
        }
        (Expect::Refused(_), Err(_)) | (Expect::Unreachable(_), Ok(_)) => {
            let mut out = Vec::new();
            if seen(&after) != seen(&before) {
                out.push(format!(
                    "the row changed: {:?} -> {:?}",
                    seen(&before),
                    seen(&after)
                ));
            }
            if said == Some(true) {
                out.push("the writer's answer says it reached the row".into());
            }
            out
        }
        (Expect::Moves | Expect::Unreachable(_), Err(r)) => {
            vec![format!("the table says core accepts, core refuses: {r}")]
        }
        (Expect::Refused(_), Ok(t)) => {
            vec![format!(
                "the table says core refuses, core moves it to {}",
                t.status
            )]
        }
    };
    for problem in &mut out {
        *problem = format!("{ledger}: {problem}");
    }
    out
}

#[tokio::test]
async fn every_status_and_event_moves_a_stored_row_as_core_says() {
    let env = env().await;
    let events = events();
    let variants: HashSet<_> = events.iter().map(std::mem::discriminant).collect();
    assert_eq!(variants.len(), EVENT_VARIANTS, "every kind of event");
    let mut visited = BTreeSet::new();
    let mut problems = Vec::new();
    for status in RowStatus::ALL {
        for event in &events {
            problems.extend(check_pair(&env.store, status, event).await);
            visited.insert((status, label(event)));
        }
    }
    assert_eq!(visited.len(), RowStatus::ALL.len() * events.len());
    assert_eq!(visited.len(), 6 * 13, "every (status, event) pair, once");
    assert!(
        problems.is_empty(),
        "the store and core disagree:\n{}",
        problems.join("\n")
    );
}

/// A BLOCKED row redriven on its own is blocked again at once: the
/// dependency that blocked it still fails, so `redrive` carries out Redrive
/// and then DependencyFailed in one transaction (its step 2, which re-blocks
/// in SQL) and the row ends where core's two steps put it, not where
/// Redrive alone does (PENDING). The table redrives the row together with
/// its dependencies, where Redrive is all that happens to it.
#[tokio::test]
async fn a_blocked_row_redriven_alone_is_blocked_again_by_its_failed_dependency() {
    let env = env().await;
    let case = reach(&env.store, "blocked-redriven-alone", Reach::Blocked).await;
    let before = env.store.get_row(&case.ledger, "r").await.unwrap();
    let done = redrive(&env.store, &case.ledger, &["r"]).await;
    assert_eq!((done.redriven, done.skipped), (0, 1));
    let after = env.store.get_row(&case.ledger, "r").await.unwrap();
    let redriven = step(state(&before), &Event::Redrive).unwrap();
    assert_eq!(redriven.status, RowStatus::Pending, "Redrive alone");
    let reblocked = RowState {
        status: redriven.status,
        failures: redriven.failures,
        total: redriven.total,
    };
    let t = step(reblocked, &Event::DependencyFailed).unwrap();
    assert_eq!(differences(&before, &after, &t), Vec::<String>::new());
    assert_eq!(after.status, RowStatus::Blocked);
}
