//! The result cache (rules and key in `tally_core::cache`): a claim's rows
//! settled from answers kept before (through the report pipeline, so a hit
//! is a report like any other: fenced, logged, freeing dependants), the
//! requests that missed remembered with their rows, their answers kept once
//! reported, the dry run, what a ledger's summary says of it, and its bounds.

use crate::codes;
use crate::types::{CachedFrom, ReportItem, Usage, Verdict};
use crate::{Result, Store, StoreError};
use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::Duration;
use tally_core::cache::ResultCache;
use tally_core::transition::Outcome;
use uuid::Uuid;

/// One row's request as the worker built it (`tally_core::cache::request_of`).
#[derive(Debug, Clone)]
pub struct Lookup {
    pub key: String,
    pub request: String,
}

/// What SettleFromCache did.
#[derive(Debug, Clone, Default)]
pub struct Settled {
    /// Rows settled SUCCEEDED from the cache, in request order.
    pub hits: Vec<String>,
    pub misses: u32,
    pub saved_usd: f64,
}

/// What the cache would answer (the dry run).
#[derive(Debug, Clone, Default)]
pub struct Estimate {
    /// Keys and what their cached answer cost first, in request order.
    pub hits: Vec<(String, f64)>,
    pub misses: u32,
    pub saved_usd: f64,
}

/// What the result cache did for a ledger.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Stats {
    pub hits: i64,
    pub misses: i64,
    pub saved_usd: f64,
    /// Hits served an answer cached before its model's last drift.
    pub stale: i64,
}

/// What the result cache holds, server-wide.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Size {
    pub entries: i64,
    pub bytes: i64,
}

/// The server's bounds on the whole cache.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub max_age: Duration,
    pub max_entries: i64,
    pub max_bytes: i64,
}

#[derive(sqlx::FromRow)]
struct Found {
    n: i64,
    result: String,
    response: Option<String>,
    cost_usd: f64,
    source_row: String,
    source_attempt: i32,
    answer_ms: i64,
    model_version: String,
    model: String,
    provider: String,
}

#[derive(sqlx::FromRow)]
struct StatsRow {
    hits: i64,
    saved_usd: f64,
    stale: i64,
    misses: i64,
}

fn cache_off(ledger: &str) -> StoreError {
    StoreError::FailedPrecondition {
        reason: "RESULT_CACHE_OFF",
        description: format!(
            "ledgers/{ledger} does not use the result cache (set its policy's result_cache)"
        ),
    }
}

/// Each lookup's SHA-256, what the cache finds answers by (computed once a
/// call: a request may be a megabyte).
fn hashes_of(lookups: &[Lookup]) -> Vec<Vec<u8>> {
    lookups
        .iter()
        .map(|l| tally_core::cache::hash(&l.request).to_vec())
        .collect()
}

impl Store {
    /// Whether `ledger` serves rows from the result cache (as read at most
    /// the ledger cache's age ago).
    pub async fn cache_on(&self, ledger: &str) -> Result<bool> {
        Ok(self.ledger(ledger).await?.policy.result_cache.is_some())
    }

    /// Answers found for `lookups` of rows of ledger `ledger_id` (by
    /// position; `hashes` theirs) under `cache`'s scope and age, for
    /// `team`. None for a row being asked again: it wants a new answer,
    /// not the one it had.
    async fn find(
        &self,
        ledger_id: i64,
        lookups: &[Lookup],
        hashes: &[Vec<u8>],
        team: &str,
        cache: &ResultCache,
    ) -> Result<HashMap<usize, Found>> {
        static SQL: LazyLock<String> =
            LazyLock::new(|| codes::render(include_str!("queries/cache/find.sql")));
        let requests: Vec<&str> = lookups.iter().map(|l| l.request.as_str()).collect();
        let keys: Vec<&str> = lookups.iter().map(|l| l.key.as_str()).collect();
        let found: Vec<Found> = sqlx::query_as(sqlx::AssertSqlSafe(SQL.as_str()))
            .bind(hashes)
            .bind(&requests)
            .bind(team)
            .bind(cache.scope.is_shared())
            .bind(crate::report::millis(cache.max_age))
            .bind(ledger_id)
            .bind(&keys)
            .fetch_all(&self.pool)
            .await?;
        Ok(found
            .into_iter()
            .map(|f| ((f.n - 1).max(0) as usize, f))
            .collect())
    }

