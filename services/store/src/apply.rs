//! The shared writer: settles RUNNING rows of one claim (reports, releases,
//! lease expiry, job failure, rows missing from output) in one guarded
//! statement, records their attempts, requeues what is claimable again, and
//! carries the effects to dependants: a SUCCEEDED row counts down its
//! dependants' unmet dependencies (queuing those that reach zero); a
//! PERMANENT row blocks all its transitive dependants.

use crate::types::Usage;
use crate::{Result, StoreError};
use sqlx::{Postgres, Row, Transaction};
use std::sync::LazyLock;
use tally_core::status::{Budget, PerBudget, RowStatus};
use uuid::Uuid;

/// One attempt to record.
#[derive(Debug, Clone)]
pub(crate) struct NewAttempt {
    pub number: i32,
    pub job_id: Option<i64>,
    pub model: String,
    pub prompt_name: String,
    pub prompt_version: String,
    pub outcome: RowStatus,
    pub rule: String,
    pub budget: Option<Budget>,
    pub usage: Usage,
    pub error: String,
    pub actor: String,
}

/// A RUNNING row's next state.
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
    pub usage: Usage,
    /// RETRYABLE rows: claimable again after this many milliseconds.
    pub retry_after_ms: i64,
    /// Whether this write is the claim's own attempt on the row (a report,
    /// or an expiry counted against the claim): a later report from the same
    /// claim is then a DUPLICATE rather than STALE.
    pub attempted: bool,
    pub attempt: Option<NewAttempt>,
}

/// The settle statement's arguments: one array per column of `writes`
/// (`$3`…`$17`) and of their attempts (`$18`…`$32`).
pub(crate) struct Settlement<'a> {
    ids: Vec<i64>,
    statuses: Vec<i16>,
    failures: [Vec<i32>; 3],
    totals: Vec<i32>,
    rules: Vec<Option<&'a str>>,
    errors: Vec<Option<&'a str>>,
    results: Vec<Option<&'a str>>,
    usage: [Vec<i64>; 4],
    delays: Vec<i64>,
    last_claims: Vec<Option<Uuid>>,
    a_row: Vec<i64>,
    a_number: Vec<i32>,
    a_job: Vec<Option<i64>>,
    a_text: [Vec<&'a str>; 3],
    a_outcome: Vec<i16>,
    a_rule: Vec<&'a str>,
    a_budget: Vec<Option<i16>>,
    a_usage: [Vec<i64>; 4],
    a_error: Vec<&'a str>,
    a_actor: Vec<&'a str>,
}

