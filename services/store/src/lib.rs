//! All of tally's SQL. Nothing outside this crate writes a query.
//!
//! The store reads what a change needs (locking it), asks `tally-core` what
//! the change is (pure state machines), and writes the result back in
//! set-based statements guarded by the state it read: a row is settled only
//! while the claim it locked still holds it (`claims.row_ids`, migration
//! 0007). Time is the database's clock (`now()`), so replicas with skewed
//! clocks agree on leases and backoff.
//!
//! - [`Store`]: the pool and the migrator.
//! - [`ledgers`], [`enroll`], [`claims`], [`report`], [`rows`],
//!   [`redrive`], [`prompts`]: one module per job of LedgerService.
//! - [`jobs`], [`events`], [`locks`], [`alerts`]: JobService's jobs, the
//!   job event log (and its LISTEN side), run locks, ledger alerts.
//! - [`operations`]: provider operations through the monotonic reducer,
//!   their event log, and the job each one moves on.
//! - [`admission`]: whether a job may go to the provider now (shared
//!   cool-downs, the provider's batch and enqueued-token limits; the rules
//!   are in `tally_core::quota`).
//! - [`golden`]: golden rows: the set, the jobs that carry it, results
//!   and drift (the rules are in `tally_core::golden`).
//! - [`pause`]: pausing and resuming ledgers (the rules are in
//!   `tally_core::pause`).
//! - [`spend`], `capped`: spend caps' accounts, and the claim of a capped
//!   ledger (the rules are in `tally_core::spend`).
//! - [`purge`]: deleting ledgers: the mark, then the purge in bounded
//!   batches.
//! - [`notify`]: `LISTEN` connections that wake watch streams.
//! - `held`: what this process's claims hold, so a report can skip reading it.
//! - [`apply`]: the shared writer of row transitions and their effects
//!   (attempts history, the runnable queue, dependants).
//! - [`error`]: the typed errors callers map to gRPC codes.

pub mod admission;
pub mod alerts;
pub mod apply;
pub mod backlog;
mod capped;
pub mod claims;
pub mod enroll;
pub mod error;
pub mod events;
pub mod golden;
mod held;
pub mod jobs;
pub mod ledgers;
pub mod locks;
pub mod maintenance;
mod models;
pub mod notify;
pub mod operations;
pub mod pause;
pub mod prompts;
pub mod purge;
pub mod redrive;
pub mod report;
pub mod rows;
pub mod spend;
pub mod types;

pub use error::{Result, StoreError};

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgPool, Postgres, Transaction};
use std::str::FromStr;
use std::time::Duration;

/// The migrations in `migrations/` at the workspace root, embedded.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations");

/// A handle on the database. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Store {
    pool: PgPool,
    ledgers: ledgers::Cache,
    models: models::KnownModels,
    held: held::HeldCache,
    quotas: std::sync::Arc<tally_core::quota::ProviderQuotas>,
}

/// How to connect.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    pub url: String,
    pub max_connections: u32,
    pub acquire_timeout: Duration,
}

impl ConnectOptions {
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            max_connections: 16,
            acquire_timeout: Duration::from_secs(10),
        }
    }
}

impl Store {
    /// Connects lazily-verified: the first connection is opened now so a bad
    /// URL fails at start, not at the first request.
    pub async fn connect(opts: &ConnectOptions) -> Result<Self> {
        let connect = PgConnectOptions::from_str(&opts.url)
            .map_err(|e| StoreError::Unavailable(format!("bad database url: {e}")))?
            .application_name("tally");
        let pool = PgPoolOptions::new()
            .max_connections(opts.max_connections)
            .min_connections(1)
            // No ping before every query (a round trip each): a connection
            // the database dropped fails its next query as UNAVAILABLE,
            // which callers retry, and the pool replaces it.
            .test_before_acquire(false)
            .acquire_timeout(opts.acquire_timeout)
            .connect_with(connect)
            .await?;
        Ok(Self::from_pool(pool))
    }

    /// Wraps an existing pool (tests, tools).
    pub fn from_pool(pool: PgPool) -> Self {
        Self {
            pool,
            ledgers: ledgers::Cache::default(),
            models: models::KnownModels::default(),
            held: held::HeldCache::default(),
            quotas: Default::default(),
        }
    }

    /// The provider's limits CreateJob admits jobs against (default:
    /// `ProviderQuotas::default()`, Gemini's documented Tier 1 figures).
    pub fn with_provider_quotas(mut self, quotas: tally_core::quota::ProviderQuotas) -> Self {
        self.quotas = std::sync::Arc::new(quotas);
        self
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Applies pending migrations; safe to run from several replicas at once
    /// (sqlx takes an advisory lock).
    pub async fn migrate(&self) -> Result<()> {
        MIGRATOR
            .run(&self.pool)
            .await
            .map_err(|e| StoreError::Internal(format!("migration failed: {e}")))
    }

    /// One round trip: is the database answering?
    /// Runs `SELECT 1`; answers how long it waited for a pool connection
    /// (a sample of how long statements queue for one).
    pub async fn ping(&self) -> Result<std::time::Duration> {
        let start = std::time::Instant::now();
        let mut conn = self.pool.acquire().await?;
        let waited = start.elapsed();
        sqlx::query("SELECT 1").execute(&mut *conn).await?;
        Ok(waited)
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }

    pub(crate) async fn begin(&self) -> Result<Transaction<'static, Postgres>> {
        Ok(self.pool.begin().await?)
    }
}

/// Ends a transaction: commits when `out` is Ok, and otherwise rolls back
/// before returning, so a refused call has released its locks by the time
/// its caller sees the error (a dropped transaction rolls back only when its
/// connection is next used, and SKIP LOCKED readers would skip its rows).
pub(crate) async fn end_tx<T>(tx: Transaction<'static, Postgres>, out: Result<T>) -> Result<T> {
    match out {
        Ok(v) => {
            tx.commit().await?;
            Ok(v)
        }
        Err(e) => {
            tx.rollback().await?;
            Err(e)
        }
    }
}

/// A jitter sample in `[0, 1)` derived from a row and its attempt count:
/// spreads retries without a random number generator and is reproducible.
pub(crate) fn jitter_sample(row_id: i64, attempts: u32) -> f64 {
    let mut x = (row_id as u64) ^ (u64::from(attempts) << 48) ^ 0x9E37_79B9_7F4A_7C15;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    (x % 1_000_000) as f64 / 1_000_000.0
}
