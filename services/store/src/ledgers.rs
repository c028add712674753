//! Ledgers and their policies.
//!
//! A ledger being deleted (`delete_time` set, see [`crate::purge`]) is
//! invisible here except to [`Store::describe_ledger`] and
//! [`Store::list_ledgers`] with `show_deleted`: every work path loads its
//! ledger through [`load`] or [`Store::ledger`], which answer NOT_FOUND.

use crate::types::{Deletion, LedgerRecord, Pause, Time};
use crate::{Result, Store, StoreError};
use sqlx::types::Json;
use sqlx::{Executor, Postgres};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tally_core::pause::PauseReason;
use tally_core::policy::Policy;
use tally_core::scope::Patterns;

/// How long a ledger read stays fresh in a replica. Ids never change; a
/// policy update made through another replica takes effect here within this
/// long (through this replica, at once).
pub const CACHE_TTL: Duration = Duration::from_secs(1);

/// Recently read ledgers, so the hot paths (enroll, claim, report) do not
/// read the ledger row on every call.
#[derive(Clone, Debug, Default)]
pub(crate) struct Cache(Arc<Mutex<HashMap<String, (Instant, LedgerRecord)>>>);

impl Cache {
    fn get(&self, name: &str) -> Option<LedgerRecord> {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.get(name)
            .filter(|(at, _)| at.elapsed() < CACHE_TTL)
            .map(|(_, l)| l.clone())
    }

    pub(crate) fn put(&self, record: &LedgerRecord) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() > 10_000 {
            map.retain(|_, (at, _)| at.elapsed() < CACHE_TTL);
        }
        map.insert(record.name.clone(), (Instant::now(), record.clone()));
    }

    pub(crate) fn forget(&self, name: &str) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
    }
}

#[derive(sqlx::FromRow)]
pub(crate) struct LedgerRow {
    id: i64,
    name: String,
    policy: Json<Policy>,
    etag: i64,
    create_time: Time,
    update_time: Time,
    pause_reason: Option<String>,
    pause_message: Option<String>,
    pause_actor: Option<String>,
    pause_time: Option<Time>,
    // Only in queries that join `ledger_purges` (DESCRIBE_COLUMNS).
    #[sqlx(default)]
    delete_time: Option<Time>,
    #[sqlx(default)]
    forced: Option<bool>,
    #[sqlx(default)]
    rows_total: Option<i64>,
    #[sqlx(default)]
    rows_purged: Option<i64>,
    #[sqlx(default)]
    claims_expired: Option<i32>,
    #[sqlx(default)]
    jobs_abandoned: Option<i32>,
}

impl From<LedgerRow> for LedgerRecord {
    fn from(r: LedgerRow) -> Self {
        // The CHECK constraints on `ledgers` keep reason and time
        // together and the reason in the set PauseReason parses.
        let pause = match (
            r.pause_reason.as_deref().and_then(PauseReason::parse),
            r.pause_time,
        ) {
            (Some(reason), Some(time)) => Some(Pause {
                reason,
                message: r.pause_message.unwrap_or_default(),
                actor: r.pause_actor.unwrap_or_default(),
                time,
            }),
            _ => None,
        };
        let deletion = r.delete_time.map(|delete_time| Deletion {
            delete_time,
            forced: r.forced.unwrap_or(false),
            rows_total: r.rows_total,
            rows_purged: r.rows_purged.unwrap_or(0),
            claims_expired: r.claims_expired.unwrap_or(0),
            jobs_abandoned: r.jobs_abandoned.unwrap_or(0),
        });
        LedgerRecord {
            id: r.id,
            name: r.name,
            policy: r.policy.0,
            etag: r.etag,
            create_time: r.create_time,
            update_time: r.update_time,
            deletion,
            pause,
        }
    }
}

pub(crate) const COLUMNS: &str = "id, name, policy, etag, create_time, update_time, \
     pause_reason, pause_message, pause_actor, pause_time";

/// A ledger with its deletion, if any: `FROM ledgers l LEFT JOIN
/// ledger_purges p ON p.ledger_id = l.id`.
const DESCRIBE_COLUMNS: &str = "l.id, l.name, l.policy, l.etag, l.create_time, l.update_time, \
     l.pause_reason, l.pause_message, l.pause_actor, l.pause_time, l.delete_time, p.forced, p.rows_total, p.rows_purged, p.claims_expired, p.jobs_abandoned";

/// Looks a live ledger up by id, inside any executor (pool or
/// transaction). A ledger being deleted is NOT_FOUND.
pub(crate) async fn load<'e, E: Executor<'e, Database = Postgres>>(
    exec: E,
    name: &str,
) -> Result<LedgerRecord> {
    let sql = format!("SELECT {COLUMNS} FROM ledgers WHERE name = $1 AND delete_time IS NULL");
    sqlx::query_as::<_, LedgerRow>(sqlx::AssertSqlSafe(sql))
        .bind(name)
        .fetch_optional(exec)
        .await?
        .map(Into::into)
        .ok_or_else(|| StoreError::not_found("ledger", format!("ledgers/{name}")))
}

