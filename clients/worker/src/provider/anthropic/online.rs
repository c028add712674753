//! Anthropic's synchronous lane: `POST /v1/messages` (standard only: it has
//! no flex, and `service_tier: "standard_only"` keeps a priority
//! commitment out of it), the tier granted in `usage.service_tier`, the
//! request in the `request-id` header; an answer reads as the batch result
//! it would have been. Pure.

use serde_json::{Value, json};
use tally_core::lane::Lane;

use crate::provider::types::OnlineAnswer;

/// The endpoint, under the base URL and API version (the client adds
/// `/v1`).
pub const PATH: &str = "/messages";

/// The call's body: the batch request's params, standard capacity only.
pub fn body(mut request: Value, _lane: Lane) -> Value {
    request["service_tier"] = json!("standard_only");
    request
}

/// The most output tokens a call's body asks for (the API requires it).
pub fn max_output(body: &Value) -> Option<u64> {
    body.get("max_tokens").and_then(Value::as_u64)
}

/// The answer as the result line of a batch request `id`.
pub fn line(id: &str, a: &OnlineAnswer) -> Value {
    json!({"custom_id": id, "result": {"type": "succeeded", "message": a.body}})
}

pub fn request_id(a: &OnlineAnswer) -> String {
    a.header("request-id")
        .or_else(|| a.body["id"].as_str())
        .unwrap_or_default()
        .to_owned()
}

pub fn granted(a: &OnlineAnswer) -> String {
    a.body["usage"]["service_tier"]
        .as_str()
        .unwrap_or("standard")
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Invariant: the call keeps to standard capacity; the answer reads as a
    // succeeded batch result with the header's request id.
    #[test]
    fn the_call_keeps_to_standard_and_reads_as_a_result() {
        let b = body(json!({"model": "c", "max_tokens": 4096}), Lane::Standard);
        assert_eq!(
            (b["service_tier"].as_str(), max_output(&b)),
            (Some("standard_only"), Some(4096))
        );
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert("request-id", "req_9".parse().unwrap());
        let a = OnlineAnswer {
            headers,
            body: json!({"id": "msg_1", "usage": {"service_tier": "standard"}}),
        };
        assert_eq!(line("k", &a)["result"]["type"], "succeeded");
        assert_eq!(
            (request_id(&a), granted(&a)),
            ("req_9".to_string(), "standard".to_string())
        );
    }
}
