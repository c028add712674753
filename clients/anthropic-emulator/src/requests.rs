//! What a create carries and how it is checked. Synchronously, as the API
//! checks a create's body: 1 to 100,000 requests, each `{custom_id,
//! params}` with a custom_id matching `^[a-zA-Z0-9_-]{1,64}$` and unique in
//! the batch, and params an object naming `model`, `max_tokens` and
//! `messages`; a problem is a 400 naming the request's index
//! (`requests.3.custom_id: …`). The params' deeper validity (and whether
//! the model exists) is checked when the request is processed, as the
//! docs say validation of `params` is asynchronous: a problem there is an
//! `errored` result, not a refused create. Pure.

use std::collections::HashSet;

use serde_json::Value;

use crate::config::Models;
use crate::error::{ApiError, ErrorType};

/// Requests one batch may hold.
pub const MAX_REQUESTS: usize = 100_000;
/// A create's body may be this large (256 MB); beyond, 413.
pub const MAX_BODY_BYTES: usize = 256 * 1024 * 1024;

/// One request of a batch.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchRequest {
    pub custom_id: String,
    pub params: Value,
}

impl BatchRequest {
    /// The `model` of its params, if it is a string.
    pub fn model(&self) -> Option<&str> {
        self.params.get("model").and_then(Value::as_str)
    }
}

/// The requests of a create's body, or the 400 naming the first problem.
pub fn parse_create(body: &[u8]) -> Result<Vec<BatchRequest>, ApiError> {
    let body: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid(format!("There was an error parsing the body: {e}")))?;
    let Some(requests) = body.get("requests") else {
        return Err(ApiError::invalid("requests: Field required"));
    };
    let Some(requests) = requests.as_array() else {
        return Err(ApiError::invalid("requests: Input should be a valid list"));
    };
    if requests.is_empty() || requests.len() > MAX_REQUESTS {
        return Err(ApiError::invalid(format!(
            "requests: List should have between 1 and {MAX_REQUESTS} items, not {}",
            requests.len()
        )));
    }
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(requests.len());
    for (i, request) in requests.iter().enumerate() {
        let at = |field: &str, problem: &str| {
            ApiError::invalid(format!("requests.{i}{field}: {problem}"))
        };
        let Some(request) = request.as_object() else {
            return Err(at("", "Input should be a valid dictionary"));
        };
        let custom_id = match request.get("custom_id") {
            None => return Err(at(".custom_id", "Field required")),
            Some(Value::String(c)) => c,
            Some(_) => return Err(at(".custom_id", "Input should be a valid string")),
        };
        if !valid_custom_id(custom_id) {
            return Err(at(
                ".custom_id",
                "String should match pattern '^[a-zA-Z0-9_-]{1,64}$'",
            ));
        }
        if !seen.insert(custom_id.as_str()) {
            return Err(at(
                ".custom_id",
                &format!(
                    "Duplicate custom_id '{custom_id}': each request in a batch needs a unique custom_id"
                ),
            ));
        }
        let params = match request.get("params") {
            None => return Err(at(".params", "Field required")),
            Some(p @ Value::Object(_)) => p,
            Some(_) => return Err(at(".params", "Input should be a valid dictionary")),
        };
        for field in ["model", "max_tokens", "messages"] {
            if params.get(field).is_none() {
                return Err(at(&format!(".params.{field}"), "Field required"));
            }
        }
        out.push(BatchRequest {
            custom_id: custom_id.clone(),
            params: params.clone(),
        });
    }
    Ok(out)
}

