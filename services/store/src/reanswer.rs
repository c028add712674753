//! Re-answers: a SUCCEEDED row asked again (`Event::Reanswer`), by an
//! operator's redrive that includes succeeded rows, or because a dependency
//! whose answer it used answered differently and the ledger re-runs
//! dependants (`Policy::rerun_dependants`; otherwise the edge is marked
//! `changed` and counted). The result replaced is kept, never overwritten.

use crate::codes;
use crate::{Result, StoreError};
use sqlx::{Postgres, Transaction};
use std::sync::LazyLock;
use tally_core::lane::Lane;
use tally_core::policy::Policy;
use tally_core::transition::{DEPENDENCY_CHANGED_MESSAGE, DEPENDENCY_CHANGED_RULE};

/// Why rows are asked again, as recorded with each result kept.
pub(crate) struct Why<'a> {
    /// The rule shown on the row until it is answered.
    pub rule: &'a str,
    /// Its message.
    pub message: &'a str,
    pub reason: &'a str,
    pub actor: &'a str,
}

macro_rules! statement {
    ($file:literal) => {{
        static SQL: LazyLock<String> =
            LazyLock::new(|| codes::render(include_str!(concat!("queries/reanswer/", $file))));
        sqlx::AssertSqlSafe(SQL.as_str())
    }};
}

/// Asks again each of the SUCCEEDED rows `ids` of ledger `ledger_id` that no
/// queued or held dependant waits behind; answers those reopened. Each
/// reopened row's dependants wait for it again, and it is queued unless it
/// waits for a dependency itself.
pub(crate) async fn reopen(
    tx: &mut Transaction<'static, Postgres>,
    ledger_id: i64,
    ids: &[i64],
    why: &Why<'_>,
) -> Result<Vec<i64>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let reopened: Vec<i64> = sqlx::query_scalar(statement!("reopen.sql"))
        .bind(ledger_id)
        .bind(ids)
        .bind(why.rule)
        .bind(why.message)
        .bind(why.reason)
        .bind(why.actor)
        .fetch_all(&mut **tx)
        .await?;
    if reopened.is_empty() {
        return Ok(reopened);
    }
    sqlx::query(statement!("wait.sql"))
        .bind(&reopened)
        .execute(&mut **tx)
        .await?;
    sqlx::query(statement!("queue.sql"))
        .bind(&reopened)
        .bind(ledger_id)
        .execute(&mut **tx)
        .await?;
    Ok(reopened)
}

/// After rows `settled` of ledger `ledger_id` were answered again: the
/// dependants that used another answer than the one each has now are asked
/// again where the ledger's policy says so, and otherwise (or while a row
/// after them is queued or held) marked `changed`.
pub(crate) async fn dependants_changed(
    tx: &mut Transaction<'static, Postgres>,
    ledger_id: i64,
    settled: &[i64],
) -> Result<()> {
    let edges: Vec<(i64, i64, String)> = sqlx::query_as(statement!("changed.sql"))
        .bind(settled)
        .fetch_all(&mut **tx)
        .await?;
    if edges.is_empty() {
        return Ok(());
    }
    let rerun: Option<bool> =
        sqlx::query_scalar("SELECT (policy->>'rerun_dependants')::bool FROM ledgers WHERE id = $1")
            .bind(ledger_id)
            .fetch_one(&mut **tx)
            .await?;
    let mut asked = Vec::new();
    if rerun.unwrap_or(false) {
        let mut dependants: Vec<i64> = edges.iter().map(|(_, d, _)| *d).collect();
        dependants.dedup();
        let mut keys: Vec<&str> = edges.iter().map(|(_, _, k)| k.as_str()).collect();
        keys.sort_unstable();
        keys.dedup();
        let reason = format!("{} answered differently", keys.join(", "));
        let why = Why {
            rule: DEPENDENCY_CHANGED_RULE,
            message: DEPENDENCY_CHANGED_MESSAGE,
            reason: &reason,
            actor: "tally",
        };
        asked = reopen(tx, ledger_id, &dependants, &why).await?;
    }
    let (marked_deps, marked_rows): (Vec<i64>, Vec<i64>) = edges
        .iter()
        .filter(|(_, d, _)| !asked.contains(d))
        .map(|(p, d, _)| (*p, *d))
        .unzip();
    if !marked_rows.is_empty() {
        sqlx::query(
            "UPDATE row_deps e SET changed = true
             FROM unnest($1::int8[], $2::int8[]) AS x(dep_id, row_id)
             WHERE e.dep_id = x.dep_id AND e.row_id = x.row_id",
        )
        .bind(&marked_deps)
        .bind(&marked_rows)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

/// The SUCCEEDED rows that used, directly or through each other, an answer
/// of rows `ids`, with their keys, in id order.
pub(crate) async fn at_risk(
    tx: &mut Transaction<'static, Postgres>,
    ids: &[i64],
) -> Result<Vec<(i64, String)>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    Ok(sqlx::query_as(statement!("at_risk.sql"))
        .bind(ids)
        .fetch_all(&mut **tx)
        .await?)
}

/// What asking rows `ids` again costs, in USD, at `policy`'s prices: each
/// row's last successful attempt again, in the lane it ran in (0 for a row
/// whose model has no price).
pub(crate) async fn cost_again(
    tx: &mut Transaction<'static, Postgres>,
    ledger_id: i64,
    ids: &[i64],
    policy: &Policy,
) -> Result<f64> {
    if ids.is_empty() {
        return Ok(0.0);
    }
    let used: Vec<(String, i16, i64, i64, i64, i64)> = sqlx::query_as(statement!("last_usage.sql"))
        .bind(ledger_id)
        .bind(ids)
        .fetch_all(&mut **tx)
        .await?;
    let mut total = 0.0;
    for (model, lane, input, output, thinking, cached) in used {
        let lane = Lane::from_code(lane)
            .ok_or_else(|| StoreError::Internal(format!("an attempt's lane is {lane}")))?;
        if let Some(price) = policy.price_in(&model, lane) {
            total += price.cost(input, output, thinking, cached);
        }
    }
    Ok(tally_core::money::usd(total))
}
