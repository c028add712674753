//! What a refused batch create asks of tally: wait, fix, or stop. A refusal
//! never loops: every kind changes something before the same rows go out
//! again (a cool-down and a smaller batch, a smaller batch, or a paused
//! ledger). Pure.
//!
//! | answer | kind |
//! | --- | --- |
//! | 429 naming a per-day quota | stop (`quota`): waiting for a RetryInfo does not bring it back |
//! | any other 429 (rate, enqueued tokens) | wait: the model cools down for every worker of the account, for the provider's RetryInfo (60s when none); the next batch is smaller |
//! | 413, or a 400 saying the request is too large | fix: a smaller batch (a batch of one row that is still too large is that row's fault: PERMANENT) |
//! | 403; 400 FAILED_PRECONDITION naming billing | stop (`billing`) |
//! | 404 (the model is unknown or takes no batches) | stop (`model`) |
//! | 401, any other 4xx | stop (`refused`): the key or the request; the provider's words go with the pause |
//! | 408, 5xx, no answer | not a refusal: the batch may exist; it is searched for |
//!
//! OpenAI ([`classify_openai`]), at create and after it:
//!
//! | answer | kind |
//! | --- | --- |
//! | 429 `insufficient_quota` (or `credit_balance_exhausted`, `billing_…`) | stop (`billing`) |
//! | any other 429 (`rate_limit_exceeded`) | wait, for its `retry-after` (60s when none) |
//! | 413, or a 400 saying the request is too large | fix: a smaller batch |
//! | 401, 403, 404, any other 4xx | stop (`refused`) |
//! | a batch made, then `failed` at validation ([`validation`]): `token_limit_exceeded` | wait: nothing ran, the rows go back with no attempt, the model cools down |
//! | … `too_many_tasks`, or too large | fix: a smaller batch |
//! | … `model_not_found` | stop (`model`) |
//! | … errors naming lines | the rows at those lines are invalid input (PERMANENT); the others go back with no attempt |
//! | … any other error | stop (`refused`), with the provider's words |
//!
//! Anthropic ([`classify_anthropic`]), at create (a batch is refused whole
//! or made; its requests' own errors come in its results):
//!
//! | answer | kind |
//! | --- | --- |
//! | 429 `rate_limit_error`, 529 `overloaded_error` | wait, for its `retry-after` (60s when none) |
//! | 413 `request_too_large`, or a 400 saying the request is too large | fix: a smaller batch |
//! | 400 `invalid_request_error` naming a request (`requests.3.…`) | fix: that row is invalid input (PERMANENT), the others go back |
//! | 402 `billing_error` | stop (`billing`) |
//! | 404 `not_found_error` | stop (`model`) |
//! | 401, 403, any other 4xx | stop (`refused`) |
//! | 500 `api_error`, other 5xx, no answer | not a refusal: searched for |

use std::time::Duration;

use serde_json::Value;
use tally_core::provider::Api;
use tally_proto::v1 as pb;

use crate::provider::ProviderError;

/// What to do about a refused create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Nothing is wrong with the request: the model cools down for every
    /// worker of the account (and the next batch is smaller), as long as
    /// the provider said (`retry-after`) or, when it named no delay,
    /// `--refusal-cooldown`.
    Wait(Option<Duration>),
    /// The batch is too large: send fewer rows.
    TooLarge,
    /// The request at this index of the batch is at fault (the row at
    /// that place, 0-based); the others are fine.
    Invalid(usize),
    /// No retry fixes it: the ledger pauses with the provider's words.
    Stop(pb::ProviderRefusal),
}

/// The kind of a create's failure; `None` when it is no definite refusal
/// (the batch may have been made: search for it).
pub fn classify(e: &ProviderError) -> Option<Refusal> {
    let ProviderError::Http {
        code,
        message,
        status,
        quota_ids,
        retry_after,
    } = e
    else {
        return None;
    };
    let refusal = match code {
        408 | 500..=599 => return None,
        429 if quota_ids.iter().any(|id| id.contains("PerDay")) => {
            Refusal::Stop(pb::ProviderRefusal::Quota)
        }
        429 => Refusal::Wait(*retry_after),
        413 => Refusal::TooLarge,
        400 if too_large(message) => Refusal::TooLarge,
        400 if status == "FAILED_PRECONDITION"
            && message.to_ascii_lowercase().contains("billing") =>
        {
            Refusal::Stop(pb::ProviderRefusal::Billing)
        }
        403 => Refusal::Stop(pb::ProviderRefusal::Billing),
        404 => Refusal::Stop(pb::ProviderRefusal::Model),
        400..=499 => Refusal::Stop(pb::ProviderRefusal::Request),
        _ => return None,
    };
    Some(refusal)
}

