//! Reading rows: one row with its attempts history, filtered lists, and the
//! ledger summary.
//!
//! A row held by a claim keeps its stored status until it is settled;
//! readers show it RUNNING, under the ACTIVE claim whose
//! `row_ids` holds it and with that claim's job.

use crate::codes::{self, CLAIM_ACTIVE, Fragment, HELD as HELD_STATUS, PERMANENT, SUCCEEDED};
use crate::types::{
    AttemptInfo, DependencyInput, LedgerRecord, LedgerSummary, ModelUsage, RowFilter, RowRecord,
    RowsPage, SupersededResult, Time, Usage,
};
use crate::{Result, Store, StoreError};
use sqlx::{Postgres, QueryBuilder};
use std::collections::HashMap;
use std::sync::LazyLock;
use tally_core::lane::Lane;
use tally_core::status::{Budget, PerBudget, RowStatus};
use tally_core::summary::LedgerCounts;
use uuid::Uuid;

#[derive(sqlx::FromRow)]
struct RowRow {
    id: i64,
    key: String,
    payload: Option<String>,
    depends_on: Vec<String>,
    prompt_name: String,
    prompt_version: String,
    model: String,
    status: i16,
    provider_failures: i32,
    content_failures: i32,
    infra_failures: i32,
    attempts: i32,
    rule: String,
    last_error: String,
    result: Option<String>,
    response: Option<String>,
    input_tokens: i64,
    output_tokens: i64,
    thinking_tokens: i64,
    cached_tokens: i64,
    claim_id: Option<Uuid>,
    job: Option<String>,
    next_attempt_time: Option<Time>,
    create_time: Time,
    update_time: Time,
    unmet_deps: i32,
    result_version: i32,
    /// Rows in the page before the byte cut (FULL lists only).
    #[sqlx(default)]
    page_rows: i64,
}

impl RowRow {
    fn into_record(self, ledger: &str) -> Result<(i64, RowRecord)> {
        let status = RowStatus::from_code(self.status).ok_or_else(|| {
            StoreError::Internal(format!("row {} status {}", self.key, self.status))
        })?;
        Ok((
            self.id,
            RowRecord {
                ledger: ledger.to_string(),
                key: self.key,
                payload: self.payload,
                depends_on: self.depends_on,
                prompt_name: self.prompt_name,
                prompt_version: self.prompt_version,
                model: self.model,
                status,
                failures: PerBudget::new(
                    self.provider_failures as u32,
                    self.content_failures as u32,
                    self.infra_failures as u32,
                ),
                total: self.attempts as u32,
                rule: self.rule,
                last_error: self.last_error,
                result: self.result,
                response: self.response,
                usage: Usage {
                    input: self.input_tokens,
                    output: self.output_tokens,
                    thinking: self.thinking_tokens,
                    cached: self.cached_tokens,
                    cache_write: 0,
                },
                claim: self.claim_id,
                job: self.job,
                next_attempt_time: self.next_attempt_time,
                create_time: self.create_time,
                update_time: self.update_time,
                unmet_deps: self.unmet_deps,
                result_version: self.result_version,
                history: Vec::new(),
                inputs: Vec::new(),
                superseded: Vec::new(),
                superseded_omitted: 0,
                history_omitted: 0,
            },
        ))
    }
}

/// The rows a ledger's active claims hold (`$1`: the ledger). Queries that
/// filter many rows define it as a CTE `held` and test rows against it with
/// [`IS_HELD`] (a hashed subplan: one pass over the held ids per query).
static HELD: Fragment = Fragment::new(|| {
    format!(
        "SELECT unnest(c.row_ids) AS id FROM claims c WHERE c.ledger_id = $1 AND c.state = {CLAIM_ACTIVE}"
    )
});

const IS_HELD: &str = "r.id IN (SELECT id FROM held)";

/// A row's status as filters see it (held rows are RUNNING).
pub(crate) static STATUS: Fragment = Fragment::new(|| {
    format!("(CASE WHEN r.id IN (SELECT id FROM held) THEN {HELD_STATUS}::int2 ELSE r.status END)")
});

