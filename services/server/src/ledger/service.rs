//! LedgerService: thin handlers. Each validates its request (see
//! [`super::validate`]), makes one store call and encodes the answer
//! ([`super::convert`]).

use super::convert::{self, ledger_to_proto};
use super::{golden, validate};
use crate::config::Limits;
use crate::edge::caller::{access, actor};
use crate::edge::status::{from_store, invalid, invalid_field};
use crate::edge::wire_convert::duration_to_proto;
use crate::metrics::Metrics;
use crate::{edge::paging, tasks::purger};
use tally_core::names;
use tally_core::outbound::Reach;
use tally_core::pause::PauseReason;
use tally_core::summary::ledger_state_line;
use tally_core::violation::Violations;
use tally_proto::v1 as pb;
use tally_proto::v1::ledger_service_server::LedgerService;
use tally_store::fill::Filled;
use tally_store::pause::PauseLedger;
use tally_store::purge::DeleteLedger;
use tally_store::types::{ClaimGrant, ClaimRequest, EnrollOutcome};
use tally_store::{Store, StoreError};
use tonic::{Request, Response, Status};

pub struct Ledgers {
    store: Store,
    limits: Limits,
    metrics: Metrics,
    purge: purger::Wake,
    reach: Reach,
}

impl Ledgers {
    /// `purge` wakes this replica's purger after a DeleteLedger; `reach`
    /// says which alert URLs a policy may name.
    pub fn new(
        store: Store,
        limits: Limits,
        metrics: Metrics,
        purge: purger::Wake,
        reach: Reach,
    ) -> Self {
        Self {
            store,
            limits,
            metrics,
            purge,
            reach,
        }
    }
}

type Reply<T> = Result<Response<T>, Status>;

impl Ledgers {
    /// ClaimRows' work once the request is valid and allowed.
    async fn claim(
        &self,
        ledger: &str,
        claim: &ClaimRequest,
    ) -> Result<pb::ClaimRowsResponse, Status> {
        let grant = match self
            .metrics
            .timed("claim", self.store.claim_rows(ledger, claim))
            .await
        {
            // A paused ledger answers the empty claim of "nothing runnable",
            // saying why: clients back off as they would anyway.
            Err(StoreError::LedgerPaused { pause, .. }) => {
                return Ok(pb::ClaimRowsResponse {
                    pause: Some(convert::pause_to_proto(&pause)),
                    ..Default::default()
                });
            }
            other => other.map_err(from_store)?,
        };
        Ok(self.answer_claim(ledger, grant).await)
    }

    /// The answer to what a claim took (counted in the ledger's metrics),
    /// saying whether the ledger serves rows from the result cache.
    async fn answer_claim(&self, ledger: &str, grant: Option<ClaimGrant>) -> pb::ClaimRowsResponse {
        let claimed = grant.as_ref().map_or(0, |g| g.rows.len());
        self.metrics.rows_claimed_in(ledger, claimed as u64);
        match grant {
            None => pb::ClaimRowsResponse::default(),
            Some(g) => pb::ClaimRowsResponse {
                claim: Some(pb::Claim {
                    // Unknown (the rows are claimed already): the rows are
                    // sent without a lookup, as with the cache off.
                    result_cache: self.store.cache_on(ledger).await.unwrap_or(false),
                    ..convert::claim_to_proto(&g.claim)
                }),
                truncated: g.held_back > 0,
                rows: g
                    .rows
                    .into_iter()
                    .map(convert::claimed_row_to_proto)
                    .collect(),
                pause: None,
                filling: None,
            },
        }
    }