    /// Settles the rows of claim `token` whose request the cache answers
    /// (a report of each cached answer, recorded as cached and with no
    /// usage); remembers the others' requests for their answers. Rows the
    /// claim no longer holds are neither settled nor remembered.
    pub async fn settle_from_cache(
        &self,
        ledger: &str,
        token: Uuid,
        team: &str,
        lookups: &[Lookup],
        actor: &str,
    ) -> Result<Settled> {
        let record = self.ledger(ledger).await?;
        let cache = record
            .policy
            .result_cache
            .ok_or_else(|| cache_off(ledger))?;
        let hashes = hashes_of(lookups);
        let mut found = self.find(record.id, lookups, &hashes, team, &cache).await?;
        let mut items = Vec::with_capacity(found.len());
        let mut costs = HashMap::new();
        let mut missed = Vec::new();
        for (i, l) in lookups.iter().enumerate() {
            let Some(f) = found.remove(&i) else {
                missed.push((l, hashes[i].as_slice()));
                continue;
            };
            costs.insert(l.key.as_str(), f.cost_usd);
            items.push(ReportItem {
                key: l.key.clone(),
                outcome: Outcome::Success,
                result: Some(f.result),
                response: f.response,
                usage: Usage::default(),
                request_id: None,
                tier: None,
                model_version: None,
                cached: Some(CachedFrom {
                    row: f.source_row,
                    attempt: f.source_attempt,
                    cost_usd: f.cost_usd,
                    answer_ms: f.answer_ms,
                    model_version: f.model_version,
                    model: f.model,
                    provider: f.provider,
                }),
            });
        }
        let mut out = Settled::default();
        if !items.is_empty() {
            let summary = self.report(ledger, token, &items, actor).await?;
            for v in summary.verdicts {
                match v.verdict {
                    Verdict::Succeeded => {
                        out.saved_usd += costs.get(v.key.as_str()).copied().unwrap_or(0.0);
                        out.hits.push(v.key);
                    }
                    // A retried lookup: this claim settled the row already,
                    // and nothing but a lookup comes before its sending.
                    Verdict::Duplicate => out.hits.push(v.key),
                    _ => {}
                }
            }
        }
        out.misses = missed.len() as u32;
        if !missed.is_empty() {
            self.remember(record.id, token, team, cache.scope.is_shared(), &missed)
                .await?;
        }
        Ok(out)
    }

    /// Keeps the requests that missed with their rows (those the live
    /// claim holds), and counts the misses.
    async fn remember(
        &self,
        ledger_id: i64,
        token: Uuid,
        team: &str,
        shared: bool,
        missed: &[(&Lookup, &[u8])],
    ) -> Result<()> {
        static SQL: LazyLock<String> =
            LazyLock::new(|| codes::render(include_str!("queries/cache/remember.sql")));
        let keys: Vec<&str> = missed.iter().map(|(l, _)| l.key.as_str()).collect();
        let hashes: Vec<&[u8]> = missed.iter().map(|(_, h)| *h).collect();
        let requests: Vec<&str> = missed.iter().map(|(l, _)| l.request.as_str()).collect();
        let mut tx = self.begin().await?;
        let done = async {
            sqlx::query(sqlx::AssertSqlSafe(SQL.as_str()))
                .bind(ledger_id)
                .bind(token)
                .bind(&keys)
                .bind(&hashes)
                .bind(&requests)
                .bind(team)
                .bind(shared)
                .execute(&mut *tx)
                .await?;
            sqlx::query(
                "INSERT INTO cache_misses (ledger_id, misses) VALUES ($1, $2)
                 ON CONFLICT (ledger_id) DO UPDATE SET misses = cache_misses.misses + excluded.misses",
            )
            .bind(ledger_id)
            .bind(missed.len() as i64)
            .execute(&mut *tx)
            .await?;
            Ok(())
        }
        .await;
        crate::end_tx(tx, done).await
    }

