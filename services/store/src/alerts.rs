//! Ledger alerts: recording threshold crossings exactly once across
//! replicas, and the outbox their deliveries go through.
//!
//! Every replica evaluates every alerting ledger now and then. An
//! evaluation locks the ledger's `ledger_alerts` row first (SKIP LOCKED:
//! another replica evaluating it right now is enough), then counts, then
//! decides with `tally_core::alert::decide`, and records the decision with a
//! guarded UPDATE (`… WHERE NOT above`) in the same transaction as the
//! outbox row. So a crossing is recorded, and its alert queued, once.
//!
//! The outbox is delivered at least once: a sender leases due rows (SKIP
//! LOCKED), POSTs, and marks them sent or schedules a retry. A sender that
//! dies mid-POST leaves a lease that runs out, and another sender retries
//! with the same `msg_id`, which receivers use to drop duplicates.

use crate::codes::PERMANENT;
use crate::types::{LedgerRecord, OutboxAlert};
use crate::{Result, Store};
use std::time::Duration;
use tally_core::alert::{self, AlertFacts, AlertKind, Decision};
use tally_core::scope::Patterns;

impl Store {
    /// Ledgers whose policy asks for alerts.
    pub async fn alerting_ledgers(&self) -> Result<Vec<LedgerRecord>> {
        let mut out = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = self
                .list_ledgers(after.as_deref(), 1000, false, &Patterns::all())
                .await?;
            let full = page.len() == 1000;
            after = page.last().map(|l| l.name.clone());
            out.extend(page.into_iter().filter(|l| alert::enabled(&l.policy)));
            if !full {
                return Ok(out);
            }
        }
    }

    /// Counts the ledger's PERMANENT rows and records a crossing (or a daily
    /// reminder, or a re-arm). Answers the kind of alert this call queued;
    /// `None` when nothing was due or another replica is evaluating the
    /// ledger right now.
    pub async fn evaluate_alert(&self, ledger: &LedgerRecord) -> Result<Option<AlertKind>> {
        let policy = &ledger.policy;
        let mut tx = self.begin().await?;
        sqlx::query("INSERT INTO ledger_alerts (ledger_id) VALUES ($1) ON CONFLICT DO NOTHING")
            .bind(ledger.id)
            .execute(&mut *tx)
            .await?;
        let state: Option<(bool, Option<f64>)> = sqlx::query_as(
            "SELECT above, extract(epoch FROM now() - last_alert_time)::float8
             FROM ledger_alerts WHERE ledger_id = $1 FOR UPDATE SKIP LOCKED",
        )
        .bind(ledger.id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some((above, since_last)) = state else {
            return Ok(None);
        };
        // Counted after taking the lock, so the count is at least as new as
        // whatever the previous evaluator recorded.
        let permanent: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM rows WHERE ledger_id = $1 AND status = {PERMANENT}"
        )))
        .bind(ledger.id)
        .fetch_one(&mut *tx)
        .await?;
        let since_last = since_last.map(|s| Duration::from_secs_f64(s.max(0.0)));
        let kind = match alert::decide(
            policy.review_threshold,
            permanent.max(0) as u64,
            above,
            since_last,
        ) {
            Decision::Nothing => {
                tx.commit().await?;
                return Ok(None);
            }
            Decision::Rearm => {
                sqlx::query(
                    "UPDATE ledger_alerts SET above = false, update_time = now()
                     WHERE ledger_id = $1 AND above",
                )
                .bind(ledger.id)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                tracing::info!(ledger = %ledger.name, permanent, "alert re-armed: permanent rows below the review threshold");
                return Ok(None);
            }
            Decision::Send(kind) => kind,
        };
        let guard = match kind {
            AlertKind::Crossed => {
                "UPDATE ledger_alerts SET above = true, crossings = crossings + 1,
                        last_alert_time = now(), update_time = now()
                 WHERE ledger_id = $1 AND NOT above RETURNING crossings"
            }
            AlertKind::Reminder => {
                "UPDATE ledger_alerts SET last_alert_time = now(), update_time = now()
                 WHERE ledger_id = $1 AND above
                   AND (last_alert_time IS NULL OR last_alert_time <= now() - interval '1 day')
                 RETURNING crossings"
            }
        };
        let won: Option<i32> = sqlx::query_scalar(guard)
            .bind(ledger.id)
            .fetch_optional(&mut *tx)
            .await?;
        if won.is_none() {
            tx.commit().await?;
            return Ok(None);
        }
        let (counts, by_rule, now) = crate::rows::status_counts(&mut *tx, ledger.id).await?;
        let examples: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT key FROM rows WHERE ledger_id = $1 AND status = {PERMANENT}
             ORDER BY update_time DESC, key LIMIT $2"
        )))
        .bind(ledger.id)
        .bind(alert::EXAMPLE_KEYS as i64)
        .fetch_all(&mut *tx)
        .await?;
        let body = alert::body(&AlertFacts {
            ledger: &ledger.name,
            kind,
            threshold: policy.review_threshold,
            counts: &counts,
            permanent_by_rule: &by_rule,
            example_keys: &examples,
            time: now,
        });
        sqlx::query(
            "INSERT INTO alert_outbox (ledger_id, msg_id, kind, url, body)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(ledger.id)
        .bind(format!("msg_{}", uuid::Uuid::new_v4().simple()))
        .bind(kind.as_str())
        .bind(&policy.alert_url)
        .bind(body.to_string())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        tracing::warn!(ledger = %ledger.name, permanent, threshold = policy.review_threshold, reason = kind.as_str(), "review threshold alert queued");
        Ok(Some(kind))
    }

    /// Leases up to `limit` due alerts for `lease` (each lease counts a try).
    pub async fn lease_alerts(&self, limit: i64, lease: Duration) -> Result<Vec<OutboxAlert>> {
        let rows: Vec<(i64, String, String, String, String, String, i32)> = sqlx::query_as(
            "UPDATE alert_outbox o SET lease_until = now() + $2 * interval '1 millisecond',
                    tries = o.tries + 1
             FROM ledgers l
             WHERE l.id = o.ledger_id AND o.id IN (
                 SELECT id FROM alert_outbox
                 WHERE sent_time IS NULL AND failed_time IS NULL AND next_attempt_time <= now()
                   AND (lease_until IS NULL OR lease_until <= now())
                 ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
             RETURNING o.id, l.name, o.msg_id, o.kind, o.url, o.body, o.tries",
        )
        .bind(limit)
        .bind(lease.as_millis().min(i64::MAX as u128) as i64)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(id, ledger, msg_id, kind, url, body, tries)| OutboxAlert {
                id,
                ledger,
                msg_id,
                kind,
                url,
                body,
                tries,
            })
            .collect())
    }

    /// Records a delivery the receiver acknowledged.
    pub async fn alert_delivered(&self, id: i64) -> Result<()> {
        sqlx::query(
            "UPDATE alert_outbox SET sent_time = now(), lease_until = NULL, last_error = ''
             WHERE id = $1 AND sent_time IS NULL",
        )
        .bind(id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Records a failed try: retried after `retry_in`, or given up (`None`).
    pub async fn alert_failed(
        &self,
        id: i64,
        error: &str,
        retry_in: Option<Duration>,
    ) -> Result<()> {
        sqlx::query(
            "UPDATE alert_outbox SET lease_until = NULL, last_error = $2,
                    next_attempt_time = now() + coalesce($3, 0) * interval '1 millisecond',
                    failed_time = CASE WHEN $3 IS NULL THEN now() END
             WHERE id = $1 AND sent_time IS NULL",
        )
        .bind(id)
        .bind(error.chars().take(2048).collect::<String>())
        .bind(retry_in.map(|d| d.as_millis().min(i64::MAX as u128) as i64))
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}
