//! JobService's request checks: requests to store inputs, or
//! INVALID_ARGUMENT with a field violation per problem. Ledger and claim
//! names and leases are checked as LedgerService checks them
//! ([`crate::ledger::validate`]). Pure: no I/O.

use super::convert::job_state_from_proto;
use crate::edge::status::{invalid, invalid_field};
use crate::edge::wire_convert::bounded_duration;
use crate::ledger::validate as ledger_validate;
use std::time::Duration;
use tally_core::job::{FinalState, JobState};
use tally_core::names;
use tally_core::operation::normalize_name;
use tally_core::pause::PauseReason;
use tally_core::violation::Violations;
use tally_proto::v1 as pb;
use tally_store::holders::MAX_HOLDERS;
use tally_store::types::{FinishRequest, WorkerProcess};
use tonic::Status;
use uuid::Uuid;

/// Longest input or output file name accepted.
const MAX_FILE: usize = 512;
/// Longest job error kept.
const MAX_ERROR: usize = 4096;
/// Longest MarkNotCreated reason.
const MAX_REASON: usize = 1024;
/// Longest worker or lock owner name.
const MAX_NAME: usize = 128;
/// Lock TTLs.
pub const MIN_TTL: Duration = Duration::from_secs(1);
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
/// AdoptJobs' `max_jobs`.
pub const DEFAULT_ADOPT: i64 = 10;
pub const MAX_ADOPT: i64 = 100;

/// `ledgers/{ledger}/jobs/{job}` → (ledger, job id).
pub fn job(field: &str, name: &str) -> Result<(String, String), Status> {
    names::parse_job(name)
        .map(|(l, j)| (l.to_string(), j.to_string()))
        .map_err(|e| invalid_field(field, e.to_string()))
}

/// A job name and the claim fencing it, which must be of the same ledger.
pub fn job_and_claim(job_name: &str, claim_name: &str) -> Result<(String, String, Uuid), Status> {
    let (ledger, job) = job("name", job_name)?;
    let (claim_ledger, token) = ledger_validate::claim("claim", claim_name)?;
    if claim_ledger != ledger {
        return Err(invalid_field(
            "claim",
            format!("is a claim of ledgers/{claim_ledger}, not of the job's ledgers/{ledger}"),
        ));
    }
    Ok((ledger, job, token))
}

fn text(field: &str, value: &str, max: usize, v: &mut Violations) {
    if value.len() > max {
        v.add(field, format!("must be at most {max} characters"));
    }
}

/// MarkSubmitted's batch (normalized to `batches/{id}`) and input file.
pub fn submission(req: &pb::MarkSubmittedRequest) -> Result<(String, String), Status> {
    let mut v = Violations::new();
    let batch = match normalize_name(&req.batch) {
        Ok(b) => b,
        Err(e) => {
            v.add("batch", e.to_string());
            String::new()
        }
    };
    text("input_file", &req.input_file, MAX_FILE, &mut v);
    v.finish().map_err(invalid)?;
    Ok((batch, req.input_file.clone()))
}

pub use tally_core::media::MAX_BATCH_MEDIA;

/// MarkCreating's input file (empty where the requests go inline), the
/// batch's estimated tokens (`None`: keep CreateJob's estimate) and the
/// media uploads it references.
pub fn creating(
    req: &pb::MarkCreatingRequest,
) -> Result<(String, Option<i64>, Vec<String>), Status> {
    let mut v = Violations::new();
    // Empty where the requests go inline in the create (Anthropic).
    text("input_file", &req.input_file, MAX_FILE, &mut v);
    if !(0..=tally_core::quota::MAX_TOKENS_LIMIT).contains(&req.estimated_tokens) {
        v.add(
            "estimated_tokens",
            format!(
                "must be 0 (keep CreateJob's estimate) to {}",
                tally_core::quota::MAX_TOKENS_LIMIT
            ),
        );
    }
    let media = super::media::creating_media(&req.media_sha256, MAX_BATCH_MEDIA, &mut v);
    v.finish().map_err(invalid)?;
    let tokens = (req.estimated_tokens > 0).then_some(req.estimated_tokens);
    Ok((req.input_file.clone(), tokens, media))
}

/// CreateJob's provider account ([`tally_core::provider::account_problem`]).
pub fn provider_account(account: &str) -> Result<&str, Status> {
    match tally_core::provider::account_problem(account) {
        Some(why) => Err(invalid_field("provider_account", why)),
        None => Ok(account),
    }
}

