//! The synchronous endpoint's wire shapes: `POST /v1/messages` with
//! `service_tier` (`auto`, `standard_only`; Anthropic has no flex), the
//! tier granted in `usage.service_tier` (`standard`); refusals as the API
//! words them (429 `rate_limit_error` with `retry-after` and the
//! `anthropic-ratelimit-*` headers past the account's per-minute limits).
//! Pure.

use emulator_kit::online::{Gate, Limits, Tier};
use serde_json::Value;

use crate::error::{ApiError, ErrorType};

/// The tier a request asks for: Anthropic's tiers are standard capacity
/// (`standard_only`) or priority when committed (`auto`); the emulator
/// grants standard to both, as an account without a commitment is served.
pub fn tier_of(params: &Value) -> Result<Tier, ApiError> {
    match params.get("service_tier") {
        None | Some(Value::Null) => Ok(Tier::Standard),
        Some(Value::String(s)) if s == "auto" || s == "standard_only" => Ok(Tier::Standard),
        Some(other) => Err(ApiError::invalid(format!(
            "service_tier: Input should be 'auto' or 'standard_only', got {other}"
        ))),
    }
}

/// The most output tokens the request asks for (counted against TPM).
pub fn max_output(params: &Value) -> u64 {
    params["max_tokens"].as_u64().unwrap_or(0)
}

/// The refusal of a request the gate did not let through.
pub fn refusal(gate: Gate, limits: Limits) -> ApiError {
    let wait = match gate {
        Gate::RateLimited { retry_after }
        | Gate::Shed {
            retry_after: Some(retry_after),
        } => retry_after,
        Gate::Shed { retry_after: None } | Gate::Answer { .. } => {
            return ApiError::of(ErrorType::Overloaded);
        }
    };
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    let mut e = ApiError::new(
        ErrorType::RateLimit,
        format!(
            "This request would exceed the rate limit for your organization of {} requests per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits.",
            limits.rpm
        ),
    )
    .header("retry-after", secs.max(1).to_string());
    if limits.rpm > 0 {
        e = e
            .header("anthropic-ratelimit-requests-limit", limits.rpm.to_string())
            .header("anthropic-ratelimit-requests-remaining", "0".to_owned());
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    // Invariant: the two documented tiers are taken; anything else is a 400.
    #[test]
    fn the_documented_tiers_are_taken() {
        assert_eq!(tier_of(&json!({})).unwrap(), Tier::Standard);
        assert_eq!(
            tier_of(&json!({"service_tier": "auto"})).unwrap(),
            Tier::Standard
        );
        assert!(tier_of(&json!({"service_tier": "flex"})).is_err());
    }

    // Invariant: past the limits, a 429 rate_limit_error naming the wait.
    #[test]
    fn a_rate_limit_names_its_wait() {
        let e = refusal(
            Gate::RateLimited {
                retry_after: Duration::from_millis(2500),
            },
            Limits { rpm: 50, tpm: 0 },
        );
        assert_eq!(e.kind, ErrorType::RateLimit);
        assert!(e.headers.contains(&("retry-after", "3".to_owned())));
    }
}
