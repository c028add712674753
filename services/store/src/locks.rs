//! Named run locks with an owner token and a TTL on the database clock, so
//! two copies of one nightly run cannot both start.
//!
//! Acquiring is one upsert that only overwrites an expired holder
//! (`ON CONFLICT … DO UPDATE … WHERE expire_time <= now()`): concurrent
//! acquirers queue on the row and re-check the condition against the
//! winner's version, so exactly one of them gets a token. Renew and release
//! match on the token; a lock taken over after expiry has a new token, so
//! the old owner is refused.

use crate::types::{LockAttempt, LockRecord, Time};
use crate::{Result, Store, StoreError};
use std::time::Duration;
use tally_core::names;
use uuid::Uuid;

#[derive(sqlx::FromRow)]
struct LockRow {
    name: String,
    owner: String,
    acquire_time: Time,
    expire_time: Time,
}

impl LockRow {
    fn into_record(self, token: Option<Uuid>) -> LockRecord {
        LockRecord {
            name: self.name,
            owner: self.owner,
            token,
            acquire_time: self.acquire_time,
            expire_time: self.expire_time,
        }
    }
}

fn ttl_ms(ttl: Duration) -> i64 {
    ttl.as_millis().min(i64::MAX as u128) as i64
}

fn not_owner(name: &str) -> StoreError {
    StoreError::PermissionDenied(format!(
        "{} is held under another token (taken over after it expired, or never yours)",
        names::lock_name(name)
    ))
}

impl Store {
    /// Takes lock `name` for `ttl` if it is free or expired; otherwise
    /// answers the current holder and expiry (without its token).
    pub async fn acquire_lock(
        &self,
        name: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<LockAttempt> {
        // A holder may release between our upsert and our read; then try
        // again (a lock that keeps flapping is reported as held).
        for _ in 0..3 {
            let token = Uuid::new_v4();
            let taken = sqlx::query_as::<_, LockRow>(
                "INSERT INTO locks (name, owner, token, acquire_time, expire_time)
                 VALUES ($1, $2, $3, now(), now() + $4 * interval '1 millisecond')
                 ON CONFLICT (name) DO UPDATE
                     SET owner = EXCLUDED.owner, token = EXCLUDED.token,
                         acquire_time = EXCLUDED.acquire_time, expire_time = EXCLUDED.expire_time
                     WHERE locks.expire_time <= now()
                 RETURNING name, owner, acquire_time, expire_time",
            )
            .bind(name)
            .bind(owner)
            .bind(token)
            .bind(ttl_ms(ttl))
            .fetch_optional(&self.pool)
            .await?;
            if let Some(row) = taken {
                tracing::info!(lock = %name, owner = %owner, "lock acquired");
                return Ok(LockAttempt {
                    acquired: true,
                    lock: row.into_record(Some(token)),
                });
            }
            let holder = sqlx::query_as::<_, LockRow>(
                "SELECT name, owner, acquire_time, expire_time FROM locks WHERE name = $1",
            )
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
            if let Some(row) = holder {
                return Ok(LockAttempt {
                    acquired: false,
                    lock: row.into_record(None),
                });
            }
        }
        Err(StoreError::Aborted(format!(
            "{} changed hands while being acquired; retry",
            names::lock_name(name)
        )))
    }

    /// Extends a lock to `now + ttl`, with its owner's token. A lock that
    /// expired but was not taken over may still be renewed (nobody else held
    /// it in between).
    pub async fn renew_lock(&self, name: &str, token: Uuid, ttl: Duration) -> Result<LockRecord> {
        let renewed = sqlx::query_as::<_, LockRow>(
            "UPDATE locks SET expire_time = now() + $3 * interval '1 millisecond'
             WHERE name = $1 AND token = $2
             RETURNING name, owner, acquire_time, expire_time",
        )
        .bind(name)
        .bind(token)
        .bind(ttl_ms(ttl))
        .fetch_optional(&self.pool)
        .await?;
        match renewed {
            Some(row) => Ok(row.into_record(None)),
            None if self.lock_exists(name).await? => Err(not_owner(name)),
            None => Err(StoreError::not_found("lock", names::lock_name(name))),
        }
    }

    /// Releases a lock, with its owner's token. Releasing a lock nobody
    /// holds is a no-op (a retried release succeeds).
    pub async fn release_lock(&self, name: &str, token: Uuid) -> Result<()> {
        let deleted = sqlx::query("DELETE FROM locks WHERE name = $1 AND token = $2")
            .bind(name)
            .bind(token)
            .execute(&self.pool)
            .await?
            .rows_affected();
        if deleted == 0 && self.lock_exists(name).await? {
            return Err(not_owner(name));
        }
        if deleted > 0 {
            tracing::info!(lock = %name, "lock released");
        }
        Ok(())
    }

    async fn lock_exists(&self, name: &str) -> Result<bool> {
        Ok(
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM locks WHERE name = $1)")
                .bind(name)
                .fetch_one(&self.pool)
                .await?,
        )
    }
}
