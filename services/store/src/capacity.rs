//! AcquireCapacity: the provider account's requests and tokens per minute,
//! handed out to synchronous claims (rules in `tally_core::capacity`). One
//! pipeline: lock the claim (it must be live, of a synchronous lane) →
//! record a cool-down the worker reports → under a transaction lock of the
//! account and model, read the window's grants and the cool-down → decide
//! in core → add the grant. Grants of every ledger and team sending to the
//! account count alike: the limits are the account's.

use std::time::Duration;

use sqlx::{Postgres, Transaction};
use tally_core::capacity::{self, Grant, Granted, RateLimits};
use tally_core::lane::Lane;
use uuid::Uuid;

use crate::codes::COOL_ALL_SYNC;
use crate::{Result, Store, StoreError, fence, pause};
use tally_core::pause::PauseReason;

/// One AcquireCapacity call.
#[derive(Debug, Clone)]
pub struct CapacityAsk<'a> {
    pub ledger: &'a str,
    pub claim: Uuid,
    pub account: &'a str,
    /// Each request's estimated tokens, in order.
    pub tokens: &'a [i64],
    /// The provider answered 429 asking to wait this long.
    pub rate_limited: Option<Duration>,
    /// A flex request was shed.
    pub shed: bool,
    /// The provider refused a call for good: the ledger pauses for this
    /// reason with these words.
    pub refused: Option<(PauseReason, &'a str)>,
    /// Who asked (recorded with a pause).
    pub actor: &'a str,
}

/// What the call got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapacityGrant {
    pub grant: Grant,
    pub limits: RateLimits,
}

/// How long a shed flex call holds back every flex call of the account and
/// model when the provider named no wait.
const SHED_WAIT: Duration = Duration::from_secs(5);

impl Store {
    /// Grants what fits of `ask` under the limits of the claim's model (see
    /// the module doc and [`Store::sync_limits`]).
    pub async fn acquire_capacity(&self, ask: &CapacityAsk<'_>) -> Result<CapacityGrant> {
        let record = self.ledger(ask.ledger).await?;
        let mut tx = self.begin().await?;
        if ask.refused.is_some() {
            // The ledger's row before the claim's, as every pause takes it.
            pause::lock_first(&mut tx, ask.ledger).await?;
        }
        let claim = fence::lock_claim(&mut tx, record.id, ask.ledger, ask.claim).await?;
        fence::check_live(&claim, ask.ledger)?;
        let lane = Lane::from_code(claim.lane).unwrap_or_default();
        if !lane.is_sync() && ask.refused.is_some() && ask.tokens.is_empty() {
            // A batch job's later calls (its poll, its list, its output's
            // download) refused for good: the same pause, from a job whose
            // create was attempted (one that never spoke to the provider
            // cannot speak for it).
            sent_job(&mut tx, &claim).await?;
        } else if !lane.is_sync() {
            return Err(StoreError::FailedPrecondition {
                reason: "BATCH_CLAIM",
                description: format!(
                    "claim {} is for the batch lane: its rows go in a provider batch (CreateJob), not by capacity",
                    tally_core::names::claim_for_logs(&ask.claim.to_string())
                ),
            });
        }
        if ask.tokens.len() > claim.row_ids.len() {
            return Err(StoreError::invalid(
                "tokens",
                format!(
                    "asks for {} requests; the claim holds {} rows",
                    ask.tokens.len(),
                    claim.row_ids.len()
                ),
            ));
        }
        let model = claim.model.as_str();
        if let Some((reason, words)) = ask.refused {
            let message = if lane.is_sync() {
                format!("the provider refused a synchronous call: {words}")
            } else {
                format!("the provider refused a call for a batch already sent: {words}")
            };
            let req = pause::PauseLedger {
                ledger: ask.ledger,
                reason,
                message: &message,
                actor: ask.actor,
                etag: None,
            };
            pause::pause_in(&mut tx, &req).await?;
            tx.commit().await?;
            return Ok(CapacityGrant {
                grant: Grant {
                    requests: 0,
                    tokens: 0,
                    retry_after: None,
                },
                limits: self.sync_limits.of(model),
            });
        }
        if let Some(wait) = ask.rate_limited.or(ask.shed.then_some(SHED_WAIT)) {
            let scope = if ask.shed {
                lane.code()
            } else {
                capacity::ALL_SYNC_LANES
            };
            cool(&mut tx, ask, model, scope, wait).await?;
        }
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 48))")
            .bind(format!("{}\u{1f}{model}", ask.account))
            .execute(&mut *tx)
            .await?;
        let cooldown = cooldown_left(&mut tx, ask, model, lane).await?;
        let recent = recent(&mut tx, ask.account, model).await?;
        let asks: Vec<u64> = ask.tokens.iter().map(|t| (*t).max(0) as u64).collect();
        let limits = self.sync_limits.of(model);
        let grant = capacity::grant(limits, &recent, &asks, cooldown);
        if grant.requests > 0 {
            add(&mut tx, ask.account, model, &grant).await?;
        }
        tx.commit().await?;
        if ask.shed {
            // After the commit: the ledger's row is locked before a claim's
            // everywhere else, never after.
            let wait = ask.rate_limited.unwrap_or(SHED_WAIT);
            crate::forecast::flex_shed(self.pool(), record.id, wait).await?;
        }
        Ok(CapacityGrant { grant, limits })
    }
}

