//! Claims: leasing runnable rows to a worker (the claim statement),
//! extending the lease and releasing rows. Rescue of expired claims is
//! [`crate::rescue`]; locking a claim is [`crate::fence`].
//!
//! A claim takes rows off the narrow `runnable` queue with `FOR UPDATE SKIP
//! LOCKED` (concurrent claimers never wait for, nor get, the same row) and
//! records them in its `row_ids`, all in one statement. The rows themselves
//! are not written until they are settled: a row is
//! RUNNING while an ACTIVE claim's `row_ids` holds it.

use crate::claim_cache::CachedClaim;
use crate::codes::PgQueryAs;
use crate::fence::{RowSnapshot, check_live, lease_ms, lock_claim, lock_held_rows};
use crate::rescue::RESCUE_DUE;
use crate::settle::transitions;
use crate::settle::{self, Settler};
use crate::types::{
    ClaimGrant, ClaimRecord, ClaimRequest, ClaimState, ClaimedRow, DependencyResult, JobEventKind,
    LedgerRecord, Time,
};
use crate::{Result, Store, StoreError, abandon, codes, events, fence, pause};
use sqlx::postgres::PgRow;
use sqlx::{Postgres, Row as _};
use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::Duration;
use tally_core::job::JobState;
use tally_core::lane::Lane;
use tally_core::status::PerBudget;
use tally_core::transition::Event;
use uuid::Uuid;

#[derive(sqlx::FromRow)]
struct ClaimRow {
    token: Uuid,
    ledger: String,
    worker: String,
    model: String,
    create_time: Time,
    expire_time: Time,
    state: i16,
    row_count: i32,
    held: i32,
    job: Option<String>,
    lane: i16,
}

impl From<ClaimRow> for ClaimRecord {
    fn from(r: ClaimRow) -> Self {
        ClaimRecord {
            token: r.token,
            ledger: r.ledger,
            worker: r.worker,
            model: r.model,
            create_time: r.create_time,
            expire_time: r.expire_time,
            state: ClaimState::from_code(r.state),
            row_count: r.row_count,
            held: r.held,
            job: r.job,
            lane: Lane::from_code(r.lane).unwrap_or_default(),
        }
    }
}

/// FAILED_PRECONDITION (LANE_NOT_ALLOWED) unless the ledger's policy lets
/// its rows take the claim's lane.
pub(crate) fn check_lane(ledger: &LedgerRecord, req: &ClaimRequest) -> Result<()> {
    let lanes = &ledger.policy.lanes;
    if lanes.allows(req.lane) {
        return Ok(());
    }
    let allowed: Vec<&str> = lanes.iter().map(Lane::name).collect();
    Err(StoreError::FailedPrecondition {
        reason: "LANE_NOT_ALLOWED",
        description: format!(
            "ledgers/{} does not allow the {} lane (its lanes: {}); add it to the policy's lanes first",
            ledger.name,
            req.lane,
            allowed.join(", ")
        ),
    })
}

#[derive(sqlx::FromRow)]
struct HeldRow {
    key: String,
    payload: String,
    prompt_name: String,
    prompt_version: String,
    model: String,
    provider_failures: i32,
    content_failures: i32,
    infra_failures: i32,
    attempts: i32,
    has_deps: bool,
}

impl From<HeldRow> for ClaimedRow {
    fn from(r: HeldRow) -> Self {
        ClaimedRow {
            key: r.key,
            payload: r.payload,
            prompt_name: r.prompt_name,
            prompt_version: r.prompt_version,
            model: r.model,
            failures: PerBudget::new(
                r.provider_failures as u32,
                r.content_failures as u32,
                r.infra_failures as u32,
            ),
            total: r.attempts as u32,
            has_dependencies: r.has_deps,
            dependencies: Vec::new(),
        }
    }
}

/// One dependency result given, with the key of the row it is given to.
#[derive(sqlx::FromRow)]
struct GivenInput {
    row_key: String,
    #[sqlx(flatten)]
    input: DependencyResult,
}

/// A claim as the store loads it for a change.
const CLAIM_SELECT: &str = "SELECT c.token, l.name AS ledger, c.worker, c.model, c.create_time, \
     c.expire_time, c.state, c.row_count, c.held, c.lane, \
     (SELECT j.public_id FROM jobs j WHERE j.id = c.job_id) AS job \
     FROM claims c JOIN ledgers l ON l.id = c.ledger_id";

