//! All of tally's SQL. Nothing outside this crate writes a query.
//!
//! The store reads what a change needs (locking it), asks `tally-core` what
//! the change is (pure state machines), and writes the result back in
//! set-based statements guarded by the state it read: a row is settled only
//! while the claim it locked still holds it (`claims.row_ids`).
//! Time is the database's clock (`now()`), so replicas with skewed clocks agree on leases and backoff.
//!
//! Which file holds what, from the bottom layer up (a module uses only
//! modules of its own layer listed before it, or of layers below; there is
//! no import circle):
//!
//! 1. Foundations, used by everything above:
//!    - [`error`]: the typed errors callers map to gRPC codes, and the one
//!      place SQLSTATEs are decoded; [`types`]: plain records in and out.
//!    - `codes`: statuses, states and the sets of them (claimable,
//!      blockable, …) as SQL reads them, from `tally-core`: no statement
//!      holds a bare number (a test reads every statement to keep it so).
//!      Long statements live in `queries/…/*.sql`, each loaded next to
//!      the one function that binds it and filled in by `codes::render`.
//!    - `copy_binary`: the stream a binary `COPY … FROM STDIN` reads.
//!    - `fence`: locking and fencing: a claim, the rows it holds, a job
//!      (claim first, then job, then rows) and the checks that a writer's
//!      claim is live and is its job's.
//!    - `job_view`: the job read model (one job as GetJob and the job event
//!      log show it).
//!    - [`ledgers`] (with its cache), `models` (known ledger models).
//! 2. Rules and writers shared by several services:
//!    - `settle`: the one writer of row transitions: settles rows of one
//!      claim in a guarded statement, records attempts, requeues, carries
//!      effects to dependants; and `transitions`, a system event (release,
//!      expiry, job failure) through core's row state machine.
//!    - [`event_log`]: what the commit-ordered logs share: ordering
//!      by commit, the `NOTIFY` hint, the one `LISTEN` connection;
//!      [`events`]: the job event log (appending, reading); `results`:
//!      each ledger's results log, appended to by every settlement that
//!      finishes rows.
//!    - `abandon`: closing a job that never reached the provider.
//!    - [`pause`]: pausing and resuming ledgers (rules in `tally_core::pause`).
//!    - [`spend`]: spend caps' accounts (rules in `tally_core::spend`).
//!    - [`admission`]: whether a job may go to the provider now (rules in
//!      `tally_core::quota`); [`capacity`]: the account's requests and
//!      tokens per minute handed to synchronous claims (rules in
//!      `tally_core::capacity`).
//! 3. LedgerService, one module per job:
//!    - [`prompts`], [`enroll`] (with `enroll::copy`, its rows by `COPY`),
//!      [`rows`], [`redrive`]; `reanswer`: SUCCEEDED rows asked again
//!      (their old results kept) and the dependants whose inputs changed.
//!    - `rescue`: claims whose lease ran out (its condition is also the
//!      claim statement's).
//!    - `forecast`: each lane's turnaround from the ledger's history, and
//!      the depths a claim's lane takes now (rules in `tally_core::route`);
//!    - [`claims`]: the claim statement, extending, releasing;
//!      `claim_cache`: what this process's claims hold, so a report can
//!      skip reading it; `capped`: the claim of a capped ledger;
//!      [`fill`]: the claim of a whole batch, which may wait for more rows.
//!    - [`report`]: one pipeline: load the rows named (from the claim
//!      cache, or read under the claim's lock) → judge (one pure core
//!      function, `tally_core::report::judge`) → write (the guarded
//!      one-statement write, or the locked settle).
//!    - [`golden`]: golden rows: the set, the jobs that carry it, results
//!      and drift (rules in `tally_core::golden`); [`cache`]: the result
//!      cache (rules and key in `tally_core::cache`), hits settled through
//!      [`report`].
//!    - [`purge`]: deleting ledgers: the mark, then bounded batches.
//!    - [`alerts`]: ledger alerts and their outbox; [`backlog`]: what
//!      `/metrics` shows of each ledger; [`maintenance`]: the runnable
//!      queue's head.
//! 4. JobService and OperationsService:
//!    - [`operations`]: provider operations through the monotonic reducer
//!      (`records`: what goes in and out; `ingest`: the write path; `read`:
//!      the readers; `job_link`: the job each operation moves on).
//!    - [`jobs`]: jobs made from claims, their submission, adoption and
//!      close; [`holders`]: the process behind each worker name, taking
//!      over a gone holder's claims, the jobs a worker would wait for;
//!      [`unresolved`]: a lost create its search cannot resolve, shown on
//!      the job.
//!    - [`locks`]: named run locks.
//!    - [`media`]: the media uploads register (files uploaded for rows'
//!      media, and the jobs that reference them).
//! 5. DeliveryService:
//!    - [`consumers`]: a ledger's named consumers reading its results log
//!      (cursors, leases, acks, nacks, dead letters, resets) and what the
//!      webhook sender needs (rules in `tally_core::delivery`).
//! - [`Store`] (below): the pool, the caches and the migrator.

