//! DeliveryService's store: a ledger's named consumers, reading its results
//! log ([`crate::results`]) from their own cursors, with leases, acks,
//! nacks, dead letters and resets; and what the webhook sender needs. The
//! rules (what a receive hands out, what a nack does) are
//! `tally_core::delivery`'s; here they are loaded and written.
//!
//! A receive is one transaction under the consumer's row lock (so two
//! instances of a consumer never lease the same result): load the visible
//! leases and the results after the cursor → [`delivery::plan_receive`] →
//! one statement writes the leases, dead letters and cursor → the rows'
//! content is read for the answer. Acks and nacks touch only the leases
//! they name (no consumer lock): an ack deletes a lease, whoever holds it
//! now, so a result is acknowledged once however many instances saw it.

use crate::codes::{self, FINISHED};
use crate::types::{LedgerRecord, Time};
use crate::{Result, Store, StoreError};
use sqlx::Row;
use std::sync::LazyLock;
use std::time::Duration;
use tally_core::delivery::{
    self, Candidate, DeadReason, Kind, NackFate, Position, ReceiveLimits, RowNow, Settings, Start,
    WebhookTarget,
};
use tally_core::status::RowStatus;
use tally_core::violation::FieldViolation;

/// Bytes a result adds to an answer besides its texts (field tags, numbers,
/// times).
pub const RESULT_OVERHEAD: i64 = 128;

/// Dead letters, leases or delivery log entries deleted per transaction
/// when a consumer is deleted.
const DELETE_BATCH: i64 = 5_000;

/// A consumer, with its cursor, what it holds and its lag.
#[derive(Debug, Clone)]
pub struct ConsumerRecord {
    pub id: i64,
    pub ledger_id: i64,
    pub ledger: String,
    pub name: String,
    pub kind: Kind,
    pub visibility: Duration,
    pub max_deliveries: u32,
    pub webhook: Option<WebhookTarget>,
    /// Every result at or below it was handed out, acknowledged or passed
    /// over.
    pub read_position: Position,
    /// Every result at or below it is acknowledged, dead-lettered or passed
    /// over.
    pub acked_position: Position,
    pub in_flight: i64,
    pub dead_letters: i64,
    /// Results of the ledger after `acked_position`.
    pub lag_rows: i64,
    /// When the oldest of them was logged.
    pub oldest_unacked: Option<Time>,
    /// Webhook consumers: failed POSTs in a row, and when the next may go.
    pub failures: i32,
    pub next_post_time: Option<Time>,
    pub actor: String,
    pub create_time: Time,
    pub update_time: Time,
    /// The database's clock when this was read (for ages).
    pub now: Time,
}

/// A consumer to make.
#[derive(Debug, Clone)]
pub struct NewConsumer<'a> {
    pub ledger: &'a str,
    pub name: &'a str,
    pub settings: &'a Settings,
    /// Webhook consumers: the `whsec_` secret POSTs are signed with.
    pub secret: Option<&'a str>,
    pub start: Start,
    pub actor: &'a str,
}

/// What one receive asks for.
#[derive(Debug, Clone, Copy)]
pub struct ReceiveRequest {
    pub max_rows: u32,
    pub max_bytes: u64,
    /// Overrides the consumer's visibility timeout for what this hands out.
    pub visibility: Option<Duration>,
    pub include_payload: bool,
}

/// One result handed out.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    pub position: Position,
    pub key: String,
    pub version: i32,
    pub status: RowStatus,
    pub result: Option<String>,
    pub rule: String,
    pub last_error: String,
    pub model: String,
    pub prompt_name: String,
    pub prompt_version: String,
    pub attempts: i32,
    pub usage: crate::types::Usage,
    /// When the row reached this result.
    pub finish_time: Time,
    /// Times handed out, this one included.
    pub deliveries: i32,
    /// Visible again (to any instance) from then, unless acknowledged.
    pub visible_time: Time,
    /// With `include_payload`.
    pub payload: Option<String>,
}

/// What a receive handed out, and the cursor after it.
#[derive(Debug, Clone, Default)]
pub struct Received {
    pub deliveries: Vec<Delivery>,
    pub read_position: Position,
    /// Leases dead-lettered by this receive (handed out `max_deliveries`
    /// times).
    pub dead_lettered: usize,
    /// Results passed over as superseded.
    pub superseded: usize,
}

/// An ack's outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Acked {
    /// Leases acknowledged now.
    pub acked: usize,
    /// Positions named that were not leased (acknowledged before, by this
    /// or another instance, dead-lettered, or passed over).
    pub not_leased: usize,
}

/// A nack's outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Nacked {
    pub requeued: usize,
    pub dead_lettered: usize,
    pub not_leased: usize,
}

/// A dead letter.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetter {
    pub position: Position,
    /// `None` when the row is gone.
    pub key: Option<String>,
    pub version: i32,
    pub deliveries: i32,
    pub reason: String,
    pub time: Time,
}

/// A webhook consumer due for a POST, taken for it (`next_post_time` moved
/// to the end of [`delivery::WEBHOOK_LEASE`], so other replicas leave it).
#[derive(Debug, Clone)]
pub struct DueWebhook {
    pub id: i64,
    pub ledger_id: i64,
    pub ledger: String,
    pub name: String,
    pub url: String,
    pub secret: String,
    pub batch: u32,
    pub failures: i32,
}