pub(crate) async fn load_claim<'e, E: sqlx::Executor<'e, Database = Postgres>>(
    exec: E,
    token: Uuid,
) -> Result<ClaimRecord> {
    let sql = format!("{CLAIM_SELECT} WHERE c.token = $1");
    sqlx::query_as::<_, ClaimRow>(sqlx::AssertSqlSafe(sql))
        .bind(token)
        .fetch_optional(exec)
        .await?
        .map(Into::into)
        .ok_or_else(|| StoreError::not_found("claim", token.to_string()))
}

/// What the claim statement answered: one row, with one array per column
/// of the rows taken (hundreds a call; decoding a row per row taken showed
/// in profiles), zipped back into rows here, once.
pub(crate) struct Taken {
    due: bool,
    paused: bool,
    rows: Vec<TakenRow>,
    held_back: i32,
    /// The claim record's times; `None` when nothing was taken.
    made: Option<(Time, Time)>,
}

/// One row taken, with its id.
struct TakenRow {
    id: i64,
    row: ClaimedRow,
}

impl<'r> sqlx::FromRow<'r, PgRow> for Taken {
    fn from_row(r: &'r PgRow) -> sqlx::Result<Self> {
        /// One array column, as values to take in order.
        fn column<'r, T>(r: &'r PgRow, name: &str) -> sqlx::Result<std::vec::IntoIter<T>>
        where
            Option<Vec<T>>: sqlx::Decode<'r, Postgres> + sqlx::Type<Postgres>,
        {
            Ok(r.try_get::<Option<Vec<T>>, _>(name)?
                .unwrap_or_default()
                .into_iter())
        }
        /// The next value of a column that must be as long as `ids`.
        fn next<T>(values: &mut std::vec::IntoIter<T>, name: &str) -> sqlx::Result<T> {
            values.next().ok_or_else(|| sqlx::Error::ColumnDecode {
                index: name.into(),
                source: "shorter than ids".into(),
            })
        }
        let ids = column::<i64>(r, "ids")?;
        let mut keys = column::<String>(r, "keys")?;
        let mut payloads = column::<String>(r, "payloads")?;
        let mut prompt_names = column::<String>(r, "prompt_names")?;
        let mut prompt_versions = column::<String>(r, "prompt_versions")?;
        let mut models = column::<String>(r, "models")?;
        let mut provider = column::<i32>(r, "provider_failures")?;
        let mut content = column::<i32>(r, "content_failures")?;
        let mut infra = column::<i32>(r, "infra_failures")?;
        let mut attempts = column::<i32>(r, "attempts")?;
        let mut has_deps = column::<bool>(r, "has_deps")?;
        let mut rows = Vec::with_capacity(ids.len());
        for id in ids {
            let failures = PerBudget::new(
                next(&mut provider, "provider_failures")? as u32,
                next(&mut content, "content_failures")? as u32,
                next(&mut infra, "infra_failures")? as u32,
            );
            let row = ClaimedRow {
                key: next(&mut keys, "keys")?,
                payload: next(&mut payloads, "payloads")?,
                prompt_name: next(&mut prompt_names, "prompt_names")?,
                prompt_version: next(&mut prompt_versions, "prompt_versions")?,
                model: next(&mut models, "models")?,
                failures,
                total: next(&mut attempts, "attempts")? as u32,
                has_dependencies: next(&mut has_deps, "has_deps")?,
                dependencies: Vec::new(),
            };
            rows.push(TakenRow { id, row });
        }
        let times: (Option<Time>, Option<Time>) =
            (r.try_get("create_time")?, r.try_get("expire_time")?);
        Ok(Taken {
            due: r.try_get("due")?,
            paused: r.try_get("paused")?,
            rows,
            held_back: r.try_get::<Option<i32>, _>("held_back")?.unwrap_or(0),
            made: match times {
                (Some(create), Some(expire)) => Some((create, expire)),
                _ => None,
            },
        })
    }
}

