//! The store's typed errors: the one place that decides what a database
//! failure means to a caller. The server maps each variant to one gRPC code.

use tally_core::violation::{FieldViolation, Invalid};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A named resource does not exist.
    #[error("{kind} {name} not found")]
    NotFound { kind: &'static str, name: String },
    /// A resource with this name exists already (and differs).
    #[error("{kind} {name} already exists")]
    AlreadyExists { kind: &'static str, name: String },
    /// The request is malformed in ways only the database could tell (an
    /// unknown dependency, an unregistered prompt).
    #[error("invalid argument: {}", join(.0))]
    InvalidArgument(Invalid),
    /// The resource is not in a state that allows the operation (a claim
    /// whose lease ran out, a job already submitted under another name).
    #[error("{description}")]
    FailedPrecondition {
        /// Machine-readable reason, e.g. `CLAIM_EXPIRED`.
        reason: &'static str,
        description: String,
    },
    /// The name belongs to a ledger whose deletion has not finished.
    #[error("{name} is being deleted; the name is free again once its purge has finished")]
    LedgerDeleting { name: String },
    /// DeleteLedger without force on a ledger with work in flight.
    #[error(
        "{name} has {live_claims} live claim(s) and {open_jobs} open job(s); finish or cancel them, or delete with force"
    )]
    LedgerActive {
        name: String,
        live_claims: i64,
        open_jobs: i64,
    },
    /// The ledger is paused and the call would make new work (a claim, a
    /// job); see `tally_core::pause`.
    #[error("{name} is paused ({}): {}", pause.reason, pause.message)]
    LedgerPaused {
        name: String,
        pause: Box<crate::types::Pause>,
    },
    /// A concurrent change won (etag mismatch).
    #[error("{0}")]
    Aborted(String),
    /// A limit was hit; try again after `retry_after_secs`. `reason` names
    /// the limit (ErrorInfo): `JOB_LIMIT`, `PROVIDER_COOLDOWN`, `PROVIDER_QUOTA`.
    #[error("{message}")]
    ResourceExhausted {
        reason: &'static str,
        message: String,
        retry_after_secs: u64,
    },
    /// The caller does not hold what it claims to (a lock token).
    #[error("{0}")]
    PermissionDenied(String),
    /// The database cannot be reached; the call may be retried.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// Anything else: a bug or a broken invariant. Logged, never detailed
    /// to clients.
    #[error("internal error: {0}")]
    Internal(String),
}

fn join(v: &Invalid) -> String {
    v.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl StoreError {
    pub fn not_found(kind: &'static str, name: impl Into<String>) -> Self {
        StoreError::NotFound {
            kind,
            name: name.into(),
        }
    }

    pub fn invalid(field: impl Into<String>, description: impl Into<String>) -> Self {
        StoreError::InvalidArgument(vec![FieldViolation::new(field, description)].into())
    }

    pub fn precondition(reason: &'static str, description: impl Into<String>) -> Self {
        StoreError::FailedPrecondition {
            reason,
            description: description.into(),
        }
    }

    /// Whether retrying the same call may succeed (used by the retry loops
    /// around serialization failures and enrollment races).
    pub fn is_retryable(&self) -> bool {
        match self {
            StoreError::Unavailable(_) | StoreError::Aborted(_) => true,
            StoreError::NotFound { .. }
            | StoreError::AlreadyExists { .. }
            | StoreError::LedgerDeleting { .. }
            | StoreError::LedgerActive { .. }
            | StoreError::LedgerPaused { .. }
            | StoreError::InvalidArgument(_)
            | StoreError::FailedPrecondition { .. }
            | StoreError::ResourceExhausted { .. }
            | StoreError::PermissionDenied(_)
            | StoreError::Internal(_) => false,
        }
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        match &e {
            sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed
            | sqlx::Error::Tls(_) => StoreError::Unavailable(e.to_string()),
            sqlx::Error::Database(db) => match db.code().as_deref() {
                // serialization_failure, deadlock_detected: safe to retry.
                Some("40001") | Some("40P01") => StoreError::Aborted(db.message().to_string()),
                // admin_shutdown, crash_shutdown, cannot_connect_now,
                // too_many_connections.
                Some("57P01") | Some("57P02") | Some("57P03") | Some("53300") => {
                    StoreError::Unavailable(db.message().to_string())
                }
                _ => StoreError::Internal(e.to_string()),
            },
            _ => StoreError::Internal(e.to_string()),
        }
    }
}

/// The SQLSTATEs some callers branch on (a unique key taken), decoded here
/// and nowhere else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sqlstate {
    /// 23505 unique_violation.
    UniqueViolation,
    /// Anything else (or not a database error).
    Other,
}

/// What `e`'s SQLSTATE says.
pub(crate) fn sqlstate(e: &sqlx::Error) -> Sqlstate {
    match e {
        sqlx::Error::Database(db) => match db.code().as_deref() {
            Some("23505") => Sqlstate::UniqueViolation,
            _ => Sqlstate::Other,
        },
        _ => Sqlstate::Other,
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;