/// One POST of a webhook consumer, for its delivery log.
#[derive(Debug, Clone)]
pub struct PostRecord {
    pub message_id: String,
    pub rows: i32,
    pub first: Position,
    pub last: Position,
    pub http_status: Option<u16>,
    pub error: String,
    pub duration: Duration,
}

/// An entry of a webhook consumer's delivery log.
#[derive(Debug, Clone, PartialEq)]
pub struct PostLogEntry {
    pub id: i64,
    pub message_id: String,
    pub rows: i32,
    pub first: Position,
    pub last: Position,
    pub http_status: Option<i32>,
    pub error: String,
    pub duration_ms: i64,
    pub time: Time,
}

fn ms(d: Duration) -> i64 {
    d.as_millis().min(i64::MAX as u128) as i64
}

fn render(sql: &str) -> String {
    let bits = delivery::ORDINAL_BITS;
    let mask = (1i64 << bits) - 1;
    codes::render_with(
        sql,
        &[
            ("ORDINAL_BITS", &bits),
            ("ORDINAL_MASK", &mask),
            ("RESULT_SIZE", &result_size(4, 5)),
            ("WEBHOOK", &Kind::Webhook.code()),
        ],
    )
}

/// What a result adds to an answer, as SQL over `r` (its row), parameter
/// `payload` (whether payloads are sent) and parameter `overhead`.
fn result_size(payload: u8, overhead: u8) -> String {
    format!(
        "coalesce(octet_length(r.key) + coalesce(octet_length(r.result), 0)
                  + octet_length(r.rule) + octet_length(r.last_error) + octet_length(r.model)
                  + octet_length(r.prompt_name) + octet_length(r.prompt_version)
                  + CASE WHEN ${payload} THEN octet_length(r.payload) ELSE 0 END, 0) + ${overhead}"
    )
}

static VIEW: LazyLock<String> =
    LazyLock::new(|| render(include_str!("queries/consumers/view.sql")));

#[derive(sqlx::FromRow)]
struct ConsumerRow {
    id: i64,
    ledger_id: i64,
    ledger: String,
    name: String,
    kind: i16,
    visibility_ms: i64,
    max_deliveries: i32,
    read_position: i64,
    webhook_url: Option<String>,
    webhook_batch: Option<i32>,
    failures: i32,
    next_post_time: Option<Time>,
    actor: String,
    create_time: Time,
    update_time: Time,
    in_flight: i64,
    dead_letters: i64,
    acked: i64,
    lag_rows: i64,
    oldest_unacked: Option<Time>,
    now: Time,
}

impl TryFrom<ConsumerRow> for ConsumerRecord {
    type Error = StoreError;

    fn try_from(r: ConsumerRow) -> Result<Self> {
        let kind = Kind::from_code(r.kind).ok_or_else(|| {
            StoreError::Internal(format!("consumer {} has kind {}", r.id, r.kind))
        })?;
        let position = |raw: i64| {
            Position::parse(raw).map_err(|e| {
                StoreError::Internal(format!("consumer {} has position {raw}: {e}", r.id))
            })
        };
        Ok(ConsumerRecord {
            id: r.id,
            ledger_id: r.ledger_id,
            ledger: r.ledger,
            name: r.name,
            kind,
            visibility: Duration::from_millis(r.visibility_ms.max(0) as u64),
            max_deliveries: r.max_deliveries.max(0) as u32,
            webhook: r.webhook_url.map(|url| WebhookTarget {
                url,
                batch: r.webhook_batch.unwrap_or(0).max(0) as u32,
            }),
            read_position: position(r.read_position)?,
            acked_position: position(r.acked)?,
            in_flight: r.in_flight,
            dead_letters: r.dead_letters,
            lag_rows: r.lag_rows.max(0),
            oldest_unacked: r.oldest_unacked,
            failures: r.failures,
            next_post_time: r.next_post_time,
            actor: r.actor,
            create_time: r.create_time,
            update_time: r.update_time,
            now: r.now,
        })
    }
}

fn consumer_name(ledger: &str, name: &str) -> String {
    format!("ledgers/{ledger}/consumers/{name}")
}

/// The position a start names, in `exec`'s view of the log. A saved
/// position past the ledger's last logged result is refused (INVALID_ARGUMENT
/// on `field`): results logged later could sort before it and be skipped.
async fn start_position<'e, E: sqlx::Executor<'e, Database = sqlx::Postgres>>(
    exec: E,
    ledger_id: i64,
    start: Start,
    field: &str,
) -> Result<Position> {
    if start == Start::Beginning {
        return Ok(Position::ORIGIN);
    }
    let head: Option<(i64, i32)> = sqlx::query_as(
        "SELECT seq, n FROM result_log WHERE ledger_id = $1 ORDER BY seq DESC LIMIT 1",
    )
    .bind(ledger_id)
    .fetch_optional(exec)
    .await?;
    let head = head
        .and_then(|(seq, n)| Position::new(seq, n.max(0) as u32))
        .unwrap_or(Position::ORIGIN);
    match start {
        Start::After(p) if p > head => Err(StoreError::InvalidArgument(
            vec![FieldViolation::new(
                format!("{field}.after_position"),
                format!(
                    "{} is past the ledger's last result ({}): use a position a consumer \
                     of this ledger was given, or its acked_position",
                    p.raw(),
                    head.raw()
                ),
            )]
            .into(),
        )),
        Start::After(p) => Ok(p),
        Start::Beginning | Start::Now => Ok(head),
    }
}

