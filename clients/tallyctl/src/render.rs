//! How API values are shown: enum names without their type prefix
//! (`PERMANENT`, not `ROW_STATUS_PERMANENT`), times in RFC 3339 UTC,
//! durations in human form, and the explicit JSON projections `--json`
//! prints (prost types are not serde; these say exactly what a script gets:
//! proto field names in snake_case, short enum names, times as RFC 3339
//! strings, durations as humantime strings like `30m`).

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

pub fn pause_json(p: Option<&pb::LedgerPause>) -> Value {
    match p {
        None => Value::Null,
        Some(p) => json!({
            "reason": pause_reason(p.reason),
            "message": p.message,
            "actor": p.actor,
            "pause_time": time_json(p.pause_time.as_ref()),
        }),
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

/// RFC 3339 in UTC with seconds (`2026-01-02T03:04:05Z`); empty when unset.
pub fn time(t: Option<&prost_types::Timestamp>) -> String {
    let Some(t) = t else {
        return String::new();
    };
    match chrono::DateTime::from_timestamp(t.seconds, t.nanos.clamp(0, 999_999_999) as u32) {
        Some(dt) => dt.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        None => format!("{}s", t.seconds),
    }
}

fn time_json(t: Option<&prost_types::Timestamp>) -> Value {
    match t {
        Some(_) => Value::String(time(t)),
        None => Value::Null,
    }
}

/// `30m`, `1h 30m`; empty when unset.
pub fn duration(d: Option<&prost_types::Duration>) -> String {
    match d.and_then(|d| std::time::Duration::try_from(*d).ok()) {
        Some(d) => humantime::format_duration(d).to_string(),
        None => String::new(),
    }
}

/// A human duration (`30m`) as a proto Duration.
pub fn parse_duration(text: &str) -> Result<prost_types::Duration, String> {
    let d =
        humantime::parse_duration(text).map_err(|e| format!("{e} (use forms like 30s, 5m, 1h)"))?;
    prost_types::Duration::try_from(d).map_err(|e| e.to_string())
}

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

// ---- JSON projections --------------------------------------------------------

fn attempts_json(a: Option<&pb::AttemptCounts>) -> Value {
    let a = a.cloned().unwrap_or_default();
    json!({"provider": a.provider, "content": a.content, "infra": a.infra, "total": a.total})
}

fn usage_json(u: Option<&pb::Usage>) -> Value {
    let u = u.cloned().unwrap_or_default();
    json!({
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "thinking_tokens": u.thinking_tokens,
        "cached_tokens": u.cached_tokens,
    })
}

fn prompt_json(p: Option<&pb::PromptRef>) -> Value {
    match p {
        Some(p) if !p.name.is_empty() => json!({"name": p.name, "version": p.version}),
        _ => Value::Null,
    }
}

/// A JSON text field (payload, result) as the JSON it holds; a string when
/// it does not parse; null when empty.
pub fn embedded_json(text: &str) -> Value {
    if text.is_empty() {
        return Value::Null;
    }
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

pub fn ledger_json(l: &pb::Ledger) -> Value {
    let p = l.policy.clone().unwrap_or_default();
    let b = p.budgets.unwrap_or_default();
    let backoff = p.backoff.unwrap_or_default();
    json!({
        "name": l.name,
        "policy": {
            "model": p.model,
            "budgets": {"provider": b.provider, "content": b.content, "infra": b.infra},
            "lease": duration(p.lease.as_ref()),
            "backoff": {
                "initial": duration(backoff.initial.as_ref()),
                "max": duration(backoff.max.as_ref()),
                "multiplier": backoff.multiplier,
                "jitter": backoff.jitter,
            },
            "overrides": p.overrides.iter().map(|o| json!({
                "name": o.name,
                "http_code": o.http_code,
                "status": o.status,
                "message_contains": o.message_contains,
                "finish_reason": o.finish_reason,
                "verdict": row_status(o.verdict),
                "budget": budget(o.budget),
            })).collect::<Vec<_>>(),
            "review_threshold": p.review_threshold,
            "alert_url": p.alert_url,
            "max_active_jobs": p.max_active_jobs,
            "prices": p.prices.iter().map(|m| json!({
                "model": m.model,
                "input_per_million": m.input_per_million,
                "output_per_million": m.output_per_million,
                "cached_input_per_million": m.cached_input_per_million,
                "thinking_per_million": m.thinking_per_million,
            })).collect::<Vec<_>>(),
        },
        "create_time": time_json(l.create_time.as_ref()),
        "update_time": time_json(l.update_time.as_ref()),
        "etag": l.etag,
        "state": ledger_state(l.state),
        "delete_time": time_json(l.delete_time.as_ref()),
        "purge": l.purge.as_ref().map(|p| json!({
            "rows_total": p.rows_total,
            "rows_purged": p.rows_purged,
            "forced": p.forced,
            "claims_expired": p.claims_expired,
            "jobs_abandoned": p.jobs_abandoned,
        })),
        "pause": pause_json(l.pause.as_ref()),
    })
}

pub fn summary_json(s: &pb::LedgerSummary) -> Value {
    json!({
        "ledger": s.ledger,
        "total": s.total,
        "pending": s.pending,
        "running": s.running,
        "retryable": s.retryable,
        "succeeded": s.succeeded,
        "permanent": s.permanent,
        "blocked": s.blocked,
        "attempts": {
            "provider": s.attempts_provider,
            "content": s.attempts_content,
            "infra": s.attempts_infra,
            "total": s.attempts_total,
        },
        "usage": usage_json(s.usage.as_ref()),
        "estimated_cost_usd": s.estimated_cost_usd,
        "unpriced_models": s.unpriced_models,
        "permanent_by_rule": s.permanent_by_rule,
        "active_jobs": s.active_jobs,
        "summary_line": s.summary_line,
        "state": ledger_state(s.state),
        "pause": pause_json(s.pause.as_ref()),
        "terminal": is_terminal(s),
    })
}

/// Every row is SUCCEEDED, PERMANENT or BLOCKED.
pub fn is_terminal(s: &pb::LedgerSummary) -> bool {
    s.pending == 0 && s.running == 0 && s.retryable == 0
}

pub fn attempt_json(a: &pb::Attempt) -> Value {
    json!({
        "number": a.number,
        "claim": a.claim,
        "job": a.job,
        "batch": a.batch,
        "model": a.model,
        "prompt": prompt_json(a.prompt.as_ref()),
        "vars_hash": a.vars_hash,
        "outcome": row_status(a.outcome),
        "rule": a.rule,
        "budget": budget(a.budget),
        "usage": usage_json(a.usage.as_ref()),
        "error": a.error,
        "actor": a.actor,
        "time": time_json(a.time.as_ref()),
    })
}

/// A row; `full` adds payload, result and history (when the server sent
/// them).
pub fn row_json(r: &pb::Row, full: bool) -> Value {
    let mut v = json!({
        "name": r.name,
        "key": r.key,
        "depends_on": r.depends_on,
        "unmet_dependencies": r.unmet_dependencies,
        "prompt": prompt_json(r.prompt.as_ref()),
        "model": r.model,
        "status": row_status(r.status),
        "attempts": attempts_json(r.attempts.as_ref()),
        "rule": r.rule,
        "last_error": r.last_error,
        "usage": usage_json(r.usage.as_ref()),
        "claim": r.claim,
        "job": r.job,
        "next_attempt_time": time_json(r.next_attempt_time.as_ref()),
        "create_time": time_json(r.create_time.as_ref()),
        "update_time": time_json(r.update_time.as_ref()),
    });
    if full {
        v["payload"] = embedded_json(&r.payload);
        v["result"] = embedded_json(&r.result);
        v["history"] = r.history.iter().map(attempt_json).collect();
    }
    v
}

pub fn redrive_json(r: &pb::RedriveRowsResponse, dry_run: bool) -> Value {
    json!({
        "dry_run": dry_run,
        "redriven": r.redriven,
        "unblocked": r.unblocked,
        "skipped": r.skipped,
        "sample_keys": r.sample_keys,
    })
}

pub fn job_json(j: &pb::Job) -> Value {
    let c = j.counts.unwrap_or_default();
    json!({
        "name": j.name,
        "job_id": j.job_id,
        "claim": j.claim,
        "state": job_state(j.state),
        "model": j.model,
        "owner": j.owner,
        "batch": j.batch,
        "input_file": j.input_file,
        "output_file": j.output_file,
        "counts": {
            "rows": c.rows,
            "succeeded": c.succeeded,
            "retryable": c.retryable,
            "permanent": c.permanent,
            "missing": c.missing,
            "unreported": c.unreported,
        },
        "summary": j.summary,
        "error": j.error,
        "adoptions": j.adoptions,
        "operation": j.operation,
        "create_time": time_json(j.create_time.as_ref()),
        "submit_time": time_json(j.submit_time.as_ref()),
        "end_time": time_json(j.end_time.as_ref()),
        "update_time": time_json(j.update_time.as_ref()),
        "lease_expire_time": time_json(j.lease_expire_time.as_ref()),
    })
}

pub fn lock_json(l: &pb::Lock) -> Value {
    json!({
        "name": l.name,
        "owner": l.owner,
        "token": if l.token.is_empty() { Value::Null } else { Value::String(l.token.clone()) },
        "acquire_time": time_json(l.acquire_time.as_ref()),
        "expire_time": time_json(l.expire_time.as_ref()),
    })
}

pub fn operation_json(o: &pb::Operation) -> Value {
    json!({
        "name": o.name,
        "state": operation_state(o.state),
        "update_time": time_json(o.update_time.as_ref()),
        "version": o.version,
        "job": o.job,
        "output_file": o.output_file,
        "error_code": o.error_code,
        "error_message": o.error_message,
        "applied_events": o.applied_events,
        "drops": o.drops,
        "create_time": time_json(o.create_time.as_ref()),
    })
}

pub fn operation_event_json(e: &pb::OperationEventRecord) -> Value {
    json!({
        "sequence": e.sequence,
        "source": event_source(e.source),
        "raw_state": e.raw_state,
        "state": operation_state(e.state),
        "update_time": time_json(e.update_time.as_ref()),
        "receive_time": time_json(e.receive_time.as_ref()),
        "verdict": event_verdict(e.verdict),
        "reason": e.reason,
        "event_id": e.event_id,
    })
}

pub fn prompt_json_full(p: &pb::Prompt) -> Value {
    json!({
        "name": p.name,
        "prompt_id": p.prompt_id,
        "version": p.version,
        "template": p.template,
        "response_schema": embedded_json(&p.response_schema),
        "system_instruction": p.system_instruction,
        "sha256": p.sha256,
        "create_time": time_json(p.create_time.as_ref()),
    })
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
    fn rows_embed_their_json_and_hide_the_bulk_unless_full() {
        let row = pb::Row {
            key: "k".into(),
            payload: r#"{"a":1}"#.into(),
            result: "not json".into(),
            status: pb::RowStatus::Succeeded as i32,
            ..Default::default()
        };
        let basic = row_json(&row, false);
        assert_eq!(basic["status"], "SUCCEEDED");
        assert!(basic.get("payload").is_none());
        let full = row_json(&row, true);
        assert_eq!(full["payload"]["a"], 1);
        assert_eq!(full["result"], "not json");
        assert_eq!(full["prompt"], Value::Null);
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
