//! How API values are shown in tables: enum names without their type
//! prefix (`PERMANENT`, not `ROW_STATUS_PERMANENT`), times in RFC 3339 UTC,
//! durations in human form; and the JSON of each printed message (made by
//! [`crate::output`] from the descriptors, plus a few derived fields).

use crate::output;
use serde_json::{Value, json};
use tally_proto::v1 as pb;

/// Strips `PREFIX_` from a generated enum's name; unknown numbers show as
/// `UNKNOWN(n)` so a newer server never breaks an older tallyctl.
fn short(name: Option<&'static str>, prefix: &str, raw: i32) -> String {
    match name {
        Some(n) => n.strip_prefix(prefix).unwrap_or(n).to_string(),
        None => format!("UNKNOWN({raw})"),
    }
}

pub fn row_status(v: i32) -> String {
    short(
        pb::RowStatus::try_from(v).ok().map(|s| s.as_str_name()),
        "ROW_STATUS_",
        v,
    )
}

pub fn budget(v: i32) -> String {
    short(
        pb::Budget::try_from(v).ok().map(|s| s.as_str_name()),
        "BUDGET_",
        v,
    )
}

pub fn ledger_state(v: i32) -> String {
    short(
        pb::LedgerState::try_from(v).ok().map(|s| s.as_str_name()),
        "LEDGER_STATE_",
        v,
    )
}

pub fn pause_reason(v: i32) -> String {
    short(
        pb::LedgerPauseReason::try_from(v)
            .ok()
            .map(|s| s.as_str_name()),
        "LEDGER_PAUSE_REASON_",
        v,
    )
    .to_ascii_lowercase()
}

/// `PAUSED since … by …: reason (message)`, or the bare state.
pub fn ledger_state_text(state: i32, pause: Option<&pb::LedgerPause>) -> String {
    match pause {
        Some(p) if state == pb::LedgerState::Paused as i32 => format!(
            "PAUSED since {} by {} ({}): {}",
            time(p.pause_time.as_ref()),
            p.actor,
            pause_reason(p.reason),
            p.message
        ),
        _ => ledger_state(state),
    }
}

/// `rows purged/total` of a ledger being deleted.
pub fn purge_progress(l: &pb::Ledger) -> String {
    let p = l.purge.unwrap_or_default();
    let total = p.rows_total.map_or("?".to_string(), |n| n.to_string());
    format!("{}/{total} rows purged", p.rows_purged)
}

pub fn job_state(v: i32) -> String {
    short(
        pb::JobState::try_from(v).ok().map(|s| s.as_str_name()),
        "JOB_STATE_",
        v,
    )
}

pub fn job_event_type(v: i32) -> String {
    short(
        pb::JobEventType::try_from(v).ok().map(|s| s.as_str_name()),
        "JOB_EVENT_TYPE_",
        v,
    )
}

pub fn operation_state(v: i32) -> String {
    short(
        pb::OperationState::try_from(v)
            .ok()
            .map(|s| s.as_str_name()),
        "OPERATION_STATE_",
        v,
    )
}

pub fn event_source(v: i32) -> String {
    short(
        pb::EventSource::try_from(v).ok().map(|s| s.as_str_name()),
        "EVENT_SOURCE_",
        v,
    )
}

pub fn event_verdict(v: i32) -> String {
    short(
        pb::EventVerdict::try_from(v).ok().map(|s| s.as_str_name()),
        "EVENT_VERDICT_",
        v,
    )
}

pub fn enroll_outcome(v: i32) -> String {
    short(
        pb::EnrollOutcome::try_from(v).ok().map(|s| s.as_str_name()),
        "ENROLL_OUTCOME_",
        v,
    )
}

/// Parses a short or full enum name case-insensitively (`permanent`,
/// `ROW_STATUS_PERMANENT`).
fn parse_enum<T>(
    text: &str,
    prefix: &str,
    from: impl Fn(&str) -> Option<T>,
    all: &[&str],
) -> Result<T, String> {
    let upper = text.trim().to_ascii_uppercase();
    let full = if upper.starts_with(prefix) {
        upper
    } else {
        format!("{prefix}{upper}")
    };
    from(&full).ok_or_else(|| format!("unknown value {text:?}; expected one of {}", all.join(", ")))
}

pub fn parse_row_status(text: &str) -> Result<pb::RowStatus, String> {
    parse_enum(
        text,
        "ROW_STATUS_",
        pb::RowStatus::from_str_name,
        &[
            "pending",
            "running",
            "retryable",
            "succeeded",
            "permanent",
            "blocked",
        ],
    )
}

pub fn parse_job_state(text: &str) -> Result<pb::JobState, String> {
    parse_enum(
        text,
        "JOB_STATE_",
        pb::JobState::from_str_name,
        &[
            "preparing",
            "submitted",
            "running",
            "succeeded",
            "failed",
            "cancelled",
            "expired",
            "reconciled",
        ],
    )
}

pub fn parse_operation_state(text: &str) -> Result<pb::OperationState, String> {
    parse_enum(
        text,
        "OPERATION_STATE_",
        pb::OperationState::from_str_name,
        &[
            "pending",
            "running",
            "succeeded",
            "failed",
            "cancelled",
            "expired",
        ],
    )
}

pub use crate::timefmt::{duration, parse_duration, time};

