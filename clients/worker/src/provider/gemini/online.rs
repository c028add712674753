//! Gemini's synchronous lanes: `POST /v1beta/models/{model}:generateContent`
//! with `serviceTier` (`flex`, `priority`; standard when absent), the tier
//! granted in the `x-gemini-service-tier` header (or `usageMetadata`), the
//! request in `responseId`; an answer reads as the batch output line it
//! would have been. A flex call is shed with a 503, or a 429 without a
//! quota named (the provider does not fall back to standard). Pure.

use serde_json::{Value, json};
use tally_core::lane::Lane;

use crate::provider::http::ProviderError;
use crate::provider::types::OnlineAnswer;

/// The endpoint for `model`, under the base URL.
pub fn path(model: &str) -> String {
    format!(
        "/v1beta/models/{}:generateContent",
        model.trim_start_matches("models/")
    )
}

/// The call's body: the batch line's request, in the lane's tier.
pub fn body(mut request: Value, lane: Lane) -> Value {
    match lane {
        Lane::Flex => request["serviceTier"] = json!("flex"),
        Lane::Priority => request["serviceTier"] = json!("priority"),
        Lane::Standard | Lane::Batch => {}
    }
    request
}

/// The most output tokens a call's body asks for.
pub fn max_output(body: &Value) -> Option<u64> {
    body.pointer("/generationConfig/maxOutputTokens")
        .and_then(Value::as_u64)
}

/// The answer as the output line of a batch request `id`.
pub fn line(id: &str, a: &OnlineAnswer) -> Value {
    json!({"key": id, "response": a.body})
}

pub fn request_id(a: &OnlineAnswer) -> String {
    a.body["responseId"].as_str().unwrap_or_default().to_owned()
}

pub fn granted(a: &OnlineAnswer) -> String {
    a.header("x-gemini-service-tier")
        .or_else(|| a.body["usageMetadata"]["serviceTier"].as_str())
        .unwrap_or("standard")
        .to_ascii_lowercase()
}

/// Whether a refused flex call was shed: a 503, or a 429 that names no
/// quota (a rate limit names the quota it hit).
pub fn shed(e: &ProviderError) -> bool {
    match e {
        ProviderError::Http { code: 503, .. } => true,
        ProviderError::Http {
            code: 429,
            error_codes,
            ..
        } => error_codes.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Invariant: flex and priority are asked for; standard is the default;
    // the granted tier is read from the header first.
    #[test]
    fn tiers_are_asked_for_and_read_back() {
        assert_eq!(body(json!({}), Lane::Flex)["serviceTier"], "flex");
        assert!(body(json!({}), Lane::Standard).get("serviceTier").is_none());
        let capped = json!({"generationConfig": {"maxOutputTokens": 64}});
        assert_eq!(
            (max_output(&capped), max_output(&json!({}))),
            (Some(64), None)
        );
        assert_eq!(
            path("models/gemini-x"),
            "/v1beta/models/gemini-x:generateContent"
        );
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert("x-gemini-service-tier", "Flex".parse().unwrap());
        let a = OnlineAnswer {
            headers,
            body: json!({"responseId": "r1", "usageMetadata": {"serviceTier": "standard"}}),
        };
        assert_eq!(
            (granted(&a), request_id(&a)),
            ("flex".to_string(), "r1".to_string())
        );
    }
}