/// FlagCreateUnresolved's reason: required, at most 1 KiB.
pub fn unresolved(req: &pb::FlagCreateUnresolvedRequest) -> Result<(), Status> {
    let mut v = Violations::new();
    if req.reason.trim().is_empty() {
        v.add("reason", "is required: why the search cannot end");
    }
    text("reason", &req.reason, MAX_REASON, &mut v);
    v.finish().map_err(invalid)
}

/// MarkNotCreated's reason (bounded).
/// The reason, and the shared cool-down asked for (a 429 at create).
/// MarkNotCreated's request, checked (the reason is read from `req`).
pub fn not_created(req: &pb::MarkNotCreatedRequest) -> Result<NotCreatedParts, Status> {
    let mut v = Violations::new();
    text("reason", &req.reason, MAX_REASON, &mut v);
    let cooldown = match &req.provider_cooldown {
        None => None,
        Some(d) => match crate::edge::wire_convert::duration(d) {
            Some(d) => Some(d),
            None => {
                v.add("provider_cooldown", "must be a non-negative duration");
                None
            }
        },
    };
    let pause = refusal_pause(
        "provider_refusal",
        req.provider_refusal,
        &req.reason,
        &mut v,
    );
    v.finish().map_err(invalid)?;
    Ok(NotCreatedParts { cooldown, pause })
}

/// An AcquireCapacity request, checked (its `tokens` are bounded at
/// intake, one per row, and by the claim's rows in the store).
pub struct CapacityParts<'a> {
    pub ledger: String,
    pub claim: Uuid,
    pub account: &'a str,
    pub rate_limited: Option<Duration>,
    pub pause: Option<PauseReason>,
}

pub fn capacity(req: &pb::AcquireCapacityRequest) -> Result<CapacityParts<'_>, Status> {
    let (ledger, claim) = ledger_validate::claim("claim", &req.claim)?;
    let account = provider_account(&req.provider_account)?;
    let mut v = Violations::new();
    if let Some(i) = req
        .tokens
        .iter()
        .position(|t| !(0..=tally_core::usage::MAX_TOKENS_PER_ATTEMPT).contains(t))
    {
        v.add(
            format!("tokens[{i}]"),
            format!("must be 0 to {}", tally_core::usage::MAX_TOKENS_PER_ATTEMPT),
        );
    }
    text("reason", &req.reason, MAX_REASON, &mut v);
    let pause = refusal_pause("refused", req.refused, &req.reason, &mut v);
    let rate_limited = match &req.rate_limited {
        None => None,
        Some(d) => match crate::edge::wire_convert::duration(d) {
            Some(d) => Some(d),
            None => {
                v.add("rate_limited", "must be a non-negative duration");
                None
            }
        },
    };
    v.finish().map_err(invalid)?;
    Ok(CapacityParts {
        ledger,
        claim,
        account,
        rate_limited,
        pause,
    })
}

/// The pause a reported provider refusal asks for (none when unset); the
/// provider's words (`reason`) are required with one.
fn refusal_pause(field: &str, code: i32, reason: &str, v: &mut Violations) -> Option<PauseReason> {
    let pause = match pb::ProviderRefusal::try_from(code) {
        Ok(pb::ProviderRefusal::Unspecified) => None,
        Ok(pb::ProviderRefusal::Quota) => Some(PauseReason::Quota),
        Ok(pb::ProviderRefusal::Billing) => Some(PauseReason::Billing),
        Ok(pb::ProviderRefusal::Model) => Some(PauseReason::Model),
        Ok(pb::ProviderRefusal::Request) => Some(PauseReason::Refused),
        Err(_) => {
            v.add(
                field,
                "must be a ProviderRefusal (QUOTA, BILLING, MODEL, REQUEST) or unset",
            );
            None
        }
    };
    if pause.is_some() && reason.trim().is_empty() {
        v.add(
            "reason",
            format!("must say what the provider answered when {field} pauses the ledger"),
        );
    }
    pause
}

/// The checked parts of a MarkNotCreated request besides its reason.
pub struct NotCreatedParts {
    pub cooldown: Option<std::time::Duration>,
    pub pause: Option<PauseReason>,
}