/// A consumer's id and lock, inside `tx`: NOT_FOUND when it does not exist.
struct Locked {
    id: i64,
    read_position: Position,
    visibility: Duration,
    max_deliveries: u32,
    in_flight: i64,
}

impl Store {
    /// Makes a consumer; ALREADY_EXISTS when the ledger has one of that name,
    /// FAILED_PRECONDITION past [`delivery::MAX_CONSUMERS_PER_LEDGER`].
    pub async fn create_consumer(&self, req: &NewConsumer<'_>) -> Result<ConsumerRecord> {
        let ledger = self.ledger(req.ledger).await?;
        let mut tx = self.begin().await?;
        let out = async {
            crate::ledgers::hold(&mut tx, &ledger).await?;
            let count: i64 =
                sqlx::query_scalar("SELECT count(*) FROM consumers WHERE ledger_id = $1")
                    .bind(ledger.id)
                    .fetch_one(&mut *tx)
                    .await?;
            if count >= delivery::MAX_CONSUMERS_PER_LEDGER {
                return Err(StoreError::precondition(
                    "TOO_MANY_CONSUMERS",
                    format!(
                        "ledgers/{} has {count} consumers, the most a ledger may have; delete one first",
                        req.ledger
                    ),
                ));
            }
            let start = start_position(&mut *tx, ledger.id, req.start, "start").await?;
            let s = req.settings;
            let inserted = sqlx::query(
                "INSERT INTO consumers (ledger_id, name, kind, visibility_ms, max_deliveries,
                                        read_position, webhook_url, webhook_secret, webhook_batch,
                                        actor)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
                 ON CONFLICT (ledger_id, name) DO NOTHING",
            )
            .bind(ledger.id)
            .bind(req.name)
            .bind(s.kind.code())
            .bind(ms(s.visibility))
            .bind(s.max_deliveries as i32)
            .bind(start.raw())
            .bind(s.webhook.as_ref().map(|w| w.url.as_str()))
            .bind(req.secret.filter(|_| s.webhook.is_some()))
            .bind(s.webhook.as_ref().map(|w| w.batch as i32))
            .bind(req.actor)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if inserted == 0 {
                return Err(StoreError::AlreadyExists {
                    kind: "consumer",
                    name: consumer_name(req.ledger, req.name),
                });
            }
            Ok(())
        }
        .await;
        crate::end_tx(tx, out).await?;
        tracing::info!(ledger = %req.ledger, consumer = %req.name, kind = req.settings.kind.as_str(), actor = %req.actor, "consumer created");
        self.get_consumer(req.ledger, req.name).await
    }

    /// One consumer, with its cursor, leases, dead letters and lag.
    pub async fn get_consumer(&self, ledger: &str, name: &str) -> Result<ConsumerRecord> {
        let record = self.ledger(ledger).await?;
        let sql = format!("{} WHERE c.ledger_id = $1 AND c.name = $2", *VIEW);
        sqlx::query_as::<_, ConsumerRow>(sqlx::AssertSqlSafe(sql))
            .bind(record.id)
            .bind(name)
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| StoreError::not_found("consumer", consumer_name(ledger, name)))?
            .try_into()
    }

    /// A ledger's consumers in name order, after `after`.
    pub async fn list_consumers(
        &self,
        ledger: &str,
        after: Option<&str>,
        limit: i64,
    ) -> Result<Vec<ConsumerRecord>> {
        let record = self.ledger(ledger).await?;
        let sql = format!(
            "{} WHERE c.ledger_id = $1 AND c.name > $2 ORDER BY c.name LIMIT $3",
            *VIEW
        );
        sqlx::query_as::<_, ConsumerRow>(sqlx::AssertSqlSafe(sql))
            .bind(record.id)
            .bind(after.unwrap_or(""))
            .bind(limit)
            .fetch_all(&self.pool)
            .await?
            .into_iter()
            .map(TryInto::try_into)
            .collect()
    }

    /// Every consumer of every live ledger (for `/metrics`).
    pub async fn consumer_lags(&self) -> Result<Vec<ConsumerRecord>> {
        let sql = format!(
            "{} WHERE l.delete_time IS NULL ORDER BY l.name, c.name",
            *VIEW
        );
        sqlx::query_as::<_, ConsumerRow>(sqlx::AssertSqlSafe(sql))
            .fetch_all(&self.pool)
            .await?
            .into_iter()
            .map(TryInto::try_into)
            .collect()
    }

    /// Deletes a consumer with its leases, dead letters and delivery log,
    /// in bounded transactions (a delete cut short leaves the consumer, with
    /// less; deleting again finishes it).
    pub async fn delete_consumer(&self, ledger: &str, name: &str) -> Result<()> {
        let record = self.ledger(ledger).await?;
        let id = self.consumer_id(&record, name).await?;
        for table in [
            "consumer_dead_letters",
            "consumer_leases",
            "webhook_deliveries",
        ] {
            let sql = format!(
                "DELETE FROM {table} WHERE ctid = ANY(ARRAY(
                     SELECT ctid FROM {table} WHERE consumer_id = $1 LIMIT $2))"
            );
            loop {
                let n = sqlx::query(sqlx::AssertSqlSafe(sql.as_str()))
                    .bind(id)
                    .bind(DELETE_BATCH)
                    .execute(&self.pool)
                    .await?
                    .rows_affected();
                if (n as i64) < DELETE_BATCH {
                    break;
                }
            }
        }
        let n = sqlx::query("DELETE FROM consumers WHERE id = $1")
            .bind(id)
            .execute(&self.pool)
            .await?
            .rows_affected();
        if n == 0 {
            return Err(StoreError::not_found(
                "consumer",
                consumer_name(ledger, name),
            ));
        }
        tracing::info!(ledger, consumer = name, "consumer deleted");
        Ok(())
    }

    /// Moves a consumer's cursor to `to`; every lease goes (what was handed
    /// out and not acknowledged is handed out again if it is after `to`).
    /// Dead letters stay.
    pub async fn reset_consumer(
        &self,
        ledger: &str,
        name: &str,
        to: Start,
        actor: &str,
    ) -> Result<ConsumerRecord> {
        let record = self.ledger(ledger).await?;
        let mut tx = self.begin().await?;
        let out = async {
            let locked = lock(&mut tx, &record, name).await?;
            let position = start_position(&mut *tx, record.id, to, "to").await?;
            sqlx::query("DELETE FROM consumer_leases WHERE consumer_id = $1")
                .bind(locked.id)
                .execute(&mut *tx)
                .await?;
            sqlx::query(
                "UPDATE consumers SET read_position = $2, failures = 0, next_post_time = NULL,
                        update_time = now()
                 WHERE id = $1",
            )
            .bind(locked.id)
            .bind(position.raw())
            .execute(&mut *tx)
            .await?;
            Ok((locked.read_position, position))
        }
        .await;
        let (from, to) = crate::end_tx(tx, out).await?;
        tracing::info!(ledger, consumer = name, from = %from, to = %to, actor, "consumer reset");
        self.get_consumer(ledger, name).await
    }

    /// Hands out what consumer `name` may receive now (see the module
    /// documentation); an empty answer when there is nothing.
    pub async fn receive(
        &self,
        ledger: &str,
        name: &str,
        req: &ReceiveRequest,
    ) -> Result<Received> {
        let record = self.ledger(ledger).await?;
        let mut tx = self.begin().await?;
        let out = async {
            let locked = lock(&mut tx, &record, name).await?;
            receive_locked(&mut tx, record.id, &locked, req).await
        }
        .await;
        crate::end_tx(tx, out).await
    }

    /// Acknowledges `positions` and, with `up_to`, every lease at or below
    /// it. A position after the cursor was never handed out: refused
    /// (INVALID_ARGUMENT), nothing written.
    pub async fn ack(
        &self,
        ledger: &str,
        name: &str,
        positions: &[Position],
        up_to: Option<Position>,
    ) -> Result<Acked> {
        let id = self.handed_out(ledger, name, positions, up_to).await?;
        self.ack_by_id(id, positions, up_to).await
    }

    /// [`Store::ack`] of a consumer known by id, without the check against
    /// its cursor (the webhook sender acknowledges what it was handed).
    pub async fn ack_by_id(
        &self,
        id: i64,
        positions: &[Position],
        up_to: Option<Position>,
    ) -> Result<Acked> {
        let raw: Vec<i64> = positions.iter().map(|p| p.raw()).collect();
        // The statement's own transaction commits without waiting for its
        // WAL to reach the disk: a database crash may lose the last acks,
        // and their results are then handed out again (never lost), which
        // a consumer's sink is ready for; the flush is most of an ack's
        // cost otherwise (milliseconds on a plain disk).
        let acked: Vec<i64> = sqlx::query_scalar(
            "WITH unflushed AS (SELECT set_config('synchronous_commit', 'off', true))
             DELETE FROM consumer_leases
             WHERE consumer_id = $1 AND (position = ANY($2) OR position <= $3)
               AND EXISTS (SELECT 1 FROM unflushed)
             RETURNING position",
        )
        .bind(id)
        .bind(&raw)
        .bind(up_to.map_or(-1, Position::raw))
        .fetch_all(&self.pool)
        .await?;
        let named: std::collections::HashSet<i64> = raw.iter().copied().collect();
        let found = acked.iter().filter(|p| named.contains(p)).count();
        Ok(Acked {
            acked: acked.len(),
            not_leased: named.len() - found,
        })
    }

    /// Gives leased results back: visible again after a delay, or
    /// dead-lettered (see [`delivery::nack`]). Positions after the cursor
    /// are refused as for an ack.
    pub async fn nack(
        &self,
        ledger: &str,
        name: &str,
        positions: &[Position],
        fate: &NackFate,
    ) -> Result<Nacked> {
        let id = self.handed_out(ledger, name, positions, None).await?;
        self.nack_by_id(id, positions, fate, "").await
    }

    /// [`Store::nack`] of a consumer known by id; `error` is kept with a
    /// requeued lease (a webhook's failure).
    pub async fn nack_by_id(
        &self,
        id: i64,
        positions: &[Position],
        fate: &NackFate,
        error: &str,
    ) -> Result<Nacked> {
        let raw: Vec<i64> = positions.iter().map(|p| p.raw()).collect();
        let named: std::collections::HashSet<i64> = raw.iter().copied().collect();
        let hit = match fate {
            NackFate::Retry(after) => sqlx::query_scalar::<_, i64>(
                "UPDATE consumer_leases
                 SET visible_time = now() + $3 * interval '1 millisecond', last_error = $4
                 WHERE consumer_id = $1 AND position = ANY($2)
                 RETURNING position",
            )
            .bind(id)
            .bind(&raw)
            .bind(ms(*after))
            .bind(error)
            .fetch_all(&self.pool)
            .await?
            .len(),
            NackFate::Dead(reason) => sqlx::query_scalar::<_, i64>(
                "WITH dead AS (
                     DELETE FROM consumer_leases WHERE consumer_id = $1 AND position = ANY($2)
                     RETURNING consumer_id, position, row_id, version, deliveries
                 )
                 INSERT INTO consumer_dead_letters
                     (consumer_id, position, row_id, version, deliveries, reason)
                 SELECT consumer_id, position, row_id, version, deliveries, $3 FROM dead
                 ON CONFLICT (consumer_id, position) DO UPDATE
                     SET row_id = EXCLUDED.row_id, version = EXCLUDED.version,
                         deliveries = EXCLUDED.deliveries, reason = EXCLUDED.reason,
                         time = now()
                 RETURNING position",
            )
            .bind(id)
            .bind(&raw)
            .bind(reason.describe())
            .fetch_all(&self.pool)
            .await?
            .len(),
        };
        let (requeued, dead_lettered) = match fate {
            NackFate::Retry(_) => (hit, 0),
            NackFate::Dead(_) => (0, hit),
        };
        Ok(Nacked {
            requeued,
            dead_lettered,
            not_leased: named.len() - hit,
        })
    }

    /// A consumer's dead letters in position order, after `after`.
    pub async fn list_dead_letters(
        &self,
        ledger: &str,
        name: &str,
        after: Position,
        limit: i64,
    ) -> Result<Vec<DeadLetter>> {
        let record = self.ledger(ledger).await?;
        let id = self.consumer_id(&record, name).await?;
        let rows: Vec<(i64, Option<String>, i32, i32, String, Time)> = sqlx::query_as(
            "SELECT d.position, r.key, d.version, d.deliveries, d.reason, d.time
             FROM consumer_dead_letters d LEFT JOIN rows r ON r.id = d.row_id
             WHERE d.consumer_id = $1 AND d.position > $2
             ORDER BY d.position LIMIT $3",
        )
        .bind(id)
        .bind(after.raw())
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|(position, key, version, deliveries, reason, time)| {
                Ok(DeadLetter {
                    position: Position::parse(position).map_err(StoreError::Internal)?,
                    key,
                    version,
                    deliveries,
                    reason,
                    time,
                })
            })
            .collect()
    }

    /// A webhook consumer's delivery log, newest first, before entry
    /// `before` (0: from the newest).
    pub async fn list_webhook_posts(
        &self,
        ledger: &str,
        name: &str,
        before: i64,
        limit: i64,
    ) -> Result<Vec<PostLogEntry>> {
        let record = self.ledger(ledger).await?;
        let id = self.consumer_id(&record, name).await?;
        #[derive(sqlx::FromRow)]
        struct PostRow {
            id: i64,
            message_id: String,
            rows: i32,
            first_position: i64,
            last_position: i64,
            http_status: Option<i32>,
            error: String,
            duration_ms: i64,
            time: Time,
        }
        let rows: Vec<PostRow> = sqlx::query_as(
            "SELECT id, message_id, rows, first_position, last_position, http_status, error,
                    duration_ms, time
             FROM webhook_deliveries
             WHERE consumer_id = $1 AND ($2 = 0 OR id < $2)
             ORDER BY id DESC LIMIT $3",
        )
        .bind(id)
        .bind(before)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|r| {
                Ok(PostLogEntry {
                    id: r.id,
                    message_id: r.message_id,
                    rows: r.rows,
                    first: Position::parse(r.first_position).map_err(StoreError::Internal)?,
                    last: Position::parse(r.last_position).map_err(StoreError::Internal)?,
                    http_status: r.http_status,
                    error: r.error,
                    duration_ms: r.duration_ms,
                    time: r.time,
                })
            })
            .collect()
    }

    /// Takes up to `limit` webhook consumers of live ledgers that are due
    /// (not backing off, not taken by another sender) and have something to
    /// send: a visible lease, or a result after the cursor.
    pub async fn take_due_webhooks(&self, limit: i64) -> Result<Vec<DueWebhook>> {
        static DUE: LazyLock<String> = LazyLock::new(|| {
            render(
                "WITH due AS (
                     SELECT c.id FROM consumers c JOIN ledgers l ON l.id = c.ledger_id
                     WHERE c.kind = {{WEBHOOK}} AND l.delete_time IS NULL
                       AND (c.next_post_time IS NULL OR c.next_post_time <= now())
                       AND (EXISTS (SELECT 1 FROM consumer_leases x
                                    WHERE x.consumer_id = c.id AND x.visible_time <= now())
                            OR EXISTS (SELECT 1 FROM result_log e
                                       WHERE e.ledger_id = c.ledger_id
                                         AND e.seq >= c.read_position >> {{ORDINAL_BITS}}
                                         AND ((e.seq << {{ORDINAL_BITS}}) | e.n) > c.read_position))
                     ORDER BY c.next_post_time NULLS FIRST, c.id
                     LIMIT $1
                     FOR UPDATE OF c SKIP LOCKED
                 )
                 UPDATE consumers c SET next_post_time = now() + $2 * interval '1 millisecond'
                 FROM due, ledgers l
                 WHERE c.id = due.id AND l.id = c.ledger_id
                 RETURNING c.id, c.ledger_id, l.name AS ledger, c.name, c.webhook_url AS url,
                           c.webhook_secret AS secret, c.webhook_batch AS batch, c.failures",
            )
        });
        #[derive(sqlx::FromRow)]
        struct DueRow {
            id: i64,
            ledger_id: i64,
            ledger: String,
            name: String,
            url: String,
            secret: String,
            batch: i32,
            failures: i32,
        }
        let rows: Vec<DueRow> = sqlx::query_as(sqlx::AssertSqlSafe(DUE.as_str()))
            .bind(limit)
            .bind(ms(delivery::WEBHOOK_LEASE))
            .fetch_all(&self.pool)
            .await?;
        Ok(rows
            .into_iter()
            .map(|r| DueWebhook {
                id: r.id,
                ledger_id: r.ledger_id,
                ledger: r.ledger,
                name: r.name,
                url: r.url,
                secret: r.secret,
                batch: r.batch.max(1) as u32,
                failures: r.failures,
            })
            .collect())
    }

    /// Receives for a webhook consumer taken with
    /// [`Store::take_due_webhooks`] (by id: its ledger may not be cached).
    pub async fn receive_for_webhook(&self, due: &DueWebhook, max_bytes: u64) -> Result<Received> {
        let mut tx = self.begin().await?;
        let out = async {
            let locked = lock_by_id(&mut tx, due.id).await?;
            let req = ReceiveRequest {
                max_rows: due.batch,
                max_bytes,
                visibility: Some(delivery::WEBHOOK_LEASE),
                include_payload: false,
            };
            receive_locked(&mut tx, due.ledger_id, &locked, &req).await
        }
        .await;
        crate::end_tx(tx, out).await
    }

    /// Records a POST of a webhook consumer in its delivery log (keeping the
    /// newest [`delivery::DELIVERY_LOG_KEPT`]).
    pub async fn record_webhook_post(&self, consumer_id: i64, post: &PostRecord) -> Result<()> {
        sqlx::query(
            "WITH logged AS (
                 INSERT INTO webhook_deliveries (consumer_id, message_id, rows, first_position,
                                                 last_position, http_status, error, duration_ms)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             )
             DELETE FROM webhook_deliveries
             WHERE consumer_id = $1 AND id <= (
                 SELECT id FROM webhook_deliveries WHERE consumer_id = $1
                 ORDER BY id DESC OFFSET $9 - 1 LIMIT 1)",
        )
        .bind(consumer_id)
        .bind(&post.message_id)
        .bind(post.rows)
        .bind(post.first.raw())
        .bind(post.last.raw())
        .bind(post.http_status.map(i32::from))
        .bind(&post.error)
        .bind(ms(post.duration))
        .bind(delivery::DELIVERY_LOG_KEPT)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Releases a webhook consumer after its turn, with its count of
    /// failed POSTs in a row: due again at once (`retry_in` `None`), or
    /// after `retry_in`.
    pub async fn webhook_turn_over(
        &self,
        consumer_id: i64,
        failures: i32,
        retry_in: Option<Duration>,
    ) -> Result<()> {
        sqlx::query(
            "UPDATE consumers
             SET failures = $2,
                 next_post_time = CASE WHEN $3 < 0 THEN NULL
                                       ELSE now() + $3 * interval '1 millisecond' END
             WHERE id = $1",
        )
        .bind(consumer_id)
        .bind(failures)
        .bind(retry_in.map_or(-1, ms))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The id of consumer `name`, once `positions` and `up_to` are checked
    /// against its cursor: a position after it was never handed out
    /// (INVALID_ARGUMENT).
    async fn handed_out(
        &self,
        ledger: &str,
        name: &str,
        positions: &[Position],
        up_to: Option<Position>,
    ) -> Result<i64> {
        let record = self.ledger(ledger).await?;
        let (id, read): (i64, i64) = sqlx::query_as(
            "SELECT id, read_position FROM consumers WHERE ledger_id = $1 AND name = $2",
        )
        .bind(record.id)
        .bind(name)
        .fetch_optional(&self.pool)
        .await?
        .ok_or_else(|| StoreError::not_found("consumer", consumer_name(ledger, name)))?;
        let read = Position::parse(read).map_err(StoreError::Internal)?;
        check_handed_out(positions, up_to, read)?;
        Ok(id)
    }

    async fn consumer_id(&self, ledger: &LedgerRecord, name: &str) -> Result<i64> {
        sqlx::query_scalar("SELECT id FROM consumers WHERE ledger_id = $1 AND name = $2")
            .bind(ledger.id)
            .bind(name)
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| StoreError::not_found("consumer", consumer_name(&ledger.name, name)))
    }
}

