//! The accounts of spend caps (rules in `tally_core::spend`): what a capped
//! ledger's reports spent, what its claims reserve, the prompt sizes its
//! estimates need, and the alerts it sends. Claims of a capped ledger lock
//! its `ledger_spend` row first, so they are decided one at a time against
//! the spend as it is.

use crate::codes;
use crate::types::LedgerRecord;
use crate::{Result, Store};
use sqlx::{Postgres, Transaction};
use std::collections::HashMap;
use std::sync::LazyLock;
use tally_core::spend::{Amount, SpendCap};
use uuid::Uuid;

/// A capped ledger's spend, locked for the transaction.
#[derive(Debug, Clone, Copy, Default)]
pub struct Locked {
    pub spent: Amount,
    pub reserved: Amount,
    /// 0 none, 1 warning sent, 2 cap-reached sent.
    pub alerted: i16,
}

impl Locked {
    pub fn used(&self) -> Amount {
        self.spent.plus(self.reserved)
    }
}

fn amount((cost_usd, input_tokens, output_tokens): (f64, i64, i64)) -> Amount {
    Amount {
        cost_usd: tally_core::spend::usd(cost_usd),
        input_tokens,
        output_tokens,
    }
}

/// Sums held at the largest `int8` (and dollars at `MAX_SPEND_USD`): a sum
/// past them would fail the statement, and with it every claim.
const RESERVED_SQL: &str = "SELECT least(coalesce(sum(r.cost_usd * c.held), 0), 1e15)::float8,
            least(coalesce(sum(r.input_tokens::numeric * c.held), 0), 9223372036854775807)::int8,
            least(coalesce(sum(r.output_tokens::numeric * c.held), 0), 9223372036854775807)::int8
     FROM claim_reservations r JOIN claims c ON c.token = r.token
     WHERE r.ledger_id = $1 AND c.held > 0";

/// Locks the ledger's spend row (made at zero the first time) and reads
/// what is spent and reserved.
pub(crate) async fn lock(
    tx: &mut Transaction<'static, Postgres>,
    ledger_id: i64,
) -> Result<Locked> {
    sqlx::query("INSERT INTO ledger_spend (ledger_id) VALUES ($1) ON CONFLICT DO NOTHING")
        .bind(ledger_id)
        .execute(&mut **tx)
        .await?;
    let (cost, input, output, alerted): (f64, i64, i64, i16) = sqlx::query_as(
        "SELECT cost_usd, input_tokens, output_tokens, alerted FROM ledger_spend
         WHERE ledger_id = $1 FOR UPDATE",
    )
    .bind(ledger_id)
    .fetch_one(&mut **tx)
    .await?;
    let reserved: (f64, i64, i64) = sqlx::query_as(RESERVED_SQL)
        .bind(ledger_id)
        .fetch_one(&mut **tx)
        .await?;
    Ok(Locked {
        spent: amount((cost, input, output)),
        reserved: amount(reserved),
        alerted,
    })
}

/// Records that claim `token` reserved `per_row` for each row it holds.
pub(crate) async fn reserve(
    tx: &mut Transaction<'static, Postgres>,
    ledger_id: i64,
    token: Uuid,
    per_row: Amount,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO claim_reservations (token, ledger_id, cost_usd, input_tokens, output_tokens)
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(token)
    .bind(ledger_id)
    .bind(per_row.cost_usd)
    .bind(per_row.input_tokens)
    .bind(per_row.output_tokens)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// An adopted job's rows keep the reservation of the claim they move from.
pub(crate) async fn carry_reservation(
    tx: &mut Transaction<'static, Postgres>,
    from: Uuid,
    to: Uuid,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO claim_reservations (token, ledger_id, cost_usd, input_tokens, output_tokens)
         SELECT $2, ledger_id, cost_usd, input_tokens, output_tokens
         FROM claim_reservations WHERE token = $1",
    )
    .bind(from)
    .bind(to)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Re-arms the spend alerts (the spend is below the warning again).
pub(crate) async fn rearm(tx: &mut Transaction<'static, Postgres>, ledger_id: i64) -> Result<()> {
    sqlx::query("UPDATE ledger_spend SET alerted = 0 WHERE ledger_id = $1")
        .bind(ledger_id)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// Adds reported usage to what the ledger spent.
pub(crate) async fn add_spent(
    tx: &mut Transaction<'static, Postgres>,
    ledger_id: i64,
    spent: Amount,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO ledger_spend (ledger_id, cost_usd, input_tokens, output_tokens)
         VALUES ($1, $2, $3, $4)
         ON CONFLICT (ledger_id) DO UPDATE SET
             cost_usd = least(ledger_spend.cost_usd + excluded.cost_usd, 1e15),
             input_tokens = least(ledger_spend.input_tokens::numeric + excluded.input_tokens,
                                  9223372036854775807)::int8,
             output_tokens = least(ledger_spend.output_tokens::numeric + excluded.output_tokens,
                                   9223372036854775807)::int8",
    )
    .bind(ledger_id)
    .bind(spent.cost_usd)
    .bind(spent.input_tokens)
    .bind(spent.output_tokens)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Bytes of each prompt's template and system instruction (what every row
/// rendered with it adds to the request).
pub(crate) async fn prompt_bytes(
    tx: &mut Transaction<'static, Postgres>,
    names: &[String],
    versions: &[String],
) -> Result<HashMap<(String, String), u64>> {
    let rows: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT p.prompt_id, p.version,
                (octet_length(p.template) + octet_length(p.system_instruction))::int8
         FROM prompts p
         JOIN (SELECT DISTINCT name, version
               FROM unnest($1::text[], $2::text[]) AS u (name, version)) AS w
           ON p.prompt_id = w.name AND p.version = w.version",
    )
    .bind(names)
    .bind(versions)
    .fetch_all(&mut **tx)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(n, v, b)| ((n, v), b.max(0) as u64))
        .collect())
}

