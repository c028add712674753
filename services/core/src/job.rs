//! The job state machine. A job is the provider batch made from a claim; its
//! state says what was sent and what became of it:
//!
//! ```text
//! PREPARING ──begin create──▶ CREATING ──submit──▶ SUBMITTED ──provider──▶ RUNNING ──provider──▶ SUCCEEDED | FAILED | CANCELLED | EXPIRED
//!     │                           │                     │                      │                          │
//!     │ abandon                   │ not created         └──────── finish ──────┴────────── finish ────────┴──▶ RECONCILED
//!     ▼                           ▼
//! CANCELLED (closed: never sent, rows released)
//! ```
//!
//! - `begin create` is recorded before the create call goes to the
//!   provider: from then on the batch may exist (creation is not
//!   idempotent and its answer can be lost), so the job's rows are never
//!   released by the sweeper; a CREATING job whose owner died is adopted
//!   like a submitted one, and its new owner searches the provider for the
//!   batch by display name (the job id). Found, it is `submit`ted; after a
//!   search covering the provider's list lag finds nothing, `not created`
//!   closes the job and its rows go back without an attempt.
//!
//! - `finish` (FinishJob) settles every row the job still holds and closes
//!   the job as RECONCILED; the batch's final state is kept beside it.
//! - `abandon` happens to a job whose owner went away before submitting:
//!   its rows were never sent, so they go back without an attempt and the
//!   job is closed as CANCELLED.
//! - `adopt` hands a submitted job to a new owner; its state does not move.
//!
//! A transition says whether it closes the job; a closed job never changes
//! again (the store guards every job write on that). The store reads a job,
//! asks [`step`], and writes the answer; the rules live here, once.

use crate::transition::Event as RowEvent;

/// Where a job is. The numeric codes are stored and equal the
/// `tally.v1.JobState` numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobState {
    /// Made from a claim; nothing sent to the provider yet.
    Preparing,
    /// The provider accepted the batch; its name is recorded.
    Submitted,
    /// The provider says the batch is running.
    Running,
    /// The provider says the batch finished; rows not yet reconciled.
    Succeeded,
    Failed,
    Cancelled,
    Expired,
    /// Every row's outcome is settled; counts and summary are final.
    Reconciled,
    /// The create call may have reached the provider; no batch recorded yet.
    Creating,
}

impl JobState {
    pub const ALL: [JobState; 9] = [
        JobState::Preparing,
        JobState::Submitted,
        JobState::Running,
        JobState::Succeeded,
        JobState::Failed,
        JobState::Cancelled,
        JobState::Expired,
        JobState::Reconciled,
        JobState::Creating,
    ];

    pub const fn code(self) -> i16 {
        match self {
            JobState::Preparing => 1,
            JobState::Submitted => 2,
            JobState::Running => 3,
            JobState::Succeeded => 4,
            JobState::Failed => 5,
            JobState::Cancelled => 6,
            JobState::Expired => 7,
            JobState::Reconciled => 8,
            JobState::Creating => 9,
        }
    }

    pub const fn from_code(code: i16) -> Option<JobState> {
        match code {
            1 => Some(JobState::Preparing),
            2 => Some(JobState::Submitted),
            3 => Some(JobState::Running),
            4 => Some(JobState::Succeeded),
            5 => Some(JobState::Failed),
            6 => Some(JobState::Cancelled),
            7 => Some(JobState::Expired),
            8 => Some(JobState::Reconciled),
            9 => Some(JobState::Creating),
            _ => None,
        }
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            JobState::Preparing => "preparing",
            JobState::Submitted => "submitted",
            JobState::Running => "running",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
            JobState::Expired => "expired",
            JobState::Reconciled => "reconciled",
            JobState::Creating => "creating",
        }
    }

    /// Whether the provider has (or may have) the batch: the job's rows must
    /// not be handed to anyone else, only its ownership.
    pub const fn is_submitted(self) -> bool {
        match self {
            JobState::Creating
            | JobState::Submitted
            | JobState::Running
            | JobState::Succeeded
            | JobState::Failed
            | JobState::Cancelled
            | JobState::Expired => true,
            JobState::Preparing | JobState::Reconciled => false,
        }
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A batch's final state, as FinishJob reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FinalState {
    Succeeded,
    Failed,
    Cancelled,
    Expired,
}