/// The claim itself, in one statement: unless the ledger is paused (its
/// row, read by primary key, has a `pause_reason`: then nothing is taken,
/// on every replica at once) or `check_due` finds expired claims of the
/// ledger to rescue first, the model (given, or that of the
/// oldest ready row), the queue entries taken and their rows (by
/// `tally_claim_runnable` (migrations/0001_baseline.sql): SKIP LOCKED, chunks
/// split where the claim needs only part of one), and the claim record
/// holding them. One row back, whatever happened: arrays, not a row per row
/// taken (hundreds a call; decoding them one by one showed in profiles).
/// With a byte budget, rows past it are put back on the queue by the same
/// statement and counted in `held_back`.
pub(crate) async fn take_rows<'e, E: sqlx::Executor<'e, Database = Postgres>>(
    exec: E,
    ledger: &LedgerRecord,
    req: &ClaimRequest,
    token: Uuid,
    check_due: bool,
) -> Result<Taken> {
    static SQL: LazyLock<String> = LazyLock::new(|| {
        codes::render_with(
            include_str!("queries/claims/take.sql"),
            &[("RESCUE_DUE", &RESCUE_DUE)],
        )
    });
    let take = Take {
        ledger_id: ledger.id,
        model: req.model.as_deref(),
        max_rows: req.max_rows,
        token,
        worker: &req.worker,
        request_id: req.request_id.as_deref(),
        lease_ms: lease_ms(req.lease, ledger.policy.lease),
        check_due,
        lane: req.lane.code(),
        depth_min: req.depths.map_or(0, |d| d.0),
        depth_max: req.depths.map_or(i32::MAX, |d| d.1),
        max_bytes: req.bytes.map(|b| b.max_bytes),
        row_overhead: req.bytes.map_or(0, |b| b.row_overhead),
        provider: req.provider.as_deref(),
    };
    let query = sqlx::query_as::<_, Taken>(sqlx::AssertSqlSafe(SQL.as_str()));
    Ok(take.bind(query).fetch_one(exec).await?)
}

/// The claim statement's parameters, one field each, in the order
/// `queries/claims/take.sql` documents them.
struct Take<'a> {
    ledger_id: i64,
    /// `None`: that of the oldest ready row.
    model: Option<&'a str>,
    max_rows: i64,
    token: Uuid,
    worker: &'a str,
    request_id: Option<&'a str>,
    lease_ms: i64,
    /// Whether to look for expired claims of the ledger first.
    check_due: bool,
    /// `None`: no byte budget.
    max_bytes: Option<i64>,
    /// Bytes counted per row on top of its own.
    row_overhead: i32,
    /// `None`: any provider's models.
    provider: Option<&'a str>,
    /// The lane's code.
    lane: i16,
    /// The depths of the rows it may take.
    depth_min: i32,
    depth_max: i32,
}

impl<'a> Take<'a> {
    /// Binds `$1`…`$14`.
    fn bind<O>(self, q: PgQueryAs<'a, O>) -> PgQueryAs<'a, O> {
        q.bind(self.ledger_id)
            .bind(self.model)
            .bind(self.max_rows)
            .bind(self.token)
            .bind(self.worker)
            .bind(self.request_id)
            .bind(self.lease_ms)
            .bind(self.check_due)
            .bind(self.max_bytes)
            .bind(self.row_overhead)
            .bind(self.provider)
            .bind(self.lane)
            .bind(self.depth_min)
            .bind(self.depth_max)
    }
}

/// What a claim with a request id found: the claim that id made before, or
/// what this call took.
enum Once {
    Replayed(ClaimGrant),
    Taken(Taken),
}

/// A taken row, as its spend estimate needs it.
pub(crate) struct TakenSize<'a> {
    pub payload_bytes: u64,
    pub prompt_name: &'a str,
    pub prompt_version: &'a str,
    pub model: &'a str,
}