/// The claim holding row `r`, with its job, as `h` (`gate`: SQL that is
/// false for rows known not to be held, so they skip the search).
fn holder(gate: &str) -> String {
    format!(
        "LEFT JOIN LATERAL (
             SELECT c.token, c.job_id FROM claims c
             WHERE {gate} AND c.ledger_id = r.ledger_id AND c.state = {CLAIM_ACTIVE}
               AND r.id = ANY(c.row_ids)
             LIMIT 1) h ON true"
    )
}

/// Columns of `rows r` and its holder `h` (with `full`: payload, result and
/// the provider's response too).
fn row_columns(full: bool) -> String {
    let heavy = if full {
        "r.payload, r.result, r.response"
    } else {
        "NULL::text AS payload, NULL::text AS result, NULL::text AS response"
    };
    format!(
        "r.id, r.key, {heavy}, r.depends_on, r.prompt_name, r.prompt_version, r.model, \
         CASE WHEN h.token IS NOT NULL THEN {HELD_STATUS}::int2 ELSE r.status END AS status, \
         r.provider_failures, r.content_failures, r.infra_failures, r.attempts, r.rule, \
         r.last_error, r.input_tokens, r.output_tokens, r.thinking_tokens, r.cached_tokens, \
         h.token AS claim_id, \
         (SELECT j.public_id FROM jobs j WHERE j.id = coalesce(h.job_id, r.job_id)) AS job, \
         r.next_attempt_time, r.create_time, r.update_time, r.unmet_deps, r.result_version"
    )
}

/// `WITH held … SELECT {select} FROM rows r {join} WHERE r.ledger_id = `
/// (the caller binds the ledger next, as `$1`): the start of every query
/// that filters rows with [`push_filter`].
pub(crate) fn select_rows(select: &str, join: &str) -> QueryBuilder<Postgres> {
    QueryBuilder::new(format!(
        "WITH held AS MATERIALIZED ({HELD}) \
         SELECT {select} FROM rows r {join} WHERE r.ledger_id = "
    ))
}

/// Appends ` AND …` conditions for `filter` on `rows r` (with the `held`
/// CTE of [`select_rows`]).
pub(crate) fn push_filter(qb: &mut QueryBuilder<Postgres>, filter: &RowFilter) {
    if !filter.statuses.is_empty() {
        let codes: Vec<i16> = filter.statuses.iter().map(|s| s.code()).collect();
        qb.push(format!(" AND {STATUS} = ANY("))
            .push_bind(codes)
            .push(")");
    }
    if let Some(rule) = &filter.rule {
        qb.push(" AND r.rule = ").push_bind(rule.clone());
    }
    if let Some(model) = &filter.model {
        qb.push(" AND r.model = ").push_bind(model.clone());
    }
    if let Some(name) = &filter.prompt_name {
        qb.push(" AND r.prompt_name = ").push_bind(name.clone());
    }
    if let Some(version) = &filter.prompt_version {
        qb.push(" AND r.prompt_version = ")
            .push_bind(version.clone());
    }
    if let Some(job) = &filter.job {
        // A held row is the job's while the job's claim holds it; any
        // other row, when the job was the last to carry it.
        qb.push(format!(
            " AND CASE WHEN {IS_HELD} THEN r.id IN (
                 SELECT unnest(c.row_ids) FROM claims c JOIN jobs j ON j.id = c.job_id
                 WHERE c.ledger_id = r.ledger_id AND c.state = {CLAIM_ACTIVE} AND j.public_id = "
        ))
        .push_bind(job.clone())
        .push(") ELSE r.job_id = (SELECT id FROM jobs WHERE public_id = ")
        .push_bind(job.clone())
        .push(") END");
    }
    if let Some(job) = &filter.in_job {
        // Uncorrelated, so an InitPlan: the job's array is read once, then
        // rows are found by id (ids are unique across ledgers, so another
        // ledger's job matches nothing here).
        qb.push(" AND r.id = ANY((SELECT j.row_ids FROM jobs j WHERE j.public_id = ")
            .push_bind(job.clone())
            .push(")::bigint[])");
    }
    if filter.stale_cache {
        qb.push(
            " AND EXISTS (SELECT 1 FROM attempts a JOIN model_snapshots s
                 ON s.provider = a.cached->>'provider' AND s.model = a.cached->>'model'
                 WHERE a.ledger_id = r.ledger_id AND a.row_id = r.id AND a.cached IS NOT NULL
                   AND (a.cached->>'answer_ms')::int8
                       < (extract(epoch FROM s.drift_time) * 1000)::int8)",
        );
    }
    if filter.inputs_changed {
        qb.push(" AND EXISTS (SELECT 1 FROM row_deps e WHERE e.row_id = r.id AND e.changed)");
    }
}