/// `p/c/i` attempts by budget.
pub fn attempts(a: Option<&pb::AttemptCounts>) -> String {
    let a = a.cloned().unwrap_or_default();
    format!("{}/{}/{}", a.provider, a.content, a.infra)
}

pub fn prompt_ref(p: Option<&pb::PromptRef>) -> String {
    match p {
        Some(p) if !p.name.is_empty() => format!("{}@{}", p.name, p.version),
        _ => String::new(),
    }
}

/// The last segment of a resource name (`ledgers/x/jobs/abc` → `abc`).
pub fn last_segment(name: &str) -> &str {
    name.rsplit('/').next().unwrap_or(name)
}

// ---- JSON ----------------------------------------------------------------------
//
// Machine output is the proto messages as [`crate::output`] prints them
// (every field, generically); these add what a script needs that the
// message does not carry.

pub fn ledger_json(l: &pb::Ledger) -> Value {
    let mut v = output::to_json(l);
    lowercase_pause_reason(&mut v);
    v
}

/// `pause.reason` in lower case (`operator`, `spend_cap`), as the summary
/// line and the tables write it, and as tallyctl's JSON always had it.
fn lowercase_pause_reason(v: &mut Value) {
    if let Some(Value::String(r)) = v.pointer_mut("/pause/reason") {
        *r = r.to_ascii_lowercase();
    }
}

/// The summary, plus `attempts` (the four `attempts_*` fields as one
/// object, as tallyctl printed them before) and `terminal`.
pub fn summary_json(s: &pb::LedgerSummary) -> Value {
    let mut v = output::to_json(s);
    v["attempts"] = json!({
        "provider": s.attempts_provider,
        "content": s.attempts_content,
        "infra": s.attempts_infra,
        "total": s.attempts_total,
    });
    v["terminal"] = Value::Bool(is_terminal(s));
    lowercase_pause_reason(&mut v);
    v
}

/// Every row is SUCCEEDED, PERMANENT or BLOCKED.
pub fn is_terminal(s: &pb::LedgerSummary) -> bool {
    s.pending == 0 && s.running == 0 && s.retryable == 0
}

/// A row as the server sent it (payload, result and history are empty in
/// the BASIC view `rows list` asks for without --full).
pub fn row_json(r: &pb::Row) -> Value {
    output::to_json(r)
}

pub fn redrive_json(r: &pb::RedriveRowsResponse, dry_run: bool) -> Value {
    let mut v = output::to_json(r);
    v["dry_run"] = Value::Bool(dry_run);
    v
}

pub fn job_json(j: &pb::Job) -> Value {
    output::to_json(j)
}

pub fn lock_json(l: &pb::Lock) -> Value {
    output::to_json(l)
}

pub fn operation_json(o: &pb::Operation) -> Value {
    output::to_json(o)
}

pub fn operation_event_json(e: &pb::OperationEventRecord) -> Value {
    output::to_json(e)
}

pub fn prompt_json_full(p: &pb::Prompt) -> Value {
    output::to_json(p)
}

/// A JSON text field (payload, result) as the JSON it holds; a string when
/// it does not parse; null when empty.
pub fn embedded_json(text: &str) -> Value {
    output::embedded_json(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enum_names_are_short_and_parse_back() {
        assert_eq!(row_status(pb::RowStatus::Permanent as i32), "PERMANENT");
        assert_eq!(row_status(99), "UNKNOWN(99)");
        assert_eq!(job_state(pb::JobState::Reconciled as i32), "RECONCILED");
        assert_eq!(parse_row_status("permanent"), Ok(pb::RowStatus::Permanent));
        assert_eq!(
            parse_row_status("ROW_STATUS_BLOCKED"),
            Ok(pb::RowStatus::Blocked)
        );
        assert!(parse_row_status("done").unwrap_err().contains("succeeded"));
        assert_eq!(parse_job_state("Running"), Ok(pb::JobState::Running));
        assert_eq!(
            parse_operation_state("expired"),
            Ok(pb::OperationState::Expired)
        );
    }

    #[test]
    fn times_and_durations() {
        let t = prost_types::Timestamp {
            seconds: 1_700_000_000,
            nanos: 5,
        };
        assert_eq!(time(Some(&t)), "2023-11-14T22:13:20Z");
        assert_eq!(time(None), "");
        let d = parse_duration("1h 30m").unwrap();
        assert_eq!(d.seconds, 5400);
        assert_eq!(duration(Some(&d)), "1h 30m");
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn the_summary_keeps_its_attempts_object_and_terminal() {
        let s = pb::LedgerSummary {
            attempts_content: 2,
            attempts_total: 3,
            ..Default::default()
        };
        let v = summary_json(&s);
        assert_eq!(v["attempts"]["content"], 2);
        assert_eq!(v["attempts_total"], 3);
        assert_eq!(v["terminal"], true);
        let l = pb::Ledger {
            pause: Some(pb::LedgerPause {
                reason: pb::LedgerPauseReason::SpendCap as i32,
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(ledger_json(&l)["pause"]["reason"], "spend_cap");
    }

    #[test]
    fn terminal_means_nothing_left_to_run() {
        let mut s = pb::LedgerSummary {
            total: 3,
            succeeded: 2,
            blocked: 1,
            ..Default::default()
        };
        assert!(is_terminal(&s));
        s.retryable = 1;
        assert!(!is_terminal(&s));
    }
}
