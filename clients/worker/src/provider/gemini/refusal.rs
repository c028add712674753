//! How Gemini's answers to a refused call read as tally's refusals (pure).
//!
//! | answer | kind |
//! | --- | --- |
//! | 429 naming a per-day quota | stop (`quota`): waiting for a RetryInfo does not bring it back |
//! | any other 429 (rate, enqueued tokens) | wait: the model cools down for every worker of the account, for the provider's RetryInfo (`--refusal-cooldown` when none, doubling in a row; the 7th in a row pauses the ledger, QUOTA); the next batch is smaller |
//! | 413, or a 400 saying the request is too large | fix: a smaller batch (a batch of one row that is still too large is that row's fault: PERMANENT) |
//! | 403; 400 FAILED_PRECONDITION naming billing | stop (`billing`) |
//! | 404 naming the model (it is unknown or takes no batches) | stop (`model`) |
//! | 401, a 404 naming no model (a wrong base URL), any other 4xx | stop (`refused`): the key or the request; the provider's words go with the pause |
//! | 408, 5xx, no answer | not a refusal: the batch may exist; it is searched for |

use tally_proto::v1 as pb;

use crate::provider::ProviderError;
use crate::refusal::{Refusal, names_a_model, too_large};

/// The kind of a create's failure; `None` when it is no definite refusal
/// (the batch may have been made: search for it).
pub(crate) fn classify(e: &ProviderError) -> Option<Refusal> {
    let ProviderError::Http {
        code,
        message,
        status,
        error_codes,
        retry_after,
    } = e
    else {
        return None;
    };
    let refusal = match code {
        408 | 500..=599 => return None,
        429 if error_codes.iter().any(|id| id.contains("PerDay")) => {
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
        404 if names_a_model(message) => Refusal::Stop(pb::ProviderRefusal::Model),
        400..=499 => Refusal::Stop(pb::ProviderRefusal::Request),
        _ => return None,
    };
    Some(refusal)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn http(code: u16, status: &str, message: &str, ids: &[&str]) -> ProviderError {
        ProviderError::Http {
            code,
            message: message.into(),
            retry_after: None,
            status: status.into(),
            error_codes: ids.iter().map(|s| s.to_string()).collect(),
        }
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
            classify(&http(404, "", "<html>404. That's an error.</html>", &[])),
            Some(Refusal::Stop(P::Request)),
            "a wrong base URL is not the model's"
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
