//! The one mapping from errors to gRPC statuses, with `google.rpc` details:
//! BadRequest field violations for INVALID_ARGUMENT, ResourceInfo for
//! NOT_FOUND and ALREADY_EXISTS, PreconditionFailure and ErrorInfo for
//! FAILED_PRECONDITION, RetryInfo for RESOURCE_EXHAUSTED. Internal details
//! are logged, never sent.

use std::time::Duration;
use tally_core::violation::{FieldViolation, Invalid};
use tally_store::StoreError;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

/// The ErrorInfo domain of every tally error.
pub const DOMAIN: &str = "tally.v1";
/// The ErrorInfo reason of a list longer than a call takes.
pub const TOO_MANY_ROWS: &str = "TOO_MANY_ROWS";

/// Most field violations sent in one status (the rest are counted), so a
/// request with 200,000 bad entries cannot make a multi-megabyte trailer.
pub const MAX_VIOLATIONS: usize = 100;
/// Violations spelled out in the status message.
const IN_MESSAGE: usize = 5;

/// INVALID_ARGUMENT naming the bad fields: the first [`MAX_VIOLATIONS`] as
/// BadRequest details, then one entry `…` counting the rest (those the
/// list did not keep included).
pub fn invalid(violations: impl Into<Invalid>) -> Status {
    let Invalid {
        violations,
        omitted,
    } = violations.into();
    let total = violations.len() + omitted;
    let message = match violations.as_slice() {
        [one] if omitted == 0 => format!("invalid {}: {}", one.field, one.description),
        many => {
            let shown: Vec<String> = many
                .iter()
                .take(IN_MESSAGE)
                .map(ToString::to_string)
                .collect();
            let more = total.saturating_sub(shown.len());
            format!(
                "{total} invalid fields: {}{}",
                shown.join("; "),
                if more > 0 {
                    format!("; and {more} more")
                } else {
                    String::new()
                }
            )
        }
    };
    let mut details = ErrorDetails::new();
    let listed = violations.len().min(MAX_VIOLATIONS);
    for v in violations.into_iter().take(MAX_VIOLATIONS) {
        details.add_bad_request_violation(v.field, v.description);
    }
    if total > listed {
        details.add_bad_request_violation(
            "…",
            format!("{} more invalid fields not listed", total - listed),
        );
    }
    Status::with_error_details(Code::InvalidArgument, message, details)
}

/// INVALID_ARGUMENT for one field.
pub fn invalid_field(field: impl Into<String>, description: impl Into<String>) -> Status {
    invalid(vec![FieldViolation::new(field, description)])
}

/// INVALID_ARGUMENT for a list with more rows than one call takes: the
/// field's violation and an ErrorInfo `TOO_MANY_ROWS` whose `value` is the
/// limit, so a client can split its call and go on.
pub fn too_many_rows(
    field: impl Into<String>,
    description: impl Into<String>,
    metadata: std::collections::HashMap<String, String>,
) -> Status {
    let field = field.into();
    let description = description.into();
    let mut details = ErrorDetails::with_error_info(TOO_MANY_ROWS, DOMAIN, metadata);
    details.add_bad_request_violation(field.clone(), description.clone());
    Status::with_error_details(
        Code::InvalidArgument,
        format!("invalid {field}: {description}"),
        details,
    )
}

/// RESOURCE_EXHAUSTED with a RetryInfo.
pub fn exhausted(message: impl Into<String>, retry_after: Duration) -> Status {
    Status::with_error_details(
        Code::ResourceExhausted,
        message,
        ErrorDetails::with_retry_info(Some(retry_after)),
    )
}

/// An ErrorInfo-carrying status (auth and precondition failures).
pub fn with_reason(code: Code, reason: &str, message: impl Into<String>) -> Status {
    Status::with_error_details(
        code,
        message,
        ErrorDetails::with_error_info(reason, DOMAIN, std::collections::HashMap::new()),
    )
}

/// A refusal by the auth or limits layers: an ErrorInfo with `reason` and
/// `metadata` (the method, the limit and its value), and a RetryInfo when
/// trying again later can succeed.
pub fn refused(
    code: Code,
    reason: &str,
    message: impl Into<String>,
    metadata: std::collections::HashMap<String, String>,
    retry_after: Option<Duration>,
) -> Status {
    let mut details = ErrorDetails::with_error_info(reason, DOMAIN, metadata);
    if let Some(after) = retry_after {
        details.set_retry_info(Some(after));
    }
    Status::with_error_details(code, message, details)
}

