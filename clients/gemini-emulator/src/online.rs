//! The synchronous endpoint's wire shapes: `models/{model}:generateContent`
//! with `serviceTier` (`flex`, `priority`; standard when absent or
//! `standard`), the tier granted in the `x-gemini-service-tier` header and
//! `usageMetadata.serviceTier`; refusals as the provider words them (429
//! RESOURCE_EXHAUSTED with QuotaFailure and RetryInfo past the account's
//! per-minute limits; a shed flex call 503 UNAVAILABLE, with no fallback to
//! standard). Pure.

use std::time::Duration;

use emulator_kit::online::{Gate, Limits, Tier};
use serde_json::Value;

use crate::error::ApiError;

/// The tier a request asks for: `serviceTier` (or `service_tier`), in any
/// case, `SERVICE_TIER_…` too, as the docs write it several ways.
pub fn tier_of(body: &Value) -> Result<Tier, ApiError> {
    let given = body.get("serviceTier").or_else(|| body.get("service_tier"));
    let Some(value) = given.filter(|v| !v.is_null()) else {
        return Ok(Tier::Standard);
    };
    let name = value.as_str().map(|s| {
        s.trim()
            .trim_start_matches("SERVICE_TIER_")
            .to_ascii_lowercase()
    });
    match name.as_deref() {
        Some("standard" | "unspecified" | "") => Ok(Tier::Standard),
        Some("flex") => Ok(Tier::Flex),
        Some("priority") => Ok(Tier::Priority),
        _ => Err(ApiError::invalid(format!(
            "Invalid value at 'service_tier' (type.googleapis.com/google.ai.generativelanguage.v1beta.ServiceTier), {value}"
        ))),
    }
}

/// The tier as the header and `usageMetadata` name it.
pub fn tier_name(tier: Tier) -> &'static str {
    tier.name()
}

/// The most output tokens the request asks for (counted against TPM).
pub fn max_output(body: &Value) -> u64 {
    body["generationConfig"]["maxOutputTokens"]
        .as_u64()
        .unwrap_or(0)
}

/// The refusal of a request the gate did not let through.
pub fn refusal(gate: Gate, limits: Limits, model: &str) -> ApiError {
    match gate {
        Gate::RateLimited { retry_after } => {
            let secs = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
            let mut e = ApiError::quota_exhausted(
                format!(
                    "You exceeded your current quota, please check your plan and billing details. Quota exceeded for metric: generate_content_requests, limit: {} per minute, model: {model}. Please retry in {:.1}s.",
                    limits.rpm,
                    retry_after.as_secs_f64()
                ),
                "GenerateRequestsPerMinutePerProjectPerModel",
                secs.max(1),
            );
            e.retry_after = Some(secs.max(1));
            e
        }
        Gate::Shed { retry_after } => {
            let mut e = ApiError::new(
                503,
                "The model is overloaded: Flex capacity is unavailable right now. Please try again later.",
            );
            e.retry_after = retry_after.map(|d: Duration| d.as_secs());
            e
        }
        Gate::Answer { .. } => ApiError::new(500, "Internal error encountered."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // Invariant: every spelling the docs use reads as its tier; anything
    // else is a 400.
    #[test]
    fn tiers_are_read_in_every_documented_spelling() {
        assert_eq!(tier_of(&json!({})).unwrap(), Tier::Standard);
        for v in ["flex", "FLEX", "SERVICE_TIER_FLEX"] {
            assert_eq!(tier_of(&json!({"serviceTier": v})).unwrap(), Tier::Flex);
        }
        assert_eq!(
            tier_of(&json!({"service_tier": "priority"})).unwrap(),
            Tier::Priority
        );
        assert_eq!(
            tier_of(&json!({"serviceTier": "cheap"})).unwrap_err().code,
            400
        );
    }

    // Invariant: past the minute's limit the refusal is a 429 naming a
    // per-minute quota with RetryInfo; a shed flex call is a 503.
    #[test]
    fn refusals_look_as_the_provider_writes_them() {
        let limited = refusal(
            Gate::RateLimited {
                retry_after: Duration::from_millis(1500),
            },
            Limits { rpm: 5, tpm: 0 },
            "gemini-x",
        );
        assert_eq!((limited.code, limited.retry_after), (429, Some(2)));
        assert!(limited.details.iter().any(|d| d["quotaId"].is_null()
            && d["violations"][0]["quotaId"] == "GenerateRequestsPerMinutePerProjectPerModel"));
        let shed = refusal(Gate::Shed { retry_after: None }, Limits::default(), "m");
        assert_eq!(shed.code, 503);
    }
}