/// Refuses positions after the cursor (never handed out).
fn check_handed_out(positions: &[Position], up_to: Option<Position>, read: Position) -> Result<()> {
    let mut v = tally_core::violation::Violations::new();
    for (i, p) in positions.iter().enumerate() {
        if let Err(why) = delivery::check_ack_up_to(*p, read) {
            v.add(format!("positions[{i}]"), why);
        }
    }
    if let Some(up_to) = up_to
        && let Err(why) = delivery::check_ack_up_to(up_to, read)
    {
        v.add("up_to_position", why);
    }
    v.finish().map_err(StoreError::InvalidArgument)
}

const LOCK_COLUMNS: &str = "c.id, c.read_position, c.visibility_ms, c.max_deliveries,
     (SELECT count(*) FROM consumer_leases x WHERE x.consumer_id = c.id)";

type LockRow = (i64, i64, i64, i32, i64);

fn locked(row: LockRow) -> Result<Locked> {
    let (id, read, visibility_ms, max_deliveries, in_flight) = row;
    Ok(Locked {
        id,
        read_position: Position::parse(read).map_err(StoreError::Internal)?,
        visibility: Duration::from_millis(visibility_ms.max(0) as u64),
        max_deliveries: max_deliveries.max(0) as u32,
        in_flight,
    })
}