pub fn from_store(e: StoreError) -> Status {
    match e {
        StoreError::NotFound { kind, name } => {
            // A claim's whole id authorizes reports for it, and callers log
            // messages: the message names a claim as logs do; ResourceInfo
            // keeps the name the caller sent.
            let shown = if kind == "claim" {
                tally_core::names::claim_for_logs(&name)
            } else {
                name.clone()
            };
            let message = format!("{kind} {shown} not found");
            Status::with_error_details(
                Code::NotFound,
                message.clone(),
                ErrorDetails::with_resource_info(kind, name, "", message),
            )
        }
        StoreError::AlreadyExists { kind, name } => {
            let message = format!("{kind} {name} already exists");
            Status::with_error_details(
                Code::AlreadyExists,
                message.clone(),
                ErrorDetails::with_resource_info(kind, name, "", message),
            )
        }
        StoreError::LedgerDeleting { name } => {
            let message = format!(
                "{name} is being deleted; its id is free again once the purge has finished (GetLedger shows its progress)"
            );
            let mut details = ErrorDetails::with_resource_info("ledger", name, "", message.clone());
            details.set_error_info("LEDGER_DELETING", DOMAIN, std::collections::HashMap::new());
            Status::with_error_details(Code::AlreadyExists, message, details)
        }
        StoreError::LedgerActive {
            name,
            live_claims,
            open_jobs,
        } => {
            let message = format!(
                "{name} has {live_claims} live claim(s) and {open_jobs} open job(s); \
                 let them finish (or cancel the jobs' batches at the provider), or delete with force"
            );
            let metadata = std::collections::HashMap::from([
                ("live_claims".to_string(), live_claims.to_string()),
                ("open_jobs".to_string(), open_jobs.to_string()),
            ]);
            let mut details = ErrorDetails::with_error_info("LEDGER_ACTIVE", DOMAIN, metadata);
            details.add_precondition_failure_violation("LEDGER_ACTIVE", name, message.clone());
            Status::with_error_details(Code::FailedPrecondition, message, details)
        }
        StoreError::LedgerPaused { name, pause } => {
            let message = format!(
                "{name} is paused ({}, by {}: {}); nothing new is started until ResumeLedger",
                pause.reason, pause.actor, pause.message
            );
            let metadata = std::collections::HashMap::from([
                (
                    "pause_reason".to_string(),
                    pause.reason.as_str().to_string(),
                ),
                ("actor".to_string(), pause.actor.clone()),
            ]);
            let mut details = ErrorDetails::with_error_info("LEDGER_PAUSED", DOMAIN, metadata);
            details.add_precondition_failure_violation("LEDGER_PAUSED", name, message.clone());
            Status::with_error_details(Code::FailedPrecondition, message, details)
        }
        StoreError::InvalidArgument(v) => invalid(v),
        StoreError::FailedPrecondition {
            reason,
            description,
        } => {
            let mut details =
                ErrorDetails::with_error_info(reason, DOMAIN, std::collections::HashMap::new());
            details.add_precondition_failure_violation(reason, "", description.clone());
            Status::with_error_details(Code::FailedPrecondition, description, details)
        }
        StoreError::Aborted(m) => Status::aborted(m),
        StoreError::ResourceExhausted {
            reason,
            message,
            retry_after_secs,
        } => {
            let mut details =
                ErrorDetails::with_retry_info(Some(Duration::from_secs(retry_after_secs)));
            details.set_error_info(reason, DOMAIN, std::collections::HashMap::new());
            Status::with_error_details(Code::ResourceExhausted, message, details)
        }
        StoreError::PermissionDenied(m) => with_reason(Code::PermissionDenied, "NOT_OWNER", m),
        StoreError::Unavailable(m) => {
            tracing::warn!(error = %m, "database unavailable");
            Status::unavailable("the database is unavailable; retry with backoff")
        }
        StoreError::Internal(m) => {
            let id = uuid::Uuid::new_v4();
            tracing::error!(error = %m, error_id = %id, "internal error");
            Status::internal(format!("internal error (logged as {id})"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request with more bad fields than MAX_VIOLATIONS gets the first
    /// MAX_VIOLATIONS and one entry counting the rest, so the trailer stays
    /// small; the message spells out only a few.
    #[test]
    fn field_violations_are_capped() {
        let many: Vec<FieldViolation> = (0..200_000)
            .map(|i| FieldViolation::new(format!("depends_on[{i}]"), "unknown key"))
            .collect();
        let s = invalid(many);
        let bad = s.get_error_details().bad_request().unwrap().clone();
        assert_eq!(bad.field_violations.len(), MAX_VIOLATIONS + 1);
        let last = bad.field_violations.last().unwrap();
        assert_eq!(last.description, "199900 more invalid fields not listed");
        assert!(
            s.message()
                .starts_with("200000 invalid fields: depends_on[0]")
        );
        assert!(
            s.message().ends_with("; and 199995 more"),
            "{}",
            s.message()
        );
        assert!(s.details().len() < 16 * 1024, "{}", s.details().len());
    }

    #[test]
    fn violations_become_bad_request_details() {
        let s = invalid(vec![
            FieldViolation::new("rows[0].key", "key must not be empty"),
            FieldViolation::new("rows[1].payload", "payload must be a JSON object"),
        ]);
        assert_eq!(s.code(), Code::InvalidArgument);
        assert!(s.message().starts_with("2 invalid fields"));
        let details = s.get_error_details();
        let bad = details.bad_request().expect("bad request detail");
        assert_eq!(bad.field_violations.len(), 2);
        assert_eq!(bad.field_violations[1].field, "rows[1].payload");
    }

    /// A claim's NOT_FOUND message shows its id as logs do (callers log
    /// messages; the whole id authorizes reports), while its ResourceInfo
    /// names the claim whole, as the caller sent it.
    #[test]
    fn a_missing_claim_is_named_in_full_only_in_its_resource_info() {
        use tonic_types::StatusExt;
        let id = uuid::Uuid::new_v4().to_string();
        let name = format!("ledgers/l/claims/{id}");
        let s = from_store(StoreError::not_found("claim", name.clone()));
        assert_eq!(s.code(), Code::NotFound);
        assert!(!s.message().contains(&id), "{}", s.message());
        assert!(s.message().contains(&id[..8]), "{}", s.message());
        let info = s
            .get_error_details()
            .resource_info()
            .cloned()
            .expect("ResourceInfo");
        assert_eq!(
            (info.resource_type.as_str(), info.resource_name.as_str()),
            ("claim", name.as_str())
        );
        assert!(!info.description.contains(&id), "{}", info.description);
        let ledger = from_store(StoreError::not_found("ledger", "ledgers/x"));
        assert_eq!(ledger.message(), "ledger ledgers/x not found");
    }

    #[test]
    fn internal_errors_hide_their_details() {
        let s = from_store(StoreError::Internal("secret sql".into()));
        assert_eq!(s.code(), Code::Internal);
        assert!(!s.message().contains("secret"));
    }

    #[test]
    fn codes() {
        assert_eq!(
            from_store(StoreError::not_found("ledger", "ledgers/x")).code(),
            Code::NotFound
        );
        assert_eq!(
            from_store(StoreError::precondition("CLAIM_EXPIRED", "gone")).code(),
            Code::FailedPrecondition
        );
        assert_eq!(
            from_store(StoreError::Unavailable("down".into())).code(),
            Code::Unavailable
        );
        let active = from_store(StoreError::LedgerActive {
            name: "ledgers/x".into(),
            live_claims: 2,
            open_jobs: 1,
        });
        assert_eq!(active.code(), Code::FailedPrecondition);
        let info = active.get_error_details().error_info().cloned().unwrap();
        assert_eq!(info.reason, "LEDGER_ACTIVE");
        assert_eq!(info.metadata["live_claims"], "2");
        assert_eq!(info.metadata["open_jobs"], "1");
        let deleting = from_store(StoreError::LedgerDeleting {
            name: "ledgers/x".into(),
        });
        assert_eq!(deleting.code(), Code::AlreadyExists);
        assert!(deleting.message().contains("being deleted"));
        let s = from_store(StoreError::ResourceExhausted {
            reason: "JOB_LIMIT",
            message: "too many jobs".into(),
            retry_after_secs: 30,
        });
        assert_eq!(s.code(), Code::ResourceExhausted);
        assert!(s.get_error_details().retry_info().is_some());
        assert_eq!(
            s.get_error_details()
                .error_info()
                .map(|i| i.reason.as_str()),
            Some("JOB_LIMIT")
        );
    }
}