mod abandon;
pub mod admission;
pub mod alerts;
pub mod backlog;
pub mod cache;
pub mod capacity;
mod capped;
mod claim_cache;
pub mod claims;
mod codes;
pub mod consumers;
mod copy_binary;
pub mod enroll;
pub mod error;
pub mod event_log;
pub mod events;
mod fence;
pub mod fill;
pub mod forecast;
pub mod golden;
pub mod holders;
mod job_view;
pub mod jobs;
pub mod ledgers;
pub mod locks;
pub mod maintenance;
pub mod media;
mod models;
pub mod operations;
pub mod pause;
pub mod prompts;
pub mod purge;
mod reanswer;
pub mod redrive;
pub mod report;
mod rescue;
mod results;
pub mod rows;
mod settle;
pub mod spend;
pub mod types;
pub mod unresolved;

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
    claim_cache: claim_cache::ClaimCache,
    quotas: std::sync::Arc<tally_core::quota::ProviderQuotas>,
    sync_limits: std::sync::Arc<tally_core::capacity::SyncLimits>,
    forecasts: forecast::Forecasts,
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
            claim_cache: claim_cache::ClaimCache::default(),
            quotas: Default::default(),
            sync_limits: Default::default(),
            forecasts: Default::default(),
        }
    }

    /// The provider's limits CreateJob admits jobs against (default:
    /// `ProviderQuotas::default()`, Gemini's documented Tier 1 figures).
    /// The provider quotas admission applies.
    pub fn provider_quotas(&self) -> &tally_core::quota::ProviderQuotas {
        &self.quotas
    }

    pub fn with_provider_quotas(mut self, quotas: tally_core::quota::ProviderQuotas) -> Self {
        self.quotas = std::sync::Arc::new(quotas);
        self
    }

    /// The provider accounts' requests and tokens per minute AcquireCapacity
    /// hands out (default: each provider's Tier 1 figures).
    pub fn sync_limits(&self) -> &tally_core::capacity::SyncLimits {
        &self.sync_limits
    }

    pub fn with_sync_limits(mut self, limits: tally_core::capacity::SyncLimits) -> Self {
        self.sync_limits = std::sync::Arc::new(limits);
        self
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Reports that tried the rows this process's claim remembered and found
    /// the claim moved on (nothing written; read again under its lock).
    pub fn claim_cache_misses(&self) -> u64 {
        self.claim_cache.misses()
    }

    /// Whether this process remembers claim `token`'s rows, so that its
    /// reports may take the one-statement path.
    pub fn claim_cached(&self, token: uuid::Uuid) -> bool {
        self.claim_cache.get(token).is_some()
    }

    /// Applies pending migrations; safe to run from several replicas at once
    /// (sqlx takes an advisory lock).
    pub async fn migrate(&self) -> Result<()> {
        MIGRATOR
            .run(&self.pool)
            .await
            .map_err(|e| StoreError::Internal(format!("migration failed: {e}")))?;
        models::route_listed(&self.pool).await
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
