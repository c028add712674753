//! RedriveRows: an operator sends PERMANENT and BLOCKED rows back to
//! PENDING with their budgets renewed, and the rows they blocked come back
//! with them, unless something else still blocks them. Asked to include
//! succeeded rows, it asks them again too ([`crate::reanswer`]).

use crate::codes::{self, BLOCKED, BLOCKED_MESSAGE, BLOCKED_RULE, PENDING};
use crate::types::{RedriveResult, RedriveTarget};
use crate::{Result, Store, StoreError, reanswer, rows};
use sqlx::types::Json;
use sqlx::{Postgres, Transaction};
use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;
use tally_core::status::RowStatus;
use tally_core::transition::REANSWER_RULE;
use tally_core::violation::Violations;

const SAMPLE_KEYS: usize = 100;

impl Store {
    /// Redrives `target`; with `include_succeeded`, asks its SUCCEEDED rows
    /// again too. With `validate_only`, computes the same answer (and what
    /// asking again would cost) and writes nothing.
    #[tracing::instrument(
        target = "tally::trace",
        level = "debug",
        name = "store.redrive",
        skip_all
    )]
    pub async fn redrive(
        &self,
        ledger: &str,
        target: &RedriveTarget,
        validate_only: bool,
        include_succeeded: bool,
        actor: &str,
        reason: &str,
    ) -> Result<RedriveResult> {
        let record = self.ledger(ledger).await?;
        let mut tx = self.begin().await?;
        crate::ledgers::hold(&mut tx, &record).await?;
        let matched: Vec<(i64, String, i16)> = match target {
            RedriveTarget::Keys(keys) => {
                let found: Vec<(i64, String, i16)> = sqlx::query_as(
                    "SELECT id, key, status FROM rows WHERE ledger_id = $1 AND key = ANY($2)
                     ORDER BY id FOR UPDATE",
                )
                .bind(record.id)
                .bind(keys)
                .fetch_all(&mut *tx)
                .await?;
                let known: HashSet<&str> = found.iter().map(|(_, k, _)| k.as_str()).collect();
                let mut v = Violations::new();
                for (i, key) in keys.iter().enumerate() {
                    if !known.contains(key.as_str()) {
                        v.add(
                            format!("keys.keys[{i}]"),
                            format!("no row {key:?} in ledgers/{ledger}"),
                        );
                    }
                }
                v.finish().map_err(StoreError::InvalidArgument)?;
                found
            }
            RedriveTarget::Filter(filter) => {
                let mut qb = rows::select_rows(&format!("r.id, r.key, {}", rows::STATUS), "");
                qb.push_bind(record.id);
                rows::push_filter(&mut qb, filter);
                qb.push(" ORDER BY r.id FOR UPDATE");
                qb.build_query_as().fetch_all(&mut *tx).await?
            }
        };
        let redrivable = |code: i16| RowStatus::from_code(code).is_some_and(|s| s.is_redrivable());
        let reanswerable = |code: i16| {
            include_succeeded && RowStatus::from_code(code).is_some_and(|s| s.is_reanswerable())
        };
        let targets: Vec<i64> = matched
            .iter()
            .filter(|(_, _, s)| redrivable(*s))
            .map(|(id, _, _)| *id)
            .collect();
        let again: Vec<i64> = matched
            .iter()
            .filter(|(_, _, s)| reanswerable(*s))
            .map(|(id, _, _)| *id)
            .collect();
        let skipped = (matched.len() - targets.len() - again.len()) as i64;

        // 0. Succeeded rows asked again first, so that their dependants
        //    redriven with them wait for their new answers.
        let message = format!("asked again by {actor}: {reason}");
        let why = reanswer::Why {
            rule: REANSWER_RULE,
            message: message.trim_end_matches(": "),
            reason,
            actor,
        };
        let reopened = reanswer::reopen(&mut tx, record.id, &again, &why).await?;
        let at_risk = reanswer::at_risk(&mut tx, &reopened).await?;

        // 1. Targets and the rows they transitively blocked back to PENDING.
        static SQL: LazyLock<String> =
            LazyLock::new(|| codes::render(include_str!("queries/redrive/reset.sql")));
        let touched: Vec<(i64, bool)> = sqlx::query_as(sqlx::AssertSqlSafe(SQL.as_str()))
            .bind(&targets)
            .fetch_all(&mut *tx)
            .await?;
        let touched_ids: Vec<i64> = touched.iter().map(|(id, _)| *id).collect();

        // 2. Whatever still has a failing dependency is blocked again (the
        //    rule is core's), with its dependants.
        let reblocked = reblock(&mut tx, &touched_ids).await?;
        crate::settle::block_dependants(&mut tx, &reblocked).await?;

        // 3. Queue what is claimable now; count the result.
        static QUEUE: LazyLock<String> = LazyLock::new(|| {
            format!(
                "WITH ready AS (
                     SELECT id, key, model, unmet_deps, depth FROM rows
                     WHERE id = ANY($2) AND status = {PENDING}
                 ),
                 queued AS (
                     INSERT INTO runnable (ledger_id, model, ready_time, row_id, depth)
                     SELECT $1, model, now(), id, depth FROM ready WHERE unmet_deps = 0
                 )
                 SELECT id, key FROM ready ORDER BY id"
            )
        });
        let pending: Vec<(i64, String)> = sqlx::query_as(sqlx::AssertSqlSafe(QUEUE.as_str()))
            .bind(record.id)
            .bind(&touched_ids)
            .fetch_all(&mut *tx)
            .await?;
        let target_set: HashSet<i64> = touched
            .iter()
            .filter(|(_, t)| *t)
            .map(|(id, _)| *id)
            .collect();
        let mut result = RedriveResult {
            skipped: skipped
                + (targets.len() as i64 - target_set.len() as i64)
                + (again.len() - reopened.len()) as i64,
            reanswered: reopened.len() as i64,
            dependants_at_risk: at_risk.len() as i64,
            ..RedriveResult::default()
        };
        let priced: Vec<i64> = if record.policy.rerun_dependants {
            reopened
                .iter()
                .copied()
                .chain(at_risk.iter().map(|(id, _)| *id))
                .collect()
        } else {
            reopened.clone()
        };
        result.estimated_cost_usd =
            reanswer::cost_again(&mut tx, record.id, &priced, &record.policy).await?;
        let keys: HashMap<i64, &str> = matched.iter().map(|(id, k, _)| (*id, k.as_str())).collect();
        for id in &reopened {
            if result.sample_keys.len() < SAMPLE_KEYS {
                result.sample_keys.push(keys[id].to_owned());
            }
        }
        result.at_risk_keys = at_risk
            .into_iter()
            .take(SAMPLE_KEYS)
            .map(|(_, key)| key)
            .collect();
        for (id, key) in &pending {
            if target_set.contains(id) {
                result.redriven += 1;
                if result.sample_keys.len() < SAMPLE_KEYS {
                    result.sample_keys.push(key.clone());
                }
            } else {
                result.unblocked += 1;
            }
        }
        // Targets re-blocked by a dependency that is still PERMANENT did not
        // go back to PENDING.
        result.skipped += target_set.len() as i64 - result.redriven;
        if validate_only {
            tx.rollback().await?;
            return Ok(result);
        }
        sqlx::query(
            "INSERT INTO redrives (ledger_id, actor, reason, target, redriven, unblocked,
                                   reanswered)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(record.id)
        .bind(actor)
        .bind(reason)
        .bind(Json(describe(target)))
        .bind(result.redriven)
        .bind(result.unblocked)
        .bind(result.reanswered)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        tracing::info!(
            ledger,
            actor,
            redriven = result.redriven,
            unblocked = result.unblocked,
            reanswered = result.reanswered,
            "rows redriven"
        );
        Ok(result)
    }
}

