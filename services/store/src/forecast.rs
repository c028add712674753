//! The critical path's inputs (rules in `tally_core::route`): each lane's
//! turnaround from the ledger's own history (a batch's: its jobs from
//! submission to end; a synchronous lane's: its claims to their attempts),
//! the ledger's priors until there is enough; and the band of depths a
//! claim's lane takes now. While the ledger's flex calls are being shed,
//! flex counts as unavailable: its rows go to another lane the ledger
//! allows (or wait, where flex is the only one).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tally_core::lane::Lane;
use tally_core::route::{self, Turnarounds, Work};

use crate::codes::CLAIMABLE;

use crate::types::{ClaimRequest, LedgerRecord};
use crate::{Result, Store};

/// How long a ledger's forecast is reused before it is read again.
const FRESH: Duration = Duration::from_secs(10);
/// Ended batches a batch forecast needs (else the prior).
const MIN_BATCHES: i64 = 3;
/// Synchronous attempts a lane's forecast needs (else the prior).
const MIN_CALLS: i64 = 5;

/// Each ledger's last forecast, with when it was read.
#[derive(Debug, Default, Clone)]
pub(crate) struct Forecasts(Arc<Mutex<HashMap<i64, (Instant, Turnarounds)>>>);

impl Store {
    /// Each lane's turnaround for `ledger`: the median of its last 20
    /// ended batches (submission to end) and of its last 100 attempts of
    /// each synchronous lane (claim to report), where there are enough;
    /// the policy's priors otherwise.
    pub async fn turnarounds(&self, ledger: &LedgerRecord) -> Result<Turnarounds> {
        if let Some((at, t)) = self
            .forecasts
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&ledger.id)
            && at.elapsed() < FRESH
        {
            return Ok(*t);
        }
        let mut t = ledger.policy.turnarounds;
        let (n, batch_ms): (i64, Option<f64>) = sqlx::query_as(
            "SELECT count(*), percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) FROM (
                 SELECT extract(epoch FROM end_time - submit_time) * 1000 AS ms FROM jobs
                 WHERE ledger_id = $1 AND end_time IS NOT NULL AND submit_time IS NOT NULL
                 ORDER BY end_time DESC LIMIT 20) j",
        )
        .bind(ledger.id)
        .fetch_one(self.pool())
        .await?;
        if let (true, Some(ms)) = (n >= MIN_BATCHES, batch_ms) {
            t.set(Lane::Batch, Duration::from_millis(ms.max(1.0) as u64));
        }
        let calls: Vec<(i16, i64, Option<f64>)> = sqlx::query_as(
            "SELECT lane, count(*), percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) FROM (
                 SELECT a.lane, extract(epoch FROM a.time - c.create_time) * 1000 AS ms,
                        row_number() OVER (PARTITION BY a.lane ORDER BY a.time DESC) AS nth
                 FROM attempts a JOIN claims c ON c.token = a.claim_id
                 WHERE a.ledger_id = $1 AND a.lane <> $2) x
             WHERE nth <= 100 GROUP BY lane",
        )
        .bind(ledger.id)
        .bind(Lane::Batch.code())
        .fetch_all(self.pool())
        .await?;
        for (code, n, ms) in calls {
            if let (Some(lane), true, Some(ms)) = (Lane::from_code(code), n >= MIN_CALLS, ms) {
                t.set(lane, Duration::from_millis(ms.max(1.0) as u64));
            }
        }
        self.forecasts
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(ledger.id, (Instant::now(), t));
        Ok(t)
    }

    /// The ledger's unfinished rows by model and depth, with their
    /// estimated input tokens (`tally_core::quota::estimate_tokens` of
    /// their payloads).
    pub async fn unfinished_work(&self, ledger: &LedgerRecord) -> Result<Vec<Work>> {
        let rows: Vec<(String, i32, i64, i64)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT model, depth, count(*)::int8, coalesce(sum(octet_length(payload)), 0)::int8
             FROM rows WHERE ledger_id = $1 AND status IN ({CLAIMABLE})
             GROUP BY model, depth ORDER BY model, depth"
        )))
        .bind(ledger.id)
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(|(model, depth, n, bytes)| Work {
                model,
                depth: depth.max(1) as u32,
                rows: n.max(0) as u64,
                input_tokens: tally_core::quota::estimate_tokens(bytes.max(0) as u64),
            })
            .collect())
    }

    /// `req` with the depths its lane takes now (`None`: none now). Without
    /// a deadline a ledger's first allowed lane takes every depth.
    pub(crate) async fn routed(
        &self,
        ledger: &LedgerRecord,
        req: &ClaimRequest,
    ) -> Result<Option<ClaimRequest>> {
        let policy = &ledger.policy;
        let left = policy.deadline_ms.map(|ms| {
            let now = chrono::Utc::now().timestamp_millis();
            Duration::from_millis(ms.saturating_sub(now).max(0) as u64)
        });
        let t = match left {
            Some(_) => self.turnarounds(ledger).await?,
            None => policy.turnarounds,
        };
        let api = req
            .provider
            .as_deref()
            .and_then(tally_core::provider::Api::parse);
        let shed = policy.lanes.allows(Lane::Flex) && self.flex_shed_now(ledger.id).await?;
        let offered =
            move |l: Lane| api.is_none_or(|a| l.offered_by(a)) && !(shed && l == Lane::Flex);
        let Some((low, high)) = route::band(req.lane, left, &policy.lanes, offered, &t) else {
            return Ok(None);
        };
        let clamp = |d: u32| i32::try_from(d).unwrap_or(i32::MAX);
        Ok(Some(ClaimRequest {
            depths: (low > 0 || high < u32::MAX).then(|| (clamp(low), clamp(high))),
            ..req.clone()
        }))
    }

    /// Whether the ledger's flex calls are being shed now.
    async fn flex_shed_now(&self, ledger_id: i64) -> Result<bool> {
        let shed: Option<bool> =
            sqlx::query_scalar("SELECT flex_shed_until > now() FROM ledgers WHERE id = $1")
                .bind(ledger_id)
                .fetch_optional(self.pool())
                .await?
                .flatten();
        Ok(shed.unwrap_or(false))
    }
}

/// Marks the ledger's flex calls shed for `wait` (clamped as cool-downs
/// are), or keeps the later end already set.
pub(crate) async fn flex_shed(pool: &sqlx::PgPool, ledger_id: i64, wait: Duration) -> Result<()> {
    let ms = tally_core::job::provider_cooldown(wait).as_millis() as i64;
    sqlx::query(
        "UPDATE ledgers SET flex_shed_until =
             greatest(coalesce(flex_shed_until, now()), now() + $2 * interval '1 millisecond')
         WHERE id = $1",
    )
    .bind(ledger_id)
    .bind(ms)
    .execute(pool)
    .await?;
    Ok(())
}