    /// A claim for one provider batch (`fill_batch`): held back while the
    /// batch would not be full and more rows can become runnable soon.
    async fn claim_batch(
        &self,
        ledger: &str,
        claim: &ClaimRequest,
    ) -> Result<pb::ClaimRowsResponse, Status> {
        match self
            .metrics
            .timed("claim", self.store.claim_batch(ledger, claim))
            .await
        {
            Ok(Filled::Waiting(w)) => Ok(pb::ClaimRowsResponse {
                filling: Some(pb::FillWait {
                    runnable_rows: w.runnable.min(i64::MAX as u64) as i64,
                    reason: w.for_.code().to_string(),
                    retry_after: Some(duration_to_proto(w.within)),
                }),
                ..Default::default()
            }),
            Ok(Filled::Claimed(grant)) => Ok(self.answer_claim(ledger, grant).await),
            Err(StoreError::LedgerPaused { pause, .. }) => Ok(pb::ClaimRowsResponse {
                pause: Some(convert::pause_to_proto(&pause)),
                ..Default::default()
            }),
            Err(e) => Err(from_store(e)),
        }
    }

    /// Gives back the rows of a `claim_next` whose report failed: the
    /// caller sees only the report's error. Should that fail too, the
    /// claim's lease runs out and its rows are rescued as any other's.
    async fn give_back(
        &self,
        ledger: &str,
        next: Result<pb::ClaimRowsResponse, Status>,
        actor: &str,
    ) {
        let Some(claim) = next.ok().and_then(|n| n.claim) else {
            return;
        };
        let released = match validate::claim("claim", &claim.name) {
            Ok((_, token)) => self
                .store
                .release_claim(ledger, token, None, actor)
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.message().to_owned()),
        };
        if let Err(e) = released {
            tracing::warn!(claim = %claim.name, error = %e, "could not give back the next claim of a failed report; its lease will run out");
        }
    }
}

/// The error of a `claim_next` whose report went through: said so, as the
/// client would otherwise retry outcomes that are already recorded.
fn recorded_anyway(s: Status) -> Status {
    Status::with_details(
        s.code(),
        format!(
            "the outcomes were recorded; claiming the next rows failed: {}",
            s.message()
        ),
        s.details().to_vec().into(),
    )
}

#[tonic::async_trait]
impl LedgerService for Ledgers {
    async fn create_ledger(&self, req: Request<pb::CreateLedgerRequest>) -> Reply<pb::Ledger> {
        let access = access(&req);
        let req = req.into_inner();
        let mut v = Violations::new();
        v.check("ledger_id", names::validate_ledger_id(&req.ledger_id));
        let policy = match convert::policy_for_create(req.policy.as_ref(), self.reach) {
            Ok(p) => Some(p),
            Err(more) => {
                v.extend(more.finish().err().unwrap_or_default());
                None
            }
        };
        v.finish().map_err(invalid)?;
        access.ledger(&req.ledger_id)?;
        let policy = policy.expect("no violations means a policy");
        let ledger = self
            .store
            .create_ledger(&req.ledger_id, &policy)
            .await
            .map_err(from_store)?;
        tracing::info!(ledger = %ledger.name, "ledger created");
        Ok(Response::new(ledger_to_proto(&ledger)))
    }

    async fn get_ledger(&self, req: Request<pb::GetLedgerRequest>) -> Reply<pb::Ledger> {
        let name = validate::ledger("name", &req.get_ref().name)?;
        access(&req).ledger(&name)?;
        let ledger = self
            .store
            .describe_ledger(&name)
            .await
            .map_err(from_store)?;
        Ok(Response::new(ledger_to_proto(&ledger)))
    }

    async fn list_ledgers(
        &self,
        req: Request<pb::ListLedgersRequest>,
    ) -> Reply<pb::ListLedgersResponse> {
        let access = access(&req);
        let req = req.into_inner();
        let size = paging::page_size(req.page_size)?;
        // A page token is valid only with the show_deleted it was made for.
        let fp = if req.show_deleted { "show_deleted" } else { "" };
        let after = paging::decode(&req.page_token, "ledgers", fp)?;
        let ledgers = self
            .store
            .list_ledgers(
                after.as_deref(),
                size,
                req.show_deleted,
                &access.scope.ledgers,
            )
            .await
            .map_err(from_store)?;
        // Policies (overrides, prices) make ledgers large enough that a page
        // of them is cut by bytes like every other list.
        let (page, got) = crate::edge::responses::page(&ledgers, size, ledger_to_proto);
        let last = page.len().checked_sub(1).map(|i| ledgers[i].name.as_str());
        Ok(Response::new(pb::ListLedgersResponse {
            next_page_token: paging::next_token("ledgers", fp, got, size, last),
            ledgers: page,
        }))
    }