#[derive(sqlx::FromRow)]
struct AttemptRow {
    row_id: i64,
    number: i32,
    claim_id: Option<Uuid>,
    job: Option<String>,
    batch: Option<String>,
    model: String,
    prompt_name: String,
    prompt_version: String,
    outcome: i16,
    rule: String,
    budget: Option<i16>,
    input_tokens: i64,
    output_tokens: i64,
    thinking_tokens: i64,
    cached_tokens: i64,
    error: String,
    actor: String,
    time: Time,
    lane: i16,
    request_id: String,
    tier: String,
    cached: Option<sqlx::types::Json<crate::types::CachedFrom>>,
    total: i64,
}

/// The most bytes of attempts text one row's history carries in an answer
/// (GetRow, ListRows FULL): the newest attempts that fit, the newest always.
/// An error is at most 2048 characters, so this is a few hundred attempts;
/// a row redriven again and again has more, and its answer says how many
/// older ones it left out.
pub const HISTORY_BYTES: i64 = 1024 * 1024;

/// Most superseded results GetRow shows (each as long as a result may be).
pub const SUPERSEDED_SHOWN: i64 = 5;

/// Counted for each attempt beyond its text: numbers, times, tokens and
/// their encoding.
const ATTEMPT_OVERHEAD: i64 = 128;

/// A row's history as answered: its newest attempts, oldest first, and how
/// many older ones were left out.
#[derive(Default)]
struct History {
    attempts: Vec<AttemptInfo>,
    omitted: i64,
}

