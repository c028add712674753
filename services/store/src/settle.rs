//! Settling: the one writer of row transitions. It settles RUNNING rows of one claim (reports, releases,
//! lease expiry, job failure, rows missing from output) in one guarded
//! statement, records their attempts, requeues what is claimable again, and
//! carries the effects to dependants: a SUCCEEDED row counts down its
//! dependants' unmet dependencies (queuing those that reach zero); a
//! PERMANENT row blocks all its transitive dependants.

use crate::codes::PgQuery;
use crate::fence::RowSnapshot;
use crate::results::Finished;
use crate::types::Usage;
use crate::{Result, StoreError, codes, jitter_sample};
use sqlx::{Postgres, Row, Transaction};
use std::sync::LazyLock;
use tally_core::policy::Policy;
use tally_core::status::{Budget, PerBudget, RowStatus};
use tally_core::transition::{self, Context, Event};
use uuid::Uuid;

/// One attempt to record. The rest of it comes from its write and its row:
/// its number is the row's new attempt count, its outcome, rule, usage and
/// error are the write's (the state machine gives an attempt the status and
/// rule it gives the row), its model and prompt the row's, its claim and job
/// the settling claim's, its actor the settlement's.
#[derive(Debug, Clone)]
pub(crate) struct NewAttempt {
    pub budget: Option<Budget>,
}

impl NewAttempt {
    /// The attempt of transition `t`, which must record it as the row's
    /// status and rule (a bug otherwise).
    pub fn of(t: &tally_core::transition::Transition) -> Result<Option<NewAttempt>> {
        let Some(a) = &t.attempt else {
            return Ok(None);
        };
        if a.outcome != t.status || Some(&a.rule) != t.rule.as_ref() {
            return Err(StoreError::Internal(format!(
                "an attempt recorded as {} {} left its row {} {:?}",
                a.outcome,
                a.rule.name(),
                t.status,
                t.rule.as_ref().map(|r| r.name())
            )));
        }
        Ok(Some(NewAttempt { budget: a.budget }))
    }
}

/// A held row's next state.
#[derive(Debug, Clone)]
pub(crate) struct RowWrite {
    pub id: i64,
    pub status: RowStatus,
    pub failures: PerBudget,
    pub total: u32,
    /// `None` keeps the row's current value.
    pub rule: Option<String>,
    pub last_error: Option<String>,
    pub result: Option<String>,
    /// The provider's response, kept with `result`.
    pub response: Option<String>,
    pub usage: Usage,
    /// RETRYABLE rows: claimable again after this many milliseconds.
    pub retry_after_ms: i64,
    pub attempt: Option<NewAttempt>,
    /// The provider's request id and granted tier, recorded with the
    /// attempt (synchronous lanes).
    pub request_id: Option<String>,
    pub tier: Option<String>,
    /// Where an answer from the result cache came from (JSON, recorded with
    /// the attempt).
    pub cached: Option<String>,
}

/// Who settles the rows of one statement.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settler<'a> {
    /// The claim's own attempt (a report): a later report of a row from the
    /// same claim is then a DUPLICATE rather than STALE.
    pub attempted: bool,
    /// Recorded with each attempt.
    pub actor: &'a str,
}

impl<'a> Settler<'a> {
    /// Settlements tally makes itself (releases, expiries).
    pub const SYSTEM: Settler<'static> = Settler::on_behalf("system");

    /// A report: the claim's own attempt, by `actor`.
    pub const fn report(actor: &'a str) -> Self {
        Settler {
            attempted: true,
            actor,
        }
    }

    /// A settlement `actor` makes for the claim (the end of its job): not
    /// the claim's own attempt.
    pub const fn on_behalf(actor: &'a str) -> Self {
        Settler {
            attempted: false,
            actor,
        }
    }
}

/// The settle statement's arguments: one array per column of `writes` and
/// of their attempts (`$3`…`$18`), then the settler (`$19`, `$20`); the
/// responses, request ids, tiers and cache sources are bound by [`run`]. A column
/// whose every value is its default is sent empty (`unnest` pads it with
/// NULLs, which the statement reads as the default).
pub(crate) struct Settlement<'a> {
    ids: Vec<i64>,
    statuses: Vec<i16>,
    failures: [Vec<i32>; 3],
    totals: Vec<i32>,
    rules: Vec<Option<&'a str>>,
    errors: Vec<Option<&'a str>>,
    results: Vec<Option<&'a str>>,
    responses: Vec<Option<&'a str>>,
    usage: [Vec<i64>; 4],
    delays: Vec<i64>,
    recorded: Vec<bool>,
    a_budget: Vec<Option<i16>>,
    request_ids: Vec<Option<&'a str>>,
    tiers: Vec<Option<&'a str>>,
    cached: Vec<Option<&'a str>>,
    by: Settler<'a>,
}

/// `values`, or nothing when every one of them is `default`.
pub(crate) fn unless_all<T: PartialEq>(mut values: Vec<T>, default: &T) -> Vec<T> {
    if values.iter().all(|v| v == default) {
        values.clear();
    }
    values
}