    async fn update_ledger(&self, req: Request<pb::UpdateLedgerRequest>) -> Reply<pb::Ledger> {
        let access = access(&req);
        let req = req.into_inner();
        let ledger = req
            .ledger
            .ok_or_else(|| invalid_field("ledger", "must be set"))?;
        let name = validate::ledger("ledger.name", &ledger.name)?;
        access.ledger(&name)?;
        let paths = req.update_mask.map(|m| m.paths).unwrap_or_default();
        let current = self.store.get_ledger(&name).await.map_err(from_store)?;
        let etag = match ledger.etag.as_str() {
            "" => current.etag,
            e => e
                .parse()
                .map_err(|_| invalid_field("ledger.etag", "is not an etag this server issued"))?,
        };
        let src = ledger.policy.unwrap_or_default();
        let policy = convert::policy_for_update(&current.policy, &src, &paths, self.reach)
            .map_err(|v| invalid(v.finish().err().unwrap_or_default()))?;
        let updated = self
            .store
            .update_ledger(&name, &policy, etag)
            .await
            .map_err(from_store)?;
        tracing::info!(ledger = %name, paths = ?paths, "ledger updated");
        Ok(Response::new(ledger_to_proto(&updated)))
    }

    async fn enroll_rows(
        &self,
        req: Request<pb::EnrollRowsRequest>,
    ) -> Reply<pb::EnrollRowsResponse> {
        let access = access(&req);
        let (ledger, rows) = validate::enroll(req.into_inner(), &self.limits)?;
        access.ledger(&ledger)?;
        access.read_prompts(rows.iter().map(|r| r.prompt_name.as_str()))?;
        let outcomes = self
            .metrics
            .timed("enroll", self.store.enroll(&ledger, &rows))
            .await
            .map_err(from_store)?;
        let mut resp = pb::EnrollRowsResponse::default();
        for (row, outcome) in rows.into_iter().zip(&outcomes) {
            let o = match outcome {
                EnrollOutcome::Enrolled => {
                    resp.enrolled += 1;
                    pb::EnrollOutcome::Enrolled
                }
                EnrollOutcome::AlreadyPresent => {
                    resp.already_present += 1;
                    pb::EnrollOutcome::AlreadyPresent
                }
                EnrollOutcome::Conflict => {
                    resp.conflicts += 1;
                    pb::EnrollOutcome::Conflict
                }
            };
            resp.results.push(pb::EnrollResult {
                key: row.key,
                outcome: o as i32,
            });
        }
        self.metrics
            .rows_enrolled_in(&ledger, resp.enrolled.max(0) as u64);
        tracing::debug!(ledger = %ledger, enrolled = resp.enrolled, present = resp.already_present, conflicts = resp.conflicts, "rows enrolled");
        Ok(Response::new(resp))
    }

    async fn claim_rows(&self, req: Request<pb::ClaimRowsRequest>) -> Reply<pb::ClaimRowsResponse> {
        let (ledger, claim) = validate::claim_rows(req.get_ref(), &self.limits)?;
        access(&req).ledger(&ledger)?;
        if req.get_ref().fill_batch {
            return Ok(Response::new(self.claim_batch(&ledger, &claim).await?));
        }
        Ok(Response::new(self.claim(&ledger, &claim).await?))
    }

    async fn extend_claim(&self, req: Request<pb::ExtendClaimRequest>) -> Reply<pb::Claim> {
        let access = access(&req);
        let req = req.into_inner();
        let (ledger, token) = validate::claim("name", &req.name)?;
        access.ledger(&ledger)?;
        let mut v = Violations::new();
        let lease = validate::lease("lease", req.lease.as_ref(), &mut v);
        v.finish().map_err(invalid)?;
        let claim = self
            .store
            .extend_claim(&ledger, token, lease)
            .await
            .map_err(from_store)?;
        Ok(Response::new(convert::claim_to_proto(&claim)))
    }