/// `^[a-zA-Z0-9_-]{1,64}$`.
pub fn valid_custom_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The params' problem as the Messages API would answer it, found when the
/// request is processed: `(error type, message)`.
pub fn check_params(params: &Value, models: &Models) -> Result<(), (ErrorType, String)> {
    let invalid = |m: String| Err((ErrorType::InvalidRequest, m));
    let Some(model) = params.get("model").and_then(Value::as_str) else {
        return invalid("model: Input should be a valid string".into());
    };
    match params.get("max_tokens").and_then(Value::as_i64) {
        Some(n) if n >= 1 => {}
        Some(_) => return invalid("max_tokens: Input should be greater than or equal to 1".into()),
        None => return invalid("max_tokens: Input should be a valid integer".into()),
    }
    let Some(messages) = params.get("messages").and_then(Value::as_array) else {
        return invalid("messages: Input should be a valid list".into());
    };
    if messages.is_empty() {
        return invalid("messages: at least one message is required".into());
    }
    for (i, message) in messages.iter().enumerate() {
        match message.get("role").and_then(Value::as_str) {
            Some("user" | "assistant") => {}
            _ => {
                return invalid(format!(
                    "messages.{i}.role: Input should be 'user' or 'assistant'"
                ));
            }
        }
        match message.get("content") {
            Some(Value::String(_) | Value::Array(_)) => {}
            _ => {
                return invalid(format!(
                    "messages.{i}.content: Input should be a valid string or list"
                ));
            }
        }
    }
    if !models.allows(model) {
        return Err((ErrorType::NotFound, format!("model: {model}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(id: &str) -> Value {
        json!({"custom_id": id, "params": {"model": "claude-sonnet-4-6", "max_tokens": 16,
            "messages": [{"role": "user", "content": "hi"}]}})
    }

    fn refusal(requests: Value) -> String {
        parse_create(json!({ "requests": requests }).to_string().as_bytes())
            .unwrap_err()
            .message
    }

    // Invariant: each rule of a create's body is a 400 naming the index of
    // the first offending request and its field.
    #[test]
    fn each_create_rule_names_the_request() {
        let ok = parse_create(
            json!({"requests": [request("a"), request("b")]})
                .to_string()
                .as_bytes(),
        )
        .unwrap();
        assert_eq!(ok.len(), 2);
        assert_eq!(ok[1].model(), Some("claude-sonnet-4-6"));
        assert!(refusal(json!([])).starts_with("requests: List should have between 1"));
        let mut bad = request("x");
        bad["custom_id"] = json!("has space");
        assert!(
            refusal(json!([request("a"), bad]))
                .starts_with("requests.1.custom_id: String should match")
        );
        assert!(
            refusal(json!([request("a"), request("a")]))
                .starts_with("requests.1.custom_id: Duplicate")
        );
        let mut bad = request("x");
        bad["params"].as_object_mut().unwrap().remove("max_tokens");
        assert_eq!(
            refusal(json!([request("a"), request("b"), bad])),
            "requests.2.params.max_tokens: Field required"
        );
        assert_eq!(
            refusal(json!([{"params": {}}])),
            "requests.0.custom_id: Field required"
        );
        assert_eq!(
            refusal(json!([{"custom_id": "a", "params": 3}])),
            "requests.0.params: Input should be a valid dictionary"
        );
        assert!(parse_create(b"{").is_err());
        assert_eq!(
            parse_create(b"{}").unwrap_err().message,
            "requests: Field required"
        );
        assert!(
            valid_custom_id(&"a".repeat(64))
                && !valid_custom_id(&"a".repeat(65))
                && !valid_custom_id("")
        );
    }

    // Invariant: deeper problems are found per request at processing time,
    // an unknown model as `not_found_error`, the rest as
    // `invalid_request_error`.
    #[test]
    fn params_are_checked_when_processed() {
        let models = Models::only(&["claude-sonnet-4-6"]);
        let good = request("a")["params"].clone();
        assert_eq!(check_params(&good, &models), Ok(()));
        let mut p = good.clone();
        p["model"] = json!("claude-nope");
        assert_eq!(
            check_params(&p, &models),
            Err((ErrorType::NotFound, "model: claude-nope".into()))
        );
        assert!(check_params(&p, &Models::Any).is_ok());
        let mut p = good.clone();
        p["max_tokens"] = json!(0);
        assert_eq!(
            check_params(&p, &models).unwrap_err().0,
            ErrorType::InvalidRequest
        );
        let mut p = good.clone();
        p["messages"] = json!([]);
        assert!(check_params(&p, &models).is_err());
        let mut p = good;
        p["messages"] = json!([{"role": "system", "content": "x"}]);
        assert!(
            check_params(&p, &models)
                .unwrap_err()
                .1
                .starts_with("messages.0.role")
        );
    }
}
