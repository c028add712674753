//! Anthropic's Message Batches, as one folder: its client ([`client`]), a
//! row's request, batch request and media blocks ([`request`]), a result
//! line read as a row's outcome ([`output`]), what its refusals ask of
//! tally ([`refusal`]), and its flags ([`flags`]). [`AnthropicWire`] hands
//! the pure parts to the provider-neutral code.

pub mod client;
pub mod flags;
pub mod online;
pub mod output;
pub mod refusal;
pub mod request;

use serde_json::Value;
use tally_core::lane::Lane;
use tally_core::media::MediaRef;
use tally_core::provider::Api;
use tally_proto::v1 as pb;

pub use client::Anthropic;

use crate::jsonl::LineShape;
use crate::output::{Decode, Expect};
use crate::prompt::{InputError, PromptSpec};
use crate::provider::http::ProviderError;
use crate::provider::types::Observed;
use crate::provider::types::OnlineAnswer;
use crate::provider::wire::{BatchLimits, MediaSlots, Wire, counted_lines};
use crate::refusal::{Refusal, Validation};

/// Most requests in one Anthropic Message Batch.
pub const MAX_REQUESTS: usize = 100_000;
/// Largest Anthropic batch create (256 MB).
pub const MAX_BYTES: usize = 256 * 1024 * 1024;

/// Anthropic's shapes and rules.
#[derive(Debug, Clone, Copy, Default)]
pub struct AnthropicWire;

impl Decode for AnthropicWire {
    fn id_field(&self) -> &'static str {
        request::LINE.id
    }

    fn outcome(
        &self,
        key: &str,
        line: &Value,
        _raw: &str,
        expect: &Expect<'_>,
    ) -> Option<pb::RowOutcome> {
        output::outcome(key, line, expect)
    }

    fn golden(&self, key: &str, line: &Value) -> pb::GoldenAnswer {
        output::golden_answer(key, line)
    }
}

impl Wire for AnthropicWire {
    fn api(&self) -> Api {
        Api::Anthropic
    }

    fn build_request(
        &self,
        payload: &str,
        prompt: Option<&PromptSpec>,
        model: &str,
    ) -> Result<Value, InputError> {
        request::build_request(payload, prompt, model)
    }

    fn asks_for_json(&self, payload: &str, has_prompt: bool) -> bool {
        request::asks_for_json(payload, has_prompt)
    }

    fn line_shape(&self) -> LineShape {
        request::LINE
    }

    /// A `custom_id` must match `^[a-zA-Z0-9_-]{1,64}$`: ids are derived
    /// from the job and the key ([`crate::tags::custom_id`]).
    fn derives_request_ids(&self) -> bool {
        true
    }

    fn batch_limits(&self) -> Option<BatchLimits> {
        Some(BatchLimits {
            what: "an Anthropic batch",
            requests: MAX_REQUESTS,
            bytes: MAX_BYTES,
            shown: "256 MB",
        })
    }

    fn media_slots(&self) -> MediaSlots {
        MediaSlots {
            turns: "messages",
            parts: "content",
        }
    }

    fn inline_part(&self, r: &MediaRef, bytes: &[u8]) -> Value {
        request::inline_part(r, bytes)
    }

    fn refuses_media(&self, r: &MediaRef) -> Option<String> {
        request::refuses_media(r)
    }

    fn classify(&self, e: &ProviderError) -> Option<Refusal> {
        refusal::classify(e)
    }

    fn refused_every_request(&self, outcomes: &[pb::RowOutcome]) -> Option<Validation> {
        refusal::unknown_model(outcomes)
    }

    fn expected_lines(&self, batch: &Observed) -> Option<u64> {
        counted_lines(batch)
    }

    fn online_body(&self, request: Value, lane: Lane) -> Result<Value, InputError> {
        Ok(online::body(request, lane))
    }

    fn online_max_output(&self, body: &Value) -> Option<u64> {
        online::max_output(body)
    }

    fn online_line(&self, id: &str, answer: &OnlineAnswer) -> Value {
        online::line(id, answer)
    }

    fn online_meta(&self, answer: &OnlineAnswer) -> (String, String) {
        (online::request_id(answer), online::granted(answer))
    }
}