/// The kind of a create's failure at `api`'s provider.
pub fn classify_for(api: Api, e: &ProviderError) -> Option<Refusal> {
    match api {
        Api::Gemini => classify(e),
        Api::OpenAi => classify_openai(e),
        Api::Anthropic => classify_anthropic(e),
    }
}

/// [`classify`] for Anthropic's Message Batches.
pub fn classify_anthropic(e: &ProviderError) -> Option<Refusal> {
    let ProviderError::Http {
        code,
        message,
        retry_after,
        ..
    } = e
    else {
        return None;
    };
    let refusal = match code {
        429 | 529 => Refusal::Wait(*retry_after),
        408 | 500..=599 => return None,
        413 => Refusal::TooLarge,
        400 if too_large(message) => Refusal::TooLarge,
        400 => match request_index(message) {
            Some(i) => Refusal::Invalid(i),
            None => Refusal::Stop(pb::ProviderRefusal::Request),
        },
        402 => Refusal::Stop(pb::ProviderRefusal::Billing),
        404 => Refusal::Stop(pb::ProviderRefusal::Model),
        400..=499 => Refusal::Stop(pb::ProviderRefusal::Request),
        _ => return None,
    };
    Some(refusal)
}

/// The index of the request an error message names (`requests.3.params…`,
/// `requests[3]`), if it names one.
fn request_index(message: &str) -> Option<usize> {
    let rest = &message[message.find("requests")? + "requests".len()..];
    let rest = rest.strip_prefix('.').or_else(|| rest.strip_prefix('['))?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// [`classify`] for the OpenAI Batch API (and the servers that copy it).
pub fn classify_openai(e: &ProviderError) -> Option<Refusal> {
    let ProviderError::Http {
        code,
        message,
        status,
        retry_after,
        ..
    } = e
    else {
        return None;
    };
    let refusal = match code {
        408 | 500..=599 => return None,
        429 if is_billing(status) => Refusal::Stop(pb::ProviderRefusal::Billing),
        429 => Refusal::Wait(*retry_after),
        413 => Refusal::TooLarge,
        400 if too_large(message) => Refusal::TooLarge,
        400..=499 => Refusal::Stop(pb::ProviderRefusal::Request),
        _ => return None,
    };
    Some(refusal)
}

/// OpenAI's error codes of an account that cannot pay.
fn is_billing(status: &str) -> bool {
    matches!(status, "insufficient_quota" | "credit_balance_exhausted")
        || status.starts_with("billing")
}

/// What a batch the provider made and then refused at validation (an
/// OpenAI batch `failed` with `errors.data`) asks of tally. Nothing ran:
/// no row is charged, so none spends an attempt unless it is at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Validation {
    /// Every row goes back with no attempt; the model cools down for
    /// `--refusal-cooldown` (a failed batch names no delay).
    Wait,
    /// Every row goes back with no attempt; the next batch is smaller.
    TooLarge,
    /// The rows at these lines (1-based, of the input file) are invalid
    /// input, with why; the others go back with no attempt.
    Lines(Vec<(u64, String)>),
    /// Every row goes back and the ledger pauses with the provider's words.
    Stop(pb::ProviderRefusal, String),
}

/// The kind of refusal a failed batch's resource (`errors.data[]`: `code`,
/// `message`, `line`) says; `None` when it lists no error (a batch that
/// failed for its own reasons: its rows count an attempt).
pub fn validation(resource: &Value) -> Option<Validation> {
    let errors: Vec<&Value> = resource["errors"]["data"]
        .as_array()
        .map(|d| d.iter().take(10_000).collect())
        .unwrap_or_default();
    if errors.is_empty() {
        return None;
    }
    let code = |e: &Value| e["code"].as_str().unwrap_or_default().to_owned();
    let text = |e: &Value| {
        format!(
            "{}: {}",
            e["code"].as_str().unwrap_or("error"),
            e["message"].as_str().unwrap_or_default()
        )
    };
    if errors.iter().any(|e| code(e) == "token_limit_exceeded") {
        return Some(Validation::Wait);
    }
    if errors
        .iter()
        .any(|e| code(e) == "too_many_tasks" || too_large(e["message"].as_str().unwrap_or("")))
    {
        return Some(Validation::TooLarge);
    }
    if let Some(e) = errors.iter().find(|e| code(e) == "model_not_found") {
        return Some(Validation::Stop(pb::ProviderRefusal::Model, text(e)));
    }
    let lines: Vec<(u64, String)> = errors
        .iter()
        .filter_map(|e| Some((e["line"].as_u64().filter(|l| *l > 0)?, text(e))))
        .collect();
    if lines.len() == errors.len() {
        return Some(Validation::Lines(lines));
    }
    let first = errors
        .iter()
        .find(|e| e["line"].as_u64().is_none())
        .unwrap_or(&errors[0]);
    Some(Validation::Stop(pb::ProviderRefusal::Request, text(first)))
}