/// Sets the alert level reached, and queues its alert when the policy has
/// an alert URL.
pub(crate) async fn alert(
    tx: &mut Transaction<'static, Postgres>,
    ledger: &LedgerRecord,
    level: i16,
    kind: &str,
    body: &serde_json::Value,
) -> Result<()> {
    sqlx::query("UPDATE ledger_spend SET alerted = $2 WHERE ledger_id = $1")
        .bind(ledger.id)
        .bind(level)
        .execute(&mut **tx)
        .await?;
    if ledger.policy.alert_url.is_empty() {
        return Ok(());
    }
    queue_alert(tx, ledger, kind, body).await
}

/// Queues an alert to the ledger's `alert_url` (the alert sender delivers
/// it, signed, with retries).
pub(crate) async fn queue_alert(
    tx: &mut Transaction<'static, Postgres>,
    ledger: &LedgerRecord,
    kind: &str,
    body: &serde_json::Value,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO alert_outbox (ledger_id, msg_id, kind, url, body)
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(ledger.id)
    .bind(format!("msg_{}", Uuid::new_v4().simple()))
    .bind(kind)
    .bind(&ledger.policy.alert_url)
    .bind(body.to_string())
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// The spend of those of `ids` that have a spend cap (for the backlog
/// metrics): one statement, reservations summed per ledger.
pub(crate) async fn of_ledgers(pool: &sqlx::PgPool, ids: &[i64]) -> Result<Vec<(i64, SpendView)>> {
    type Row = (
        i64,
        sqlx::types::Json<SpendCap>,
        f64,
        i64,
        i64,
        f64,
        i64,
        i64,
    );
    static SQL: LazyLock<String> =
        LazyLock::new(|| codes::render(include_str!("queries/spend/views.sql")));
    let rows: Vec<Row> = sqlx::query_as(sqlx::AssertSqlSafe(SQL.as_str()))
        .bind(ids)
        .fetch_all(pool)
        .await?;
    Ok(rows
        .into_iter()
        .filter(|r| r.1.limits_anything())
        .map(|(id, cap, sc, si, so, rc, ri, ro)| {
            (
                id,
                SpendView {
                    cap: cap.0,
                    spent: amount((sc, si, so)),
                    reserved: amount((rc, ri, ro)),
                },
            )
        })
        .collect())
}

/// A capped ledger's spend as SummarizeLedger shows it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpendView {
    pub cap: SpendCap,
    pub spent: Amount,
    pub reserved: Amount,
}

impl Store {
    /// Spent and reserved of a ledger with a spend cap (`None` without one).
    pub async fn spend(&self, ledger: &LedgerRecord) -> Result<Option<SpendView>> {
        let Some(cap) = ledger.policy.cap() else {
            return Ok(None);
        };
        let spent: Option<(f64, i64, i64)> = sqlx::query_as(
            "SELECT cost_usd, input_tokens, output_tokens FROM ledger_spend WHERE ledger_id = $1",
        )
        .bind(ledger.id)
        .fetch_optional(&self.pool)
        .await?;
        let reserved: (f64, i64, i64) = sqlx::query_as(RESERVED_SQL)
            .bind(ledger.id)
            .fetch_one(&self.pool)
            .await?;
        Ok(Some(SpendView {
            cap: *cap,
            spent: spent.map(amount).unwrap_or_default(),
            reserved: amount(reserved),
        }))
    }
}