impl FinalState {
    pub const ALL: [FinalState; 4] = [
        FinalState::Succeeded,
        FinalState::Failed,
        FinalState::Cancelled,
        FinalState::Expired,
    ];

    pub const fn state(self) -> JobState {
        match self {
            FinalState::Succeeded => JobState::Succeeded,
            FinalState::Failed => JobState::Failed,
            FinalState::Cancelled => JobState::Cancelled,
            FinalState::Expired => JobState::Expired,
        }
    }

    pub const fn from_state(state: JobState) -> Option<FinalState> {
        match state {
            JobState::Succeeded => Some(FinalState::Succeeded),
            JobState::Failed => Some(FinalState::Failed),
            JobState::Cancelled => Some(FinalState::Cancelled),
            JobState::Expired => Some(FinalState::Expired),
            JobState::Preparing
            | JobState::Creating
            | JobState::Submitted
            | JobState::Running
            | JobState::Reconciled => None,
        }
    }

    pub const fn as_str(self) -> &'static str {
        self.state().as_str()
    }

    /// What happens to rows the job still holds when it closes: after a
    /// successful batch they were missing from its output; after any other
    /// end the batch as a whole failed them.
    pub const fn row_event(self) -> RowEvent {
        match self {
            FinalState::Succeeded => RowEvent::MissingFromOutput,
            FinalState::Failed | FinalState::Cancelled | FinalState::Expired => RowEvent::JobFailed,
        }
    }
}

impl std::fmt::Display for FinalState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Everything that can happen to a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobEvent {
    /// MarkCreating: the create call is about to go to the provider.
    BeginCreate,
    /// MarkNotCreated: the provider was searched for the batch over its
    /// list lag and has none; nothing was sent.
    NotCreated,
    /// MarkNotCreated with `batch_refused`: the provider made the batch,
    /// then refused it before running any request (an OpenAI batch
    /// `failed` at validation: the enqueued-token limit, a bad line; an
    /// Anthropic batch that ended with every request `not_found_error` for
    /// its model); nothing reached the model, nothing was charged.
    Refused,
    /// MarkSubmitted: the provider accepted the batch.
    Submit,
    /// The provider reports the batch running (operations reducer).
    ProviderRunning,
    /// The provider reports the batch finished (operations reducer).
    ProviderFinished(FinalState),
    /// FinishJob: the owner reconciled the batch's output.
    Finish(FinalState),
    /// The owner went away (lease expired, or every row released) before
    /// submitting.
    Abandon,
    /// A new owner takes a submitted job over.
    Adopt,
}

/// A job after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobTransition {
    pub state: JobState,
    /// The job is closed from now on: nothing changes it again.
    pub closes: bool,
}

/// Why an event does not apply. Each variant has a stable reason code that
/// callers put in their FAILED_PRECONDITION answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum JobRefusal {
    #[error("the job is closed ({state}); nothing changes it any more")]
    Closed { state: JobState },
    #[error("the job is {state}: its batch was already recorded")]
    AlreadySubmitted { state: JobState },
    #[error("the job is {state}: no batch was recorded for it yet")]
    NotSubmitted { state: JobState },
    #[error(
        "the job is creating: its batch may exist at the provider; search for it (MarkSubmitted if found, MarkNotCreated if not)"
    )]
    CreateUnresolved,
    #[error(
        "the job is {state}: only a batch the provider reported FAILED can have been refused before it ran"
    )]
    NotFailed { state: JobState },
    #[error("the batch already finished as {current}, not {reported}")]
    FinishedOtherwise {
        current: FinalState,
        reported: FinalState,
    },
}

impl JobRefusal {
    pub const fn reason(&self) -> &'static str {
        match self {
            JobRefusal::Closed { .. } => "JOB_CLOSED",
            JobRefusal::AlreadySubmitted { .. } => "JOB_ALREADY_SUBMITTED",
            JobRefusal::NotSubmitted { .. } => "JOB_NOT_SUBMITTED",
            JobRefusal::FinishedOtherwise { .. } => "JOB_FINISHED_OTHERWISE",
            JobRefusal::CreateUnresolved => "JOB_CREATE_UNRESOLVED",
            JobRefusal::NotFailed { .. } => "JOB_NOT_FAILED",
        }
    }
}