impl Taken {
    /// The rows taken, in order, as estimates need them.
    pub(crate) fn sizes(&self) -> Vec<TakenSize<'_>> {
        self.rows
            .iter()
            .map(|TakenRow { row, .. }| TakenSize {
                payload_bytes: row.payload.len() as u64,
                prompt_name: &row.prompt_name,
                prompt_version: &row.prompt_version,
                model: &row.model,
            })
            .collect()
    }

    /// The ledger was paused: nothing was taken.
    pub(crate) fn paused(&self) -> bool {
        self.paused
    }

    /// The model of the `i`th row taken.
    pub(crate) fn model_at(&self, i: usize) -> Option<String> {
        self.rows.get(i).map(|r| r.row.model.clone())
    }

    /// The keys of the rows taken from the `from`th on.
    pub(crate) fn keys_from(&self, from: usize) -> Vec<String> {
        let rest = self.rows.get(from..).unwrap_or_default();
        rest.iter().map(|r| r.row.key.clone()).collect()
    }

    /// Keeps the first `n` rows taken (the rest were given back).
    pub(crate) fn truncate(&mut self, n: usize) {
        self.rows.truncate(n);
    }

    /// The answer to the claim (none: nothing was runnable), and what the
    /// claim holds as it found it (for the claim cache).
    fn into_grant(
        self,
        ledger: &LedgerRecord,
        req: &ClaimRequest,
        token: Uuid,
    ) -> Result<Option<(ClaimGrant, Option<CachedClaim>)>> {
        let Some((create_time, expire_time)) = self.made else {
            return Ok(None);
        };
        let Some(first) = self.rows.first() else {
            return Err(StoreError::Internal(format!(
                "claim {token} was recorded but returned no rows"
            )));
        };
        let n = self.rows.len();
        let claim = ClaimRecord {
            token,
            ledger: ledger.name.clone(),
            worker: req.worker.clone(),
            model: first.row.model.clone(),
            create_time,
            expire_time,
            state: ClaimState::Active,
            row_count: n as i32,
            held: n as i32,
            job: None,
            lane: req.lane,
        };
        let mut held = HashMap::with_capacity(if req.for_job { 0 } else { n });
        let mut rows = Vec::with_capacity(n);
        for TakenRow { id, row } in self.rows {
            if !req.for_job {
                held.insert(row.key.clone(), RowSnapshot::taken(id, &row));
            }
            rows.push(row);
        }
        let held = (!req.for_job).then(|| CachedClaim {
            ledger_id: ledger.id,
            rows: held,
            held: n as i32,
            model: claim.model.clone(),
            lane: req.lane,
        });
        Ok(Some((
            ClaimGrant {
                claim,
                rows,
                held_back: i64::from(self.held_back),
            },
            held,
        )))
    }
}