impl Store {
    /// One row with its attempts history.
    pub async fn get_row(&self, ledger: &str, key: &str) -> Result<RowRecord> {
        let record = self.ledger(ledger).await?;
        let sql = format!(
            "SELECT {} FROM rows r {} WHERE r.ledger_id = $1 AND r.key = $2",
            row_columns(true),
            holder("true")
        );
        let row = sqlx::query_as::<_, RowRow>(sqlx::AssertSqlSafe(sql))
            .bind(record.id)
            .bind(key)
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| StoreError::not_found("row", format!("ledgers/{ledger}/rows/{key}")))?;
        let (id, mut out) = row.into_record(ledger)?;
        let history = self
            .histories(&record, &[id])
            .await?
            .remove(&id)
            .unwrap_or_default();
        out.history = history.attempts;
        out.history_omitted = history.omitted;
        if !out.depends_on.is_empty() {
            out.inputs = self.inputs(&[id]).await?.remove(&id).unwrap_or_default();
        }
        if out.result_version > tally_core::delivery::FIRST_VERSION {
            (out.superseded, out.superseded_omitted) = self.superseded(id).await?;
        }
        Ok(out)
    }

    /// The newest results row `row_id` had before it was asked again, and
    /// how many older ones are left out.
    async fn superseded(&self, row_id: i64) -> Result<(Vec<SupersededResult>, i64)> {
        // Each row with the count of all (the window runs before LIMIT).
        #[derive(sqlx::FromRow)]
        struct Counted {
            #[sqlx(flatten)]
            kept: SupersededResult,
            all: i64,
        }
        let rows: Vec<Counted> = sqlx::query_as(
            "SELECT result_version, result, rule, reason, actor, supersede_time,
                    count(*) OVER () AS all
             FROM superseded_results WHERE row_id = $1
             ORDER BY result_version DESC LIMIT $2",
        )
        .bind(row_id)
        .bind(SUPERSEDED_SHOWN)
        .fetch_all(&self.pool)
        .await?;
        let all = rows.first().map_or(0, |r| r.all);
        let shown: Vec<SupersededResult> = rows.into_iter().map(|r| r.kept).collect();
        let omitted = all - shown.len() as i64;
        Ok((shown, omitted))
    }

    /// The dependencies of several rows as their prompts used them, by row
    /// id, each in key order.
    async fn inputs(&self, row_ids: &[i64]) -> Result<HashMap<i64, Vec<DependencyInput>>> {
        let rows: Vec<(i64, String, String, String, bool)> = sqlx::query_as(
            "SELECT e.row_id, d.key, e.name, coalesce(encode(e.used_hash, 'hex'), ''), e.changed
             FROM row_deps e JOIN rows d ON d.id = e.dep_id
             WHERE e.row_id = ANY($1) ORDER BY e.row_id, d.key",
        )
        .bind(row_ids)
        .fetch_all(&self.pool)
        .await?;
        let mut out: HashMap<i64, Vec<DependencyInput>> = HashMap::new();
        for (row_id, key, name, used_hash, changed) in rows {
            out.entry(row_id).or_default().push(DependencyInput {
                key,
                name,
                used_hash,
                changed,
            });
        }
        Ok(out)
    }

    /// The attempts of several rows, in one query, by row id, each with its
    /// cost at the ledger's price for its model and lane.
    async fn histories(
        &self,
        ledger: &LedgerRecord,
        row_ids: &[i64],
    ) -> Result<HashMap<i64, History>> {
        // The newest attempts of each row while their text adds up to
        // HISTORY_BYTES (the newest always), oldest first; `omitted` counts
        // the older ones left out.
        static SQL: LazyLock<String> =
            LazyLock::new(|| codes::render(include_str!("queries/rows/histories.sql")));
        let rows = sqlx::query_as::<_, AttemptRow>(sqlx::AssertSqlSafe(SQL.as_str()))
            .bind(ledger.id)
            .bind(row_ids)
            .bind(ATTEMPT_OVERHEAD)
            .bind(HISTORY_BYTES)
            .fetch_all(&self.pool)
            .await?;
        let mut out: HashMap<i64, History> = HashMap::new();
        for a in rows {
            let row_id = a.row_id;
            let total = a.total;
            let lane = Lane::from_code(a.lane).unwrap_or_default();
            let usage = Usage {
                input: a.input_tokens,
                output: a.output_tokens,
                thinking: a.thinking_tokens,
                cached: a.cached_tokens,
                cache_write: 0,
            };
            let cost_usd = ledger
                .policy
                .price_in(&a.model, lane)
                .map_or(0.0, |p| p.cost_of(&usage));
            let info = AttemptInfo {
                number: a.number,
                claim: a.claim_id,
                job: a.job,
                batch: a.batch,
                model: a.model,
                prompt_name: a.prompt_name,
                prompt_version: a.prompt_version,
                outcome: RowStatus::from_code(a.outcome).ok_or_else(|| {
                    StoreError::Internal(format!("attempt outcome {}", a.outcome))
                })?,
                rule: a.rule,
                budget: a.budget.and_then(Budget::from_code),
                usage,
                error: a.error,
                actor: a.actor,
                time: a.time,
                lane,
                request_id: a.request_id,
                tier: a.tier,
                cost_usd,
                cached: a.cached.map(|c| c.0),
            };
            let history = out.entry(row_id).or_default();
            history.attempts.push(info);
            history.omitted = (total - history.attempts.len() as i64).max(0);
        }
        Ok(out)
    }

    /// Rows matching `filter` in key order after `after`: at most `limit`,
    /// and with `full` set (the FULL view, with payload, result and history)
    /// at most about `full` bytes of them (the first row always). Says
    /// whether the page ended at the byte limit before the count.
    pub async fn list_rows(
        &self,
        ledger: &str,
        filter: &RowFilter,
        after: Option<&str>,
        limit: i64,
        full: Option<i64>,
    ) -> Result<RowsPage> {
        let record = self.ledger(ledger).await?;
        let mut qb = match full {
            // Sized in key order over the page only (the window runs after
            // the LIMIT): key, payload, result, error and dependencies, and
            // an estimate of the history (GetRow's bound at most).
            Some(_) => QueryBuilder::new(format!(
                "WITH held AS MATERIALIZED ({HELD}), page AS (SELECT {}, \
                 octet_length(r.key) + coalesce(octet_length(r.payload), 0) \
                 + coalesce(octet_length(r.result), 0) + coalesce(octet_length(r.response), 0) \
                 + octet_length(r.last_error) \
                 + octet_length(r.rule) + octet_length(r.model) \
                 + octet_length(array_to_string(r.depends_on, '')) \
                 + 80 * cardinality(r.depends_on) + 512 \
                 + least(r.attempts::int8 * 256, {HISTORY_BYTES}) AS size \
                 FROM rows r {} WHERE r.ledger_id = ",
                row_columns(true),
                holder(IS_HELD)
            )),
            None => select_rows(&row_columns(false), &holder(IS_HELD)),
        };
        qb.push_bind(record.id);
        if let Some(after) = after {
            qb.push(" AND r.key > ").push_bind(after.to_string());
        }
        push_filter(&mut qb, filter);
        qb.push(" ORDER BY r.key LIMIT ").push_bind(limit);
        if let Some(max_bytes) = full {
            qb.push(
                ") SELECT * FROM (SELECT p.*, sum(p.size) OVER (ORDER BY p.key) AS upto, \
                 row_number() OVER (ORDER BY p.key) AS nth, count(*) OVER () AS page_rows \
                 FROM page p) w WHERE w.nth = 1 OR w.upto <= ",
            )
            .push_bind(max_bytes)
            .push(" ORDER BY w.key");
        }
        let rows = qb.build_query_as::<RowRow>().fetch_all(&self.pool).await?;
        let fetched = rows.len();
        let page_rows = rows.iter().map(|r| r.page_rows).max().unwrap_or(0);
        let records = rows
            .into_iter()
            .map(|r| r.into_record(ledger))
            .collect::<Result<Vec<_>>>()?;
        let (mut histories, mut inputs) = if full.is_some() {
            let ids: Vec<i64> = records.iter().map(|(id, _)| *id).collect();
            let with_deps: Vec<i64> = records
                .iter()
                .filter(|(_, r)| !r.depends_on.is_empty())
                .map(|(id, _)| *id)
                .collect();
            let inputs = if with_deps.is_empty() {
                HashMap::new()
            } else {
                self.inputs(&with_deps).await?
            };
            (self.histories(&record, &ids).await?, inputs)
        } else {
            (HashMap::new(), HashMap::new())
        };
        let rows = records
            .into_iter()
            .map(|(id, mut rec)| {
                let history = histories.remove(&id).unwrap_or_default();
                rec.history = history.attempts;
                rec.history_omitted = history.omitted;
                rec.inputs = inputs.remove(&id).unwrap_or_default();
                rec
            })
            .collect();
        Ok(RowsPage {
            rows,
            cut: (fetched as i64) < page_rows,
        })
    }

    /// Counts by status, attempts and tokens summed over the history (so
    /// cost covers every attempt, not successes × price), permanent rows by
    /// rule, active jobs.
    #[tracing::instrument(
        target = "tally::trace",
        level = "debug",
        name = "store.summarize",
        skip_all
    )]
    pub async fn summarize(&self, ledger: &str) -> Result<LedgerSummary> {
        let record = self.ledger(ledger).await?;
        let mut summary = LedgerSummary::default();
        let (counts, by_rule, _) = status_counts(&self.pool, record.id).await?;
        summary.content_etag = content_etag(&self.pool, record.id).await?;
        summary.counts = counts;
        summary.permanent_by_rule = by_rule;
        let by_model: Vec<AttemptSums> = sqlx::query_as(
            // sum(int8) is numeric: held at the int8 maximum before the
            // cast, so a huge total saturates instead of failing the call.
            "SELECT model, lane, budget, count(*) AS n,
                    least(coalesce(sum(input_tokens), 0), $2)::int8 AS input,
                    least(coalesce(sum(output_tokens), 0), $2)::int8 AS output,
                    least(coalesce(sum(thinking_tokens), 0), $2)::int8 AS thinking,
                    least(coalesce(sum(cached_tokens), 0), $2)::int8 AS cached
             FROM attempts WHERE ledger_id = $1 GROUP BY 1, 2, 3 ORDER BY 1, 2",
        )
        .bind(record.id)
        .bind(i64::MAX)
        .fetch_all(&self.pool)
        .await?;
        for AttemptSums {
            model,
            lane,
            budget,
            n,
            input,
            output,
            thinking,
            cached,
        } in by_model
        {
            let u = Usage {
                input,
                output,
                thinking,
                cached,
                cache_write: 0,
            };
            summary.attempts_total += n;
            if let Some(b) = budget.and_then(Budget::from_code) {
                summary.failures[(b.code() - 1) as usize] += n;
            }
            summary.usage.add(&u);
            let lane = Lane::from_code(lane).unwrap_or_default();
            match summary.by_model.last_mut() {
                Some(m) if m.model == model && m.lane == lane => {
                    m.attempts += n;
                    m.usage.add(&u);
                }
                _ => summary.by_model.push(ModelUsage {
                    model,
                    lane,
                    attempts: n,
                    usage: u,
                }),
            }
        }
        summary.active_jobs = sqlx::query_scalar(
            "SELECT count(*) FROM jobs WHERE ledger_id = $1 AND end_time IS NULL",
        )
        .bind(record.id)
        .fetch_one(&self.pool)
        .await?;
        summary.inputs_changed = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT count(DISTINCT e.row_id) FROM row_deps e JOIN rows r ON r.id = e.row_id
             WHERE e.ledger_id = $1 AND e.changed AND r.status = {SUCCEEDED}"
        )))
        .bind(record.id)
        .fetch_one(&self.pool)
        .await?;
        Ok(summary)
    }
}

