//! Jobs: the provider batch made from a claim, its submission, its adoption
//! by another worker when the owner dies, and its close.
//!
//! A job's claim is its lease and its fence: every write to a job first
//! locks the job's current claim (`claims … FOR UPDATE`), then the job, then
//! rows, and appends its events last (see [`crate::events`]). So writers of
//! one job are serialized by its claim, and a writer holding a claim that is
//! no longer the job's (`jobs.claim_token`) is refused. The state machine is
//! `tally_core::job::step`; this module only reads, asks and writes.
//!
//! A claim that carries an open job stays ACTIVE while its rows are
//! reported (so its lease keeps meaning "the owner is alive" until the job
//! is finished); FinishJob marks it DONE, adoption EXPIRED.

use crate::abandon::close_unsent;
use crate::codes::{self, CLAIM_ACTIVE, JOB_PREPARING};
use crate::fence::{self, lease_ms, lock_fenced, lock_job_by_id};
use crate::job_view::{JOB_SELECT, JobRow, load_job};
use crate::results::Finished;
use crate::types::{
    AdoptResult, AdoptedJob, ClaimRecord, ClaimState, CreateAttempt, FinishRequest, JobEventKind,
    JobOrigin, JobRecord, NotCreated,
};
use crate::{Result, Store, StoreError};
use crate::{admission, claims, events, golden, pause, settle};
use std::collections::HashSet;
use std::sync::LazyLock;
use std::time::Duration;
use tally_core::job::{FinalState, JobEvent, JobState};
use tally_core::names::{self, claim_for_logs};
use tally_core::pause::Work;
use tally_core::status::RowStatus;
use tally_core::summary::JobCounts;
use tally_core::transition::Event;
use uuid::Uuid;

/// How long a caller refused by `max_active_jobs` is told to wait.
pub const RETRY_AFTER_FULL_SECS: u64 = 30;

/// First key of the advisory lock that makes counting a ledger's open jobs
/// and inserting one atomic (second key: the ledger).
const JOB_LIMIT_LOCK: i32 = 0x7461_6a01;