impl<'a> Settlement<'a> {
    pub fn new(writes: &'a [RowWrite], by: Settler<'a>) -> Self {
        fn col<'a, T: PartialEq>(
            writes: &'a [RowWrite],
            default: T,
            f: impl Fn(&'a RowWrite) -> T,
        ) -> Vec<T> {
            unless_all(writes.iter().map(f).collect(), &default)
        }
        Settlement {
            ids: writes.iter().map(|w| w.id).collect(),
            statuses: writes.iter().map(|w| w.status.code()).collect(),
            failures: [
                col(writes, 0, |w| w.failures.provider as i32),
                col(writes, 0, |w| w.failures.content as i32),
                col(writes, 0, |w| w.failures.infra as i32),
            ],
            totals: writes.iter().map(|w| w.total as i32).collect(),
            rules: col(writes, None, |w| w.rule.as_deref()),
            errors: col(writes, None, |w| w.last_error.as_deref()),
            results: col(writes, None, |w| w.result.as_deref()),
            responses: col(writes, None, |w| w.response.as_deref()),
            usage: [
                col(writes, 0, |w| w.usage.input),
                col(writes, 0, |w| w.usage.output),
                col(writes, 0, |w| w.usage.thinking),
                col(writes, 0, |w| w.usage.cached),
            ],
            delays: col(writes, 0, |w| w.retry_after_ms),
            recorded: col(writes, false, |w| w.attempt.is_some()),
            a_budget: col(writes, None, |w| {
                w.attempt.as_ref().and_then(|a| a.budget.map(Budget::code))
            }),
            request_ids: col(writes, None, |w| w.request_id.as_deref()),
            tiers: col(writes, None, |w| w.tier.as_deref()),
            cached: col(writes, None, |w| w.cached.as_deref()),
            by,
        }
    }

    /// Rows to write.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Binds `$3`…`$21` of [`SETTLE_SQL`] (after the caller bound `$1`, the
    /// ledger id, and `$2`, the claim token).
    pub fn bind<'q>(&'q self, q: PgQuery<'q>) -> PgQuery<'q> {
        q.bind(&self.ids)
            .bind(&self.statuses)
            .bind(&self.failures[0])
            .bind(&self.failures[1])
            .bind(&self.failures[2])
            .bind(&self.totals)
            .bind(&self.rules)
            .bind(&self.errors)
            .bind(&self.results)
            .bind(&self.usage[0])
            .bind(&self.usage[1])
            .bind(&self.usage[2])
            .bind(&self.usage[3])
            .bind(&self.delays)
            .bind(&self.recorded)
            .bind(&self.a_budget)
            .bind(self.by.attempted)
            .bind(self.by.actor)
            .bind(&self.responses)
    }
}

/// The settle statement (`queries/settle/settle.sql`, its parameters
/// listed there). It writes all of `writes` or nothing.
pub(crate) static SETTLE_SQL: LazyLock<String> =
    LazyLock::new(|| codes::render(include_str!("queries/settle/settle.sql")));

/// What the settle statement did.
pub(crate) struct Settled {
    /// Whether it wrote every row given; otherwise it wrote none (the claim
    /// was not live, or did not hold them all).
    pub all: bool,
    /// What the claim holds after (when it wrote them).
    pub held: i32,
    /// The writing transaction's time.
    pub now: crate::types::Time,
    /// The rows it finished (SUCCEEDED or PERMANENT), in id order, and
    /// their result versions: for the results log ([`Finished`]).
    pub finished: Vec<i64>,
    pub versions: Vec<i32>,
}

/// Runs the settle statement for `writes` of claim `claim_id` on `db`.
/// `seen_held`: `None` when the caller holds the claim's lock and read what
/// it holds; otherwise what the caller last saw it hold (the claim cache),
/// and the claim must still be as it saw it. A row written but not held is
/// impossible by the statement's own fence (it then writes none): answered
/// as an internal error.
pub(crate) async fn run<'e, E: sqlx::PgExecutor<'e>>(
    db: E,
    ledger_id: i64,
    claim_id: Uuid,
    writes: &[RowWrite],
    by: Settler<'_>,
    seen_held: Option<i32>,
) -> Result<Settled> {
    let args = Settlement::new(writes, by);
    let n = args.len() as i64;
    let query = sqlx::query(sqlx::AssertSqlSafe(SETTLE_SQL.as_str()))
        .bind(ledger_id)
        .bind(claim_id);
    let row = args
        .bind(query)
        .bind(n)
        .bind(seen_held)
        .bind(&args.request_ids)
        .bind(&args.tiers)
        .bind(&args.cached)
        .fetch_one(db)
        .await?;
    let settled: i64 = row.try_get(0)?;
    let held: Option<i32> = row.try_get(1)?;
    let now = row.try_get(2)?;
    match (settled == n, held) {
        (true, Some(held)) => Ok(Settled {
            all: true,
            held,
            now,
            finished: row.try_get(3)?,
            versions: row.try_get(4)?,
        }),
        (false, _) if settled == 0 => Ok(Settled {
            all: false,
            held: 0,
            now,
            finished: Vec::new(),
            versions: Vec::new(),
        }),
        _ => Err(StoreError::Internal(format!(
            "settling {n} rows of claim {claim_id}: {settled} written, some not held"
        ))),
    }
}