impl<'a> Settlement<'a> {
    pub fn new(claim_id: Uuid, writes: &'a [RowWrite]) -> Self {
        let col = |f: &dyn Fn(&'a RowWrite) -> i64| writes.iter().map(f).collect::<Vec<_>>();
        let attempts: Vec<(i64, &'a NewAttempt)> = writes
            .iter()
            .filter_map(|w| w.attempt.as_ref().map(|a| (w.id, a)))
            .collect();
        let a_col = |f: &dyn Fn(&'a NewAttempt) -> i64| {
            attempts.iter().map(|(_, a)| f(a)).collect::<Vec<_>>()
        };
        Settlement {
            ids: col(&|w| w.id),
            statuses: writes.iter().map(|w| w.status.code()).collect(),
            failures: [
                writes.iter().map(|w| w.failures.provider as i32).collect(),
                writes.iter().map(|w| w.failures.content as i32).collect(),
                writes.iter().map(|w| w.failures.infra as i32).collect(),
            ],
            totals: writes.iter().map(|w| w.total as i32).collect(),
            rules: writes.iter().map(|w| w.rule.as_deref()).collect(),
            errors: writes.iter().map(|w| w.last_error.as_deref()).collect(),
            results: writes.iter().map(|w| w.result.as_deref()).collect(),
            usage: [
                col(&|w| w.usage.input),
                col(&|w| w.usage.output),
                col(&|w| w.usage.thinking),
                col(&|w| w.usage.cached),
            ],
            delays: col(&|w| w.retry_after_ms),
            last_claims: writes
                .iter()
                .map(|w| w.attempted.then_some(claim_id))
                .collect(),
            a_row: attempts.iter().map(|(id, _)| *id).collect(),
            a_number: attempts.iter().map(|(_, a)| a.number).collect(),
            a_job: attempts.iter().map(|(_, a)| a.job_id).collect(),
            a_text: [
                attempts.iter().map(|(_, a)| a.model.as_str()).collect(),
                attempts
                    .iter()
                    .map(|(_, a)| a.prompt_name.as_str())
                    .collect(),
                attempts
                    .iter()
                    .map(|(_, a)| a.prompt_version.as_str())
                    .collect(),
            ],
            a_outcome: attempts.iter().map(|(_, a)| a.outcome.code()).collect(),
            a_rule: attempts.iter().map(|(_, a)| a.rule.as_str()).collect(),
            a_budget: attempts
                .iter()
                .map(|(_, a)| a.budget.map(Budget::code))
                .collect(),
            a_usage: [
                a_col(&|a| a.usage.input),
                a_col(&|a| a.usage.output),
                a_col(&|a| a.usage.thinking),
                a_col(&|a| a.usage.cached),
            ],
            a_error: attempts.iter().map(|(_, a)| a.error.as_str()).collect(),
            a_actor: attempts.iter().map(|(_, a)| a.actor.as_str()).collect(),
        }
    }

    /// Rows to write.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Binds `$3`…`$32` of [`settle_ctes`] (after the caller bound `$1`, the
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
            .bind(&self.last_claims)
            .bind(&self.a_row)
            .bind(&self.a_number)
            .bind(&self.a_job)
            .bind(&self.a_text[0])
            .bind(&self.a_text[1])
            .bind(&self.a_text[2])
            .bind(&self.a_outcome)
            .bind(&self.a_rule)
            .bind(&self.a_budget)
            .bind(&self.a_usage[0])
            .bind(&self.a_usage[1])
            .bind(&self.a_usage[2])
            .bind(&self.a_usage[3])
            .bind(&self.a_error)
            .bind(&self.a_actor)
    }
}

pub(crate) type PgQuery<'q> = sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments>;

/// The settling CTEs, to follow `WITH RECURSIVE` (`doomed` walks the
/// dependency graph): `upd` writes the rows (`$1` ledger, `$2` claim token,
/// the rest from [`Settlement::bind`]) where they are RUNNING under the claim
/// and `gate` (SQL after `AND`, or `true`) holds; `deps` counts down the
/// unmet dependencies of dependants of rows that SUCCEEDED and BLOCKs every
/// transitive dependant of rows that became PERMANENT, in one update of each
/// dependant; `queued` requeues what is claimable again; `recorded` keeps the
/// attempts. The statement using them reads `upd`.
///
/// No dependant is ever a row of the claim (a row runs only once every
/// dependency SUCCEEDED), so `upd` and `deps` never touch the same row.
pub(crate) fn settle_ctes(gate: &str) -> String {
    format!(
        r#"
        w AS (
            SELECT * FROM unnest($3::int8[], $4::int2[], $5::int4[], $6::int4[], $7::int4[],
                                 $8::int4[], $9::text[], $10::text[], $11::text[], $12::int8[],
                                 $13::int8[], $14::int8[], $15::int8[], $16::int8[], $17::uuid[])
                AS w(id, status, pf, cf, inf, attempts, rule, err, result, d_in, d_out,
                     d_think, d_cached, delay_ms, last_claim)
        ),
        upd AS (
            UPDATE rows r SET
                status = w.status,
                provider_failures = w.pf,
                content_failures = w.cf,
                infra_failures = w.inf,
                attempts = w.attempts,
                rule = coalesce(w.rule, r.rule),
                last_error = coalesce(w.err, r.last_error),
                result = coalesce(w.result, r.result),
                input_tokens = r.input_tokens + w.d_in,
                output_tokens = r.output_tokens + w.d_out,
                thinking_tokens = r.thinking_tokens + w.d_think,
                cached_tokens = r.cached_tokens + w.d_cached,
                claim_id = NULL,
                last_claim_id = coalesce(w.last_claim, r.last_claim_id),
                next_attempt_time = CASE WHEN w.status = 3
                    THEN now() + w.delay_ms * interval '1 millisecond' END,
                update_time = now()
            FROM w
            WHERE r.id = w.id AND r.status = 2 AND r.claim_id = $2 AND {gate}
            RETURNING r.id, r.status, r.model, r.next_attempt_time
        ),
        counted AS (
            SELECT d.row_id AS id, count(*)::int AS n FROM row_deps d
            WHERE d.dep_id IN (SELECT id FROM upd WHERE status = 4)
            GROUP BY d.row_id
        ),
        doomed(id) AS (
            SELECT d.row_id FROM row_deps d WHERE d.dep_id IN (SELECT id FROM upd WHERE status = 5)
            UNION
            SELECT d.row_id FROM row_deps d JOIN doomed x ON d.dep_id = x.id
        ),
        -- Mirrors Event::DependencyFailed: only PENDING and RETRYABLE rows
        -- become BLOCKED.
        deps AS (
            UPDATE rows r SET
                unmet_deps = r.unmet_deps - coalesce(t.n, 0),
                status = CASE WHEN t.doomed AND r.status IN (1, 3) THEN 6 ELSE r.status END,
                rule = CASE WHEN t.doomed AND r.status IN (1, 3)
                    THEN 'dependency_failed' ELSE r.rule END,
                last_error = CASE WHEN t.doomed AND r.status IN (1, 3)
                    THEN 'a dependency is PERMANENT or BLOCKED' ELSE r.last_error END,
                update_time = now()
            FROM (SELECT coalesce(c.id, x.id) AS id, c.n, x.id IS NOT NULL AS doomed
                  FROM counted c FULL JOIN doomed x ON x.id = c.id) t
            WHERE r.id = t.id AND (t.n IS NOT NULL OR r.status IN (1, 3))
            RETURNING r.id, r.status, r.unmet_deps, r.model
        ),
        queued AS (
            INSERT INTO runnable (ledger_id, model, ready_time, row_id)
            SELECT $1, model, coalesce(next_attempt_time, now()), id
            FROM upd WHERE status IN (1, 3)
            UNION ALL
            SELECT $1, model, now(), id FROM deps WHERE status = 1 AND unmet_deps = 0
        ),
        recorded AS (
            INSERT INTO attempts (ledger_id, row_id, number, claim_id, job_id, model,
                                  prompt_name, prompt_version, outcome, rule, budget,
                                  input_tokens, output_tokens, thinking_tokens, cached_tokens,
                                  error, actor)
            SELECT $1, a.row_id, a.number, $2, a.job_id, a.model, a.pname, a.pver, a.outcome,
                   a.rule, a.budget, a.d_in, a.d_out, a.d_think, a.d_cached, a.error, a.actor
            FROM unnest($18::int8[], $19::int4[], $20::int8[], $21::text[], $22::text[],
                        $23::text[], $24::int2[], $25::text[], $26::int2[], $27::int8[],
                        $28::int8[], $29::int8[], $30::int8[], $31::text[], $32::text[])
                AS a(row_id, number, job_id, model, pname, pver, outcome, rule, budget,
                     d_in, d_out, d_think, d_cached, error, actor)
        )"#
    )
}

static SETTLE_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH RECURSIVE {} SELECT count(*) FROM upd",
        settle_ctes("true")
    )
});