/// Locks consumer `name` of `ledger` for a receive or a reset.
async fn lock(
    tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
    ledger: &LedgerRecord,
    name: &str,
) -> Result<Locked> {
    let sql = format!(
        "SELECT {LOCK_COLUMNS} FROM consumers c WHERE c.ledger_id = $1 AND c.name = $2 FOR UPDATE"
    );
    let row: Option<LockRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(ledger.id)
        .bind(name)
        .fetch_optional(&mut **tx)
        .await?;
    locked(row.ok_or_else(|| StoreError::not_found("consumer", consumer_name(&ledger.name, name)))?)
}

async fn lock_by_id(
    tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
    id: i64,
) -> Result<Locked> {
    // A consumer of a ledger being deleted sends nothing more.
    let sql = format!(
        "SELECT {LOCK_COLUMNS} FROM consumers c JOIN ledgers l ON l.id = c.ledger_id
         WHERE c.id = $1 AND l.delete_time IS NULL FOR UPDATE OF c"
    );
    let row: Option<LockRow> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(id)
        .fetch_optional(&mut **tx)
        .await?;
    locked(row.ok_or_else(|| StoreError::not_found("consumer", format!("consumer {id}")))?)
}

type CandidateRow = (i64, i64, i32, i32, Option<i16>, Option<i32>, i64);

