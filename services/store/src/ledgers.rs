//! Ledgers and their policies.

use crate::types::{LedgerRecord, Time};
use crate::{Result, Store, StoreError};
use sqlx::types::Json;
use sqlx::{Executor, Postgres};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tally_core::policy::Policy;

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

    fn put(&self, record: &LedgerRecord) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() > 10_000 {
            map.retain(|_, (at, _)| at.elapsed() < CACHE_TTL);
        }
        map.insert(record.name.clone(), (Instant::now(), record.clone()));
    }

    fn forget(&self, name: &str) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
    }
}

#[derive(sqlx::FromRow)]
struct LedgerRow {
    id: i64,
    name: String,
    policy: Json<Policy>,
    etag: i64,
    create_time: Time,
    update_time: Time,
}

impl From<LedgerRow> for LedgerRecord {
    fn from(r: LedgerRow) -> Self {
        LedgerRecord {
            id: r.id,
            name: r.name,
            policy: r.policy.0,
            etag: r.etag,
            create_time: r.create_time,
            update_time: r.update_time,
        }
    }
}

const COLUMNS: &str = "id, name, policy, etag, create_time, update_time";

/// Looks a ledger up by id, inside any executor (pool or transaction).
pub(crate) async fn load<'e, E: Executor<'e, Database = Postgres>>(
    exec: E,
    name: &str,
) -> Result<LedgerRecord> {
    let sql = format!("SELECT {COLUMNS} FROM ledgers WHERE name = $1");
    sqlx::query_as::<_, LedgerRow>(sqlx::AssertSqlSafe(sql))
        .bind(name)
        .fetch_optional(exec)
        .await?
        .map(Into::into)
        .ok_or_else(|| StoreError::not_found("ledger", format!("ledgers/{name}")))
}

impl Store {
    pub async fn create_ledger(&self, name: &str, policy: &Policy) -> Result<LedgerRecord> {
        let sql = format!(
            "INSERT INTO ledgers (name, policy) VALUES ($1, $2)
             ON CONFLICT (name) DO NOTHING RETURNING {COLUMNS}"
        );
        sqlx::query_as::<_, LedgerRow>(sqlx::AssertSqlSafe(sql))
            .bind(name)
            .bind(Json(policy))
            .fetch_optional(&self.pool)
            .await?
            .map(Into::into)
            .ok_or_else(|| StoreError::AlreadyExists {
                kind: "ledger",
                name: format!("ledgers/{name}"),
            })
    }

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

    /// Ledgers in name order after `after`.
    pub async fn list_ledgers(&self, after: Option<&str>, limit: i64) -> Result<Vec<LedgerRecord>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM ledgers WHERE ($1::text IS NULL OR name > $1)
             ORDER BY name LIMIT $2"
        );
        let rows = sqlx::query_as::<_, LedgerRow>(sqlx::AssertSqlSafe(sql))
            .bind(after)
            .bind(limit)
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
             WHERE name = $1 AND etag = $3 RETURNING {COLUMNS}"
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