/// Whether a 400's message says the request is too large (the provider's
/// words for it vary: "payload size exceeds the limit", "request is too
/// large", "exceeds the maximum").
fn too_large(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("too large")
        || m.contains("payload size")
        || m.contains("exceeds the maximum")
        || m.contains("exceeds the limit")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(code: u16, status: &str, message: &str, ids: &[&str]) -> ProviderError {
        ProviderError::Http {
            code,
            message: message.into(),
            retry_after: None,
            status: status.into(),
            quota_ids: ids.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn openai(code: u16, status: &str) -> ProviderError {
        ProviderError::Http {
            code,
            message: "m".into(),
            retry_after: None,
            status: status.into(),
            quota_ids: Vec::new(),
        }
    }

    // Invariant: OpenAI's quota answers split by what waiting does: a rate
    // limit passes, an unpaid account does not; what may have made the
    // batch is searched for.
    #[test]
    fn openai_refusals_wait_shrink_or_stop() {
        use pb::ProviderRefusal as P;
        assert_eq!(
            classify_openai(&openai(429, "rate_limit_exceeded")),
            Some(Refusal::Wait(None))
        );
        assert_eq!(
            classify_openai(&openai(429, "insufficient_quota")),
            Some(Refusal::Stop(P::Billing))
        );
        assert_eq!(classify_openai(&openai(413, "")), Some(Refusal::TooLarge));
        assert_eq!(
            classify_openai(&openai(401, "invalid_api_key")),
            Some(Refusal::Stop(P::Request))
        );
        for code in [408, 500, 503] {
            assert_eq!(classify_openai(&openai(code, "")), None);
        }
        assert_eq!(
            classify_for(Api::OpenAi, &ProviderError::Transport("x".into())),
            None
        );
    }

    // Invariant: a batch refused at validation never fails a row that is
    // not at fault: the token limit waits, size shrinks, named lines fail
    // only their rows, and anything else stops the ledger with the words.
    #[test]
    fn validation_failures_name_what_to_do() {
        use serde_json::json;
        let of =
            |errors: Value| validation(&json!({"status": "failed", "errors": {"data": errors}}));
        assert_eq!(of(json!([])), None);
        assert_eq!(validation(&json!({"status": "failed"})), None);
        assert_eq!(
            of(
                json!([{"code": "token_limit_exceeded", "line": null, "message": "Enqueued token limit reached"}])
            ),
            Some(Validation::Wait)
        );
        assert_eq!(
            of(json!([{"code": "too_many_tasks", "message": "x"}])),
            Some(Validation::TooLarge)
        );
        assert!(matches!(
            of(json!([{"code": "model_not_found", "message": "The provided model 'x' is not supported"}])),
            Some(Validation::Stop(pb::ProviderRefusal::Model, m)) if m.contains("not supported")
        ));
        assert_eq!(
            of(
                json!([{"code": "invalid_request", "line": 3, "message": "bad"},
                      {"code": "invalid_request", "line": 7, "message": "worse"}])
            ),
            Some(Validation::Lines(vec![
                (3, "invalid_request: bad".into()),
                (7, "invalid_request: worse".into())
            ]))
        );
        assert!(matches!(
            of(json!([{"code": "invalid_request", "line": 3, "message": "bad"},
                      {"code": "empty_file", "line": null, "message": "empty"}])),
            Some(Validation::Stop(pb::ProviderRefusal::Request, m)) if m.contains("empty_file")
        ));
    }

    // Invariant: Anthropic's refusals wait (429, 529), fix (too large, or
    // the one request a 400 names) or stop; a 5xx or no answer may have
    // made the batch and is searched for.
    #[test]
    fn anthropic_refusals_wait_fix_or_stop() {
        use pb::ProviderRefusal as P;
        let e = |code: u16, kind: &str, message: &str| ProviderError::Http {
            code,
            message: message.into(),
            retry_after: None,
            status: kind.into(),
            quota_ids: Vec::new(),
        };
        let a = |code, kind, message| classify_for(Api::Anthropic, &e(code, kind, message));
        assert_eq!(a(429, "rate_limit_error", ""), Some(Refusal::Wait(None)));
        assert_eq!(
            a(529, "overloaded_error", "Overloaded"),
            Some(Refusal::Wait(None))
        );
        assert_eq!(a(413, "request_too_large", ""), Some(Refusal::TooLarge));
        assert_eq!(
            a(
                400,
                "invalid_request_error",
                "requests.17.custom_id: String should match pattern"
            ),
            Some(Refusal::Invalid(17))
        );
        assert_eq!(
            a(
                400,
                "invalid_request_error",
                "requests[3]: duplicate custom_id"
            ),
            Some(Refusal::Invalid(3))
        );
        assert_eq!(
            a(400, "invalid_request_error", "requests: too many"),
            Some(Refusal::Stop(P::Request))
        );
        assert_eq!(a(402, "billing_error", ""), Some(Refusal::Stop(P::Billing)));
        assert_eq!(
            a(401, "authentication_error", ""),
            Some(Refusal::Stop(P::Request))
        );
        assert_eq!(
            a(403, "permission_error", ""),
            Some(Refusal::Stop(P::Request))
        );
        assert_eq!(a(404, "not_found_error", ""), Some(Refusal::Stop(P::Model)));
        assert_eq!(a(500, "api_error", ""), None);
        assert_eq!(
            classify_for(Api::Anthropic, &ProviderError::Transport("reset".into())),
            None
        );
    }

    // Invariant: only a definite refusal is classified; everything that
    // may have made the batch is searched for.
    #[test]
    fn only_a_definite_refusal_is_a_refusal() {
        for code in [408, 500, 502, 503, 504] {
            assert_eq!(classify(&http(code, "", "", &[])), None, "{code}");
        }
        assert_eq!(classify(&ProviderError::Transport("reset".into())), None);
        assert_eq!(classify(&ProviderError::Protocol("no name".into())), None);
    }

    // Invariant: every refusal has a kind, and only lasting ones stop.
    #[test]
    fn every_refusal_waits_shrinks_or_stops() {
        use pb::ProviderRefusal as P;
        let day = http(
            429,
            "RESOURCE_EXHAUSTED",
            "quota",
            &["GenerateRequestsPerDayPerProjectPerModel"],
        );
        assert_eq!(classify(&day), Some(Refusal::Stop(P::Quota)));
        let tokens = http(
            429,
            "RESOURCE_EXHAUSTED",
            "quota",
            &["BatchEnqueuedTokensPerModelPerTier"],
        );
        assert_eq!(classify(&tokens), Some(Refusal::Wait(None)));
        let mut timed = tokens;
        if let ProviderError::Http { retry_after, .. } = &mut timed {
            *retry_after = Some(Duration::from_secs(7));
        }
        assert_eq!(
            classify(&timed),
            Some(Refusal::Wait(Some(Duration::from_secs(7))))
        );
        assert_eq!(classify(&http(413, "", "", &[])), Some(Refusal::TooLarge));
        assert_eq!(
            classify(&http(
                400,
                "INVALID_ARGUMENT",
                "Request payload size exceeds the limit: 20971520 bytes.",
                &[]
            )),
            Some(Refusal::TooLarge)
        );
        assert_eq!(
            classify(&http(403, "PERMISSION_DENIED", "billing disabled", &[])),
            Some(Refusal::Stop(P::Billing))
        );
        assert_eq!(
            classify(&http(
                400,
                "FAILED_PRECONDITION",
                "Please enable Billing on project",
                &[]
            )),
            Some(Refusal::Stop(P::Billing))
        );
        assert_eq!(
            classify(&http(
                404,
                "NOT_FOUND",
                "models/x is not found for API version v1beta, or is not supported for batchGenerateContent",
                &[]
            )),
            Some(Refusal::Stop(P::Model))
        );
        assert_eq!(
            classify(&http(
                401,
                "UNAUTHENTICATED",
                "Request had invalid authentication credentials.",
                &[]
            )),
            Some(Refusal::Stop(P::Request))
        );
        assert_eq!(
            classify(&http(
                400,
                "INVALID_ARGUMENT",
                "API key not valid. Please pass a valid API key.",
                &[]
            )),
            Some(Refusal::Stop(P::Request))
        );
        assert_eq!(
            classify(&http(
                400,
                "INVALID_ARGUMENT",
                "billing field is wrong",
                &[]
            )),
            Some(Refusal::Stop(P::Request))
        );
    }
}
