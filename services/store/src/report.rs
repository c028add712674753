//! ReportOutcomes: per-row outcomes for a claim, fenced by its token.
//!
//! The claim and the reported rows are locked, each outcome goes through the
//! row state machine, and every change is written by the shared writer in
//! one statement. A row the claim does not hold is STALE (nothing changes);
//! a row this claim already reported is a DUPLICATE (nothing changes).
//! When the claim carries a job, the job's counts move in the same
//! transaction and a PROGRESS event is appended.

use crate::fence::{self, ROW_SNAPSHOT_COLUMNS, RowSnapshot};
use crate::settle::{self, NewAttempt, RowWrite, Settler};
use crate::types::{
    JobEventKind, LedgerRecord, ReportItem, ReportSummary, RowVerdict, Time, Usage, Verdict,
    attempted_usage,
};
use crate::{Result, Store, StoreError, events, jitter_sample};
use chrono::TimeDelta;
use sqlx::Row;
use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;
use tally_core::classify::{Failure, Override};
use tally_core::policy::Policy;
use tally_core::status::RowStatus;
use tally_core::transition::{self, Context, Event, Outcome};
use uuid::Uuid;

/// Longest error message kept per attempt.
const MAX_ERROR_CHARS: usize = 2048;

/// The one-statement report: locks the claim (ACTIVE, within its lease,
/// without a job, and still holding as many rows as this process last saw:
/// no settlement it does not know of happened), settles the rows and takes
/// them out of the claim, and asserts (with `tally_assert`) that every row given
/// was written and held, so that it keeps all or nothing. `$21` is the
/// number of rows, `$22` the claim's `held` as this process last saw it.
static ONE_STATEMENT_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH RECURSIVE c AS (
             -- By token only (the primary key): a condition on expire_time
             -- here could send the planner through the index of every
             -- active claim.
             SELECT token, row_ids, held, job_id,
                    state = {} AND expire_time > now() AND job_id IS NULL AND held = $22 AS live
             FROM claims WHERE token = $2 AND ledger_id = $1
             FOR UPDATE
         ),
         {}
         SELECT tally_assert({}, 'the claim no longer holds every row reported'),
                (SELECT held FROM dropped), now()",
        crate::codes::CLAIM_ACTIVE,
        settle::settle_ctes(),
        settle::SETTLED
    )
});

