//! One synchronous call of a row's request, whatever the provider: the
//! exchange (never sent, answered, refused, or sent and its answer lost)
//! and what a refused call means for the row. Each provider folder's
//! `online.rs` says how its request, answer and shedding look.

use std::time::Duration;

use tally_core::lane::Lane;
use tally_proto::v1 as pb;

use super::http::{ErrorOf, ProviderError, retry_after_header, without_url};
use super::types::OnlineAnswer;
use super::wire::Wire;
use crate::refusal::Refusal;

/// A synchronous call that brought no answer to use.
#[derive(Debug)]
pub enum OnlineFail {
    /// It never reached the provider (no connection): nothing was done.
    Unsent(String),
    /// It went out and its answer was lost (a timeout, a cut connection, a
    /// body that would not read): the provider may have done, and billed,
    /// the work.
    Lost(String),
    /// The provider answered with an error status.
    Refused(ProviderError),
}

/// Sends a synchronous call (its key already set) and reads its answer.
pub(crate) async fn exchange(
    req: reqwest::RequestBuilder,
    errors: &crate::metrics::ProviderErrors,
    error_of: ErrorOf,
) -> Result<OnlineAnswer, OnlineFail> {
    let resp = match req.send().await {
        Ok(resp) => resp,
        Err(e) => {
            errors.count(None);
            // Only a connection never made proves nothing went out.
            let unsent = e.is_connect() || e.is_builder();
            let why = without_url(e);
            return Err(if unsent {
                OnlineFail::Unsent(why)
            } else {
                OnlineFail::Lost(why)
            });
        }
    };
    let code = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.bytes().await.map_err(|e| {
        errors.count(None);
        OnlineFail::Lost(without_url(e))
    })?;
    if !(200..300).contains(&code) {
        errors.count(Some(code));
        let text = String::from_utf8_lossy(&body);
        return Err(OnlineFail::Refused(error_of(
            code,
            &text,
            retry_after_header(&headers),
        )));
    }
    let body = serde_json::from_slice(&body)
        .map_err(|e| OnlineFail::Lost(format!("an answer that is not JSON: {e}")))?;
    Ok(OnlineAnswer { headers, body })
}

/// What a refused synchronous call means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// The account is over its limits: the row goes back unattempted, and
    /// every worker of the account waits this long (the provider's word,
    /// else the worker's cool-down).
    RateLimited(Option<Duration>),
    /// A flex call shed for lack of capacity (not charged): the row goes
    /// back unattempted, for any lane the ledger allows.
    Shed(Option<Duration>),
    /// No retry fixes it (a key refused, a model unknown, billing): the
    /// rows go back and the ledger pauses with the provider's words.
    Stop(pb::ProviderRefusal, String),
    /// The row's own answer: an error the classifier judges (a 400 for
    /// its request, a 5xx the provider may have billed).
    Row(pb::Failure),
}

/// What `e`, the refusal of a synchronous call in `lane`, means (see
/// [`Refused`]); the provider's own refusal kinds decide, and a refusal
/// of one request (too large, invalid) is that row's.
pub fn refused(wire: &dyn Wire, lane: Lane, e: &ProviderError) -> Refused {
    if lane == Lane::Flex && wire.online_shed(e) {
        return Refused::Shed(e.retry_after());
    }
    match wire.classify(e) {
        Some(Refusal::Wait(wait)) => Refused::RateLimited(wait),
        // A request of this row the provider refuses (400, 422) is the
        // row's verdict; a refused key, model, quota or bill is everyone's.
        Some(Refusal::Stop(pb::ProviderRefusal::Request))
            if matches!(e.code(), Some(400 | 422)) =>
        {
            Refused::Row(failure_of(e))
        }
        Some(Refusal::Stop(kind)) => Refused::Stop(kind, e.to_string()),
        Some(Refusal::TooLarge | Refusal::Invalid(_) | Refusal::Retry) | None => {
            Refused::Row(failure_of(e))
        }
    }
}

