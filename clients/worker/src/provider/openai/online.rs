//! OpenAI's synchronous lanes: `POST /chat/completions`, or `POST
//! /responses` ([`super::responses`]), with `service_tier` (`flex`,
//! `default`, `priority`), the body naming the tier granted and
//! `x-request-id` the request; an answer reads as the batch output line
//! it would have been (a `/v1/responses` batch's line, for a Response). A
//! flex call shed for lack of capacity is the API's "429 Resource
//! Unavailable" (not charged). Pure.

use serde_json::{Value, json};
use tally_core::lane::Lane;

use crate::prompt::InputError;
use crate::provider::http::ProviderError;
use crate::provider::types::OnlineAnswer;

/// The API a synchronous call goes to (`--openai-api`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OnlineApi {
    /// Chat completions: the row's request as its batch line holds it.
    #[default]
    Chat,
    /// The Responses API: the row's request translated.
    Responses,
}

impl OnlineApi {
    /// The endpoint, under the base URL (which holds `/v1`).
    pub fn path(self) -> &'static str {
        match self {
            OnlineApi::Chat => "/chat/completions",
            OnlineApi::Responses => super::responses::PATH,
        }
    }
}

/// The `service_tier` of a lane.
pub fn tier(lane: Lane) -> &'static str {
    match lane {
        Lane::Flex => "flex",
        Lane::Priority => "priority",
        Lane::Standard | Lane::Batch => "default",
    }
}

/// The call's body at `api`: the batch line's body (translated for the
/// Responses API), in the lane's tier.
pub fn body(request: Value, lane: Lane, api: OnlineApi) -> Result<Value, InputError> {
    let mut body = match api {
        OnlineApi::Chat => request,
        OnlineApi::Responses => super::responses::request(&request).map_err(InputError::Request)?,
    };
    body["service_tier"] = json!(tier(lane));
    Ok(body)
}

/// The most output tokens a call's body asks for, in either API's name.
pub fn max_output(body: &Value) -> Option<u64> {
    ["max_completion_tokens", "max_tokens", "max_output_tokens"]
        .iter()
        .find_map(|k| body.get(*k).and_then(Value::as_u64))
}

/// The answer as the output line of a batch request `id`.
pub fn line(id: &str, a: &OnlineAnswer) -> Value {
    json!({
        "custom_id": id,
        "response": {"status_code": 200, "request_id": request_id(a), "body": a.body},
        "error": null,
    })
}

/// The provider's request id (`x-request-id`, else the completion's id).
pub fn request_id(a: &OnlineAnswer) -> String {
    a.header("x-request-id")
        .or_else(|| a.body["id"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// The tier the answer says it was served in.
pub fn granted(a: &OnlineAnswer) -> String {
    a.body["service_tier"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Whether a refused flex call was shed: a 429 that says the resource is
/// unavailable (the code is not documented; the words are).
pub fn shed(e: &ProviderError) -> bool {
    let ProviderError::Http {
        code: 429,
        status,
        message,
        ..
    } = e
    else {
        return false;
    };
    status == "resource_unavailable"
        || message
            .to_ascii_lowercase()
            .contains("resource unavailable")
}

#[cfg(test)]
mod tests {
    use super::*;

    // Invariant: each lane asks for its tier; the answer's line is the
    // batch line the decoder reads, with the request id.
    #[test]
    fn the_call_asks_for_its_tier_and_the_answer_reads_as_a_batch_line() {
        let b = body(
            json!({"model": "m", "messages": []}),
            Lane::Flex,
            OnlineApi::Chat,
        )
        .unwrap();
        assert_eq!(b["service_tier"], "flex");
        let chat = json!({"model": "m", "messages": [], "max_tokens": 9});
        let r = body(chat, Lane::Priority, OnlineApi::Responses).unwrap();
        assert_eq!(
            (&r["service_tier"], &r["input"], max_output(&r)),
            (&json!("priority"), &json!([]), Some(9))
        );
        assert_eq!(max_output(&b), None);
        assert_eq!(tier(Lane::Standard), "default");
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert("x-request-id", "req_1".parse().unwrap());
        let a = OnlineAnswer {
            headers,
            body: json!({"id": "chatcmpl-1", "service_tier": "flex"}),
        };
        let l = line("k", &a);
        assert_eq!(
            (
                l["custom_id"].as_str(),
                l["response"]["request_id"].as_str()
            ),
            (Some("k"), Some("req_1"))
        );
        assert_eq!(granted(&a), "flex");
    }
}