    async fn release_claim(
        &self,
        req: Request<pb::ReleaseClaimRequest>,
    ) -> Reply<pb::ReleaseClaimResponse> {
        let access = access(&req);
        let req = req.into_inner();
        let (ledger, token) = validate::claim("name", &req.name)?;
        access.ledger(&ledger)?;
        let actor = access.name;
        validate::keys("keys", &req.keys, &self.limits, true)?;
        let keys = (!req.keys.is_empty()).then_some(req.keys.as_slice());
        let (released, claim) = self
            .store
            .release_claim(&ledger, token, keys, &actor)
            .await
            .map_err(from_store)?;
        Ok(Response::new(pb::ReleaseClaimResponse {
            released: released as i32,
            claim: Some(convert::claim_to_proto(&claim)),
        }))
    }

    async fn report_outcomes(
        &self,
        req: Request<pb::ReportOutcomesRequest>,
    ) -> Reply<pb::ReportOutcomesResponse> {
        let access = access(&req);
        let mut req = req.into_inner();
        let next = req.claim_next.take();
        let (ledger, token, items) = validate::report(req, &self.limits)?;
        let next = next
            .map(|n| validate::claim_next(&n, &ledger, &items, &self.limits))
            .transpose()?;
        access.ledger(&ledger)?;
        let actor = access.name;
        let report = self
            .metrics
            .timed("report", self.store.report(&ledger, token, &items, &actor));
        let (summary, next_claim) = match next {
            None => (report.await.map_err(from_store)?, Ok(None)),
            // The next rows are claimed while the outcomes are written.
            Some(claim) => {
                let (summary, next) = tokio::join!(report, self.claim(&ledger, &claim));
                let summary = match summary {
                    Ok(summary) => summary,
                    Err(e) => {
                        self.give_back(&ledger, next, &actor).await;
                        return Err(from_store(e));
                    }
                };
                // Found nothing: again now that the outcomes are written,
                // which may have freed rows (dependants, retries due at
                // once). No next claim then means none is runnable.
                let next = match next {
                    Ok(n) if n.claim.is_none() && n.pause.is_none() => {
                        self.claim(&ledger, &claim).await
                    }
                    other => other,
                };
                (summary, next.map(Some))
            }
        };
        // Counted even when only the next claim failed: they are recorded.
        self.metrics.report_verdicts(&ledger, &summary.verdicts);
        self.metrics.report_usage(&ledger, &items, &summary);
        let next_claim = next_claim.map_err(recorded_anyway)?;
        Ok(Response::new(convert::report_to_proto(summary, next_claim)))
    }

    async fn get_row(&self, req: Request<pb::GetRowRequest>) -> Reply<pb::Row> {
        let (ledger, key) = names::parse_row(&req.get_ref().name)
            .map_err(|e| invalid_field("name", e.to_string()))?;
        let access = access(&req);
        access.ledger(ledger)?;
        let row = self.store.get_row(ledger, key).await.map_err(from_store)?;
        let mut row = convert::row_to_proto(&row);
        if !access.uses_claims {
            convert::hide_claims(&mut row);
        }
        Ok(Response::new(row))
    }

