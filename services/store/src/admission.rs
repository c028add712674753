//! Whether a job may go to the provider now (rules in `tally_core::quota`
//! and `tally_core::job::provider_cooldown`): the shared cool-down a 429 at
//! create put its model in, and the provider's batch and enqueued-token
//! limits counted over every open job of the team in the account (all its
//! ledgers). Both refuse with RESOURCE_EXHAUSTED and a RetryInfo; neither
//! touches a row.
//!
//! Admissions take turns under one advisory lock (the limits are the
//! project's, across ledgers), so two creators cannot both see room for
//! one job. CreateJob is one call per batch, so the queue is short.

use crate::codes::COOL_BATCH;
use crate::types::JobOrigin;
use crate::{Result, StoreError};
use sqlx::{Postgres, Transaction};
use std::time::Duration;
use tally_core::quota::{self, Admission, InFlight, Limit, ProviderQuotas};
use uuid::Uuid;

/// The advisory lock admissions take turns under.
const ADMISSION_LOCK: i64 = 0x7461_6a02_0000_0001;

/// The ErrorInfo reason of a refusal while a model cools down.
pub const REASON_COOLDOWN: &str = "PROVIDER_COOLDOWN";
/// The ErrorInfo reason of a refusal by the provider's limits.
pub const REASON_QUOTA: &str = "PROVIDER_QUOTA";

/// Puts the model of job `job_id`, in the job's team and provider account,
/// in a cool-down every worker of the team shares for `cooldown` (clamped),
/// or keeps the later end of one already running. Kept per team: the
/// account is the worker's word, and a refusal another team reports for it
/// must not hold this team back.
pub(crate) async fn cool_down(
    tx: &mut Transaction<'static, Postgres>,
    job_id: i64,
    cooldown: Duration,
) -> Result<()> {
    let ms = tally_core::job::provider_cooldown(cooldown).as_millis() as i64;
    let (account, model): (String, String) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "INSERT INTO model_cooldowns (team, account, model, lane, until)
         SELECT team, provider_account, model, {COOL_BATCH}, now() + $2 * interval '1 millisecond'
         FROM jobs WHERE id = $1
         ON CONFLICT (team, account, model, lane) DO UPDATE
         SET until = greatest(model_cooldowns.until, excluded.until), update_time = now()
         RETURNING account, model"
    )))
    .bind(job_id)
    .bind(ms)
    .fetch_one(&mut **tx)
    .await?;
    tracing::warn!(
        model,
        account,
        cooldown_ms = ms,
        "the provider refused a create for quota: model cooling down for the team's workers of the account"
    );
    Ok(())
}

/// RESOURCE_EXHAUSTED (with the seconds left as RetryInfo) while `model`
/// cools down for `origin`'s team in its provider account.
pub(crate) async fn refuse_while_cooling(
    tx: &mut Transaction<'static, Postgres>,
    origin: &JobOrigin<'_>,
    model: &str,
) -> Result<()> {
    let left: Option<f64> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT extract(epoch FROM until - now())::float8 FROM model_cooldowns
         WHERE team = $3 AND account = $1 AND model = $2 AND lane = {COOL_BATCH}
           AND until > now()"
    )))
    .bind(origin.account)
    .bind(model)
    .bind(origin.team)
    .fetch_optional(&mut **tx)
    .await?;
    match left {
        None => Ok(()),
        Some(secs) => Err(StoreError::ResourceExhausted {
            reason: REASON_COOLDOWN,
            message: format!(
                "the provider refused a batch create for model {model:?} for quota (429); every worker of this team in this provider account waits {secs:.1}s before creating more (a shared cool-down)"
            ),
            retry_after_secs: secs.ceil().max(1.0) as u64,
        }),
    }
}

/// The estimated input tokens of the rows claim `token` holds: their
/// payload and prompt bytes (`tally_core::quota::estimate_tokens`).
pub(crate) async fn estimate(tx: &mut Transaction<'static, Postgres>, token: Uuid) -> Result<i64> {
    let bytes: i64 = sqlx::query_scalar(
        "SELECT coalesce(sum(octet_length(r.payload)::int8
                             + coalesce(octet_length(p.template) + octet_length(p.system_instruction), 0)), 0)::int8
         FROM claims c
         JOIN rows r ON r.id = ANY (c.row_ids)
         LEFT JOIN prompts p ON p.prompt_id = r.prompt_name AND p.version = r.prompt_version
         WHERE c.token = $1",
    )
    .bind(token)
    .fetch_one(&mut **tx)
    .await?;
    Ok(quota::estimate_tokens(bytes.max(0) as u64))
}