impl Store {
    /// Leases up to `req.max_rows` runnable rows. `None` when nothing is
    /// runnable. With a `request_id` seen before, answers that claim again
    /// (with the rows it still holds) instead of leasing more.
    ///
    /// One path with or without a request id: (answer the id's claim
    /// again) → the claim statement, which takes nothing when it finds
    /// expired claims of the ledger (then they are rescued and it runs
    /// again) → remember what the claim holds. A request id only adds
    /// the lock that makes its calls take turns (`take_once`).
    #[tracing::instrument(
        target = "tally::trace",
        level = "debug",
        name = "store.claim_rows",
        skip_all
    )]
    pub async fn claim_rows(&self, ledger: &str, req: &ClaimRequest) -> Result<Option<ClaimGrant>> {
        let record = self.ledger(ledger).await?;
        let mut grant = self.claim_for(&record, ledger, req).await?;
        if let Some(grant) = &mut grant {
            self.give_inputs(record.id, grant).await?;
        }
        Ok(grant)
    }

    /// [`Store::claim_rows`] but for the dependency results.
    async fn claim_for(
        &self,
        record: &LedgerRecord,
        ledger: &str,
        req: &ClaimRequest,
    ) -> Result<Option<ClaimGrant>> {
        check_lane(record, req)?;
        // The rows routed to the claim's lane now; none: nothing to take.
        let Some(routed) = self.routed(record, req).await? else {
            return Ok(None);
        };
        let req = &routed;
        if let Some(cap) = record.policy.cap() {
            return self.claim_capped(record, *cap, req).await;
        }
        if let Some(grant) = self.replay_claim(record.id, req).await? {
            return Ok(Some(grant));
        }
        let token = Uuid::new_v4();
        // The first statement also looks for expired claims of the ledger;
        // finding some, it takes nothing, they are rescued, and the claim
        // runs again without looking.
        let mut check_due = true;
        loop {
            let taken = match &req.request_id {
                None => take_rows(&self.pool, record, req, token, check_due).await?,
                Some(request_id) => {
                    match self
                        .take_once(record, req, request_id, token, check_due)
                        .await?
                    {
                        Once::Replayed(grant) => return Ok(Some(grant)),
                        Once::Taken(taken) => taken,
                    }
                }
            };
            if taken.paused {
                return Err(self.paused(ledger).await);
            }
            if taken.due {
                self.rescue_expired(Some(record.id)).await?;
                check_due = false;
                continue;
            }
            return self.granted(record, req, token, taken);
        }
    }

    /// The claim statement for a request id, in a transaction that makes
    /// calls with that id take turns: a retry racing the original would
    /// otherwise find every row locked or taken and answer "nothing
    /// runnable" instead of the original's claim. Under that lock, a claim
    /// the id already made is answered again instead.
    async fn take_once(
        &self,
        record: &LedgerRecord,
        req: &ClaimRequest,
        request_id: &str,
        token: Uuid,
        check_due: bool,
    ) -> Result<Once> {
        let mut tx = self.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, $2))")
            .bind(request_id)
            .bind(record.id)
            .execute(&mut *tx)
            .await?;
        if let Some(grant) = self.replay_claim(record.id, req).await? {
            return Ok(Once::Replayed(grant));
        }
        let taken = take_rows(&mut *tx, record, req, token, check_due).await?;
        tx.commit().await?;
        Ok(Once::Taken(taken))
    }

    /// The LEDGER_PAUSED answer to a claim on a paused ledger, with the
    /// pause as it is now (read again: the claim statement only saw that
    /// there is one).
    pub(crate) async fn paused(&self, ledger: &str) -> StoreError {
        match self.get_ledger(ledger).await {
            Ok(LedgerRecord { pause: Some(p), .. }) => pause::paused(ledger, p),
            // Resumed (or deleted) since: nothing was taken all the same;
            // the caller claims again.
            Ok(_) => StoreError::Aborted(format!(
                "ledgers/{ledger} was resumed while the claim ran; claim again"
            )),
            Err(e) => e,
        }
    }

    /// The answer to what a claim took; this process remembers the rows
    /// (see `claim_cache`) unless the claim is for a job.
    pub(crate) fn granted(
        &self,
        ledger: &LedgerRecord,
        req: &ClaimRequest,
        token: Uuid,
        taken: Taken,
    ) -> Result<Option<ClaimGrant>> {
        let Some((grant, held)) = taken.into_grant(ledger, req, token)? else {
            return Ok(None);
        };
        if let Some(held) = held {
            self.claim_cache.insert(token, held);
        }
        Ok(Some(grant))
    }

    /// Rescues the ledger's expired claims, if a one-row probe finds any.
    pub(crate) async fn rescue_if_due(&self, ledger_id: i64) -> Result<()> {
        let due: bool = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT EXISTS (SELECT 1 FROM claims c WHERE c.ledger_id = $1 AND {RESCUE_DUE})"
        )))
        .bind(ledger_id)
        .fetch_one(&self.pool)
        .await?;
        if due {
            self.rescue_expired(Some(ledger_id)).await?;
        }
        Ok(())
    }

    /// Gives the rows of `grant` that have dependencies their results, and
    /// records on each edge the hash of the result given (the row's inputs).
    async fn give_inputs(&self, ledger_id: i64, grant: &mut ClaimGrant) -> Result<()> {
        let keys: Vec<&str> = grant
            .rows
            .iter()
            .filter(|r| r.has_dependencies)
            .map(|r| r.key.as_str())
            .collect();
        if keys.is_empty() {
            return Ok(());
        }
        let given: Vec<(String, DependencyResult)> =
            sqlx::query_as::<_, GivenInput>(include_str!("queries/claims/inputs.sql"))
                .bind(ledger_id)
                .bind(&keys)
                .fetch_all(&self.pool)
                .await?
                .into_iter()
                .map(|g| (g.row_key, g.input))
                .collect();
        let mut by_row: HashMap<String, Vec<DependencyResult>> = HashMap::new();
        for (row, input) in given {
            by_row.entry(row).or_default().push(input);
        }
        for row in &mut grant.rows {
            if let Some(mut inputs) = by_row.remove(&row.key) {
                inputs.sort_unstable_by(|a, b| a.key.cmp(&b.key));
                row.dependencies = inputs;
            }
        }
        Ok(())
    }

    pub(crate) async fn replay_claim(
        &self,
        ledger_id: i64,
        req: &ClaimRequest,
    ) -> Result<Option<ClaimGrant>> {
        let Some(request_id) = &req.request_id else {
            return Ok(None);
        };
        let token: Option<Uuid> =
            sqlx::query_scalar("SELECT token FROM claims WHERE ledger_id = $1 AND request_id = $2")
                .bind(ledger_id)
                .bind(request_id)
                .fetch_optional(&self.pool)
                .await?;
        let Some(token) = token else {
            return Ok(None);
        };
        let claim = load_claim(&self.pool, token).await?;
        let rows = sqlx::query_as::<_, HeldRow>(
            "SELECT key, payload, prompt_name, prompt_version, model, provider_failures,
                    content_failures, infra_failures, attempts, depends_on <> '{}' AS has_deps
             FROM rows WHERE id = ANY((SELECT row_ids FROM claims WHERE token = $1)::int8[])
             ORDER BY id",
        )
        .bind(token)
        .fetch_all(&self.pool)
        .await?;
        Ok(Some(ClaimGrant {
            claim,
            rows: rows.into_iter().map(Into::into).collect(),
            held_back: 0,
        }))
    }

    /// Extends a live claim's lease to `now + lease`.
    #[tracing::instrument(
        target = "tally::trace",
        level = "debug",
        name = "store.extend_claim",
        skip_all
    )]
    pub async fn extend_claim(
        &self,
        ledger: &str,
        token: Uuid,
        lease: Option<Duration>,
    ) -> Result<ClaimRecord> {
        let record = self.ledger(ledger).await?;
        let mut tx = self.begin().await?;
        let out = async {
            let claim = lock_claim(&mut tx, record.id, ledger, token).await?;
            check_live(&claim, ledger)?;
            sqlx::query(
                "UPDATE claims SET expire_time = now() + $2 * interval '1 millisecond'
                 WHERE token = $1",
            )
            .bind(token)
            .bind(lease_ms(lease, record.policy.lease))
            .execute(&mut *tx)
            .await?;
            let out = load_claim(&mut *tx, token).await?;
            Ok(out)
        }
        .await;
        crate::end_tx(tx, out).await
    }

    /// Gives rows back unworked (all the claim holds, or only `keys`); no
    /// attempt is counted. Returns how many rows went back.
    ///
    /// Rows of a submitted job are refused (the provider has them: finish
    /// the job instead). A PREPARING job whose every row is given back is
    /// closed as CANCELLED.
    #[tracing::instrument(
        target = "tally::trace",
        level = "debug",
        name = "store.release_claim",
        skip_all
    )]
    pub async fn release_claim(
        &self,
        ledger: &str,
        token: Uuid,
        keys: Option<&[String]>,
        actor: &str,
    ) -> Result<(i64, ClaimRecord)> {
        let record = self.ledger(ledger).await?;
        let mut tx = self.begin().await?;
        let out = async {
            let claim = lock_claim(&mut tx, record.id, ledger, token).await?;
            check_live(&claim, ledger)?;
            let job = match claim.job_id {
                Some(id) => {
                    let job = fence::lock_job_by_id(&mut tx, id).await?;
                    if job.state()? == JobState::Creating {
                        return Err(StoreError::precondition(
                            "JOB_CREATE_UNRESOLVED",
                            format!(
                                "a batch may have been created for the rows of ledgers/{ledger}/jobs/{}; they cannot be released until the provider was searched for it (MarkSubmitted if found, MarkNotCreated if not)",
                                job.public_id
                            ),
                        ));
                    }
                    if job.state()?.is_submitted() {
                        return Err(StoreError::precondition(
                            "JOB_SUBMITTED",
                            format!(
                                "the rows of ledgers/{ledger}/jobs/{} were submitted as {}; they cannot be released, finish the job (FinishJob)",
                                job.public_id,
                                job.batch.as_deref().unwrap_or("a batch")
                            ),
                        ));
                    }
                    Some(job)
                }
                None => None,
            };
            let rows = lock_held_rows(&mut tx, token, keys).await?;
            let writes = transitions(&rows, &Event::Release, &record.policy)?;
            let held = settle::settle(&mut tx, record.id, token, &writes, Settler::SYSTEM).await?;
            if let Some(job) = job.filter(|_| held <= 0) {
                abandon::abandon(
                    &mut tx,
                    &record,
                    token,
                    &job,
                    ClaimState::Done,
                    "cancelled before submission: its owner released every row",
                )
                .await?;
                events::append(&mut tx, &[(job.id, JobEventKind::StateChanged)], actor).await?;
            }
            let out = load_claim(&mut *tx, token).await?;
            Ok((writes.len() as i64, out))
        }
        .await;
        self.claim_cache.forget(token);
        crate::end_tx(tx, out).await
    }
}