impl Store {
    /// Applies `items` for claim `token`; `actor` is recorded with each
    /// attempt. Answers one verdict per item, in order.
    ///
    /// When this process granted the claim and every item names a distinct
    /// row of it, the report is one statement decided from what the claim
    /// found (module `claim_cache`); otherwise, or when that statement finds the
    /// claim or a row moved on, it reads and locks what it needs first.
    #[tracing::instrument(
        target = "tally::trace",
        level = "debug",
        name = "store.report",
        skip_all
    )]
    pub async fn report(
        &self,
        ledger: &str,
        token: Uuid,
        items: &[ReportItem],
        actor: &str,
    ) -> Result<ReportSummary> {
        let record = self.ledger(ledger).await?;
        // A capped ledger's reports add to its spend in their transaction.
        let cap = record.policy.cap().is_some();
        if !cap && let Some(summary) = self.report_held(&record, token, items, actor).await? {
            return Ok(summary);
        }
        let policy = &record.policy;
        let overrides = policy.overrides();
        let mut tx = self.begin().await?;
        let claim = fence::lock_claim(&mut tx, record.id, ledger, token).await?;
        let keys: Vec<&str> = items.iter().map(|i| i.key.as_str()).collect();
        // No row locks: every writer of a row held by a claim (reports,
        // releases, rescue, adoption, job settlement) locks the claim first,
        // and we hold it; the settling UPDATE re-checks the fence anyway.
        // Rows held by other claims are only read, to answer STALE or
        // DUPLICATE.
        let sql = format!(
            "SELECT {ROW_SNAPSHOT_COLUMNS} FROM rows WHERE ledger_id = $1 AND key = ANY($2)"
        );
        let rows: HashMap<String, RowSnapshot> =
            sqlx::query_as::<_, RowSnapshot>(sqlx::AssertSqlSafe(sql))
                .bind(record.id)
                .bind(&keys)
                .fetch_all(&mut *tx)
                .await?
                .into_iter()
                .map(|r| (r.key.clone(), r))
                .collect();

        let live = claim.is_live();
        let holds: HashSet<i64> = claim.row_ids.iter().copied().collect();
        let mut seen = HashSet::new();
        let mut writes = Vec::new();
        let mut verdicts = Vec::with_capacity(items.len());
        for item in items {
            let row = rows.get(&item.key);
            let first_mention = seen.insert(item.key.as_str());
            let held = row.is_some_and(|r| holds.contains(&r.id));
            let verdict = match row {
                Some(row) if held && live && first_mention => {
                    let d = decide(row, item, policy, &overrides)?;
                    writes.push(d.write);
                    d.answer.at(claim.now)
                }
                Some(row) if !first_mention || row.last_claim_id == Some(token) => {
                    unchanged(row, Verdict::Duplicate, "already_reported")?
                }
                Some(row) if held => unchanged(row, Verdict::Stale, "lease_lost")?,
                Some(row) => unchanged(row, Verdict::Stale, "not_held")?,
                None => RowVerdict {
                    key: item.key.clone(),
                    verdict: Verdict::Stale,
                    rule: "unknown_key".into(),
                    budget: None,
                    next_attempt_time: None,
                    failures: Default::default(),
                    total: 0,
                },
            };
            verdicts.push(verdict);
        }
        let held =
            settle::settle(&mut tx, record.id, token, &writes, Settler::report(actor)).await?;
        if cap {
            let usage = attempted_usage(items, &verdicts);
            let spent = spend_of(&usage, policy.price(&claim.model));
            crate::spend::add_spent(&mut tx, record.id, spent).await?;
        }
        if let Some(job_id) = claim.job_id.filter(|_| !writes.is_empty()) {
            count_into_job(&mut tx, job_id, token, &writes).await?;
            events::append(&mut tx, &[(job_id, JobEventKind::Progress)], actor).await?;
        }
        tx.commit().await?;
        // What this process remembers of the claim is out of date now.
        self.claim_cache.forget(token);
        Ok(ReportSummary {
            verdicts,
            held,
            price: policy.price(&claim.model).cloned(),
            model: claim.model,
        })
    }

    /// The one-statement report, when this process granted the claim and
    /// every item names a distinct row it took. `None`: not applicable, or
    /// the claim or a row moved on (nothing was written).
    async fn report_held(
        &self,
        record: &LedgerRecord,
        token: Uuid,
        items: &[ReportItem],
        actor: &str,
    ) -> Result<Option<ReportSummary>> {
        let Some(held) = self.claim_cache.get(token) else {
            return Ok(None);
        };
        let mut seen = HashSet::with_capacity(items.len());
        let found = held.ledger_id == record.id
            && !items.is_empty()
            && items
                .iter()
                .all(|i| held.rows.contains_key(&i.key) && seen.insert(i.key.as_str()));
        if !found {
            return Ok(None);
        }
        let policy = &record.policy;
        let overrides = policy.overrides();
        let (writes, answers): (Vec<RowWrite>, Vec<Answer>) = items
            .iter()
            .map(|i| decide(&held.rows[&i.key], i, policy, &overrides))
            .map(|d| d.map(|d| (d.write, d.answer)))
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .unzip();
        let args = settle::Settlement::new(&writes, Settler::report(actor));
        let query = sqlx::query(ONE_STATEMENT_SQL.as_str())
            .bind(record.id)
            .bind(token);
        let outcome = args
            .bind(query)
            .bind(writes.len() as i64)
            .bind(held.held)
            .fetch_one(&self.pool)
            .await;
        let row = match outcome {
            Ok(row) => row,
            Err(e) if crate::error::sqlstate(&e) == crate::error::Sqlstate::FenceMoved => {
                self.claim_cache.forget(token);
                return Ok(None);
            }
            Err(e) => return Err(e.into()),
        };
        let held_now: i32 = row.try_get(1)?;
        let now: Time = row.try_get(2)?;
        let model = held.model.clone();
        drop(held);
        self.claim_cache
            .settled(token, items.iter().map(|i| i.key.as_str()), held_now);
        Ok(Some(ReportSummary {
            verdicts: answers.into_iter().map(|a| a.at(now)).collect(),
            held: held_now,
            price: policy.price(&model).cloned(),
            model,
        }))
    }
}

/// A held row's report, decided: what to write, and what to answer.
struct Decided {
    write: RowWrite,
    answer: Answer,
}

/// A verdict whose next attempt time waits for the writing transaction's
/// time.
struct Answer {
    verdict: RowVerdict,
    retry_after: Option<TimeDelta>,
}

impl Answer {
    fn at(self, now: Time) -> RowVerdict {
        RowVerdict {
            next_attempt_time: self.retry_after.map(|d| now + d),
            ..self.verdict
        }
    }
}