/// Writes `writes` for rows held by claim `claim_id` and takes them out of
/// its `row_ids`; returns how many rows the claim still holds. For
/// settlements that finish no row (releases, rows of a batch never sent):
/// one that finished a row fails, as a bug, since nothing would log it
/// ([`settle_logged`] is for the others). Fails (and the caller rolls back)
/// if any row was not held: callers lock the claim and read what it holds
/// first, so that would be a bug.
pub(crate) async fn settle(
    tx: &mut Transaction<'static, Postgres>,
    ledger_id: i64,
    claim_id: Uuid,
    writes: &[RowWrite],
    by: Settler<'_>,
) -> Result<i32> {
    let mut finished = Finished::default();
    let held = settle_logged(tx, ledger_id, claim_id, writes, by, &mut finished).await?;
    if finished.is_empty() {
        Ok(held)
    } else {
        Err(StoreError::Internal(format!(
            "a settlement of claim {claim_id} that finishes no row finished some"
        )))
    }
}

/// [`settle`], for settlements that may finish rows (reports, a job's end,
/// an expired lease that counts an attempt): the rows finished go into
/// `finished`, which the caller logs last, before committing
/// ([`Finished::log`]).
pub(crate) async fn settle_logged(
    tx: &mut Transaction<'static, Postgres>,
    ledger_id: i64,
    claim_id: Uuid,
    writes: &[RowWrite],
    by: Settler<'_>,
    finished: &mut Finished,
) -> Result<i32> {
    if writes.is_empty() {
        return Ok(
            sqlx::query_scalar("SELECT held FROM claims WHERE token = $1")
                .bind(claim_id)
                .fetch_one(&mut **tx)
                .await?,
        );
    }
    let done = run(&mut **tx, ledger_id, claim_id, writes, by, None).await?;
    if done.all {
        finished.add(ledger_id, done.finished, done.versions);
        Ok(done.held)
    } else {
        Err(StoreError::Internal(format!(
            "settling {} rows of claim {claim_id}: a row was not held by the claim under its lock",
            writes.len()
        )))
    }
}

/// BLOCKs every transitive dependant of rows that just became PERMANENT.
/// Mirrors `Event::DependencyFailed` of the row state machine: only PENDING,
/// RETRYABLE (and already BLOCKED) rows are touched; dependants of a row
/// that is not SUCCEEDED are never RUNNING or SUCCEEDED.
pub(crate) async fn block_dependants(
    tx: &mut Transaction<'static, Postgres>,
    failed: &[i64],
) -> Result<i64> {
    if failed.is_empty() {
        return Ok(0);
    }
    static SQL: LazyLock<String> =
        LazyLock::new(|| codes::render(include_str!("queries/settle/block_dependants.sql")));
    let blocked = sqlx::query(sqlx::AssertSqlSafe(SQL.as_str()))
        .bind(failed)
        .execute(&mut **tx)
        .await?
        .rows_affected();
    Ok(blocked as i64)
}

/// Applies one system event (release, expiry, job failure, missing output)
/// to every locked row. `actor` gives the attempt's actor for events that
/// count an attempt.
pub(crate) fn transitions(
    rows: &[RowSnapshot],
    event: &Event,
    policy: &Policy,
) -> Result<Vec<RowWrite>> {
    let overrides = policy.overrides();
    rows.iter()
        .map(|row| {
            let ctx = Context {
                policy,
                overrides: &overrides,
                jitter: jitter_sample(row.id, row.attempts as u32),
            };
            let t = transition::step(row.held_state(), event, &ctx).map_err(|r| {
                StoreError::Internal(format!("row {} refused {event:?}: {r}", row.key))
            })?;
            Ok(RowWrite {
                id: row.id,
                status: t.status,
                failures: t.failures,
                total: t.total,
                rule: t.rule.as_ref().map(|r| r.name()),
                last_error: t.attempt.as_ref().map(|a| describe_system(&a.rule)),
                result: None,
                response: None,
                usage: Usage::default(),
                retry_after_ms: t.retry_after.map_or(0, |d| d.as_millis() as i64),
                attempt: NewAttempt::of(&t)?,
                request_id: None,
                tier: None,
                cached: None,
            })
        })
        .collect()
}

fn describe_system(rule: &tally_core::classify::Rule) -> String {
    use tally_core::classify::Rule;
    match rule {
        Rule::LeaseExpired => "the claim's lease expired before the row was reported".into(),
        Rule::JobFailed => "the job carrying the row failed, expired or was cancelled".into(),
        Rule::MissingFromOutput => "the row was missing from the job's output".into(),
        other => other.name(),
    }
}

#[cfg(test)]
mod tests {
    use super::unless_all;

    #[test]
    fn a_column_of_defaults_is_sent_empty_and_any_other_whole() {
        assert!(unless_all(vec!["", ""], &"").is_empty());
        assert_eq!(unless_all(vec!["", "m"], &""), vec!["", "m"]);
        assert_eq!(unless_all(vec![1, 1], &0), vec![1, 1]);
    }
}