/// Checks that `claim` holds a job whose create was attempted.
async fn sent_job(
    tx: &mut Transaction<'static, Postgres>,
    claim: &fence::LockedClaim,
) -> Result<()> {
    let state: Option<i16> = match claim.job_id {
        Some(id) => {
            sqlx::query_scalar("SELECT state FROM jobs WHERE id = $1")
                .bind(id)
                .fetch_optional(&mut **tx)
                .await?
        }
        None => None,
    };
    if state.is_some_and(|s| s != tally_core::job::JobState::Preparing.code()) {
        return Ok(());
    }
    Err(StoreError::FailedPrecondition {
        reason: "JOB_NOT_CREATING",
        description: format!(
            "claim {} holds no job whose create was attempted: only such a job's calls can have been refused by the provider",
            tally_core::names::claim_for_logs(&claim.token.to_string())
        ),
    })
}

/// Holds back `scope` (a lane's code, or every synchronous lane) of the
/// asking team's account and model for `wait` (clamped as every provider
/// cool-down is), or keeps the later end of one already running. Kept per
/// team, as batch cool-downs are: the account is the worker's word.
async fn cool(
    tx: &mut Transaction<'static, Postgres>,
    ask: &CapacityAsk<'_>,
    model: &str,
    scope: i16,
    wait: Duration,
) -> Result<()> {
    let ms = tally_core::job::provider_cooldown(wait).as_millis() as i64;
    sqlx::query(
        "INSERT INTO model_cooldowns (team, account, model, lane, until)
         VALUES ($5, $1, $2, $3, now() + $4 * interval '1 millisecond')
         ON CONFLICT (team, account, model, lane) DO UPDATE
         SET until = greatest(model_cooldowns.until, excluded.until), update_time = now()",
    )
    .bind(ask.account)
    .bind(model)
    .bind(scope)
    .bind(ms)
    .bind(ask.actor)
    .execute(&mut **tx)
    .await?;
    tracing::info!(
        account = ask.account,
        team = ask.actor,
        model,
        lane = scope,
        cooldown_ms = ms,
        "synchronous calls cool down for the team's workers of the account"
    );
    Ok(())
}

/// What is left of the cool-downs holding back `lane` of the asking team's
/// account and model (its own, and every synchronous lane's).
async fn cooldown_left(
    tx: &mut Transaction<'static, Postgres>,
    ask: &CapacityAsk<'_>,
    model: &str,
    lane: Lane,
) -> Result<Option<Duration>> {
    let left: Option<f64> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT max(extract(epoch FROM until - now()))::float8 FROM model_cooldowns
         WHERE team = $4 AND account = $1 AND model = $2 AND lane IN ({COOL_ALL_SYNC}, $3)
           AND until > now()"
    )))
    .bind(ask.account)
    .bind(model)
    .bind(lane.code())
    .bind(ask.actor)
    .fetch_one(&mut **tx)
    .await?;
    Ok(left.map(|s| Duration::from_secs_f64(s.max(0.001))))
}

/// The grants within the window, a second each.
async fn recent(
    tx: &mut Transaction<'static, Postgres>,
    account: &str,
    model: &str,
) -> Result<Vec<Granted>> {
    let rows: Vec<(i64, i32, i64)> = sqlx::query_as(
        "SELECT extract(epoch FROM now())::int8 - second, requests, tokens FROM sync_grants
         WHERE account = $1 AND model = $2 AND second > extract(epoch FROM now())::int8 - $3",
    )
    .bind(account)
    .bind(model)
    .bind(capacity::WINDOW.as_secs() as i64 + 1)
    .fetch_all(&mut **tx)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(age, requests, tokens)| Granted {
            age: Duration::from_secs(age.max(0) as u64),
            requests: requests.max(0) as u64,
            tokens: tokens.max(0) as u64,
        })
        .collect())
}

/// Adds `grant` to this second's entry, and drops the account and model's
/// entries older than twice the window.
async fn add(
    tx: &mut Transaction<'static, Postgres>,
    account: &str,
    model: &str,
    grant: &Grant,
) -> Result<()> {
    sqlx::query(
        "WITH gone AS (
             DELETE FROM sync_grants
             WHERE account = $1 AND model = $2 AND second < extract(epoch FROM now())::int8 - $5
         )
         INSERT INTO sync_grants (account, model, second, requests, tokens)
         VALUES ($1, $2, extract(epoch FROM now())::int8, $3, $4)
         ON CONFLICT (account, model, second) DO UPDATE
         SET requests = sync_grants.requests + excluded.requests,
             tokens = sync_grants.tokens + excluded.tokens",
    )
    .bind(account)
    .bind(model)
    .bind(i32::try_from(grant.requests).unwrap_or(i32::MAX))
    .bind(i64::try_from(grant.tokens).unwrap_or(i64::MAX))
    .bind(2 * capacity::WINDOW.as_secs() as i64)
    .execute(&mut **tx)
    .await?;
    Ok(())
}