    async fn list_rows(&self, req: Request<pb::ListRowsRequest>) -> Reply<pb::ListRowsResponse> {
        let access = access(&req);
        let req = req.into_inner();
        let ledger = validate::ledger("parent", &req.parent)?;
        access.ledger(&ledger)?;
        let filter = validate::row_filter("filter", req.filter.as_ref())?;
        if !access.lists_ledgers && filter.job.is_none() {
            return Err(crate::edge::status::with_reason(
                tonic::Code::PermissionDenied,
                "ROLE_DENIED",
                "the worker role lists one job's rows (filter.job); listing a whole \
                 ledger takes the enroller or operator role",
            ));
        }
        let size = paging::page_size(req.page_size)?;
        let full = match pb::RowView::try_from(req.view) {
            Ok(pb::RowView::Full) => true,
            Ok(pb::RowView::Basic | pb::RowView::Unspecified) => false,
            Err(_) => return Err(invalid_field("view", "unknown view")),
        };
        let list = format!("rows:{ledger}");
        let fp = validate::filter_fingerprint(&filter, "");
        let after = paging::decode(&req.page_token, &list, &fp)?;
        let budget = crate::edge::responses::PAGE_BYTES;
        let page = self
            .store
            .list_rows(
                &ledger,
                &filter,
                after.as_deref(),
                size,
                full.then_some(budget as i64),
            )
            .await
            .map_err(from_store)?;
        let fetched = page.rows.len();
        let (mut rows, cut) = crate::edge::responses::cut_page(
            page.rows.iter().map(convert::row_to_proto).collect(),
            budget,
        );
        if !access.uses_claims {
            rows.iter_mut().for_each(convert::hide_claims);
        }
        // A page that ended at its byte limit continues after its last row,
        // even with fewer rows than asked for.
        let got = if page.cut || cut {
            size as usize
        } else {
            fetched
        };
        let next = paging::next_token(&list, &fp, got, size, rows.last().map(|r| r.key.as_str()));
        Ok(Response::new(pb::ListRowsResponse {
            rows,
            next_page_token: next,
        }))
    }

    async fn summarize_ledger(
        &self,
        req: Request<pb::SummarizeLedgerRequest>,
    ) -> Reply<pb::LedgerSummary> {
        let ledger = validate::ledger("name", &req.get_ref().name)?;
        access(&req).ledger(&ledger)?;
        let record = self.store.get_ledger(&ledger).await.map_err(from_store)?;
        let s = self.store.summarize(&ledger).await.map_err(from_store)?;
        let estimate = record.policy.estimate_cost(
            s.by_model
                .iter()
                .map(|m| (m.model.as_str(), m.lane, &m.usage)),
        );
        let forecast = if req.get_ref().forecast {
            let work = self
                .store
                .unfinished_work(&record)
                .await
                .map_err(from_store)?;
            let turnarounds = self.store.turnarounds(&record).await.map_err(from_store)?;
            let output = tally_core::spend::forecast_output_per_row(
                record.policy.spend_cap.as_ref(),
                s.usage.output.saturating_add(s.usage.thinking),
                s.counts.succeeded,
            );
            Some(convert::forecast(
                &record.policy,
                &work,
                &turnarounds,
                output,
                estimate.cost_usd,
            ))
        } else {
            None
        };
        let spend = self.store.spend(&record).await.map_err(from_store)?;
        let cache = self.store.cache_stats(&ledger).await.map_err(from_store)?;
        let c = &s.counts;
        Ok(Response::new(pb::LedgerSummary {
            ledger: names::ledger_name(&ledger),
            total: c.total(),
            pending: c.pending,
            running: c.running,
            retryable: c.retryable,
            succeeded: c.succeeded,
            permanent: c.permanent,
            blocked: c.blocked,
            attempts_provider: s.failures[0],
            attempts_content: s.failures[1],
            attempts_infra: s.failures[2],
            attempts_total: s.attempts_total,
            usage: Some(convert::usage_to_proto(&s.usage)),
            estimated_cost_usd: estimate.cost_usd,
            unpriced_models: estimate.unpriced_models,
            permanent_by_rule: s.permanent_by_rule.iter().cloned().collect(),
            active_jobs: s.active_jobs,
            summary_line: ledger_state_line(c, record.pause.as_ref().map(|p| p.reason)),
            state: convert::ledger_state(&record) as i32,
            pause: record.pause.as_ref().map(convert::pause_to_proto),
            spend: spend.as_ref().map(convert::spend_to_proto),
            content_etag: s.content_etag.clone(),
            cost_by_lane: convert::cost_by_lane(&record.policy, &s.by_model),
            forecast,
            result_cache: Some(pb::ResultCacheStats {
                hits: cache.hits,
                misses: cache.misses,
                saved_usd: cache.saved_usd,
                stale: cache.stale,
            }),
            inputs_changed: s.inputs_changed,
        }))
    }