/// Blocks again each of `ids` that core says a dependency still blocks
/// (read after the reset, so a dependency redriven with it counts as
/// PENDING); answers the rows blocked.
async fn reblock(tx: &mut Transaction<'static, Postgres>, ids: &[i64]) -> Result<Vec<i64>> {
    let deps: Vec<(i64, Vec<i16>)> = sqlx::query_as(
        "SELECT d.row_id, array_agg(p.status) FROM row_deps d JOIN rows p ON p.id = d.dep_id
         WHERE d.row_id = ANY($1) GROUP BY d.row_id ORDER BY d.row_id",
    )
    .bind(ids)
    .fetch_all(&mut **tx)
    .await?;
    let mut blocked = Vec::new();
    for (id, codes) in deps {
        let statuses = codes
            .into_iter()
            .map(|c| {
                RowStatus::from_code(c).ok_or_else(|| {
                    StoreError::Internal(format!("a dependency of row {id} has status {c}"))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        if RowStatus::redriven(statuses) == RowStatus::Blocked {
            blocked.push(id);
        }
    }
    static BLOCK: LazyLock<String> = LazyLock::new(|| {
        format!(
            "UPDATE rows SET status = {BLOCKED}, rule = {BLOCKED_RULE}, last_error = {BLOCKED_MESSAGE}
             WHERE id = ANY($1)"
        )
    });
    if !blocked.is_empty() {
        sqlx::query(sqlx::AssertSqlSafe(BLOCK.as_str()))
            .bind(&blocked)
            .execute(&mut **tx)
            .await?;
    }
    Ok(blocked)
}

fn describe(target: &RedriveTarget) -> serde_json::Value {
    match target {
        RedriveTarget::Keys(keys) => serde_json::json!({ "keys": keys.len() }),
        RedriveTarget::Filter(f) => serde_json::json!({
            "statuses": f.statuses.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
            "rule": f.rule, "model": f.model, "prompt_name": f.prompt_name,
            "prompt_version": f.prompt_version, "job": f.job,
            "inputs_changed": f.inputs_changed,
        }),
    }
}