fn candidate(row: CandidateRow) -> Result<Candidate> {
    let (position, row_id, version, deliveries, status, result_version, size) = row;
    let now = match (status, result_version) {
        (Some(code), Some(result_version)) => Some(RowNow {
            status: RowStatus::from_code(code)
                .ok_or_else(|| StoreError::Internal(format!("row {row_id} has status {code}")))?,
            result_version,
        }),
        _ => None,
    };
    Ok(Candidate {
        position: Position::parse(position).map_err(StoreError::Internal)?,
        row_id,
        version,
        deliveries,
        now,
        size: size.max(0) as u64,
    })
}

/// Load → decide (core) → write, under the consumer's lock.
async fn receive_locked(
    tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
    ledger_id: i64,
    c: &Locked,
    req: &ReceiveRequest,
) -> Result<Received> {
    static AGAIN: LazyLock<String> = LazyLock::new(|| {
        format!(
            "SELECT x.position, x.row_id, x.version, x.deliveries, r.status, r.result_version,
                    {}
             FROM (SELECT * FROM consumer_leases
                   WHERE consumer_id = $1 AND visible_time <= now()
                   ORDER BY visible_time, position LIMIT $2) x
             LEFT JOIN rows r ON r.id = x.row_id
             ORDER BY x.visible_time, x.position",
            result_size(3, 4)
        )
    });
    static FRESH: LazyLock<String> =
        LazyLock::new(|| render(include_str!("queries/consumers/fresh.sql")));
    static LEASE: LazyLock<String> =
        LazyLock::new(|| render(include_str!("queries/consumers/lease.sql")));

    let again: Vec<CandidateRow> = sqlx::query_as(sqlx::AssertSqlSafe(AGAIN.as_str()))
        .bind(c.id)
        .bind(i64::from(req.max_rows))
        .bind(req.include_payload)
        .bind(RESULT_OVERHEAD)
        .fetch_all(&mut **tx)
        .await?;
    let again = again
        .into_iter()
        .map(candidate)
        .collect::<Result<Vec<_>>>()?;
    let room = delivery::MAX_IN_FLIGHT - c.in_flight;
    let fresh: Vec<Candidate> = if room > 0 {
        sqlx::query_as::<_, (i64, i64, i32, Option<i16>, Option<i32>, i64)>(sqlx::AssertSqlSafe(
            FRESH.as_str(),
        ))
        .bind(ledger_id)
        .bind(c.read_position.raw())
        .bind(i64::from(req.max_rows))
        .bind(req.include_payload)
        .bind(RESULT_OVERHEAD)
        .fetch_all(&mut **tx)
        .await?
        .into_iter()
        .map(|(p, row_id, version, status, rv, size)| {
            candidate((p, row_id, version, 0, status, rv, size))
        })
        .collect::<Result<_>>()?
    } else {
        Vec::new()
    };
    let plan = delivery::plan_receive(
        &again,
        &fresh,
        &ReceiveLimits {
            max_rows: req.max_rows,
            max_bytes: req.max_bytes,
            max_deliveries: c.max_deliveries,
            room,
        },
    );
    let positions = |from: &[Candidate], idx: &[usize]| -> Vec<i64> {
        idx.iter().map(|i| from[*i].position.raw()).collect()
    };
    let redeliver = positions(&again, &plan.redeliver);
    let new_positions = positions(&fresh, &plan.deliver);
    let new_rows: Vec<i64> = plan.deliver.iter().map(|i| fresh[*i].row_id).collect();
    let new_versions: Vec<i32> = plan.deliver.iter().map(|i| fresh[*i].version).collect();
    let dropped = positions(&again, &plan.drop_leases);
    let dead = positions(&again, &plan.dead);
    let visibility = req.visibility.unwrap_or(c.visibility);
    let leased: Vec<(i64, i32, Time)> = sqlx::query_as(sqlx::AssertSqlSafe(LEASE.as_str()))
        .bind(c.id)
        .bind(ms(visibility))
        .bind(&redeliver)
        .bind(&new_positions)
        .bind(&new_rows)
        .bind(&new_versions)
        .bind(&dropped)
        .bind(&dead)
        .bind(DeadReason::MaxDeliveries(c.max_deliveries).describe())
        .bind(plan.read_position.map(Position::raw))
        .fetch_all(&mut **tx)
        .await?;
    let handed: Vec<&Candidate> = plan
        .handed_out()
        .map(|(i, again_)| if again_ { &again[i] } else { &fresh[i] })
        .collect();
    let leases: std::collections::HashMap<i64, (i32, Time)> = leased
        .into_iter()
        .map(|(p, deliveries, visible)| (p, (deliveries, visible)))
        .collect();
    let deliveries = content(tx, &handed, &leases, req.include_payload).await?;
    let superseded = plan.drop_leases.len()
        + fresh
            .iter()
            .take_while(|f| plan.read_position.is_some_and(|p| f.position <= p))
            .filter(|f| !f.current())
            .count();
    Ok(Received {
        deliveries,
        read_position: plan.read_position.unwrap_or(c.read_position),
        dead_lettered: plan.dead.len(),
        superseded,
    })
}