/// Counts by status as readers see them (held rows RUNNING), PERMANENT rows
/// by rule (most first), and the database's now.
/// The ledger's content etag ([`tally_core::summary::content_etag`]): its
/// rows' totals by stored status and its newest row, read in one pass.
pub(crate) async fn content_etag<'e, E: sqlx::Executor<'e, Database = Postgres>>(
    exec: E,
    ledger_id: i64,
) -> Result<String> {
    let groups: Vec<(i16, i64, i64, i64, i64)> = sqlx::query_as(
        "SELECT status, count(*), coalesce(sum(attempts), 0)::int8,
                coalesce(sum(provider_failures + content_failures + infra_failures), 0)::int8,
                max(id)
         FROM rows WHERE ledger_id = $1 GROUP BY status",
    )
    .bind(ledger_id)
    .fetch_all(exec)
    .await?;
    let newest = groups.iter().map(|g| g.4).max().unwrap_or(0);
    let totals: Vec<tally_core::summary::StatusTotals> = groups
        .into_iter()
        .map(
            |(status, rows, attempts, failures, _)| tally_core::summary::StatusTotals {
                status,
                rows,
                attempts,
                failures,
            },
        )
        .collect();
    Ok(tally_core::summary::content_etag(&totals, newest))
}

pub(crate) async fn status_counts<'e, E: sqlx::Executor<'e, Database = Postgres>>(
    exec: E,
    ledger_id: i64,
) -> Result<(LedgerCounts, Vec<(String, i64)>, Time)> {
    // Stored statuses (no stored row is RUNNING), then the held rows: each
    // taken off its stored status and counted RUNNING. A ledger holds far
    // fewer rows than it has, so this reads the held ones by id only.
    let rows: Vec<(i16, String, i64, Time)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT status, CASE WHEN status = {PERMANENT} THEN rule ELSE '' END AS rule, count(*), now()
         FROM rows WHERE ledger_id = $1 GROUP BY 1, 2
         UNION ALL
         SELECT r.status, '', -count(*), now() FROM ({HELD}) h JOIN rows r ON r.id = h.id
         GROUP BY 1
         UNION ALL
         SELECT {HELD_STATUS}::int2, '', count(*), now() FROM ({HELD}) h"
    )))
    .bind(ledger_id)
    .fetch_all(exec)
    .await?;
    let mut counts = LedgerCounts::default();
    let mut by_rule = Vec::new();
    let mut now = chrono::Utc::now();
    for (code, rule, n, t) in rows {
        now = t;
        match RowStatus::from_code(code) {
            Some(RowStatus::Pending) => counts.pending += n,
            Some(RowStatus::Running) => counts.running += n,
            Some(RowStatus::Retryable) => counts.retryable += n,
            Some(RowStatus::Succeeded) => counts.succeeded += n,
            Some(RowStatus::Permanent) => {
                counts.permanent += n;
                if n > 0 {
                    by_rule.push((rule, n));
                }
            }
            Some(RowStatus::Blocked) => counts.blocked += n,
            None => return Err(StoreError::Internal(format!("row status {code}"))),
        }
    }
    by_rule.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    Ok((counts, by_rule, now))
}

#[derive(sqlx::FromRow)]
struct AttemptSums {
    model: String,
    lane: i16,
    budget: Option<i16>,
    n: i64,
    input: i64,
    output: i64,
    thinking: i64,
    cached: i64,
}