impl Store {
    /// Makes a job from a live claim; the job holds the claim's rows. The
    /// same claim again answers the same job. Beyond the ledger's
    /// `max_active_jobs` open jobs: RESOURCE_EXHAUSTED. On a paused ledger:
    /// LEDGER_PAUSED (the worker releases the claim; no attempt is spent).
    /// While its model cools down, or when the provider's quotas have no
    /// room for it (see [`crate::admission`]): RESOURCE_EXHAUSTED with
    /// RetryInfo.
    #[tracing::instrument(
        target = "tally::trace",
        level = "debug",
        name = "store.create_job",
        skip_all
    )]
    pub async fn create_job(&self, ledger: &str, token: Uuid, actor: &str) -> Result<JobRecord> {
        self.create_job_in(ledger, token, actor, &JobOrigin::default())
            .await
    }

    /// [`Store::create_job`] for a worker of provider account
    /// `origin.account`, asked by team `origin.team`: the cool-down checked
    /// is the team's in the account, the quota the account's, the share the
    /// team's.
    pub async fn create_job_in(
        &self,
        ledger: &str,
        token: Uuid,
        actor: &str,
        origin: &JobOrigin<'_>,
    ) -> Result<JobRecord> {
        let record = self.ledger(ledger).await?;
        let mut tx = self.begin().await?;
        let out = async {
            let claim = fence::lock_claim(&mut tx, record.id, ledger, token).await?;
            if let Some(job_id) = claim.job_id {
                // A repeated CreateJob (its answer was lost) answers the
                // same job, with the golden rows it was made to carry.
                let mut job = load_job(&mut *tx, job_id).await?;
                job.golden = golden::of_job(&mut tx, job_id).await?;
                return Ok(job);
            }
            fence::check_live(&claim, ledger)?;
            pause::refuse_if_paused(&mut tx, &record, Work::CreateJob).await?;
            admission::refuse_while_cooling(&mut tx, origin, &claim.model).await?;
            // Concurrent creators of one ledger queue here, so the count below
            // cannot be outdated by another creator before this one commits.
            sqlx::query("SELECT pg_advisory_xact_lock($1, hashint8($2))")
                .bind(JOB_LIMIT_LOCK)
                .bind(record.id)
                .execute(&mut *tx)
                .await?;
            let open: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM jobs WHERE ledger_id = $1 AND end_time IS NULL",
            )
            .bind(record.id)
            .fetch_one(&mut *tx)
            .await?;
            let max = i64::from(record.policy.max_active_jobs);
            if open >= max {
                return Err(StoreError::ResourceExhausted {
                    reason: "JOB_LIMIT",
                    message: format!(
                        "ledgers/{ledger} has {open} active jobs, its limit (policy.max_active_jobs) is {max}; \
                         finish a job or retry later"
                    ),
                    retry_after_secs: RETRY_AFTER_FULL_SECS,
                });
            }
            let tokens = admission::estimate(&mut tx, token).await?;
            admission::admit(&mut tx, &self.quotas, origin, &claim.model, tokens).await?;
            let public_id = Uuid::now_v7().to_string();
            static SQL: LazyLock<String> =
                LazyLock::new(|| codes::render(include_str!("queries/jobs/create.sql")));
            let job_id: i64 = sqlx::query_scalar(
                sqlx::AssertSqlSafe(SQL.as_str()),
            )
            .bind(token)
            .bind(&public_id)
            .bind(actor)
            .bind(tokens)
            .bind(origin.account)
            .bind(origin.team)
            .fetch_one(&mut *tx)
            .await?;
            let mut job = load_job(&mut *tx, job_id).await?;
            job.golden = golden::for_new_job(&mut tx, record.id, job_id).await?;
            events::append(&mut tx, &[(job_id, JobEventKind::Created)], actor).await?;
            tracing::info!(ledger = %ledger, job = %job.public_id, claim = %claim_for_logs(&token.to_string()), rows = job.counts.rows, "job created");
            Ok(job)
        }
        .await;
        let job = crate::end_tx(tx, out).await?;
        // A claim with a job is reported under its lock (the job's counts
        // and events move with the rows): what the claim cache remembers of
        // it could only send its reports to the guarded statement, which
        // refuses every claim with a job, and back.
        self.claim_cache.forget(token);
        Ok(job)
    }

    pub async fn get_job(&self, ledger: &str, public_id: &str) -> Result<JobRecord> {
        let sql = format!("{JOB_SELECT} WHERE l.name = $1 AND j.public_id = $2");
        sqlx::query_as::<_, JobRow>(sqlx::AssertSqlSafe(sql))
            .bind(ledger)
            .bind(public_id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| StoreError::not_found("job", names::job_name(ledger, public_id)))?
            .into_record()
    }

    /// A ledger's jobs, newest first, after position `after` (a job's
    /// internal id from an earlier page), optionally only in `states`.
    pub async fn list_jobs(
        &self,
        ledger: &str,
        states: &[JobState],
        after: Option<i64>,
        limit: i64,
    ) -> Result<Vec<JobRecord>> {
        let record = self.ledger(ledger).await?;
        let codes: Vec<i16> = states.iter().map(|s| s.code()).collect();
        let sql = format!(
            "{JOB_SELECT} WHERE j.ledger_id = $1 AND ($2::int8 IS NULL OR j.id < $2)
               AND (cardinality($3::int2[]) = 0 OR j.state = ANY($3))
             ORDER BY j.id DESC LIMIT $4"
        );
        sqlx::query_as::<_, JobRow>(sqlx::AssertSqlSafe(sql))
            .bind(record.id)
            .bind(after)
            .bind(&codes)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?
            .into_iter()
            .map(JobRow::into_record)
            .collect()
    }

    /// Records the provider's batch and input file, fenced by the job's
    /// claim. The same values again are a no-op; other values are
    /// FAILED_PRECONDITION.
    ///
    /// A claim whose lease lapsed but that was not yet swept is accepted:
    /// the batch exists at the provider either way, and recording it is
    /// what keeps its rows from being sent twice (the job then waits for
    /// adoption instead of being abandoned).
    #[tracing::instrument(
        target = "tally::trace",
        level = "debug",
        name = "store.mark_submitted",
        skip_all
    )]
    pub async fn mark_submitted(
        &self,
        ledger: &str,
        public_id: &str,
        token: Uuid,
        batch: &str,
        input_file: &str,
        actor: &str,
    ) -> Result<JobRecord> {
        let record = self.ledger(ledger).await?;
        let name = names::job_name(ledger, public_id);
        let mut tx = self.begin().await?;
        let out = async {
            let (_, job) = lock_fenced(&mut tx, record.id, ledger, public_id, token).await?;
            let same = job.batch.as_deref() == Some(batch) && job.input_file == input_file;
            if job.batch.is_some() {
                if same {
                    let out = load_job(&mut *tx, job.id).await?;
                    return Ok(out);
                }
                return Err(StoreError::precondition(
                    "JOB_ALREADY_SUBMITTED",
                    format!(
                        "{name} was submitted as {} with input file {:?}; it cannot be recorded as {batch} with {input_file:?}",
                        job.batch.as_deref().unwrap_or_default(),
                        job.input_file
                    ),
                ));
            }
            let t = job.step(JobEvent::Submit, ledger)?;
            let updated = sqlx::query(
                "UPDATE jobs SET state = $2, batch = $3, input_file = $4, submit_time = now(),
                        update_time = now()
                 WHERE id = $1 AND state = $5 AND end_time IS NULL",
            )
            .bind(job.id)
            .bind(t.state.code())
            .bind(batch)
            .bind(input_file)
            .bind(job.state)
            .execute(&mut *tx)
            .await;
            match updated {
                Ok(r) if r.rows_affected() == 1 => {}
                Ok(_) => {
                    return Err(StoreError::Internal(format!(
                        "{name} changed under its lock"
                    )));
                }
                Err(e) if crate::error::sqlstate(&e) == crate::error::Sqlstate::UniqueViolation => {
                    return Err(StoreError::precondition(
                        "BATCH_IN_USE",
                        format!("{batch} is already recorded for another job"),
                    ));
                }
                Err(e) => return Err(e.into()),
            }
            crate::unresolved::clear(&mut tx, job.id).await?;
            // The provider may have reported on the batch before it was
            // recorded here; the job takes that state now.
            let caught_up = crate::operations::catch_up(&mut tx, batch).await?;
            let out = load_job(&mut *tx, job.id).await?;
            if caught_up.is_none() {
                events::append(&mut tx, &[(job.id, JobEventKind::StateChanged)], actor).await?;
            }
            tracing::info!(ledger = %ledger, job = %public_id, batch = %batch, caught_up = caught_up.is_some(), "job submitted");
            Ok(out)
        }
        .await;
        crate::end_tx(tx, out).await
    }

    /// Records that the batch create is about to be sent (PREPARING →
    /// CREATING) with its input file, fenced by the job's claim. Again on a
    /// CREATING job (a retried call, or a create sent again after the
    /// provider refused it unmade) it moves only the attempt time to now,
    /// and only for a live claim (else it is refused, and nothing is sent
    /// again): a search for a lost create counts from the last send. From then on the job's rows are never released unworked
    /// until [`Store::mark_not_created`].
    #[tracing::instrument(
        target = "tally::trace",
        level = "debug",
        name = "store.mark_creating",
        skip_all
    )]
    pub async fn mark_creating(
        &self,
        ledger: &str,
        public_id: &str,
        token: Uuid,
        input_file: &str,
        attempt: &CreateAttempt<'_>,
        actor: &str,
    ) -> Result<JobRecord> {
        let record = self.ledger(ledger).await?;
        let mut tx = self.begin().await?;
        let out = async {
            let (claim, job) = lock_fenced(&mut tx, record.id, ledger, public_id, token).await?;
            let t = job.step(JobEvent::BeginCreate, ledger)?;
            if job.state()? == t.state {
                fence::check_live(&claim, ledger)?;
                {
                    sqlx::query(
                        "UPDATE jobs SET create_attempt_time = now(), update_time = now()
                         WHERE id = $1 AND end_time IS NULL",
                    )
                    .bind(job.id)
                    .execute(&mut *tx)
                    .await?;
                }
                return load_job(&mut *tx, job.id).await;
            }
            // Only a live claim may start a create: a lapsed one may have
            // been (or be about to be) swept, its rows given to another.
            fence::check_live(&claim, ledger)?;
            sqlx::query(
                "UPDATE jobs SET state = $2, input_file = $3, create_attempt_time = now(),
                        est_tokens = coalesce($4, est_tokens), update_time = now()
                 WHERE id = $1 AND end_time IS NULL",
            )
            .bind(job.id)
            .bind(t.state.code())
            .bind(input_file)
            .bind(attempt.estimated_tokens)
            .execute(&mut *tx)
            .await?;
            crate::media::link_job(&mut tx, job.id, attempt.media).await?;
            let out = load_job(&mut *tx, job.id).await?;
            events::append(&mut tx, &[(job.id, JobEventKind::StateChanged)], actor).await?;
            tracing::info!(ledger = %ledger, job = %public_id, input_file = %input_file, "batch create begins");
            Ok(out)
        }
        .await;
        crate::end_tx(tx, out).await
    }

    /// Closes a CREATING (or PREPARING) job whose batch the provider does
    /// not have (its owner searched): CANCELLED with `reason`, its rows back
    /// without an attempt, its claim done. Repeating it answers the closed
    /// job.
    #[tracing::instrument(
        target = "tally::trace",
        level = "debug",
        name = "store.mark_not_created",
        skip_all
    )]
    pub async fn mark_not_created(
        &self,
        ledger: &str,
        public_id: &str,
        token: Uuid,
        not: &NotCreated<'_>,
        actor: &str,
    ) -> Result<JobRecord> {
        let record = self.ledger(ledger).await?;
        let message = format!("the provider refused the batch: {}", not.reason);
        let pausing = not.pause.map(|reason| pause::PauseLedger {
            ledger,
            reason,
            message: &message,
            actor,
            etag: None,
        });
        let mut tx = self.begin().await?;
        let out = async {
            // The pause commits with the close: one seen without the other
            // would let an operator resume between them, and the refusal,
            // older than the resume, pause the ledger again (as a repeated
            // call for the closed job would).
            if pausing.is_some() {
                pause::lock_first(&mut tx, ledger).await?;
            }
            let (_, job) = lock_fenced(&mut tx, record.id, ledger, public_id, token).await?;
            if job.closed && job.state()? == JobState::Cancelled {
                return Ok((load_job(&mut *tx, job.id).await?, None));
            }
            // A cool-down or a pause speaks for the provider: only a job
            // that sent its create may ask for one (one team's worker
            // cannot stop every team's work with a job it never sent).
            // A refused batch is one the provider reported ended: FAILED
            // (at validation), or SUCCEEDED with every request refused.
            let (event, sent): (JobEvent, &[JobState]) = if not.batch_refused {
                (JobEvent::Refused, &[JobState::Failed, JobState::Succeeded])
            } else {
                (JobEvent::NotCreated, &[JobState::Creating])
            };
            if not.batch_refused && !sent.contains(&job.state()?) {
                return Err(StoreError::precondition(
                    "JOB_NOT_FAILED",
                    format!(
                        "ledgers/{ledger}/jobs/{public_id} is {}: only a batch the provider reported ended (FAILED, or SUCCEEDED with every request refused) can have been refused before it ran",
                        job.state()?
                    ),
                ));
            }
            if (not.cooldown.is_some() || not.pause.is_some()) && !sent.contains(&job.state()?) {
                return Err(StoreError::precondition(
                    "JOB_NOT_CREATING",
                    format!(
                        "ledgers/{ledger}/jobs/{public_id} is {}: provider_cooldown and provider_refusal need a job whose create was attempted (MarkCreating)",
                        job.state()?
                    ),
                ));
            }
            let why = if not.batch_refused {
                format!("the provider refused the batch before running it: {}", not.reason)
            } else {
                format!("the batch was never created: {}", not.reason)
            };
            let n = close_unsent(
                &mut tx,
                &record,
                token,
                &job,
                event,
                ClaimState::Done,
                &why,
            )
            .await?;
            crate::unresolved::clear(&mut tx, job.id).await?;
            if let Some(cooldown) = not.cooldown {
                admission::cool_down(&mut tx, job.id, cooldown).await?;
            }
            let out = load_job(&mut *tx, job.id).await?;
            events::append(&mut tx, &[(job.id, JobEventKind::StateChanged)], actor).await?;
            let paused = match &pausing {
                Some(req) => Some(pause::pause_in(&mut tx, req).await?),
                None => None,
            };
            tracing::info!(ledger = %ledger, job = %public_id, rows = n, reason = not.reason, "batch never created; rows released");
            Ok((out, paused))
        }
        .await;
        self.claim_cache.forget(token);
        let (out, paused) = crate::end_tx(tx, out).await?;
        if let (Some(req), Some((ledger, changed))) = (&pausing, paused) {
            self.paused_now(req, &ledger, changed);
        }
        Ok(out)
    }

    /// Hands up to `max_jobs` submitted jobs whose owner's lease ran out to
    /// `worker`, each with a new claim holding the rows the job still holds
    /// (the old claim expires, so the dead owner's late reports are STALE).
    /// The rows are not made claimable. PREPARING jobs of expired claims are
    /// abandoned first (rows released, no attempt).
    #[tracing::instrument(
        target = "tally::trace",
        level = "debug",
        name = "store.adopt_jobs",
        skip_all
    )]
    pub async fn adopt_jobs(
        &self,
        ledger: &str,
        worker: &str,
        max_jobs: i64,
        lease: Option<Duration>,
        actor: &str,
    ) -> Result<AdoptResult> {
        let record = self.ledger(ledger).await?;
        let rescued = self.rescue_expired(Some(record.id)).await?;
        let owner = if worker.is_empty() { actor } else { worker };
        let mut tx = self.begin().await?;
        // Claims of submitted jobs that ran out of lease: the complement,
        // among expired claims with an open job, of what rescue takes.
        static ADOPTABLE: LazyLock<String> = LazyLock::new(|| {
            format!(
                "SELECT c.token, c.job_id, c.model, c.row_ids
                 FROM claims c JOIN jobs j ON j.id = c.job_id
                 WHERE c.ledger_id = $1 AND c.state = {CLAIM_ACTIVE} AND c.expire_time <= now()
                   AND j.end_time IS NULL AND j.state <> {JOB_PREPARING}
                 ORDER BY c.expire_time LIMIT $2
                 FOR UPDATE OF c SKIP LOCKED"
            )
        });
        let expired: Vec<(Uuid, i64, String, Vec<i64>)> =
            sqlx::query_as(sqlx::AssertSqlSafe(ADOPTABLE.as_str()))
                .bind(record.id)
                .bind(max_jobs)
                .fetch_all(&mut *tx)
                .await?;
        let mut adopted = Vec::new();
        for (old, job_id, model, row_ids) in expired {
            let job = lock_job_by_id(&mut tx, job_id).await?;
            if job.claim_token != old || job.step(JobEvent::Adopt, ledger).is_err() {
                continue;
            }
            let token = Uuid::new_v4();
            let keys: Vec<(i64, String)> =
                sqlx::query_as("SELECT id, key FROM rows WHERE id = ANY($1) ORDER BY id")
                    .bind(&row_ids)
                    .fetch_all(&mut *tx)
                    .await?;
            let ids: Vec<i64> = keys.iter().map(|(id, _)| *id).collect();
            if ids.len() != row_ids.len() {
                return Err(StoreError::Internal(format!(
                    "claim {old} of job {} holds {} rows, {} of them exist",
                    job.public_id,
                    row_ids.len(),
                    ids.len()
                )));
            }
            sqlx::query(
                "INSERT INTO claims (token, ledger_id, worker, model, row_ids, row_count, held,
                                     job_id, expire_time)
                 VALUES ($1, $2, $3, $4, $5, $6, $6, $7, now() + $8 * interval '1 millisecond')",
            )
            .bind(token)
            .bind(record.id)
            .bind(owner)
            .bind(&model)
            .bind(&ids)
            .bind(ids.len() as i32)
            .bind(job_id)
            .bind(lease_ms(lease, record.policy.lease))
            .execute(&mut *tx)
            .await?;
            sqlx::query("UPDATE claims SET state = $2, held = 0, row_ids = '{}' WHERE token = $1")
                .bind(old)
                .bind(ClaimState::Expired.code())
                .execute(&mut *tx)
                .await?;
            // Under a spend cap the rows stay reserved while they are out.
            crate::spend::carry_reservation(&mut tx, old, token).await?;
            // The requests its rows missed the result cache with: their
            // answers are kept when the new claim reports them.
            sqlx::query("UPDATE cache_requests SET claim_id = $2 WHERE claim_id = $1")
                .bind(old)
                .bind(token)
                .execute(&mut *tx)
                .await?;
            sqlx::query(
                "UPDATE jobs SET claim_token = $2, owner = $3, adoptions = adoptions + 1,
                        update_time = now()
                 WHERE id = $1 AND claim_token = $4 AND end_time IS NULL",
            )
            .bind(job_id)
            .bind(token)
            .bind(owner)
            .bind(old)
            .execute(&mut *tx)
            .await?;
            tracing::info!(ledger = %ledger, job = %job.public_id, worker = %owner, rows = ids.len(), "job adopted");
            adopted.push((job_id, token, keys.into_iter().map(|(_, k)| k).collect()));
        }
        let mut out = AdoptResult {
            adopted: Vec::with_capacity(adopted.len()),
            released_jobs: rescued.abandoned_jobs as i64,
        };
        let mut events = Vec::with_capacity(adopted.len());
        for (job_id, token, keys) in adopted {
            let job = load_job(&mut *tx, job_id).await?;
            let claim: ClaimRecord = claims::load_claim(&mut *tx, token).await?;
            out.adopted.push(AdoptedJob { job, claim, keys });
            events.push((job_id, JobEventKind::Adopted));
        }
        events::append(&mut tx, &events, actor).await?;
        tx.commit().await?;
        Ok(out)
    }

    /// Closes a job, fenced by its live claim: the rows it still holds are
    /// settled by the batch's final state (`missing_from_output` after a
    /// successful batch, `job_failed` otherwise; an attempt each), counts
    /// and summary are fixed, the job is RECONCILED and its claim DONE.
    /// Repeating the same finish answers the closed job.
    #[tracing::instrument(
        target = "tally::trace",
        level = "debug",
        name = "store.finish_job",
        skip_all
    )]
    pub async fn finish_job(
        &self,
        ledger: &str,
        public_id: &str,
        token: Uuid,
        req: &FinishRequest,
        actor: &str,
    ) -> Result<JobRecord> {
        let record = self.ledger(ledger).await?;
        let name = names::job_name(ledger, public_id);
        let mut tx = self.begin().await?;
        let out = async {
            let (claim, job) = lock_fenced(&mut tx, record.id, ledger, public_id, token).await?;
            if job.closed
                && job.state == JobState::Reconciled.code()
                && job.final_state == Some(req.final_state.state().code())
            {
                let out = load_job(&mut *tx, job.id).await?;
                return Ok(out);
            }
            let t = job.step(JobEvent::Finish(req.final_state), ledger)?;
            fence::check_live(&claim, ledger).map_err(|e| match e {
                StoreError::FailedPrecondition {
                    reason,
                    description,
                } => StoreError::FailedPrecondition {
                    reason,
                    description: format!("{description}; adopt {name} (AdoptJobs) to finish it"),
                },
                other => other,
            })?;
            let rows = fence::lock_held_rows(&mut tx, token, None).await?;
            let never_ran: HashSet<&str> = req.not_run.iter().map(String::as_str).collect();
            let (not_run, rows): (Vec<_>, Vec<_>) = rows
                .into_iter()
                .partition(|r| never_ran.contains(r.key.as_str()));
            let released = settle::transitions(&not_run, &Event::Release, &record.policy)?;
            let event = req.final_state.row_event();
            let mut writes = settle::transitions(&rows, &event, &record.policy)?;
            if req.final_state != FinalState::Succeeded && !req.error.is_empty() {
                let why = format!(
                    "the job carrying the row ended {}: {}",
                    req.final_state, req.error
                );
                for w in &mut writes {
                    w.last_error = Some(why.clone());
                }
            }
            let by = settle::Settler::on_behalf(actor);
            settle::settle(&mut tx, record.id, token, &released, by).await?;
            let mut finished = Finished::default();
            settle::settle_logged(&mut tx, record.id, token, &writes, by, &mut finished).await?;
            let retryable = writes
                .iter()
                .filter(|w| w.status == RowStatus::Retryable)
                .count() as i32;
            let permanent = writes
                .iter()
                .filter(|w| w.status == RowStatus::Permanent)
                .count() as i32;
            let missing = if req.final_state == FinalState::Succeeded {
                writes.len() as i32
            } else {
                0
            };
            let (rows_n, succeeded, retryable, permanent, missing): (i32, i32, i32, i32, i32) =
                sqlx::query_as(
                    "UPDATE jobs SET state = $2, final_state = $3, output_file = $4, error = $5,
                            retryable = retryable + $6, permanent = permanent + $7,
                            missing = missing + $8, end_time = now(), update_time = now()
                     WHERE id = $1 AND claim_token = $9 AND end_time IS NULL
                     RETURNING row_count, succeeded, retryable, permanent, missing",
                )
                .bind(job.id)
                .bind(t.state.code())
                .bind(req.final_state.state().code())
                .bind(&req.output_file)
                .bind(&req.error)
                .bind(retryable)
                .bind(permanent)
                .bind(missing)
                .bind(token)
                .fetch_one(&mut *tx)
                .await?;
            let summary = tally_core::summary::job_line(&JobCounts {
                rows: i64::from(rows_n),
                succeeded: i64::from(succeeded),
                retryable: i64::from(retryable),
                permanent: i64::from(permanent),
                missing: i64::from(missing),
            });
            sqlx::query("UPDATE jobs SET summary = $2 WHERE id = $1")
                .bind(job.id)
                .bind(&summary)
                .execute(&mut *tx)
                .await?;
            sqlx::query("UPDATE claims SET state = $2, held = 0 WHERE token = $1")
                .bind(token)
                .bind(ClaimState::Done.code())
                .execute(&mut *tx)
                .await?;
            let mut out = load_job(&mut *tx, job.id).await?;
            out.closed_now = true;
            events::append(&mut tx, &[(job.id, JobEventKind::StateChanged)], actor).await?;
            finished.log(&mut tx).await?;
            tracing::info!(ledger = %ledger, job = %public_id, final_state = %req.final_state, summary = %summary, "job reconciled");
            Ok(out)
        }
        .await;
        crate::end_tx(tx, out).await
    }
}