/// Holds the live ledger against a delete until `tx` ends: FOR KEY SHARE,
/// so writers of its rows do not wait on each other, a DeleteLedger (FOR
/// UPDATE) waits for them, and they, once a delete has committed, find the
/// ledger deleting and answer NOT_FOUND. Enrollments and redrives take it,
/// so a delete's content-etag check sees everything they wrote.
pub(crate) async fn hold(
    tx: &mut sqlx::Transaction<'static, Postgres>,
    record: &LedgerRecord,
) -> Result<()> {
    let live: Option<bool> =
        sqlx::query_scalar("SELECT delete_time IS NULL FROM ledgers WHERE id = $1 FOR KEY SHARE")
            .bind(record.id)
            .fetch_optional(&mut **tx)
            .await?;
    match live {
        Some(true) => Ok(()),
        Some(false) | None => Err(StoreError::not_found(
            "ledger",
            format!("ledgers/{}", record.name),
        )),
    }
}

impl Store {
    pub async fn create_ledger(&self, name: &str, policy: &Policy) -> Result<LedgerRecord> {
        let sql = format!(
            "INSERT INTO ledgers (name, policy) VALUES ($1, $2)
             ON CONFLICT (name) DO NOTHING RETURNING {COLUMNS}"
        );
        let created = sqlx::query_as::<_, LedgerRow>(sqlx::AssertSqlSafe(sql))
            .bind(name)
            .bind(Json(policy))
            .fetch_optional(&self.pool)
            .await?;
        if let Some(row) = created {
            return Ok(row.into());
        }
        // Taken: by a live ledger, or by one whose purge has not finished.
        let deleting: Option<Option<Time>> =
            sqlx::query_scalar("SELECT delete_time FROM ledgers WHERE name = $1")
                .bind(name)
                .fetch_optional(&self.pool)
                .await?;
        Err(match deleting {
            Some(Some(_)) => StoreError::LedgerDeleting {
                name: format!("ledgers/{name}"),
            },
            Some(None) | None => StoreError::AlreadyExists {
                kind: "ledger",
                name: format!("ledgers/{name}"),
            },
        })
    }

    /// A live ledger (NOT_FOUND while it is being deleted).
    pub async fn get_ledger(&self, name: &str) -> Result<LedgerRecord> {
        let record = load(&self.pool, name).await?;
        self.ledgers.put(&record);
        Ok(record)
    }

    /// A ledger as read at most [`CACHE_TTL`] ago: for the hot paths, which
    /// need its id and policy but not the latest etag.
    pub(crate) async fn ledger(&self, name: &str) -> Result<LedgerRecord> {
        match self.ledgers.get(name) {
            Some(record) => Ok(record),
            None => self.get_ledger(name).await,
        }
    }

    /// A ledger, live or being deleted (then with its [`Deletion`]): what
    /// GetLedger shows.
    pub async fn describe_ledger(&self, name: &str) -> Result<LedgerRecord> {
        let sql = format!(
            "SELECT {DESCRIBE_COLUMNS} FROM ledgers l
             LEFT JOIN ledger_purges p ON p.ledger_id = l.id WHERE l.name = $1"
        );
        sqlx::query_as::<_, LedgerRow>(sqlx::AssertSqlSafe(sql))
            .bind(name)
            .fetch_optional(&self.pool)
            .await?
            .map(Into::into)
            .ok_or_else(|| StoreError::not_found("ledger", format!("ledgers/{name}")))
    }

    /// Live ledgers in name order after `after`; with `show_deleted`, those
    /// being deleted too; only those inside `scope`.
    pub async fn list_ledgers(
        &self,
        after: Option<&str>,
        limit: i64,
        show_deleted: bool,
        scope: &Patterns,
    ) -> Result<Vec<LedgerRecord>> {
        let sql = format!(
            "SELECT {DESCRIBE_COLUMNS} FROM ledgers l
             LEFT JOIN ledger_purges p ON p.ledger_id = l.id
             WHERE ($1::text IS NULL OR l.name > $1) AND ($3 OR l.delete_time IS NULL)
               AND tally_in_scope(l.name, $4, $5)
             ORDER BY l.name LIMIT $2"
        );
        let rows = sqlx::query_as::<_, LedgerRow>(sqlx::AssertSqlSafe(sql))
            .bind(after)
            .bind(limit)
            .bind(show_deleted)
            .bind(scope.exact())
            .bind(scope.prefixes())
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.into_iter().map(Into::into).collect())
    }

    /// Replaces the policy, if `expected_etag` (when given) still matches.
    /// The caller merges the update mask into the current policy; the etag
    /// makes that read-modify-write safe.
    pub async fn update_ledger(
        &self,
        name: &str,
        policy: &Policy,
        expected_etag: i64,
    ) -> Result<LedgerRecord> {
        let sql = format!(
            "UPDATE ledgers SET policy = $2, etag = etag + 1, update_time = now()
             WHERE name = $1 AND etag = $3 AND delete_time IS NULL RETURNING {COLUMNS}"
        );
        self.ledgers.forget(name);
        let updated = sqlx::query_as::<_, LedgerRow>(sqlx::AssertSqlSafe(sql))
            .bind(name)
            .bind(Json(policy))
            .bind(expected_etag)
            .fetch_optional(&self.pool)
            .await?;
        match updated {
            Some(r) => {
                let record: LedgerRecord = r.into();
                self.ledgers.put(&record);
                Ok(record)
            }
            None => {
                // Either gone or changed under us: tell which.
                self.get_ledger(name).await?;
                Err(StoreError::Aborted(format!(
                    "ledgers/{name} changed since it was read (etag mismatch); read it again and retry"
                )))
            }
        }
    }
}