/// RESOURCE_EXHAUSTED (reason PROVIDER_QUOTA, RetryInfo from what should
/// finish next) unless a job of `model` estimated at `tokens`, made by
/// `origin.team` in `origin.account`, fits the team's share of the
/// provider's limits beside the team's jobs of the account in flight
/// (another team's jobs are its word about the account, and never count).
/// Holds the admission lock to the end of the transaction, which inserts
/// the job.
pub(crate) async fn admit(
    tx: &mut Transaction<'static, Postgres>,
    quotas: &ProviderQuotas,
    origin: &JobOrigin<'_>,
    model: &str,
    tokens: i64,
) -> Result<()> {
    if !quotas.limits_anything() {
        return Ok(());
    }
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(ADMISSION_LOCK)
        .execute(&mut **tx)
        .await?;
    let rows: Vec<(String, i64, f64)> = sqlx::query_as(
        "SELECT model, est_tokens, greatest(extract(epoch FROM now() - create_time), 0)::float8
         FROM jobs WHERE end_time IS NULL AND state = ANY ($1) AND provider_account = $2
           AND team = $3",
    )
    .bind(quota::in_flight_codes())
    .bind(origin.account)
    .bind(origin.team)
    .fetch_all(&mut **tx)
    .await?;
    let in_flight: Vec<InFlight> = rows
        .into_iter()
        .map(|(model, tokens, age)| InFlight {
            model,
            tokens,
            age: Duration::from_secs_f64(age),
        })
        .collect();
    // Whether it fits does not depend on how long batches take; only the
    // RetryInfo of a refusal does, so their history is read only then.
    if quota::admit(quotas, model, tokens, &in_flight, None) == Admission::Admit {
        return Ok(());
    }
    let typical = typical_duration(tx, model).await?;
    match quota::admit(quotas, model, tokens, &in_flight, typical) {
        Admission::Admit => Ok(()),
        Admission::Refuse {
            limit,
            message,
            retry_after,
        } => {
            tracing::info!(
                model,
                tokens,
                limit = match limit {
                    Limit::Batches => "batches",
                    Limit::EnqueuedTokens => "enqueued_tokens",
                },
                retry_after_secs = retry_after.as_secs(),
                "job not admitted: the provider's quota is full"
            );
            Err(StoreError::ResourceExhausted {
                reason: REASON_QUOTA,
                message,
                retry_after_secs: retry_after.as_secs().max(1),
            })
        }
    }
}

/// The median duration of the model's last 20 batches (`None` before any
/// finished).
async fn typical_duration(
    tx: &mut Transaction<'static, Postgres>,
    model: &str,
) -> Result<Option<Duration>> {
    let secs: Option<f64> = sqlx::query_scalar(
        "SELECT extract(epoch FROM percentile_cont(0.5) WITHIN GROUP (ORDER BY end_time - create_time))::float8
         FROM (SELECT create_time, end_time FROM jobs
               WHERE model = $1 AND end_time IS NOT NULL AND batch IS NOT NULL
               ORDER BY id DESC LIMIT 20) recent",
    )
    .bind(model)
    .fetch_one(&mut **tx)
    .await?;
    Ok(secs
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64))
}

/// What is at the provider per model now, for /metrics.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelInFlight {
    pub model: String,
    /// Open jobs not yet finished at the provider.
    pub batches: i64,
    /// Their estimated input tokens.
    pub enqueued_tokens: i64,
    /// Seconds left of the model's shared cool-down (0: none).
    pub cooldown_secs: f64,
    /// The model's enqueued-token limit (0: none).
    pub enqueued_tokens_limit: i64,
}

/// Every model with batches in flight or a running cool-down (at most
/// `limit` models), with its limit in `quotas`.
pub(crate) async fn in_flight_by_model(
    pool: &sqlx::PgPool,
    quotas: &ProviderQuotas,
    limit: i64,
) -> Result<Vec<ModelInFlight>> {
    let rows: Vec<(String, i64, i64, f64)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT model, sum(batches)::int8, sum(tokens)::int8, max(cooldown)::float8 FROM (
             SELECT model, count(*) AS batches, sum(est_tokens) AS tokens, 0 AS cooldown
             FROM jobs WHERE end_time IS NULL AND state = ANY ($1) GROUP BY model
             UNION ALL
             SELECT model, 0, 0, extract(epoch FROM until - now())
             FROM model_cooldowns WHERE lane = {COOL_BATCH} AND until > now()
         ) m GROUP BY model ORDER BY model LIMIT $2"
    )))
    .bind(quota::in_flight_codes())
    .bind(limit)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(
            |(model, batches, enqueued_tokens, cooldown_secs)| ModelInFlight {
                enqueued_tokens_limit: quotas.tokens_of(&model),
                model,
                batches,
                enqueued_tokens,
                cooldown_secs: cooldown_secs.max(0.0),
            },
        )
        .collect())
}