/// Puts `item`'s outcome for a row the reporting claim holds (RUNNING) through
/// the row state machine.
fn decide(
    row: &RowSnapshot,
    item: &ReportItem,
    policy: &Policy,
    overrides: &[Override],
) -> Result<Decided> {
    let ctx = Context {
        policy,
        overrides,
        jitter: jitter_sample(row.id, row.attempts as u32),
    };
    let event = Event::Report(item.outcome.clone());
    let t = transition::step(row.held_state(), &event, &ctx)
        .map_err(|r| StoreError::Internal(format!("held row {} refused a report: {r}", row.key)))?;
    let attempt = NewAttempt::of(&t)?
        .ok_or_else(|| StoreError::Internal("a report must record an attempt".into()))?;
    let rule = t.rule.as_ref().map(|r| r.name());
    let error = match &item.outcome {
        Outcome::Success => String::new(),
        Outcome::Failure(f) => describe_failure(f),
    };
    let retry_after_ms = t.retry_after.map_or(0, |d| d.as_millis() as i64);
    let verdict = RowVerdict {
        key: item.key.clone(),
        verdict: match t.status {
            RowStatus::Succeeded => Verdict::Succeeded,
            RowStatus::Retryable => Verdict::Retryable,
            RowStatus::Permanent => Verdict::Permanent,
            other => {
                return Err(StoreError::Internal(format!(
                    "a report left row {} {other}",
                    row.key
                )));
            }
        },
        rule: rule.clone().unwrap_or_default(),
        budget: attempt.budget,
        next_attempt_time: None,
        failures: t.failures,
        total: t.total,
    };
    let write = RowWrite {
        id: row.id,
        status: t.status,
        failures: t.failures,
        total: t.total,
        rule,
        last_error: Some(error),
        result: item
            .result
            .clone()
            .filter(|_| t.status == RowStatus::Succeeded),
        usage: item.usage,
        retry_after_ms,
        attempt: Some(attempt),
    };
    Ok(Decided {
        write,
        answer: Answer {
            verdict,
            retry_after: t
                .retry_after
                .map(|_| TimeDelta::milliseconds(retry_after_ms)),
        },
    })
}

/// Adds a report's settled rows to its job's counts. Only a live claim
/// writes rows, and a live claim with a job is that job's current fence, so
/// the guard below failing would be a bug.
async fn count_into_job(
    tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
    job_id: i64,
    token: Uuid,
    writes: &[RowWrite],
) -> Result<()> {
    let count = |s: RowStatus| writes.iter().filter(|w| w.status == s).count() as i32;
    let n = sqlx::query(
        "UPDATE jobs SET succeeded = succeeded + $3, retryable = retryable + $4,
                permanent = permanent + $5, update_time = now()
         WHERE id = $1 AND claim_token = $2 AND end_time IS NULL",
    )
    .bind(job_id)
    .bind(token)
    .bind(count(RowStatus::Succeeded))
    .bind(count(RowStatus::Retryable))
    .bind(count(RowStatus::Permanent))
    .execute(&mut **tx)
    .await?
    .rows_affected();
    if n == 1 {
        Ok(())
    } else {
        Err(StoreError::Internal(format!(
            "claim {token} settled rows of job {job_id}, which it does not fence"
        )))
    }
}

fn unchanged(row: &RowSnapshot, verdict: Verdict, rule: &str) -> Result<RowVerdict> {
    let state = row.state()?;
    Ok(RowVerdict {
        key: row.key.clone(),
        verdict,
        rule: rule.into(),
        budget: None,
        next_attempt_time: None,
        failures: state.failures,
        total: state.total,
    })
}

/// A failure as one line for `last_error` and the attempts history.
pub(crate) fn describe_failure(f: &Failure) -> String {
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
        use tally_core::classify::FailureKind;
        let what = match kind {
            FailureKind::ProviderError => None,
            FailureKind::EmptyResponse => Some("empty response"),
            FailureKind::InvalidOutput => Some("invalid output"),
            FailureKind::Blocked => Some("blocked"),
            FailureKind::MissingFromOutput => Some("missing from output"),
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

/// What reported usage spends, in a cap's measures: thinking tokens count
/// as output (as they are billed), cost at the model's price (0 without
/// one).
fn spend_of(u: &Usage, price: Option<&tally_core::policy::Price>) -> tally_core::spend::Amount {
    tally_core::spend::Amount {
        cost_usd: price.map_or(0.0, |p| p.cost(u.input, u.output, u.thinking, u.cached)),
        input_tokens: u.input,
        output_tokens: u.output.saturating_add(u.thinking),
    }
}
