//! What can go wrong in a command, and the exit code each failure maps to.
//! The codes are part of tallyctl's interface (scripts branch on them), so
//! they live in one place: [`ExitCode`].

use std::fmt::Write as _;
use tonic::Code;
use tonic_types::StatusExt;

/// Exit codes, listed in `tallyctl --help` (`cli::AFTER_HELP`);
/// a test checks that the two agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitCode {
    /// Everything went as asked.
    Ok = 0,
    /// Bad usage or bad input (flags, config file, files, lines); nothing
    /// or only what came before the bad input was sent. Also CONFLICT rows
    /// with `--fail-on-conflict`.
    Input = 1,
    /// The server answered with an error (or could not be reached in time).
    Server = 2,
    /// `--fail-on-permanent` (status, watch): rows ended PERMANENT.
    Permanent = 3,
    /// `locks acquire`: someone else holds the lock.
    LockHeld = 4,
    /// Interrupted (Ctrl-C) after saying how to resume (`export`).
    Interrupted = 130,
}

impl ExitCode {
    /// Every code, for the test that `--help` lists them all.
    pub const ALL: [ExitCode; 6] = [
        ExitCode::Ok,
        ExitCode::Input,
        ExitCode::Server,
        ExitCode::Permanent,
        ExitCode::LockHeld,
        ExitCode::Interrupted,
    ];

    pub fn code(self) -> i32 {
        self as i32
    }
}

/// A command's failure.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Flags that do not fit together, or a value that cannot be used.
    #[error("{0}")]
    Usage(String),
    /// A file or line that cannot be read or parsed.
    #[error("{0}")]
    Input(String),
    /// The server's answer.
    #[error("{}", describe_status(.context, .status))]
    Server {
        context: String,
        status: Box<tonic::Status>,
    },
    /// No answer: the server could not be reached, or did not answer
    /// within `--timeout`. `server` names the address (and the profile).
    #[error("{context}: {}", describe_unreachable(.server, .status))]
    Unreachable {
        context: String,
        server: String,
        status: Box<tonic::Status>,
    },
}

/// `cannot reach http://h:1 (profile …): UNAVAILABLE: …`, or for a call
/// past `--timeout`, `no answer from … within the timeout`.
fn describe_unreachable(server: &str, status: &tonic::Status) -> String {
    if is_timeout(status) {
        format!("no answer from {server} within the timeout (--timeout): DEADLINE_EXCEEDED")
    } else {
        format!("cannot reach {server}: {}", describe_status("", status))
    }
}

/// A call that tonic cut at the channel's timeout (it says CANCELLED).
fn is_timeout(status: &tonic::Status) -> bool {
    status.code() == Code::Cancelled && status.message() == tonic::TimeoutExpired(()).to_string()
}

impl CliError {
    pub fn usage(message: impl Into<String>) -> Self {
        CliError::Usage(message.into())
    }

    pub fn input(message: impl Into<String>) -> Self {
        CliError::Input(message.into())
    }

    /// A server error, with what we were doing when it happened.
    pub fn server(context: impl Into<String>, status: tonic::Status) -> Self {
        CliError::Server {
            context: context.into(),
            status: Box::new(status),
        }
    }

    pub fn exit_code(&self) -> ExitCode {
        match self {
            CliError::Usage(_) | CliError::Input(_) => ExitCode::Input,
            CliError::Server { .. } | CliError::Unreachable { .. } => ExitCode::Server,
        }
    }

    /// The gRPC code, for server errors.
    pub fn grpc_code(&self) -> Option<Code> {
        match self {
            CliError::Server { status, .. } => Some(status.code()),
            CliError::Unreachable { status, .. } if is_timeout(status) => {
                Some(Code::DeadlineExceeded)
            }
            CliError::Unreachable { status, .. } => Some(status.code()),
            CliError::Usage(_) | CliError::Input(_) => None,
        }
    }

    /// A server error that means "no answer" (UNAVAILABLE: not reachable;
    /// a call cut at `--timeout`) becomes [`CliError::Unreachable`], naming
    /// `server`; anything else is returned as it is.
    pub fn naming_server(self, server: &str) -> Self {
        match self {
            CliError::Server { context, status }
                if status.code() == Code::Unavailable || is_timeout(&status) =>
            {
                CliError::Unreachable {
                    context,
                    server: server.to_string(),
                    status,
                }
            }
            other => other,
        }
    }

    /// A JSON form for `--json` (printed on stderr).
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            CliError::Usage(m) | CliError::Input(m) => {
                serde_json::json!({"error": {"kind": "input", "message": m}})
            }
            CliError::Server { context, status } => {
                let details = status.get_error_details();
                let violations: Vec<_> = details
                    .bad_request()
                    .map(|b| {
                        b.field_violations
                            .iter()
                            .map(|v| serde_json::json!({"field": v.field, "description": v.description}))
                            .collect()
                    })
                    .unwrap_or_default();
                serde_json::json!({"error": {
                    "kind": "server",
                    "context": context,
                    "code": code_name(status.code()),
                    "message": status.message(),
                    "field_violations": violations,
                }})
            }
            CliError::Unreachable {
                context,
                server,
                status,
            } => serde_json::json!({"error": {
                "kind": "unreachable",
                "context": context,
                "server": server,
                "code": code_name(self.grpc_code().unwrap_or(status.code())),
                "message": self.to_string(),
            }}),
        }
    }
}

