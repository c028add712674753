//! Pausing a ledger: why a ledger is paused, and what it still does while
//! paused.
//!
//! A paused ledger hands out no new work and lets the work already out run
//! to its end: no claim is made and no claim becomes a job, but claims
//! already live are reported, extended and released, jobs already made are
//! submitted, polled, adopted and finished, events about their batches are
//! applied, and rows are still enrolled and redriven (they wait for the
//! resume). So a pause never strands rows at the provider, never spends an
//! attempt, and stops the spend as soon as what was already sent is done.
//!
//! Operators pause by hand ([`PauseReason::Operator`]); the other reasons
//! are for the server itself (spend caps, the provider's lasting refusals:
//! quota, billing, model, anything else no retry fixes; golden-row drift), which pause through the same store call.

use std::fmt;

/// Why a ledger is paused. Stored and shown by [`PauseReason::as_str`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PauseReason {
    /// An operator paused it (PauseLedger).
    Operator,
    /// Its spend cap was reached.
    SpendCap,
    /// The provider's quota for its model is exhausted.
    Quota,
    /// The provider refused work for billing reasons.
    Billing,
    /// Its golden rows found the model's answers changed.
    ModelDrift,
    /// The provider does not know its model, or takes no batches for it.
    Model,
    /// The provider refused a create for another reason no retry fixes
    /// (the key, the request): its words are the pause's message.
    Refused,
}

impl PauseReason {
    pub const ALL: [PauseReason; 7] = [
        PauseReason::Operator,
        PauseReason::SpendCap,
        PauseReason::Quota,
        PauseReason::Billing,
        PauseReason::ModelDrift,
        PauseReason::Model,
        PauseReason::Refused,
    ];

    /// The stored name (also the metrics label).
    pub const fn as_str(self) -> &'static str {
        match self {
            PauseReason::Operator => "operator",
            PauseReason::SpendCap => "spend_cap",
            PauseReason::Quota => "quota",
            PauseReason::Billing => "billing",
            PauseReason::ModelDrift => "model_drift",
            PauseReason::Model => "model",
            PauseReason::Refused => "refused",
        }
    }

    pub fn parse(s: &str) -> Option<PauseReason> {
        PauseReason::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

impl fmt::Display for PauseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What can be asked of a ledger, as far as a pause cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// EnrollRows.
    Enroll,
    /// ClaimRows: rows leased to a worker.
    Claim,
    /// CreateJob: a live claim about to become a batch at the provider.
    CreateJob,
    /// ExtendClaim, ReleaseClaim, ReportOutcomes: a claim already out.
    ClaimUpkeep,
    /// MarkCreating, MarkSubmitted, MarkNotCreated, AdoptJobs, FinishJob and
    /// events about a job's batch: a job already made, to its end.
    JobUpkeep,
    /// RedriveRows: rows back to PENDING (they wait for the resume).
    Redrive,
}

/// Whether `work` may be refused by a pause at all (new work: a claim, a
/// job); everything that finishes work already out goes on.
pub const fn pause_may_refuse(work: Work) -> bool {
    matches!(work, Work::Claim | Work::CreateJob)
}

/// Whether a ledger paused for `reason` does `work`. Claims are refused.
/// A claim made before the pause becoming a job is refused too (nothing
/// was sent yet), except under a spend-cap pause: such a claim was granted
/// within the cap, its spend is reserved, and the pause came from a later
/// claim that did not fit.
pub const fn allowed_while_paused(work: Work, reason: PauseReason) -> bool {
    match work {
        Work::Claim => false,
        Work::CreateJob => matches!(reason, PauseReason::SpendCap),
        Work::Enroll | Work::ClaimUpkeep | Work::JobUpkeep | Work::Redrive => true,
    }
}

/// What a pause or resume call changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The ledger moves (ACTIVE to PAUSED, or back).
    Apply,
    /// Already there: the call answers the ledger as it is (idempotent; a
    /// second pause keeps the first one's reason, actor and time).
    Unchanged,
}

/// Pausing a ledger that is `paused` (its current reason, if any).
pub const fn pause(paused: Option<PauseReason>) -> Change {
    match paused {
        None => Change::Apply,
        Some(_) => Change::Unchanged,
    }
}

/// Resuming a ledger that is `paused` (its current reason, if any).
pub const fn resume(paused: Option<PauseReason>) -> Change {
    match paused {
        Some(_) => Change::Apply,
        None => Change::Unchanged,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Invariant: every reason survives its stored name, and names are unique.
    #[test]
    fn reasons_round_trip() {
        for r in PauseReason::ALL {
            assert_eq!(PauseReason::parse(r.as_str()), Some(r));
        }
        assert_eq!(PauseReason::parse("Operator"), None);
        assert_eq!(PauseReason::parse(""), None);
    }

    // Invariant: a paused ledger makes no new work and finishes the work
    // already out.
    #[test]
    fn a_pause_stops_new_work_only() {
        for r in PauseReason::ALL {
            assert!(!allowed_while_paused(Work::Claim, r));
            assert_eq!(
                allowed_while_paused(Work::CreateJob, r),
                r == PauseReason::SpendCap,
                "{r}: only claims granted within a spend cap become jobs"
            );
            for w in [
                Work::Enroll,
                Work::ClaimUpkeep,
                Work::JobUpkeep,
                Work::Redrive,
            ] {
                assert!(allowed_while_paused(w, r), "{w:?}");
                assert!(!pause_may_refuse(w));
            }
        }
        assert!(pause_may_refuse(Work::Claim) && pause_may_refuse(Work::CreateJob));
    }

    // Invariant: pause and resume are idempotent: only a change of state
    // applies anything.
    #[test]
    fn pause_and_resume_are_idempotent() {
        assert_eq!(pause(None), Change::Apply);
        assert_eq!(resume(None), Change::Unchanged);
        for r in PauseReason::ALL {
            assert_eq!(pause(Some(r)), Change::Unchanged);
            assert_eq!(resume(Some(r)), Change::Apply);
        }
    }
}
