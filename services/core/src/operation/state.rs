//! The lifecycle of a provider operation and every spelling of it we meet.

use std::fmt;

/// Where a provider operation is in its lifecycle.
///
/// The four terminal states share the top rank: any of them is progress from
/// `Running`, none of them is progress from another (the first terminal
/// wins). `Unknown` ranks below everything, so a state the provider adds
/// tomorrow can never roll existing progress back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpState {
    Pending,
    Running,
    Succeeded,
    Failed,
    Cancelled,
    Expired,
    Unknown,
}

impl OpState {
    /// Every state, for tests and metrics.
    pub const ALL: [OpState; 7] = [
        OpState::Pending,
        OpState::Running,
        OpState::Succeeded,
        OpState::Failed,
        OpState::Cancelled,
        OpState::Expired,
        OpState::Unknown,
    ];

    /// The position in the lifecycle: Pending 0, Running 1, terminals 2,
    /// Unknown −1.
    pub fn rank(self) -> i8 {
        match self {
            OpState::Unknown => -1,
            OpState::Pending => 0,
            OpState::Running => 1,
            OpState::Succeeded | OpState::Failed | OpState::Cancelled | OpState::Expired => 2,
        }
    }

    /// Terminal states are absorbing: nothing after one is applied.
    pub fn is_terminal(self) -> bool {
        match self {
            OpState::Succeeded | OpState::Failed | OpState::Cancelled | OpState::Expired => true,
            OpState::Pending | OpState::Running | OpState::Unknown => false,
        }
    }

    /// Whether the state was recognised; unknown states are never applied.
    pub fn is_known(self) -> bool {
        match self {
            OpState::Unknown => false,
            OpState::Pending
            | OpState::Running
            | OpState::Succeeded
            | OpState::Failed
            | OpState::Cancelled
            | OpState::Expired => true,
        }
    }

    /// The canonical bare name (`"SUCCEEDED"`), as stored and logged.
    pub fn as_str(self) -> &'static str {
        match self {
            OpState::Pending => "PENDING",
            OpState::Running => "RUNNING",
            OpState::Succeeded => "SUCCEEDED",
            OpState::Failed => "FAILED",
            OpState::Cancelled => "CANCELLED",
            OpState::Expired => "EXPIRED",
            OpState::Unknown => "UNKNOWN",
        }
    }

    /// Reads any spelling, case-insensitively, ignoring surrounding
    /// whitespace:
    ///
    /// - the wire's `BATCH_STATE_*` and the SDKs' `JOB_STATE_*`;
    /// - webhook event types `batch.succeeded`, `batch.failed`,
    ///   `batch.expired`, `batch.cancelled`, and `batch.running`,
    ///   `batch.pending` (the emulator's stale deliveries);
    /// - our own API's `OPERATION_STATE_*`;
    /// - bare names (`RUNNING`), including our own [`OpState::as_str`].
    ///
    /// Beyond the five names every scheme shares, the SDKs' job states map
    /// onto the nearest state that makes the same promise: `QUEUED` is
    /// `Pending` (nothing has started); `CANCELLING`, `PAUSED` and
    /// `UPDATING` are `Running` (started, not finished: a cancel may still
    /// lose to completion, and a paused job resumes); `PARTIALLY_SUCCEEDED`
    /// is `Succeeded` (the job is over and has output; the rows that failed
    /// are found per line, as in any succeeded batch). `CANCELED` is
    /// accepted as `Cancelled`.
    ///
    /// OpenAI's statuses and webhook types (`batch.completed`) the same
    /// way: `VALIDATING` is `Pending`; `IN_PROGRESS` and `FINALIZING` are
    /// `Running`; `COMPLETED` is `Succeeded` (its failed lines are in the
    /// error file).
    ///
    /// Anything else, `*_UNSPECIFIED` included, is `Unknown`, never an
    /// error: an authentic event with a state we do not know is recorded
    /// and dropped, not rejected.
    pub fn parse(text: &str) -> OpState {
        let upper = text.trim().to_ascii_uppercase();
        bare(strip_scheme(&upper))
    }
}

/// The prefixes of the spelling schemes; at most one is stripped.
const SCHEMES: [&str; 4] = ["BATCH_STATE_", "JOB_STATE_", "OPERATION_STATE_", "BATCH."];

fn strip_scheme(upper: &str) -> &str {
    SCHEMES
        .iter()
        .find_map(|prefix| upper.strip_prefix(prefix))
        .unwrap_or(upper)
}