/// The canonical upper-case name of a gRPC code (`INVALID_ARGUMENT`).
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// `context: CODE: message` followed by one indented line per google.rpc
/// detail the server attached (field violations, preconditions, retry
/// delay, resource, reason, help links).
pub fn describe_status(context: &str, status: &tonic::Status) -> String {
    let mut out = String::new();
    if !context.is_empty() {
        let _ = write!(out, "{context}: ");
    }
    let _ = write!(out, "{}: {}", code_name(status.code()), status.message());
    let d = status.get_error_details();
    if let Some(b) = d.bad_request() {
        for v in &b.field_violations {
            let _ = write!(out, "\n  field {}: {}", v.field, v.description);
        }
    }
    if let Some(p) = d.precondition_failure() {
        for v in &p.violations {
            let _ = write!(out, "\n  precondition {}: {}", v.r#type, v.description);
        }
    }
    if let Some(r) = d.resource_info() {
        let _ = write!(out, "\n  resource {} {}", r.resource_type, r.resource_name);
    }
    if let Some(e) = d.error_info() {
        let _ = write!(out, "\n  reason {} ({})", e.reason, e.domain);
    }
    if let Some(r) = d.retry_info()
        && let Some(delay) = r.retry_delay
    {
        let _ = write!(out, "\n  retry after {}", humantime::format_duration(delay));
    }
    if let Some(q) = d.quota_failure() {
        for v in &q.violations {
            let _ = write!(out, "\n  quota {}: {}", v.subject, v.description);
        }
    }
    if let Some(h) = d.help() {
        for l in &h.links {
            let _ = write!(out, "\n  see {} ({})", l.url, l.description);
        }
    }
    if let Some(m) = d.localized_message() {
        let _ = write!(out, "\n  {}", m.message);
    }
    if status.code() == Code::Unimplemented {
        out.push_str("\n  (this server does not implement that call yet)");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic_types::ErrorDetails;

    #[test]
    fn exit_codes_are_stable() {
        assert_eq!(ExitCode::Ok.code(), 0);
        assert_eq!(CliError::usage("x").exit_code().code(), 1);
        assert_eq!(CliError::input("x").exit_code().code(), 1);
        let e = CliError::server("enroll", tonic::Status::not_found("ledger x"));
        assert_eq!(e.exit_code().code(), 2);
        assert_eq!(e.grpc_code(), Some(Code::NotFound));
        assert_eq!(ExitCode::Permanent.code(), 3);
        assert_eq!(ExitCode::LockHeld.code(), 4);
    }

    #[test]
    fn no_answer_names_the_server_and_other_errors_stay() {
        let e = CliError::server(
            "list ledgers",
            tonic::Status::unavailable("tcp connect error"),
        )
        .naming_server("http://h:1 (profile \"p\" of /c.toml)");
        let text = e.to_string();
        assert!(
            text.starts_with("list ledgers: cannot reach http://h:1 (profile \"p\""),
            "{text}"
        );
        assert!(text.contains("UNAVAILABLE: tcp connect error"), "{text}");
        assert_eq!(e.exit_code(), ExitCode::Server);
        assert_eq!(
            e.to_json()["error"]["server"],
            "http://h:1 (profile \"p\" of /c.toml)"
        );
        let timeout = tonic::Status::cancelled(tonic::TimeoutExpired(()).to_string());
        let e = CliError::server("get x", timeout).naming_server("http://h:1");
        assert!(
            e.to_string().contains("no answer from http://h:1 within"),
            "{e}"
        );
        assert_eq!(e.grpc_code(), Some(Code::DeadlineExceeded));
        let e = CliError::server("get x", tonic::Status::not_found("x")).naming_server("h");
        assert!(matches!(e, CliError::Server { .. }));
    }

    #[test]
    fn field_violations_are_printed_one_per_line() {
        let mut details = ErrorDetails::new();
        details.add_bad_request_violation("rows[0].key", "key must not be empty");
        details.add_bad_request_violation("rows[1].payload", "payload must be a JSON object");
        let status =
            tonic::Status::with_error_details(Code::InvalidArgument, "2 invalid fields", details);
        let text = describe_status("enroll", &status);
        assert_eq!(
            text,
            "enroll: INVALID_ARGUMENT: 2 invalid fields\n  field rows[0].key: key must not be empty\n  field rows[1].payload: payload must be a JSON object"
        );
        let json = CliError::server("enroll", status).to_json();
        assert_eq!(json["error"]["code"], "INVALID_ARGUMENT");
        assert_eq!(
            json["error"]["field_violations"][1]["field"],
            "rows[1].payload"
        );
    }

    #[test]
    fn retry_info_and_unimplemented_are_explained() {
        let s = tonic::Status::with_error_details(
            Code::ResourceExhausted,
            "too many jobs",
            ErrorDetails::with_retry_info(Some(std::time::Duration::from_secs(30))),
        );
        assert!(describe_status("", &s).ends_with("retry after 30s"));
        let u = describe_status("list jobs", &tonic::Status::unimplemented(""));
        assert!(u.starts_with("list jobs: UNIMPLEMENTED"));
        assert!(u.contains("does not implement"));
    }
}
