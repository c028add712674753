//! The baseline: the same work as plain SQL on an equivalent bare table, the
//! way a team would write it without tally (DESIGN.md section 10 describes
//! the naive claim loop and why it degrades).

use crate::workload::{self, Mix};
use sqlx::PgPool;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The bare table of one workload: a key, a payload, a status, a result,
/// and the partial index of runnable rows a team would add.
pub fn table(ledger: &str) -> String {
    let safe: String = ledger
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("raw_{safe}")
}

pub async fn setup(pool: &PgPool, ledger: &str) -> anyhow::Result<()> {
    let t = table(ledger);
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE TABLE {t} (
            key text PRIMARY KEY, payload text NOT NULL,
            status smallint NOT NULL DEFAULT 1, attempts integer NOT NULL DEFAULT 0,
            result text, worker text, updated_at timestamptz NOT NULL DEFAULT now())"
    )))
    .execute(pool)
    .await?;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE INDEX {t}_runnable ON {t} (updated_at) WHERE status IN (1, 3)"
    )))
    .execute(pool)
    .await?;
    Ok(())
}

/// `INSERT … SELECT FROM unnest(…) ON CONFLICT DO NOTHING`, batches of
/// `batch`, `clients` at once. Returns rows inserted and the elapsed time.
pub async fn enroll(
    pool: &PgPool,
    ledger: &str,
    keys: Arc<Vec<String>>,
    clients: usize,
    batch: usize,
) -> anyhow::Result<(u64, Duration)> {
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (pool, keys, next, t) = (pool.clone(), keys.clone(), next.clone(), table(ledger));
        tasks.push(tokio::spawn(async move {
            let mut done = 0u64;
            loop {
                let from = next.fetch_add(batch as u64, Ordering::Relaxed) as usize;
                if from >= keys.len() {
                    return Ok::<u64, anyhow::Error>(done);
                }
                let chunk = &keys[from..(from + batch).min(keys.len())];
                let payloads: Vec<String> = chunk.iter().map(|k| workload::payload(k)).collect();
                let n = sqlx::query(sqlx::AssertSqlSafe(format!(
                    "INSERT INTO {t} (key, payload)
                     SELECT k, p FROM unnest($1::text[], $2::text[]) AS t(k, p)
                     ON CONFLICT DO NOTHING"
                )))
                .bind(chunk)
                .bind(&payloads)
                .execute(&pool)
                .await?
                .rows_affected();
                done += n;
            }
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await??;
    }
    Ok((total, start.elapsed()))
}

/// The naive loop: `UPDATE … WHERE key IN (SELECT … FOR UPDATE SKIP LOCKED
/// LIMIT n) RETURNING`, then one `UPDATE … FROM unnest(…)` with the outcomes.
/// Runs `workers` loops for `duration`; returns rows reported.
pub async fn claim_report(
    pool: &PgPool,
    ledger: &str,
    workers: usize,
    batch: i64,
    duration: Duration,
) -> anyhow::Result<(u64, Duration)> {
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = Vec::new();
    for w in 0..workers {
        let (pool, t) = (pool.clone(), table(ledger));
        tasks.push(tokio::spawn(async move {
            let mut reported = 0u64;
            let worker = format!("raw-{w}");
            while Instant::now() < deadline {
                let claimed: Vec<(String, i32)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                    "UPDATE {t} SET status = 2, worker = $1, updated_at = now()
                     WHERE key IN (
                         SELECT key FROM {t} WHERE status IN (1, 3)
                         ORDER BY updated_at LIMIT $2 FOR UPDATE SKIP LOCKED)
                     RETURNING key, attempts"
                )))
                .bind(&worker)
                .bind(batch)
                .fetch_all(&pool)
                .await?;
                if claimed.is_empty() {
                    break;
                }
                let mut keys = Vec::with_capacity(claimed.len());
                let mut statuses = Vec::with_capacity(claimed.len());
                let mut results: Vec<Option<String>> = Vec::with_capacity(claimed.len());
                for (key, attempts) in &claimed {
                    let (status, result) = match workload::outcome(key, *attempts as u64 + 1) {
                        Mix::Success => (4i16, Some(workload::result(key))),
                        Mix::Transient if *attempts + 1 < 4 => (3, None),
                        Mix::Transient | Mix::Permanent => (5, None),
                    };
                    keys.push(key.clone());
                    statuses.push(status);
                    results.push(result);
                }
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "UPDATE {t} r SET status = u.status, result = coalesce(u.result, r.result),
                            attempts = r.attempts + 1, updated_at = now()
                     FROM unnest($1::text[], $2::int2[], $3::text[]) AS u(key, status, result)
                     WHERE r.key = u.key AND r.status = 2"
                )))
                .bind(&keys)
                .bind(&statuses)
                .bind(&results)
                .execute(&pool)
                .await?;
                reported += keys.len() as u64;
            }
            Ok::<u64, anyhow::Error>(reported)
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await??;
    }
    Ok((total, start.elapsed()))
}