fn bare(name: &str) -> OpState {
    match name {
        "PENDING" | "QUEUED" | "VALIDATING" => OpState::Pending,
        "RUNNING" | "CANCELLING" | "PAUSED" | "UPDATING" | "IN_PROGRESS" | "FINALIZING" => {
            OpState::Running
        }
        "SUCCEEDED" | "PARTIALLY_SUCCEEDED" | "COMPLETED" => OpState::Succeeded,
        "FAILED" => OpState::Failed,
        "CANCELLED" | "CANCELED" => OpState::Cancelled,
        "EXPIRED" => OpState::Expired,
        // Strings, not states: a new provider state lands here on purpose.
        _ => OpState::Unknown,
    }
}

impl fmt::Display for OpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::OpState::{self, *};

    #[test]
    fn ranks() {
        assert_eq!(Pending.rank(), 0);
        assert_eq!(Running.rank(), 1);
        for terminal in [Succeeded, Failed, Cancelled, Expired] {
            assert_eq!(terminal.rank(), 2);
            assert!(terminal.is_terminal());
        }
        assert_eq!(Unknown.rank(), -1);
        assert!(!Pending.is_terminal());
        assert!(!Running.is_terminal());
        assert!(!Unknown.is_terminal());
        assert!(!Unknown.is_known());
    }

    #[test]
    fn every_scheme_spells_the_shared_states() {
        let shared = [
            ("PENDING", Pending),
            ("RUNNING", Running),
            ("SUCCEEDED", Succeeded),
            ("FAILED", Failed),
            ("CANCELLED", Cancelled),
            ("EXPIRED", Expired),
        ];
        for (name, state) in shared {
            for prefix in [
                "",
                "BATCH_STATE_",
                "JOB_STATE_",
                "OPERATION_STATE_",
                "batch.",
            ] {
                let spelled = format!("{prefix}{name}");
                assert_eq!(OpState::parse(&spelled), state, "{spelled}");
                assert_eq!(OpState::parse(&spelled.to_lowercase()), state, "{spelled}");
            }
        }
    }

    #[test]
    fn webhook_event_types() {
        assert_eq!(OpState::parse("batch.succeeded"), Succeeded);
        assert_eq!(OpState::parse("batch.failed"), Failed);
        assert_eq!(OpState::parse("batch.expired"), Expired);
        assert_eq!(OpState::parse("batch.cancelled"), Cancelled);
        assert_eq!(OpState::parse("batch.running"), Running);
        assert_eq!(OpState::parse("batch.pending"), Pending);
    }

    #[test]
    fn job_state_extras() {
        assert_eq!(OpState::parse("JOB_STATE_QUEUED"), Pending);
        assert_eq!(OpState::parse("JOB_STATE_CANCELLING"), Running);
        assert_eq!(OpState::parse("JOB_STATE_PAUSED"), Running);
        assert_eq!(OpState::parse("JOB_STATE_UPDATING"), Running);
        assert_eq!(OpState::parse("JOB_STATE_PARTIALLY_SUCCEEDED"), Succeeded);
        assert_eq!(OpState::parse("batch.canceled"), Cancelled);
    }

    #[test]
    fn openai_statuses_and_event_types() {
        assert_eq!(OpState::parse("validating"), Pending);
        assert_eq!(OpState::parse("in_progress"), Running);
        assert_eq!(OpState::parse("finalizing"), Running);
        assert_eq!(OpState::parse("cancelling"), Running);
        assert_eq!(OpState::parse("completed"), Succeeded);
        assert_eq!(OpState::parse("batch.completed"), Succeeded);
        assert_eq!(OpState::parse("BATCH_STATE_COMPLETED"), Succeeded);
    }

    #[test]
    fn case_and_whitespace_do_not_matter() {
        assert_eq!(OpState::parse("  Batch_State_Running\n"), Running);
        assert_eq!(OpState::parse("Batch.Succeeded"), Succeeded);
        assert_eq!(OpState::parse("succeeded"), Succeeded);
    }

    #[test]
    fn anything_else_is_unknown() {
        for text in [
            "",
            "   ",
            "BATCH_STATE_UNSPECIFIED",
            "JOB_STATE_UNSPECIFIED",
            "OPERATION_STATE_UNSPECIFIED",
            "batch.created",
            "batch.",
            "DONE",
            "SUCCEEDED_WITH_ERRORS",
            "BATCH_STATE_BATCH_STATE_RUNNING",
            "RUNNING ING",
            "UNKNOWN",
        ] {
            assert_eq!(OpState::parse(text), Unknown, "{text:?}");
        }
    }

    #[test]
    fn canonical_names_round_trip() {
        for state in OpState::ALL {
            assert_eq!(OpState::parse(state.as_str()), state);
            assert_eq!(state.to_string(), state.as_str());
        }
        assert_eq!(Succeeded.as_str(), "SUCCEEDED");
    }
}
