//! How the OpenAI Batch API's answers to a refused call, and a batch it
//! made and then failed at validation, read as tally's refusals (pure).
//!
//! | answer | kind |
//! | --- | --- |
//! | 429 `insufficient_quota` (or `credit_balance_exhausted`, `billing_…`) | stop (`billing`) |
//! | any other 429 (`rate_limit_exceeded`) | wait, for its `retry-after` (`--refusal-cooldown` when none, doubling in a row; the 7th in a row pauses the ledger, QUOTA) |
//! | a create's 400 (or 404) naming its input file as missing, after the file was waited for ([`super::visible`]), the file gone | none: the rows go back with no attempt |
//! | … the file still there but never visible within the wait | stop (`refused`) |
//! | 413, or a 400 saying the request is too large | fix: a smaller batch |
//! | 401, 403, 404, any other 4xx | stop (`refused`) |
//! | a batch made, then `failed` at validation ([`validation`]): `token_limit_exceeded` | wait: nothing ran, the rows go back with no attempt, the model cools down |
//! | … `too_many_tasks`, or too large | fix: a smaller batch |
//! | … `model_not_found` | stop (`model`) |
//! | … errors naming lines | the rows at those lines are invalid input (PERMANENT); the others go back with no attempt |
//! | … any other error | stop (`refused`), with the provider's words |

use serde_json::Value;
use tally_proto::v1 as pb;

use crate::provider::ProviderError;
use crate::refusal::{Refusal, Validation, too_large};

/// The kind of a failed call at the OpenAI Batch API (and the servers
/// that copy it); `None` when it may have done its work.
pub(crate) fn classify(e: &ProviderError) -> Option<Refusal> {
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
        400 | 404 if status == super::visible::FILE_GONE => Refusal::Retry,
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

/// The kind of refusal a failed batch's resource (`errors.data[]`: `code`,
/// `message`, `line`) says; `None` when it lists no error (a batch that
/// failed for its own reasons: its rows count an attempt).
pub(crate) fn validation(resource: &Value) -> Option<Validation> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn openai(code: u16, status: &str) -> ProviderError {
        ProviderError::Http {
            code,
            message: "m".into(),
            retry_after: None,
            status: status.into(),
            error_codes: Vec::new(),
        }
    }

    // Invariant: OpenAI's quota answers split by what waiting does: a rate
    // limit passes, an unpaid account does not; what may have made the
    // batch is searched for.
    #[test]
    fn openai_refusals_wait_shrink_or_stop() {
        use pb::ProviderRefusal as P;
        assert_eq!(
            classify(&openai(429, "rate_limit_exceeded")),
            Some(Refusal::Wait(None))
        );
        assert_eq!(
            classify(&openai(429, "insufficient_quota")),
            Some(Refusal::Stop(P::Billing))
        );
        assert_eq!(classify(&openai(413, "")), Some(Refusal::TooLarge));
        assert_eq!(
            classify(&openai(401, "invalid_api_key")),
            Some(Refusal::Stop(P::Request))
        );
        assert_eq!(
            classify(&openai(400, super::super::visible::FILE_GONE)),
            Some(Refusal::Retry),
            "a create whose input file is gone is no refusal of the ledger"
        );
        for code in [408, 500, 503] {
            assert_eq!(classify(&openai(code, "")), None);
        }
        assert_eq!(classify(&ProviderError::Transport("x".into())), None);
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
}