/// Writes `writes` for rows held by claim `claim_id`. Fails (and the caller
/// rolls back) if any row is no longer RUNNING under that claim: callers
/// lock the rows first, so that would be a bug.
pub(crate) async fn settle(
    tx: &mut Transaction<'static, Postgres>,
    ledger_id: i64,
    claim_id: Uuid,
    writes: &[RowWrite],
) -> Result<()> {
    if writes.is_empty() {
        return Ok(());
    }
    let args = Settlement::new(claim_id, writes);
    let query = sqlx::query(SETTLE_SQL.as_str())
        .bind(ledger_id)
        .bind(claim_id);
    let updated: i64 = args.bind(query).fetch_one(&mut **tx).await?.try_get(0)?;
    let n = args.len();
    if updated != n as i64 {
        return Err(StoreError::Internal(format!(
            "settled {updated} of {n} rows of claim {claim_id}: a row changed under its lock"
        )));
    }
    Ok(())
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
    let blocked = sqlx::query(
        r#"
        WITH RECURSIVE dependants(id) AS (
            SELECT row_id FROM row_deps WHERE dep_id = ANY($1)
            UNION
            SELECT d.row_id FROM row_deps d JOIN dependants x ON d.dep_id = x.id
        )
        UPDATE rows SET status = 6, rule = 'dependency_failed',
               last_error = 'a dependency is PERMANENT or BLOCKED', update_time = now()
        WHERE id IN (SELECT id FROM dependants) AND status IN (1, 3)
        "#,
    )
    .bind(failed)
    .execute(&mut **tx)
    .await?
    .rows_affected();
    Ok(blocked as i64)
}
