//! What differs between providers in the worker's pure work, as one trait
//! each provider folder implements: a row's request and its batch line,
//! its media parts, an output line's outcome, and what a refused call asks
//! of tally. The provider-neutral code (rendering, packing, matching by
//! key, judging text, the job's life) is handed a `&dyn Wire` and never
//! names a provider; [`super::wire_of`] is where one is chosen.

use serde_json::Value;
use tally_core::lane::Lane;
use tally_core::media::MediaRef;
use tally_core::provider::Api;
use tally_proto::v1 as pb;

use super::http::ProviderError;
use super::types::{Observed, OnlineAnswer};
use crate::jsonl::LineShape;
use crate::output::Decode;
use crate::prompt::{InputError, PromptSpec};
use crate::refusal::{Refusal, Validation};

/// The most one batch of a provider holds, where it documents a bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchLimits {
    /// What the bound is of, for the error (`an OpenAI batch file`).
    pub what: &'static str,
    pub requests: usize,
    pub bytes: usize,
    /// `bytes` as the provider's documentation says it (`200 MB`).
    pub shown: &'static str,
}

/// Where a provider's request keeps the parts a media reference becomes:
/// the turns' array and, in each turn, its parts' array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MediaSlots {
    pub turns: &'static str,
    pub parts: &'static str,
}

/// Why a provider that takes images and PDFs inline only (`who`, in
/// `request`) will not take `r`; `None` when it will.
pub fn images_and_pdfs_only(r: &MediaRef, who: &str, request: &str) -> Option<String> {
    let takes = r.mime_type.starts_with("image/") || r.mime_type == "application/pdf";
    (!takes).then(|| {
        format!(
            "{}: {who} takes images and PDFs in {request}, not {}",
            r.uri, r.mime_type
        )
    })
}

/// The lines a succeeded batch's request counts say its output holds
/// (its requests that succeeded or failed); `None` for a batch that did
/// not succeed, whose counts say what ran, not what was written.
pub fn counted_lines(batch: &Observed) -> Option<u64> {
    if batch.observation.state != tally_core::operation::OpState::Succeeded {
        return None;
    }
    let s = &batch.observation.stats;
    Some(u64::try_from(s.successful_request_count + s.failed_request_count).unwrap_or(0))
}

/// `bytes` as standard base64, as every provider's inline parts hold them.
pub fn base64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A provider's shapes and rules (see the module docs).
pub trait Wire: Decode + Send + Sync {
    /// The API these shapes are.
    fn api(&self) -> Api;

    /// The request for one row at this provider, for `model` (its name
    /// there): rendered from its prompt, or the row's own request.
    fn build_request(
        &self,
        payload: &str,
        prompt: Option<&PromptSpec>,
        model: &str,
    ) -> Result<Value, InputError>;

    /// Whether the request built for a row asks for a JSON answer.
    fn asks_for_json(&self, payload: &str, has_prompt: bool) -> bool;

    /// The fields of its batch input lines (written by
    /// [`crate::jsonl::write_line`]).
    fn line_shape(&self) -> LineShape;

    /// Whether request ids are derived from the job and the key (the
    /// provider restricts them) rather than being the keys.
    fn derives_request_ids(&self) -> bool {
        false
    }

    /// The most one batch holds, where the provider documents it.
    fn batch_limits(&self) -> Option<BatchLimits> {
        None
    }

    /// Where media parts go in a request.
    fn media_slots(&self) -> MediaSlots;

    /// Whether a file too large to go inline is uploaded and referenced
    /// ([`Wire::file_part`]); else every file goes inline.
    fn uploads_media(&self) -> bool {
        false
    }

    /// The inline part for `r`'s bytes (asked only of media it does not
    /// [refuse](Wire::refuses_media)).
    fn inline_part(&self, r: &MediaRef, bytes: &[u8]) -> Value;

    /// Why the provider will not take `r` at all (checked before it is
    /// read); `None` when it may.
    fn refuses_media(&self, r: &MediaRef) -> Option<String>;

    /// The part referencing an upload of `r` at `uri`; asked only of a
    /// provider that [uploads media](Wire::uploads_media).
    fn file_part(&self, r: &MediaRef, uri: &str) -> Value {
        let _ = (r, uri);
        Value::Null
    }

    /// What a refused call asks of tally; `None` when it is no definite
    /// refusal (the call may have done its work: a create is searched
    /// for).
    fn classify(&self, e: &ProviderError) -> Option<Refusal>;

    /// What a batch the provider made and then refused before it ran says
    /// (`None`: the batch failed for its own reasons, or the provider
    /// never refuses so).
    fn validation(&self, resource: &Value) -> Option<Validation> {
        let _ = resource;
        None
    }

    /// What an ended batch's answers say when none of its requests reached
    /// the model (Anthropic: every request `not_found_error` for the model,
    /// which the provider accepts at create and refuses per request):
    /// refused before it ran, its rows go back; `None` otherwise.
    fn refused_every_request(&self, outcomes: &[pb::RowOutcome]) -> Option<Validation> {
        let _ = outcomes;
        None
    }

    /// Whether an ended batch's operation names its output file (so a
    /// webhook's word is enough), rather than only its GET.
    fn operation_names_output(&self) -> bool {
        false
    }

    /// The lines the ended batch's own counts say its output holds, where
    /// they say it (`None`: no count to compare).
    fn expected_lines(&self, batch: &Observed) -> Option<u64>;

    /// Whether an ended batch answered nothing at all: no file to wait for.
    fn answered_nothing(&self, batch: &Observed) -> bool {
        let _ = batch;
        false
    }

    /// The body of one row's synchronous call in `lane` (a lane the
    /// provider offers), from its batch request; an error when the
    /// synchronous API cannot carry that request.
    fn online_body(&self, request: Value, lane: Lane) -> Result<Value, InputError>;

    /// The most output tokens a synchronous call's body (from
    /// [`Wire::online_body`]) asks for, where it says: the provider counts
    /// them against the account's tokens per minute when the call arrives.
    fn online_max_output(&self, body: &Value) -> Option<u64>;

    /// A 2xx synchronous answer as the batch output line of request `id`,
    /// which the provider's [`Decode`] reads.
    fn online_line(&self, id: &str, answer: &OnlineAnswer) -> Value;

    /// The provider's request id of an answer, and the tier it says it
    /// granted.
    fn online_meta(&self, answer: &OnlineAnswer) -> (String, String);

    /// Whether a refused flex call was shed for lack of capacity (not a
    /// rate limit).
    fn online_shed(&self, e: &ProviderError) -> bool {
        let _ = e;
        false
    }
}
