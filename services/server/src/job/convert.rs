//! JobService's conversions: store records (jobs, job events, locks) and
//! job states to `tally.v1` messages, and job states back. A job event
//! carries a ledger pause and a job its golden rows; those conversions are
//! LedgerService's ([`crate::ledger::convert`], [`crate::ledger::golden`]).
//! Pure: no I/O.

use crate::edge::wire_convert::timestamp;
use tally_core::job::JobState;
use tally_core::names;
use tally_proto::v1 as pb;
use tally_store::types::{HeldJob, JobEventKind, JobEventRecord, JobRecord, LockRecord};

pub fn job_state_to_proto(s: JobState) -> pb::JobState {
    match s {
        JobState::Preparing => pb::JobState::Preparing,
        JobState::Submitted => pb::JobState::Submitted,
        JobState::Running => pb::JobState::Running,
        JobState::Succeeded => pb::JobState::Succeeded,
        JobState::Failed => pb::JobState::Failed,
        JobState::Cancelled => pb::JobState::Cancelled,
        JobState::Expired => pb::JobState::Expired,
        JobState::Reconciled => pb::JobState::Reconciled,
        JobState::Creating => pb::JobState::Creating,
    }
}

/// A known, specified job state.
pub fn job_state_from_proto(code: i32) -> Option<JobState> {
    JobState::from_code(i16::try_from(code).ok()?)
}

/// A job another holder's lease still covers, as AdoptJobs lists it.
pub fn held_to_proto(ledger: &str, h: &HeldJob) -> pb::HeldJob {
    pb::HeldJob {
        job: names::job_name(ledger, &h.public_id),
        state: job_state_to_proto(h.state) as i32,
        owner: h.owner.clone(),
        process: h.process.as_ref().map(|p| pb::WorkerProcess {
            host: p.host.clone(),
            boot_id: p.boot_id.clone(),
            pid: p.pid,
            start_ticks: p.start_ticks,
        }),
        lease_expire_time: Some(timestamp(h.lease_expire_time)),
    }
}

pub fn job_to_proto(j: &JobRecord) -> pb::Job {
    let c = &j.counts;
    let batch = j.batch.clone().unwrap_or_default();
    pb::Job {
        name: names::job_name(&j.ledger, &j.public_id),
        job_id: j.public_id.clone(),
        claim: names::claim_name(&j.ledger, &j.claim.to_string()),
        state: job_state_to_proto(j.state) as i32,
        model: j.model.clone(),
        owner: j.owner.clone(),
        operation: if batch.is_empty() {
            String::new()
        } else {
            format!("operations/{batch}")
        },
        batch,
        input_file: j.input_file.clone(),
        output_file: j.output_file.clone(),
        counts: Some(pb::JobCounts {
            rows: c.rows as i32,
            succeeded: c.succeeded as i32,
            retryable: c.retryable as i32,
            permanent: c.permanent as i32,
            missing: c.missing as i32,
            unreported: j.unreported,
        }),
        summary: j.summary(),
        error: j.error.clone(),
        adoptions: j.adoptions,
        create_time: Some(timestamp(j.create_time)),
        submit_time: j.submit_time.map(timestamp),
        end_time: j.end_time.map(timestamp),
        update_time: Some(timestamp(j.update_time)),
        lease_expire_time: j.lease_expire_time.map(timestamp),
        final_state: j
            .final_state
            .map_or(pb::JobState::Unspecified, |f| job_state_to_proto(f.state()))
            as i32,
        create_attempt_time: j.create_attempt_time.map(timestamp),
        golden_rows: j
            .golden
            .iter()
            .map(crate::ledger::golden::row_to_proto)
            .collect(),
        provider_token_limit: 0,
        provider_account: j.provider_account.clone(),
        create_unresolved: j.create_unresolved.clone().unwrap_or_default(),
        create_unresolved_time: j.create_unresolved_time.map(timestamp),
        provider: tally_core::provider::provider_of(&j.model).to_owned(),
    }
}

pub fn event_to_proto(e: &JobEventRecord) -> pb::JobEvent {
    pb::JobEvent {
        sequence: e.seq,
        r#type: match e.kind {
            JobEventKind::Created => pb::JobEventType::Created,
            JobEventKind::StateChanged => pb::JobEventType::StateChanged,
            JobEventKind::Progress => pb::JobEventType::Progress,
            JobEventKind::Adopted => pb::JobEventType::Adopted,
            JobEventKind::LedgerPaused => pb::JobEventType::LedgerPaused,
            JobEventKind::LedgerResumed => pb::JobEventType::LedgerResumed,
        } as i32,
        job: e.job.as_ref().map(job_to_proto),
        time: Some(timestamp(e.time)),
        actor: e.actor.clone(),
        ledger: names::ledger_name(&e.ledger),
        pause: e.pause.as_ref().map(crate::ledger::convert::pause_to_proto),
    }
}

pub fn lock_to_proto(l: &LockRecord) -> pb::Lock {
    pb::Lock {
        name: names::lock_name(&l.name),
        owner: l.owner.clone(),
        token: l.token.map(|t| t.to_string()).unwrap_or_default(),
        acquire_time: Some(timestamp(l.acquire_time)),
        expire_time: Some(timestamp(l.expire_time)),
    }
}

/// What AcquireCapacity granted.
pub fn capacity_to_proto(g: &tally_store::capacity::CapacityGrant) -> pb::AcquireCapacityResponse {
    pb::AcquireCapacityResponse {
        granted: i32::try_from(g.grant.requests).unwrap_or(i32::MAX),
        retry_after: g
            .grant
            .retry_after
            .map(crate::edge::wire_convert::duration_to_proto),
        requests_per_minute: i64::from(g.limits.rpm),
        tokens_per_minute: i64::try_from(g.limits.tpm).unwrap_or(i64::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_job_state_round_trips_through_the_proto_enum() {
        for s in JobState::ALL {
            assert_eq!(job_state_from_proto(job_state_to_proto(s) as i32), Some(s));
        }
        assert_eq!(job_state_from_proto(0), None);
        assert_eq!(job_state_from_proto(99), None);
    }
}
