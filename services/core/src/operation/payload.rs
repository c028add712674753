//! What every provider's payload reading shares: the error, the webhook
//! event and batch observation they hand the reducer, and field access
//! (dotted paths that double as the field names in errors). Each
//! provider's reading is its own module (`gemini`, `openai`, `anthropic`).

use serde_json::Value;

use super::{NameError, OpEvent, OpState, normalize_name};

/// Why a provider payload could not be read. The webhook receiver answers
/// 400; the poller logs it and tries again later.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    #[error("payload is not valid json: {0}")]
    Json(String),
    #[error("payload is not a json object")]
    NotAnObject,
    #[error("payload has no `{0}`")]
    Missing(&'static str),
    #[error("`{field}` must be {expected}")]
    WrongType {
        field: &'static str,
        expected: &'static str,
    },
    #[error("`{field}` is not an operation name: {source}")]
    BadName {
        field: &'static str,
        source: NameError,
    },
    #[error("`{field}` is not an rfc 3339 timestamp: {value:?}")]
    BadTimestamp { field: &'static str, value: String },
    #[error("`{stats}.{field}` is not a non-negative integer: {value}")]
    BadCount {
        stats: &'static str,
        field: &'static str,
        value: String,
    },
}

/// One Gemini webhook delivery, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookEvent {
    /// Normalized, `batches/{id}`.
    pub operation: String,
    /// The `type` as sent (`batch.succeeded`), for the event log.
    pub raw_type: String,
    /// `Unknown` for a type we do not know: still an authentic event, so it
    /// is recorded and dropped, not rejected.
    pub state: OpState,
    /// Unix microseconds, from `timestamp`; `None` when absent.
    pub update_time: Option<i64>,
    pub output_file: Option<String>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
}

impl WebhookEvent {
    /// The event the reducer judges.
    pub fn op_event(&self) -> OpEvent {
        OpEvent {
            state: self.state,
            update_time: self.update_time,
        }
    }
}

/// Per-request counts of a batch; a count the provider omitted is zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchStats {
    pub request_count: i64,
    pub successful_request_count: i64,
    pub failed_request_count: i64,
    pub pending_request_count: i64,
}

/// One answer of the provider's `batches.get`, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchObservation {
    /// Normalized, `batches/{id}`.
    pub operation: String,
    /// The state as sent, for the event log; `None` when the payload had none.
    pub raw_state: Option<String>,
    pub state: OpState,
    /// The operation's `done`; absent (false) until the batch finishes.
    pub done: bool,
    /// Unix microseconds, from `updateTime`; `None` when absent.
    pub update_time: Option<i64>,
    pub output_file: Option<String>,
    /// The file of the lines that failed, where the provider keeps them
    /// apart (OpenAI's `error_file_id`); `None` for Gemini.
    pub error_file: Option<String>,
    pub stats: BatchStats,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
}

impl BatchObservation {
    /// The event the reducer judges.
    pub fn op_event(&self) -> OpEvent {
        OpEvent {
            state: self.state,
            update_time: self.update_time,
        }
    }
}

// Field access. Paths are dotted (`data.id`) and double as the field names
// in error messages. Null counts as absent, as proto3 JSON allows.

pub(super) fn lookup<'a>(root: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.')
        .try_fold(root, |value, key| value.get(key))
        .filter(|value| !value.is_null())
}

pub(super) fn first_present<'a>(
    root: &'a Value,
    paths: &[&'static str],
) -> Option<(&'static str, &'a Value)> {
    paths
        .iter()
        .find_map(|path| lookup(root, path).map(|value| (*path, value)))
}

pub(super) fn as_str<'a>(field: &'static str, value: &'a Value) -> Result<&'a str, PayloadError> {
    value.as_str().ok_or(PayloadError::WrongType {
        field,
        expected: "a string",
    })
}

/// A string that must be there and not blank.
pub(super) fn required_str<'a>(
    root: &'a Value,
    field: &'static str,
) -> Result<&'a str, PayloadError> {
    let value = lookup(root, field).ok_or(PayloadError::Missing(field))?;
    let text = as_str(field, value)?;
    if text.trim().is_empty() {
        return Err(PayloadError::Missing(field));
    }
    Ok(text)
}

pub(super) fn required_name(root: &Value, field: &'static str) -> Result<String, PayloadError> {
    normalize_name(required_str(root, field)?)
        .map_err(|source| PayloadError::BadName { field, source })
}

/// An optional string; blank counts as absent (proto3 sends "" for unset).
pub(super) fn first_text(
    root: &Value,
    paths: &[&'static str],
) -> Result<Option<String>, PayloadError> {
    Ok(first_str(root, paths)?
        .map(str::trim)
        .filter(|text| !text.is_empty())
        .map(str::to_owned))
}

pub(super) fn text(root: &Value, field: &'static str) -> Result<Option<String>, PayloadError> {
    first_text(root, &[field])
}

pub(super) fn first_str<'a>(
    root: &'a Value,
    paths: &[&'static str],
) -> Result<Option<&'a str>, PayloadError> {
    first_present(root, paths)
        .map(|(field, value)| as_str(field, value))
        .transpose()
}

/// An error code: a string from webhooks, a number in `google.rpc.Status`.
pub(super) fn code(root: &Value, field: &'static str) -> Result<Option<String>, PayloadError> {
    match lookup(root, field) {
        None => Ok(None),
        Some(Value::Number(number)) => Ok(Some(number.to_string())),
        Some(Value::String(_)) => text(root, field),
        Some(Value::Bool(_) | Value::Array(_) | Value::Object(_) | Value::Null) => {
            Err(PayloadError::WrongType {
                field,
                expected: "a string or a number",
            })
        }
    }
}

pub(super) fn flag(root: &Value, field: &'static str) -> Result<bool, PayloadError> {
    match lookup(root, field) {
        None => Ok(false),
        Some(value) => value.as_bool().ok_or(PayloadError::WrongType {
            field,
            expected: "a boolean",
        }),
    }
}

pub(super) fn time(root: &Value, field: &'static str) -> Result<Option<i64>, PayloadError> {
    first_time(root, &[field])
}

/// An rfc 3339 time as unix microseconds (provider times carry nanoseconds;
/// the sub-microsecond part is cut, which can only turn a tie-break into a
/// drop, never a regression into an apply).
pub(super) fn first_time(
    root: &Value,
    paths: &[&'static str],
) -> Result<Option<i64>, PayloadError> {
    let Some((field, value)) = first_present(root, paths) else {
        return Ok(None);
    };
    let text = as_str(field, value)?;
    chrono::DateTime::parse_from_rfc3339(text.trim())
        .map(|at| Some(at.timestamp_micros()))
        .map_err(|_| PayloadError::BadTimestamp {
            field,
            value: text.chars().take(64).collect(),
        })
}