/// The facts of an error answer, for the classifier.
pub fn failure_of(e: &ProviderError) -> pb::Failure {
    let (code, message, status, retry) = match e {
        ProviderError::Http {
            code,
            message,
            status,
            retry_after,
            ..
        } => (*code, message.as_str(), status.as_str(), *retry_after),
        ProviderError::Transport(m) | ProviderError::Protocol(m) => (0, m.as_str(), "", None),
    };
    pb::Failure {
        kind: pb::FailureKind::ProviderError as i32,
        http_code: i32::from(code),
        status: status.chars().take(64).collect(),
        message: message.chars().take(crate::output::MAX_MESSAGE).collect(),
        retry_delay: retry.and_then(|d| prost_types::Duration::try_from(d).ok()),
        ..Default::default()
    }
}

/// The outcome of a call whose answer was lost: an attempt the provider
/// may have done and billed.
pub fn lost(key: &str, why: &str) -> pb::RowOutcome {
    pb::RowOutcome {
        key: key.to_string(),
        outcome: Some(pb::row_outcome::Outcome::Failure(pb::Failure {
            kind: pb::FailureKind::AnswerLost as i32,
            message: format!("the synchronous call's answer was lost: {why}")
                .chars()
                .take(crate::output::MAX_MESSAGE)
                .collect(),
            ..Default::default()
        })),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::wire_of;
    use tally_core::provider::Api;

    fn http(code: u16, status: &str, retry: Option<u64>) -> ProviderError {
        ProviderError::Http {
            code,
            message: format!("{code} {status}"),
            retry_after: retry.map(Duration::from_secs),
            status: status.into(),
            error_codes: Vec::new(),
        }
    }

    // Invariant: a 429 never costs the row an attempt (rate limited, or
    // shed in flex); a key refused stops; a 400 or a 5xx is the row's own
    // answer, with its code for the classifier.
    #[test]
    fn refusals_read_as_the_row_or_the_account() {
        let openai = wire_of(Api::OpenAi);
        assert_eq!(
            refused(
                openai,
                Lane::Standard,
                &http(429, "rate_limit_exceeded", Some(3))
            ),
            Refused::RateLimited(Some(Duration::from_secs(3)))
        );
        assert_eq!(
            refused(openai, Lane::Flex, &http(429, "resource_unavailable", None)),
            Refused::Shed(None)
        );
        assert!(matches!(
            refused(openai, Lane::Standard, &http(401, "invalid_api_key", None)),
            Refused::Stop(..)
        ));
        match refused(
            openai,
            Lane::Standard,
            &http(400, "invalid_request_error", None),
        ) {
            Refused::Row(f) => assert_eq!(f.http_code, 400),
            other => panic!("{other:?}"),
        }
        match refused(openai, Lane::Standard, &http(503, "server_error", None)) {
            Refused::Row(f) => assert_eq!(f.http_code, 503),
            other => panic!("{other:?}"),
        }
        let gemini = wire_of(Api::Gemini);
        assert_eq!(
            refused(gemini, Lane::Flex, &http(503, "UNAVAILABLE", None)),
            Refused::Shed(None)
        );
        assert!(matches!(
            refused(gemini, Lane::Standard, &http(503, "UNAVAILABLE", None)),
            Refused::Row(_)
        ));
    }

    // Invariant: a lost answer is reported as such (an attempt counted),
    // never as a success or a plain provider error.
    #[test]
    fn a_lost_answer_is_its_own_failure() {
        let o = lost("k", "timed out");
        match o.outcome {
            Some(pb::row_outcome::Outcome::Failure(f)) => {
                assert_eq!(f.kind, pb::FailureKind::AnswerLost as i32);
                assert!(f.message.contains("timed out"));
            }
            other => panic!("{other:?}"),
        }
    }
}