/// Shortest and longest shared cool-down of a model after the provider
/// refused a create for quota (429).
pub const MIN_COOLDOWN: std::time::Duration = std::time::Duration::from_secs(1);
pub const MAX_COOLDOWN: std::time::Duration = std::time::Duration::from_secs(600);

/// The cool-down a worker reported (the provider's RetryInfo), clamped.
pub fn provider_cooldown(asked: std::time::Duration) -> std::time::Duration {
    asked.clamp(MIN_COOLDOWN, MAX_COOLDOWN)
}

/// Applies one event to a job in `state`. `closed` says whether the job was
/// closed already (a CANCELLED job may be closed, abandoned before
/// submission, or open, cancelled at the provider and awaiting FinishJob).
pub fn step(state: JobState, closed: bool, event: JobEvent) -> Result<JobTransition, JobRefusal> {
    use JobState::{
        Cancelled, Creating, Expired, Failed, Preparing, Reconciled, Running, Submitted, Succeeded,
    };
    if closed {
        return Err(JobRefusal::Closed { state });
    }
    let open = |state| {
        Ok(JobTransition {
            state,
            closes: false,
        })
    };
    let close = |state| {
        Ok(JobTransition {
            state,
            closes: true,
        })
    };
    match (state, event) {
        (Reconciled, _) => Err(JobRefusal::Closed { state }),
        (Preparing | Creating, JobEvent::BeginCreate) => open(Creating),
        (Preparing | Creating, JobEvent::Submit) => open(Submitted),
        (Preparing, JobEvent::Abandon) => close(Cancelled),
        (Preparing | Creating, JobEvent::NotCreated) => close(Cancelled),
        // Nothing ran: the rows go back (their owner reported the ones at
        // fault first).
        (Failed | Succeeded, JobEvent::Refused) => close(Cancelled),
        (Preparing | Creating, JobEvent::Refused) => Err(JobRefusal::NotSubmitted { state }),
        (Submitted | Running | Cancelled | Expired, JobEvent::Refused) => {
            Err(JobRefusal::NotFailed { state })
        }
        (Creating, JobEvent::Adopt) => open(Creating),
        // The batch may exist: its rows may neither go back (they would be
        // sent twice) nor fail (a retry would send them twice).
        (Creating, JobEvent::Abandon | JobEvent::Finish(_)) => Err(JobRefusal::CreateUnresolved),
        // The provider's events name a batch; none is recorded yet.
        (Creating, JobEvent::ProviderRunning | JobEvent::ProviderFinished(_)) => {
            Err(JobRefusal::NotSubmitted { state })
        }
        // A batch that could not be created fails its rows (an infra
        // attempt each, so a row that breaks every batch ends PERMANENT).
        (Preparing, JobEvent::Finish(FinalState::Failed | FinalState::Cancelled)) => {
            close(Reconciled)
        }
        (
            Preparing,
            JobEvent::Finish(FinalState::Succeeded | FinalState::Expired)
            | JobEvent::ProviderRunning
            | JobEvent::ProviderFinished(_)
            | JobEvent::Adopt,
        ) => Err(JobRefusal::NotSubmitted { state }),
        (Submitted | Running, JobEvent::ProviderRunning) => open(Running),
        (Submitted | Running, JobEvent::ProviderFinished(f)) => open(f.state()),
        (Succeeded | Failed | Cancelled | Expired, JobEvent::ProviderRunning) => open(state),
        (Succeeded | Failed | Cancelled | Expired, JobEvent::ProviderFinished(f)) => {
            let current = FinalState::from_state(state).expect("a finished state");
            if current == f {
                open(state)
            } else {
                Err(JobRefusal::FinishedOtherwise {
                    current,
                    reported: f,
                })
            }
        }
        // The owner read the output itself: what it reports wins over an
        // earlier provider state (it may have polled after a stale webhook).
        (Submitted | Running | Succeeded | Failed | Cancelled | Expired, JobEvent::Finish(_)) => {
            close(Reconciled)
        }
        (Submitted | Running | Succeeded | Failed | Cancelled | Expired, JobEvent::Adopt) => {
            open(state)
        }
        (
            Submitted | Running | Succeeded | Failed | Cancelled | Expired,
            JobEvent::Submit | JobEvent::BeginCreate | JobEvent::NotCreated,
        ) => Err(JobRefusal::AlreadySubmitted { state }),
        // Submitted rows are adopted, never abandoned: the provider may run
        // them, and abandoning would send them twice.
        (Submitted | Running | Succeeded | Failed | Cancelled | Expired, JobEvent::Abandon) => {
            Err(JobRefusal::AlreadySubmitted { state })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events() -> Vec<JobEvent> {
        let mut all = vec![
            JobEvent::BeginCreate,
            JobEvent::NotCreated,
            JobEvent::Refused,
            JobEvent::Submit,
            JobEvent::ProviderRunning,
            JobEvent::Abandon,
            JobEvent::Adopt,
        ];
        for f in FinalState::ALL {
            all.push(JobEvent::ProviderFinished(f));
            all.push(JobEvent::Finish(f));
        }
        all
    }

    #[test]
    fn codes_round_trip_and_match_the_proto_numbers() {
        for (i, s) in JobState::ALL.into_iter().enumerate() {
            assert_eq!(s.code(), i as i16 + 1);
            assert_eq!(JobState::from_code(s.code()), Some(s));
        }
        assert_eq!(JobState::from_code(0), None);
        for f in FinalState::ALL {
            assert_eq!(FinalState::from_state(f.state()), Some(f));
        }
    }

    #[test]
    fn the_happy_path() {
        let t = step(JobState::Preparing, false, JobEvent::Submit).unwrap();
        assert_eq!(t.state, JobState::Submitted);
        let t = step(t.state, false, JobEvent::ProviderRunning).unwrap();
        assert_eq!(t.state, JobState::Running);
        let t = step(
            t.state,
            false,
            JobEvent::ProviderFinished(FinalState::Succeeded),
        )
        .unwrap();
        assert_eq!((t.state, t.closes), (JobState::Succeeded, false));
        let t = step(t.state, false, JobEvent::Finish(FinalState::Succeeded)).unwrap();
        assert_eq!((t.state, t.closes), (JobState::Reconciled, true));
    }

    // Invariant: only a batch the provider reported ended (FAILED, or
    // SUCCEEDED with every request refused) may be taken back as refused
    // (its rows returned unattempted); a batch that may still run, or was
    // cut short, never is.
    #[test]
    fn only_an_ended_batch_is_refused() {
        for s in [JobState::Failed, JobState::Succeeded] {
            assert_eq!(
                step(s, false, JobEvent::Refused),
                Ok(JobTransition {
                    state: JobState::Cancelled,
                    closes: true
                }),
                "{s}"
            );
        }
        for s in [
            JobState::Submitted,
            JobState::Running,
            JobState::Cancelled,
            JobState::Expired,
        ] {
            assert_eq!(
                step(s, false, JobEvent::Refused).unwrap_err().reason(),
                "JOB_NOT_FAILED",
                "{s}"
            );
        }
        assert!(step(JobState::Failed, true, JobEvent::Refused).is_err());
    }

    #[test]
    fn an_unsubmitted_job_is_abandoned_not_adopted() {
        assert_eq!(
            step(JobState::Preparing, false, JobEvent::Abandon),
            Ok(JobTransition {
                state: JobState::Cancelled,
                closes: true
            })
        );
        assert_eq!(
            step(JobState::Preparing, false, JobEvent::Adopt)
                .unwrap_err()
                .reason(),
            "JOB_NOT_SUBMITTED"
        );
    }

    #[test]
    fn a_submitted_job_is_adopted_not_abandoned() {
        for s in [JobState::Submitted, JobState::Running, JobState::Expired] {
            assert_eq!(step(s, false, JobEvent::Adopt).unwrap().state, s);
            assert_eq!(
                step(s, false, JobEvent::Abandon).unwrap_err().reason(),
                "JOB_ALREADY_SUBMITTED"
            );
        }
    }

    #[test]
    fn a_creating_job_is_never_released_or_failed_only_resolved() {
        // Invariant: once a create may have reached the provider, the rows
        // go back only after the search found no batch (NotCreated).
        let t = step(JobState::Preparing, false, JobEvent::BeginCreate).unwrap();
        assert_eq!((t.state, t.closes), (JobState::Creating, false));
        assert!(JobState::Creating.is_submitted());
        for e in [
            JobEvent::Abandon,
            JobEvent::Finish(FinalState::Failed),
            JobEvent::Finish(FinalState::Cancelled),
        ] {
            assert_eq!(
                step(JobState::Creating, false, e).unwrap_err().reason(),
                "JOB_CREATE_UNRESOLVED",
                "{e:?}"
            );
        }
        assert_eq!(
            step(JobState::Creating, false, JobEvent::Adopt)
                .unwrap()
                .state,
            JobState::Creating
        );
        assert_eq!(
            step(JobState::Creating, false, JobEvent::Submit)
                .unwrap()
                .state,
            JobState::Submitted
        );
        assert_eq!(
            step(JobState::Creating, false, JobEvent::NotCreated),
            Ok(JobTransition {
                state: JobState::Cancelled,
                closes: true
            })
        );
        assert_eq!(
            step(JobState::Running, false, JobEvent::NotCreated)
                .unwrap_err()
                .reason(),
            "JOB_ALREADY_SUBMITTED"
        );
    }

    #[test]
    fn submitting_twice_is_refused_here_the_store_answers_same_values() {
        assert_eq!(
            step(JobState::Running, false, JobEvent::Submit)
                .unwrap_err()
                .reason(),
            "JOB_ALREADY_SUBMITTED"
        );
    }

    #[test]
    fn a_batch_that_could_not_be_created_may_fail_but_not_succeed() {
        assert_eq!(
            step(
                JobState::Preparing,
                false,
                JobEvent::Finish(FinalState::Failed)
            )
            .unwrap()
            .state,
            JobState::Reconciled
        );
        assert!(
            step(
                JobState::Preparing,
                false,
                JobEvent::Finish(FinalState::Succeeded)
            )
            .is_err()
        );
    }

    #[test]
    fn the_first_provider_terminal_wins() {
        assert_eq!(
            step(
                JobState::Failed,
                false,
                JobEvent::ProviderFinished(FinalState::Succeeded)
            )
            .unwrap_err()
            .reason(),
            "JOB_FINISHED_OTHERWISE"
        );
        assert_eq!(
            step(JobState::Failed, false, JobEvent::ProviderRunning)
                .unwrap()
                .state,
            JobState::Failed
        );
    }

    #[test]
    fn closed_jobs_never_change() {
        for s in JobState::ALL {
            for e in events() {
                assert_eq!(
                    step(s, true, e),
                    Err(JobRefusal::Closed { state: s }),
                    "{s} {e:?}"
                );
            }
        }
        for e in events() {
            assert!(step(JobState::Reconciled, false, e).is_err());
        }
    }

    #[test]
    fn only_finish_abandon_and_not_created_close_and_nothing_moves_back_to_preparing() {
        for s in JobState::ALL {
            for e in events() {
                if let Ok(t) = step(s, false, e) {
                    assert_ne!(t.state, JobState::Preparing, "{s} {e:?}");
                    assert_eq!(
                        t.closes,
                        matches!(
                            e,
                            JobEvent::Finish(_)
                                | JobEvent::Abandon
                                | JobEvent::NotCreated
                                | JobEvent::Refused
                        ),
                        "{s} {e:?}"
                    );
                    if s.is_submitted() {
                        assert!(t.state.is_submitted() || t.state == JobState::Reconciled);
                    }
                }
            }
        }
    }

    #[test]
    fn rows_left_in_a_finished_job_are_missing_or_failed() {
        assert_eq!(
            FinalState::Succeeded.row_event(),
            RowEvent::MissingFromOutput
        );
        for f in [
            FinalState::Failed,
            FinalState::Cancelled,
            FinalState::Expired,
        ] {
            assert_eq!(f.row_event(), RowEvent::JobFailed);
        }
    }

    /// A reported cool-down is kept between a second and an hour.
    #[test]
    fn cooldowns_are_clamped() {
        use std::time::Duration;
        assert_eq!(provider_cooldown(Duration::ZERO), MIN_COOLDOWN);
        assert_eq!(
            provider_cooldown(Duration::from_secs(30)),
            Duration::from_secs(30)
        );
        assert_eq!(provider_cooldown(Duration::from_secs(86_400)), MAX_COOLDOWN);
    }
}