    async fn redrive_rows(
        &self,
        req: Request<pb::RedriveRowsRequest>,
    ) -> Reply<pb::RedriveRowsResponse> {
        let actor = actor(&req);
        let (ledger, target) = validate::redrive(req.get_ref(), &self.limits)?;
        access(&req).ledger(&ledger)?;
        let req = req.into_inner();
        let r = self
            .store
            .redrive(
                &ledger,
                &target,
                req.validate_only,
                req.include_succeeded,
                &actor,
                &req.reason,
            )
            .await
            .map_err(from_store)?;
        Ok(Response::new(pb::RedriveRowsResponse {
            redriven: r.redriven,
            unblocked: r.unblocked,
            skipped: r.skipped,
            sample_keys: r.sample_keys,
            reanswered: r.reanswered,
            dependants_at_risk: r.dependants_at_risk,
            estimated_cost_usd: r.estimated_cost_usd,
            at_risk_keys: r.at_risk_keys,
        }))
    }

    async fn delete_ledger(&self, req: Request<pb::DeleteLedgerRequest>) -> Reply<pb::Ledger> {
        let access = access(&req);
        let req = req.into_inner();
        let ledger = validate::ledger("name", &req.name)?;
        access.ledger(&ledger)?;
        let actor = access.name;
        let etag = validate::etag("etag", &req.etag)?;
        let content_etag = validate::content_etag("content_etag", &req.content_etag)?;
        let deleted = self
            .store
            .delete_ledger(&DeleteLedger {
                ledger: &ledger,
                force: req.force,
                etag,
                content_etag,
                actor: &actor,
            })
            .await
            .map_err(from_store)?;
        self.metrics.forget_ledger(&ledger);
        self.purge.now();
        Ok(Response::new(ledger_to_proto(&deleted)))
    }

    async fn pause_ledger(&self, req: Request<pb::PauseLedgerRequest>) -> Reply<pb::Ledger> {
        let actor = actor(&req);
        let (ledger, message, etag) = validate::pause(req.get_ref())?;
        access(&req).ledger(&ledger)?;
        let paused = self
            .store
            .pause_ledger(&PauseLedger {
                ledger: &ledger,
                reason: PauseReason::Operator,
                message: &message,
                actor: &actor,
                etag,
            })
            .await
            .map_err(from_store)?;
        Ok(Response::new(ledger_to_proto(&paused)))
    }

    async fn resume_ledger(&self, req: Request<pb::ResumeLedgerRequest>) -> Reply<pb::Ledger> {
        let access = access(&req);
        let req = req.into_inner();
        let ledger = validate::ledger("name", &req.name)?;
        access.ledger(&ledger)?;
        let actor = access.name;
        let etag = validate::etag("etag", &req.etag)?;
        let resumed = self
            .store
            .resume_ledger(&ledger, etag, &actor)
            .await
            .map_err(from_store)?;
        Ok(Response::new(ledger_to_proto(&resumed)))
    }

    async fn register_prompt(&self, req: Request<pb::RegisterPromptRequest>) -> Reply<pb::Prompt> {
        let prompt = validate::register_prompt(req.get_ref())?;
        access(&req).write_prompt(&prompt.prompt_id)?;
        let stored = self
            .store
            .register_prompt(&prompt)
            .await
            .map_err(from_store)?;
        Ok(Response::new(convert::prompt_to_proto(&stored)))
    }