pub fn finish(req: &pb::FinishJobRequest) -> Result<FinishRequest, Status> {
    let mut v = Violations::new();
    let final_state = match job_state_from_proto(req.final_state).and_then(FinalState::from_state) {
        Some(f) => Some(f),
        None => {
            v.add(
                "final_state",
                "must be SUCCEEDED, FAILED, CANCELLED or EXPIRED (the batch's final state)",
            );
            None
        }
    };
    text("output_file", &req.output_file, MAX_FILE, &mut v);
    text("error", &req.error, MAX_ERROR, &mut v);
    // Their number is bounded by the intake (rows per call).
    for (i, k) in req.not_run.iter().enumerate().take(1000) {
        v.check(format!("not_run[{i}]"), tally_core::keys::validate_key(k));
    }
    v.finish().map_err(invalid)?;
    Ok(FinishRequest {
        final_state: final_state.expect("no violations means a final state"),
        output_file: req.output_file.clone(),
        error: req.error.clone(),
        not_run: req.not_run.clone(),
    })
}

/// AdoptJobs, checked.
#[derive(Debug)]
pub struct Adopt {
    pub ledger: String,
    pub max: i64,
    pub lease: Option<Duration>,
    /// The caller's process, when it named one.
    pub process: Option<WorkerProcess>,
    pub starting: bool,
    pub gone: Vec<WorkerProcess>,
}

/// The longest host name (RFC 1035) and boot id a process may name.
const MAX_HOST: usize = 253;
const MAX_BOOT_ID: usize = 64;

/// AdoptJobs' ledger, bounds and processes.
pub fn adopt(req: &pb::AdoptJobsRequest) -> Result<Adopt, Status> {
    let ledger = ledger_validate::ledger("parent", &req.parent)?;
    let mut v = Violations::new();
    text("worker", &req.worker, MAX_NAME, &mut v);
    let max = match i64::from(req.max_jobs) {
        0 => DEFAULT_ADOPT,
        n if (1..=MAX_ADOPT).contains(&n) => n,
        _ => {
            v.add(
                "max_jobs",
                format!("must be between 0 (default {DEFAULT_ADOPT}) and {MAX_ADOPT}"),
            );
            0
        }
    };
    let lease = ledger_validate::lease("lease", req.lease.as_ref(), &mut v);
    let process = req
        .process
        .as_ref()
        .map(|p| worker_process("process", p, &mut v));
    if req.starting && process.is_none() {
        v.add("starting", "needs `process`: the process that is starting");
    }
    if req.gone.len() > MAX_HOLDERS {
        v.add("gone", format!("must name at most {MAX_HOLDERS} processes"));
    }
    let gone = req
        .gone
        .iter()
        .take(MAX_HOLDERS)
        .enumerate()
        .map(|(i, p)| worker_process(&format!("gone[{i}]"), p, &mut v))
        .collect();
    v.finish().map_err(invalid)?;
    Ok(Adopt {
        ledger,
        max,
        lease,
        process,
        starting: req.starting,
        gone,
    })
}

fn worker_process(field: &str, p: &pb::WorkerProcess, v: &mut Violations) -> WorkerProcess {
    if p.host.is_empty() {
        v.add(format!("{field}.host"), "is required");
    }
    text(&format!("{field}.host"), &p.host, MAX_HOST, v);
    text(&format!("{field}.boot_id"), &p.boot_id, MAX_BOOT_ID, v);
    if p.pid <= 0 {
        v.add(format!("{field}.pid"), "must be positive");
    }
    if p.start_ticks < 0 {
        v.add(format!("{field}.start_ticks"), "must not be negative");
    }
    WorkerProcess {
        host: p.host.clone(),
        boot_id: p.boot_id.clone(),
        pid: p.pid,
        start_ticks: p.start_ticks,
    }
}

/// ListJobs' state filter.
pub fn states(codes: &[i32]) -> Result<Vec<JobState>, Status> {
    let mut v = Violations::new();
    let mut out = Vec::with_capacity(codes.len());
    for (i, c) in codes.iter().enumerate() {
        match job_state_from_proto(*c) {
            Some(s) => out.push(s),
            None => v.add(format!("states[{i}]"), "unknown or unspecified job state"),
        }
    }
    v.finish().map_err(invalid)?;
    Ok(out)
}

/// A lock name, and a TTL that must be set (1s to 24h).
pub fn lock_and_ttl(
    name: &str,
    ttl: Option<&prost_types::Duration>,
) -> Result<(String, Duration), Status> {
    let mut v = Violations::new();
    let id = match names::parse_lock(name) {
        Ok(id) => id.to_string(),
        Err(e) => {
            v.add("name", e.to_string());
            String::new()
        }
    };
    if ttl.is_none() {
        v.add("ttl", "must be set (1s to 24h)");
    }
    let ttl = bounded_duration("ttl", ttl, MIN_TTL, MAX_TTL, &mut v);
    v.finish().map_err(invalid)?;
    Ok((id, ttl.expect("no violations means a ttl")))
}

