//! The synchronous endpoints' wire shapes: `POST /v1/chat/completions` and
//! `POST /v1/responses` with `service_tier` (`auto`/`default`, `flex`,
//! `priority`; the body names the tier granted), refusals as the API words
//! them (429 `rate_limit_exceeded` with `retry-after-ms` and `retry-after`;
//! a shed flex request a 429 "resource unavailable", not charged), and the
//! headers of every answer (`x-request-id`, `openai-processing-ms`,
//! `x-ratelimit-*`). Pure.

use std::time::Duration;

use axum::http::HeaderValue;
use axum::response::Response;
use emulator_kit::online::{Gate, Limits, Tier};
use serde_json::Value;

use crate::config::Models;
use crate::error::ApiError;

/// The tier a request asks for (`auto` and `default` are the standard
/// tier; `fast` is priority, as the API echoes it).
pub fn tier_of(body: &Value) -> Result<Tier, ApiError> {
    match body.get("service_tier") {
        None | Some(Value::Null) => Ok(Tier::Standard),
        Some(Value::String(s)) => match s.as_str() {
            "auto" | "default" => Ok(Tier::Standard),
            "flex" => Ok(Tier::Flex),
            "priority" | "fast" => Ok(Tier::Priority),
            other => Err(ApiError::invalid(format!(
                "Invalid value: '{other}'. Supported values are: 'auto', 'default', 'flex', 'scale', and 'priority'."
            ))
            .param("service_tier")
            .code("invalid_value")),
        },
        Some(_) => Err(ApiError::invalid(
            "Invalid type for 'service_tier': expected one of 'auto', 'default', 'flex', 'scale', or 'priority', but got a non-string value instead.",
        )
        .param("service_tier")
        .code("invalid_type")),
    }
}

/// The tier as the body names it.
pub fn tier_name(tier: Tier) -> &'static str {
    match tier {
        Tier::Standard => "default",
        Tier::Flex => "flex",
        Tier::Priority => "priority",
    }
}

/// The most output tokens the request asks for (counted against TPM).
pub fn max_output(body: &Value) -> u64 {
    ["max_completion_tokens", "max_tokens", "max_output_tokens"]
        .iter()
        .find_map(|k| body.get(*k).and_then(Value::as_u64))
        .unwrap_or(0)
}

/// Checks what the endpoint needs before any work: a known model, and the
/// prompt (`messages` for chat, `input` for responses).
pub fn validate(endpoint: &str, body: &Value, models: &Models) -> Result<(), ApiError> {
    if !body.is_object() {
        return Err(ApiError::invalid(
            "We could not parse the JSON body of your request.",
        ));
    }
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::invalid("Missing required parameter: 'model'.").param("model"))?;
    let (field, ok) = match endpoint {
        "/v1/responses" => ("input", body.get("input").is_some_and(|v| !v.is_null())),
        _ => (
            "messages",
            body.get("messages")
                .and_then(Value::as_array)
                .is_some_and(|m| !m.is_empty()),
        ),
    };
    if !ok {
        return Err(
            ApiError::invalid(format!("Missing required parameter: '{field}'.")).param(field),
        );
    }
    if !models.allows(model) {
        return Err(ApiError::not_found(format!(
            "The model `{model}` does not exist or you do not have access to it."
        ))
        .code("model_not_found"));
    }
    Ok(())
}

/// The refusal of a request the gate did not let through.
pub fn refusal(gate: Gate, limits: Limits, model: &str) -> ApiError {
    match gate {
        Gate::RateLimited { retry_after } => {
            let mut e = ApiError::new(
                429,
                "requests",
                format!(
                    "Rate limit reached for {model} in organization org-emulator on requests per min (RPM): Limit {}, Tokens per min (TPM): Limit {}. Please try again in {}ms.",
                    limits.rpm,
                    limits.tpm,
                    retry_after.as_millis()
                ),
            )
            .code("rate_limit_exceeded");
            // A storm naming no wait sends no `retry-after`.
            e.retry_after = (!retry_after.is_zero()).then_some(retry_after);
            e
        }
        Gate::Shed { retry_after } => {
            let mut e = ApiError::new(
                429,
                "resource_unavailable",
                "Resource unavailable: flex processing does not have capacity for this request right now. You were not charged. Retry later, or send it with service_tier 'auto' or 'default'.",
            )
            .code("resource_unavailable");
            e.retry_after = retry_after;
            e
        }
        Gate::Answer { .. } => ApiError::server_error(),
    }
}

/// Sets the headers every synchronous answer carries.
pub fn headers(response: &mut Response, request_id: &str, took: Duration, limits: Limits) {
    let h = response.headers_mut();
    let mut put = |name: &'static str, value: String| {
        if let Ok(v) = HeaderValue::from_str(&value) {
            h.insert(name, v);
        }
    };
    put("x-request-id", request_id.to_owned());
    put("openai-processing-ms", took.as_millis().to_string());
    put("openai-version", "2020-10-01".to_owned());
    if limits.rpm > 0 {
        put("x-ratelimit-limit-requests", limits.rpm.to_string());
    }
    if limits.tpm > 0 {
        put("x-ratelimit-limit-tokens", limits.tpm.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // Invariant: every tier the API takes maps to one granted tier, and a
    // value it does not take is a 400 naming the parameter.
    #[test]
    fn tiers_are_read_as_the_api_takes_them() {
        let tier = |v: Value| tier_of(&json!({"service_tier": v}));
        assert_eq!(tier_of(&json!({})).unwrap(), Tier::Standard);
        assert_eq!(tier(json!("auto")).unwrap(), Tier::Standard);
        assert_eq!(tier(json!("flex")).unwrap(), Tier::Flex);
        assert_eq!(tier(json!("priority")).unwrap(), Tier::Priority);
        let bad = tier(json!("cheap")).unwrap_err();
        assert_eq!(
            (bad.status, bad.param.as_deref()),
            (400, Some("service_tier"))
        );
        assert_eq!(tier_name(Tier::Standard), "default");
    }

    // Invariant: a request without its prompt, or for an unknown model, is
    // refused before any work.
    #[test]
    fn requests_are_checked_before_work() {
        let models = Models::only(&["gpt-4o-mini"]);
        let ok = json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]});
        assert!(validate("/v1/chat/completions", &ok, &models).is_ok());
        let e = validate(
            "/v1/chat/completions",
            &json!({"model": "gpt-4o-mini"}),
            &models,
        );
        assert_eq!(e.unwrap_err().param.as_deref(), Some("messages"));
        let e = validate(
            "/v1/responses",
            &json!({"model": "nope", "input": "hi"}),
            &models,
        );
        assert_eq!(e.unwrap_err().status, 404);
    }
}