    async fn get_prompt(&self, req: Request<pb::GetPromptRequest>) -> Reply<pb::Prompt> {
        let (id, version) = names::parse_prompt(&req.get_ref().name)
            .map_err(|e| invalid_field("name", e.to_string()))?;
        access(&req).read_prompt(id)?;
        let p = self
            .store
            .get_prompt(id, version)
            .await
            .map_err(from_store)?;
        Ok(Response::new(convert::prompt_to_proto(&p)))
    }

    async fn set_golden_rows(
        &self,
        req: Request<pb::SetGoldenRowsRequest>,
    ) -> Reply<pb::GoldenSet> {
        let (ledger, set) = golden::set_from_proto(req.get_ref())?;
        access(&req).ledger(&ledger)?;
        // A golden row's prompt must exist now, not at its first batch.
        let mut seen = std::collections::HashSet::new();
        for (i, r) in set.rows.iter().enumerate() {
            if r.prompt_name.is_empty() || !seen.insert((&r.prompt_name, &r.prompt_version)) {
                continue;
            }
            access(&req).read_prompt(&r.prompt_name)?;
            if let Err(e) = self
                .store
                .get_prompt(&r.prompt_name, &r.prompt_version)
                .await
            {
                return Err(match e {
                    tally_store::StoreError::NotFound { .. } => invalid_field(
                        format!("golden.rows[{i}].prompt"),
                        format!(
                            "prompts/{}/versions/{} is not registered",
                            r.prompt_name, r.prompt_version
                        ),
                    ),
                    other => from_store(other),
                });
            }
        }
        let drift = self
            .store
            .set_golden(&ledger, &set)
            .await
            .map_err(from_store)?;
        Ok(Response::new(golden::set_to_proto(&ledger, &set, &drift)))
    }

    async fn get_golden_rows(
        &self,
        req: Request<pb::GetGoldenRowsRequest>,
    ) -> Reply<pb::GoldenSet> {
        let ledger = golden::ledger_of("name", &req.get_ref().name)?;
        access(&req).ledger(&ledger)?;
        match self.store.get_golden(&ledger).await.map_err(from_store)? {
            Some((set, drift)) => Ok(Response::new(golden::set_to_proto(&ledger, &set, &drift))),
            None => Err(Status::not_found(format!(
                "ledgers/{ledger} has no golden rows (SetGoldenRows sets them)"
            ))),
        }
    }

    async fn settle_from_cache(
        &self,
        req: Request<pb::SettleFromCacheRequest>,
    ) -> Reply<pb::SettleFromCacheResponse> {
        let access = access(&req);
        let req = req.into_inner();
        let (ledger, token) = validate::claim("claim", &req.claim)?;
        let lookups = validate::cache_lookups(req.requests)?;
        access.ledger(&ledger)?;
        // The team is the caller: answers are kept and served per principal.
        let team = access.name;
        let settled = self
            .store
            .settle_from_cache(&ledger, token, &team, &lookups, &team)
            .await
            .map_err(from_store)?;
        self.metrics.cache_lookups_in(
            &ledger,
            settled.hits.len() as u64,
            u64::from(settled.misses),
            settled.saved_usd,
        );
        Ok(Response::new(pb::SettleFromCacheResponse {
            hits: settled.hits,
            misses: settled.misses as i32,
            saved_usd: settled.saved_usd,
        }))
    }

    async fn estimate_from_cache(
        &self,
        req: Request<pb::EstimateFromCacheRequest>,
    ) -> Reply<pb::EstimateFromCacheResponse> {
        let access = access(&req);
        let req = req.into_inner();
        let ledger = validate::ledger("parent", &req.parent)?;
        let lookups = validate::cache_lookups(req.requests)?;
        access.ledger(&ledger)?;
        let e = self
            .store
            .estimate_from_cache(&ledger, &access.name, &lookups)
            .await
            .map_err(from_store)?;
        Ok(Response::new(pb::EstimateFromCacheResponse {
            hits: e
                .hits
                .into_iter()
                .map(|(key, cost_usd)| pb::CacheEstimate { key, cost_usd })
                .collect(),
            misses: e.misses as i32,
            saved_usd: e.saved_usd,
        }))
    }
}