pub fn lock_token(token: &str) -> Result<Uuid, Status> {
    Uuid::parse_str(token)
        .map_err(|_| invalid_field("token", "is not a lock token this server issued"))
}

pub fn owner(owner: &str) -> Result<(), Status> {
    let mut v = Violations::new();
    text("owner", owner, MAX_NAME, &mut v);
    v.finish().map_err(invalid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_of_another_ledger_cannot_fence_a_job() {
        let t = Uuid::new_v4();
        assert!(job_and_claim("ledgers/a/jobs/j", &format!("ledgers/a/claims/{t}")).is_ok());
        let e = job_and_claim("ledgers/a/jobs/j", &format!("ledgers/b/claims/{t}")).unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
    }

    #[test]
    fn batch_names_are_normalized() {
        let (batch, _) = submission(&pb::MarkSubmittedRequest {
            batch: "projects/p/locations/l/batches/abc".into(),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(batch, "batches/abc");
        assert!(
            submission(&pb::MarkSubmittedRequest {
                batch: "abc".into(),
                ..Default::default()
            })
            .is_err()
        );
    }

    #[test]
    fn finish_needs_a_final_state() {
        for bad in [0, 1, 2, 3, 8, 42] {
            let req = pb::FinishJobRequest {
                final_state: bad,
                ..Default::default()
            };
            assert!(finish(&req).is_err(), "{bad}");
        }
        let req = pb::FinishJobRequest {
            final_state: pb::JobState::Expired as i32,
            ..Default::default()
        };
        assert_eq!(finish(&req).unwrap().final_state, FinalState::Expired);
    }

    #[test]
    fn lock_ttls_must_be_set_and_sane() {
        let d = |s| prost_types::Duration {
            seconds: s,
            nanos: 0,
        };
        assert!(lock_and_ttl("locks/a", Some(&d(60))).is_ok());
        assert!(lock_and_ttl("locks/a", None).is_err());
        assert!(lock_and_ttl("locks/a", Some(&d(0))).is_err());
        assert!(lock_and_ttl("locks/a", Some(&d(2 * 86400))).is_err());
        assert!(lock_and_ttl("locks/a b", Some(&d(60))).is_err());
    }

    #[test]
    fn adopt_defaults_and_bounds() {
        let req = pb::AdoptJobsRequest {
            parent: "ledgers/a".into(),
            ..Default::default()
        };
        assert_eq!(adopt(&req).unwrap().max, DEFAULT_ADOPT);
        let req = pb::AdoptJobsRequest {
            parent: "ledgers/a".into(),
            max_jobs: 101,
            ..Default::default()
        };
        assert!(adopt(&req).is_err());
    }

    // Invariant: a take-over names well-formed processes, a starting caller
    // names its own, and a call names at most MAX_HOLDERS gone ones.
    #[test]
    fn adopt_processes_are_bounded() {
        let p = pb::WorkerProcess {
            host: "h".into(),
            boot_id: "b".into(),
            pid: 7,
            start_ticks: 1,
        };
        let ok = pb::AdoptJobsRequest {
            parent: "ledgers/a".into(),
            process: Some(p.clone()),
            starting: true,
            gone: vec![p.clone()],
            ..Default::default()
        };
        let a = adopt(&ok).unwrap();
        assert!(a.starting && a.process.is_some() && a.gone.len() == 1);
        let bad = [
            pb::AdoptJobsRequest {
                starting: true,
                process: None,
                ..ok.clone()
            },
            pb::AdoptJobsRequest {
                gone: vec![p.clone(); MAX_HOLDERS + 1],
                ..ok.clone()
            },
            pb::AdoptJobsRequest {
                process: Some(pb::WorkerProcess {
                    host: "h".repeat(254),
                    ..p.clone()
                }),
                ..ok.clone()
            },
            pb::AdoptJobsRequest {
                gone: vec![pb::WorkerProcess {
                    pid: 0,
                    ..p.clone()
                }],
                ..ok.clone()
            },
        ];
        for req in bad {
            assert_eq!(
                adopt(&req).unwrap_err().code(),
                tonic::Code::InvalidArgument
            );
        }
    }
}
