//! How Anthropic's answers to a refused create read as tally's refusals
//! (a batch is refused whole or made; its requests' own errors come in
//! its results). Pure.
//!
//! | answer | kind |
//! | --- | --- |
//! | 429 (or 400, as the SDK types `organization_on_hold`) whose `details.error_code` is a spend cap or a hold (`enforced_spend_limit_reached`, `contract_spend_limit_reached`, `organization_on_hold`), or that says "spend limit" | stop (`billing`): no retry helps before the cap is raised or the month ends |
//! | 429 `rate_limit_error`, 529 `overloaded_error` | wait, for its `retry-after` (`--refusal-cooldown` when none, doubling in a row; the 7th in a row pauses the ledger, QUOTA) |
//! | 413 `request_too_large`, or a 400 saying the request is too large | fix: a smaller batch |
//! | 400 `invalid_request_error` naming a request (`requests.3.…`) | fix: that row is invalid input (PERMANENT), the others go back |
//! | 402 `billing_error` | stop (`billing`) |
//! | 404 `not_found_error` naming the model (`model: …`) | stop (`model`) |
//! | 401, 403, a 404 naming no model (a wrong base URL), any other 4xx | stop (`refused`) |
//! | 500 `api_error`, other 5xx, no answer | not a refusal: searched for |

use tally_proto::v1 as pb;

use crate::provider::ProviderError;
use crate::refusal::{Refusal, Validation, names_a_model, too_large};

/// The kind of a failed call at Anthropic's Message Batches; `None` when
/// it may have made the batch.
pub(crate) fn classify(e: &ProviderError) -> Option<Refusal> {
    let ProviderError::Http {
        code,
        message,
        retry_after,
        error_codes,
        ..
    } = e
    else {
        return None;
    };
    let refusal = match code {
        400 | 429 if spend_capped(error_codes, message) => {
            Refusal::Stop(pb::ProviderRefusal::Billing)
        }
        429 | 529 => Refusal::Wait(*retry_after),
        408 | 500..=599 => return None,
        413 => Refusal::TooLarge,
        400 if too_large(message) => Refusal::TooLarge,
        400 => match request_index(message) {
            Some(i) => Refusal::Invalid(i),
            None => Refusal::Stop(pb::ProviderRefusal::Request),
        },
        402 => Refusal::Stop(pb::ProviderRefusal::Billing),
        404 if names_a_model(message) => Refusal::Stop(pb::ProviderRefusal::Model),
        400..=499 => Refusal::Stop(pb::ProviderRefusal::Request),
        _ => return None,
    };
    Some(refusal)
}

/// A batch whose every result is `not_found_error` for the model (an
/// unknown or retired model: Anthropic accepts the batch and refuses each
/// request): nothing ran, nothing was charged; the ledger pauses (model)
/// with the provider's words instead of each row ending PERMANENT.
pub(crate) fn unknown_model(outcomes: &[pb::RowOutcome]) -> Option<Validation> {
    let mut words = None;
    for o in outcomes {
        let Some(pb::row_outcome::Outcome::Failure(f)) = &o.outcome else {
            return None;
        };
        if f.status != "not_found_error" || !f.message.starts_with("model") {
            return None;
        }
        words.get_or_insert_with(|| f.message.clone());
    }
    words.map(|w| {
        Validation::Stop(
            pb::ProviderRefusal::Model,
            format!("every request of the batch answered not_found_error: {w}"),
        )
    })
}

/// The account's spend cap is reached, or the organization is on hold: a
/// 429 (a hold: a 400) that lasts until the cap is raised (or the month
/// ends), not a rate.
fn spend_capped(codes: &[String], message: &str) -> bool {
    const CODES: [&str; 3] = [
        "enforced_spend_limit_reached",
        "contract_spend_limit_reached",
        "organization_on_hold",
    ];
    codes.iter().any(|c| CODES.contains(&c.as_str()))
        || message.to_ascii_lowercase().contains("spend limit")
}

/// The index of the request an error message names (`requests.3.params…`,
/// `requests[3]`), if it names one.
fn request_index(message: &str) -> Option<usize> {
    let rest = &message[message.find("requests")? + "requests".len()..];
    let rest = rest.strip_prefix('.').or_else(|| rest.strip_prefix('['))?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Invariant: Anthropic's refusals wait (429, 529), fix (too large, or
    // the one request a 400 names) or stop; a 5xx or no answer may have
    // made the batch and is searched for.
    // Invariant: only a batch whose every result is the model's
    // not_found_error is refused whole; one success, another error, or an
    // empty output is not.
    #[test]
    fn an_unknown_model_in_every_result_is_a_refusal() {
        let failed = |status: &str, message: &str| pb::RowOutcome {
            key: "k".into(),
            outcome: Some(pb::row_outcome::Outcome::Failure(pb::Failure {
                status: status.into(),
                message: message.into(),
                ..Default::default()
            })),
            ..Default::default()
        };
        let nf = failed("not_found_error", "model: claude-nope");
        assert!(matches!(
            unknown_model(&[nf.clone(), nf.clone()]),
            Some(Validation::Stop(pb::ProviderRefusal::Model, w)) if w.contains("claude-nope")
        ));
        let ok = pb::RowOutcome {
            outcome: Some(pb::row_outcome::Outcome::Result("{}".into())),
            ..Default::default()
        };
        assert!(unknown_model(&[nf.clone(), ok]).is_none());
        assert!(unknown_model(&[nf.clone(), failed("api_error", "boom")]).is_none());
        assert!(unknown_model(&[failed("not_found_error", "file: x")]).is_none());
        assert!(unknown_model(&[]).is_none());
    }

    #[test]
    fn anthropic_refusals_wait_fix_or_stop() {
        use pb::ProviderRefusal as P;
        let e = |code: u16, kind: &str, message: &str| ProviderError::Http {
            code,
            message: message.into(),
            retry_after: None,
            status: kind.into(),
            error_codes: Vec::new(),
        };
        let a = |code, kind, message| classify(&e(code, kind, message));
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
        assert_eq!(
            a(404, "not_found_error", "model: claude-nope"),
            Some(Refusal::Stop(P::Model))
        );
        // A 404 that names no model: a wrong base URL, not the model.
        assert_eq!(
            a(404, "not_found_error", "Not Found"),
            Some(Refusal::Stop(P::Request))
        );
        assert_eq!(a(500, "api_error", ""), None);
        for code in [
            "enforced_spend_limit_reached",
            "contract_spend_limit_reached",
            "organization_on_hold",
        ] {
            let capped = ProviderError::Http {
                code: 429,
                message: "Rate limited".into(),
                retry_after: None,
                status: "rate_limit_error".into(),
                error_codes: vec![code.into()],
            };
            assert_eq!(classify(&capped), Some(Refusal::Stop(P::Billing)), "{code}");
        }
        // The SDK types a hold as a 400 (`OrganizationOnHoldError`).
        let held = ProviderError::Http {
            code: 400,
            message: "Your organization is on hold.".into(),
            retry_after: None,
            status: "invalid_request_error".into(),
            error_codes: vec!["organization_on_hold".into()],
        };
        assert_eq!(classify(&held), Some(Refusal::Stop(P::Billing)));
        assert_eq!(
            a(
                429,
                "rate_limit_error",
                "This request would exceed your account's monthly spend limit. Please try again later."
            ),
            Some(Refusal::Stop(P::Billing))
        );
        assert_eq!(classify(&ProviderError::Transport("reset".into())), None);
    }
}
