//! The shared writer: settles RUNNING rows of one claim (reports, releases,
//! lease expiry, job failure, rows missing from output) in one guarded
//! statement, records their attempts, requeues what is claimable again, and
//! carries the effects to dependants: a SUCCEEDED row counts down its
//! dependants' unmet dependencies (queuing those that reach zero); a
//! PERMANENT row blocks all its transitive dependants.

use crate::types::Usage;
use crate::{Result, StoreError};
use sqlx::{Postgres, Transaction};
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
    let n = writes.len();
    let mut ids = Vec::with_capacity(n);
    let mut statuses = Vec::with_capacity(n);
    let (mut pf, mut cf, mut inf, mut totals) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (mut rules, mut errors, mut results) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let mut usage: [Vec<i64>; 4] = Default::default();
    let mut delays = Vec::with_capacity(n);
    let mut last_claims: Vec<Option<Uuid>> = Vec::with_capacity(n);
    for w in writes {
        ids.push(w.id);
        statuses.push(w.status.code());
        pf.push(w.failures.provider as i32);
        cf.push(w.failures.content as i32);
        inf.push(w.failures.infra as i32);
        totals.push(w.total as i32);
        rules.push(w.rule.as_deref());
        errors.push(w.last_error.as_deref());
        results.push(w.result.as_deref());
        usage[0].push(w.usage.input);
        usage[1].push(w.usage.output);
        usage[2].push(w.usage.thinking);
        usage[3].push(w.usage.cached);
        delays.push(w.retry_after_ms);
        last_claims.push(w.attempted.then_some(claim_id));
    }
    let attempts: Vec<(&RowWrite, &NewAttempt)> = writes
        .iter()
        .filter_map(|w| w.attempt.as_ref().map(|a| (w, a)))
        .collect();
    let a_row: Vec<i64> = attempts.iter().map(|(w, _)| w.id).collect();
    let a_number: Vec<i32> = attempts.iter().map(|(_, a)| a.number).collect();
    let a_job: Vec<Option<i64>> = attempts.iter().map(|(_, a)| a.job_id).collect();
    let a_model: Vec<&str> = attempts.iter().map(|(_, a)| a.model.as_str()).collect();
    let a_pname: Vec<&str> = attempts
        .iter()
        .map(|(_, a)| a.prompt_name.as_str())
        .collect();
    let a_pver: Vec<&str> = attempts
        .iter()
        .map(|(_, a)| a.prompt_version.as_str())
        .collect();
    let a_outcome: Vec<i16> = attempts.iter().map(|(_, a)| a.outcome.code()).collect();
    let a_rule: Vec<&str> = attempts.iter().map(|(_, a)| a.rule.as_str()).collect();
    let a_budget: Vec<Option<i16>> = attempts
        .iter()
        .map(|(_, a)| a.budget.map(Budget::code))
        .collect();
    let a_usage: [Vec<i64>; 4] = [
        attempts.iter().map(|(_, a)| a.usage.input).collect(),
        attempts.iter().map(|(_, a)| a.usage.output).collect(),
        attempts.iter().map(|(_, a)| a.usage.thinking).collect(),
        attempts.iter().map(|(_, a)| a.usage.cached).collect(),
    ];
    let a_error: Vec<&str> = attempts.iter().map(|(_, a)| a.error.as_str()).collect();
    let a_actor: Vec<&str> = attempts.iter().map(|(_, a)| a.actor.as_str()).collect();

    let updated: i64 = sqlx::query_scalar(
        r#"
        WITH w AS (
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
            WHERE r.id = w.id AND r.status = 2 AND r.claim_id = $2
            RETURNING r.id, r.status, r.model, r.next_attempt_time
        ),
        -- Dependants of rows that just SUCCEEDED count down their unmet
        -- dependencies (they are never rows of this claim: a row runs only
        -- once every dependency has SUCCEEDED).
        counted AS (
            SELECT d.row_id, count(*)::int AS n FROM row_deps d
            WHERE d.dep_id IN (SELECT id FROM upd WHERE status = 4)
            GROUP BY d.row_id
        ),
        freed AS (
            UPDATE rows r SET unmet_deps = r.unmet_deps - c.n, update_time = now()
            FROM counted c WHERE r.id = c.row_id
            RETURNING r.id, r.status, r.unmet_deps, r.model
        ),
        queued AS (
            INSERT INTO runnable (ledger_id, model, ready_time, row_id)
            SELECT $1, model, coalesce(next_attempt_time, now()), id
            FROM upd WHERE status IN (1, 3)
            UNION ALL
            SELECT $1, model, now(), id FROM freed WHERE status = 1 AND unmet_deps = 0
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
        )
        SELECT count(*) FROM upd
        "#,
    )
    .bind(ledger_id)
    .bind(claim_id)
    .bind(&ids)
    .bind(&statuses)
    .bind(&pf)
    .bind(&cf)
    .bind(&inf)
    .bind(&totals)
    .bind(&rules)
    .bind(&errors)
    .bind(&results)
    .bind(&usage[0])
    .bind(&usage[1])
    .bind(&usage[2])
    .bind(&usage[3])
    .bind(&delays)
    .bind(&last_claims)
    .bind(&a_row)
    .bind(&a_number)
    .bind(&a_job)
    .bind(&a_model)
    .bind(&a_pname)
    .bind(&a_pver)
    .bind(&a_outcome)
    .bind(&a_rule)
    .bind(&a_budget)
    .bind(&a_usage[0])
    .bind(&a_usage[1])
    .bind(&a_usage[2])
    .bind(&a_usage[3])
    .bind(&a_error)
    .bind(&a_actor)
    .fetch_one(&mut **tx)
    .await?;
    if updated != n as i64 {
        return Err(StoreError::Internal(format!(
            "settled {updated} of {n} rows of claim {claim_id}: a row changed under its lock"
        )));
    }
    let permanent: Vec<i64> = writes
        .iter()
        .filter(|w| w.status == RowStatus::Permanent)
        .map(|w| w.id)
        .collect();
    block_dependants(tx, &permanent).await?;
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