    /// The dry run: which of `lookups` the cache would answer for `team`
    /// under `ledger`'s scope and age (its defaults when its cache is off).
    /// Writes nothing.
    pub async fn estimate_from_cache(
        &self,
        ledger: &str,
        team: &str,
        lookups: &[Lookup],
    ) -> Result<Estimate> {
        let record = self.ledger(ledger).await?;
        let cache = record.policy.result_cache.unwrap_or_default();
        let hashes = hashes_of(lookups);
        let mut found = self.find(record.id, lookups, &hashes, team, &cache).await?;
        let mut out = Estimate::default();
        for (i, l) in lookups.iter().enumerate() {
            match found.remove(&i) {
                Some(f) => {
                    out.saved_usd += f.cost_usd;
                    out.hits.push((l.key.clone(), f.cost_usd));
                }
                None => out.misses += 1,
            }
        }
        Ok(out)
    }

    /// What the result cache did for `ledger`.
    pub async fn cache_stats(&self, ledger: &str) -> Result<Stats> {
        let record = self.ledger(ledger).await?;
        let s: StatsRow = sqlx::query_as(include_str!("queries/cache/stats.sql"))
            .bind(record.id)
            .fetch_one(&self.pool)
            .await?;
        Ok(Stats {
            hits: s.hits,
            misses: s.misses,
            saved_usd: s.saved_usd,
            stale: s.stale,
        })
    }

    /// How many answers the cache holds, and their bytes.
    pub async fn cache_size(&self) -> Result<Size> {
        let (entries, bytes): (i64, i64) =
            sqlx::query_as("SELECT count(*), coalesce(sum(bytes), 0)::int8 FROM result_cache")
                .fetch_one(&self.pool)
                .await?;
        Ok(Size { entries, bytes })
    }

    /// Deletes, at most `batch` at a time, answers older than the bound's
    /// age, then the oldest while the cache holds more than its entries or
    /// bytes allow. Answers how many it deleted.
    pub async fn purge_cache(&self, bounds: &Bounds, batch: i64) -> Result<u64> {
        let old = sqlx::query(
            "DELETE FROM result_cache WHERE id IN (
                 SELECT id FROM result_cache
                 WHERE answer_time < now() - $1 * interval '1 millisecond' LIMIT $2)",
        )
        .bind(crate::report::millis(bounds.max_age))
        .bind(batch)
        .execute(&self.pool)
        .await?
        .rows_affected();
        let size = self.cache_size().await?;
        let over_entries = (size.entries - bounds.max_entries).max(0);
        let over = if over_entries > 0 || size.bytes > bounds.max_bytes {
            // The oldest first, while over either bound.
            sqlx::query(
                "DELETE FROM result_cache WHERE id IN (
                     SELECT id FROM (
                         SELECT id, bytes, sum(bytes) OVER w AS upto, row_number() OVER w AS nth
                         FROM result_cache WINDOW w AS (ORDER BY answer_time, id)
                         ORDER BY answer_time, id LIMIT $4) o
                     WHERE o.nth <= $1 OR $2 - (o.upto - o.bytes) > $3)",
            )
            .bind(over_entries)
            .bind(size.bytes)
            .bind(bounds.max_bytes)
            .bind(batch)
            .execute(&self.pool)
            .await?
            .rows_affected()
        } else {
            0
        };
        Ok(old + over)
    }
}