/// The content of the results handed out, in the order handed out.
async fn content(
    tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
    handed: &[&Candidate],
    leases: &std::collections::HashMap<i64, (i32, Time)>,
    include_payload: bool,
) -> Result<Vec<Delivery>> {
    if handed.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<i64> = handed.iter().map(|c| c.row_id).collect();
    static SQL: LazyLock<String> = LazyLock::new(|| {
        format!(
            "SELECT r.id, r.key, r.status, r.result, r.rule, r.last_error, r.model,
                    r.prompt_name, r.prompt_version, r.attempts, r.input_tokens,
                    r.output_tokens, r.thinking_tokens, r.cached_tokens, r.update_time,
                    CASE WHEN $2 THEN r.payload END
             FROM rows r
             JOIN unnest($1::int8[], $3::int4[]) AS u(id, version)
               ON r.id = u.id AND r.result_version = u.version
             WHERE r.status IN ({FINISHED})"
        )
    });
    let versions: Vec<i32> = handed.iter().map(|c| c.version).collect();
    let rows = sqlx::query(sqlx::AssertSqlSafe(SQL.as_str()))
        .bind(&ids)
        .bind(include_payload)
        .bind(&versions)
        .fetch_all(&mut **tx)
        .await?;
    let mut by_id = std::collections::HashMap::with_capacity(rows.len());
    for r in rows {
        by_id.insert(r.try_get::<i64, _>(0)?, r);
    }
    handed
        .iter()
        // Left out: a row redriven between the plan's read and this one (it
        // has no result at this version any more; its lease is dropped as
        // superseded by a later receive), and a lease acknowledged by
        // another instance meanwhile (its renewal found nothing).
        .filter(|c| by_id.contains_key(&c.row_id) && leases.contains_key(&c.position.raw()))
        .map(|c| {
            let r = &by_id[&c.row_id];
            let code: i16 = r.try_get(2)?;
            let (deliveries, visible_time) = leases[&c.position.raw()];
            Ok(Delivery {
                position: c.position,
                key: r.try_get(1)?,
                version: c.version,
                status: RowStatus::from_code(code)
                    .ok_or_else(|| StoreError::Internal(format!("status {code}")))?,
                result: r.try_get(3)?,
                rule: r.try_get(4)?,
                last_error: r.try_get(5)?,
                model: r.try_get(6)?,
                prompt_name: r.try_get(7)?,
                prompt_version: r.try_get(8)?,
                attempts: r.try_get(9)?,
                usage: crate::types::Usage {
                    input: r.try_get(10)?,
                    output: r.try_get(11)?,
                    thinking: r.try_get(12)?,
                    cached: r.try_get(13)?,
                    cache_write: 0,
                },
                finish_time: r.try_get(14)?,
                deliveries,
                visible_time,
                payload: r.try_get(15)?,
            })
        })
        .collect()
}
