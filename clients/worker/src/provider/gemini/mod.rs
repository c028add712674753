//! Gemini, as one folder: its Batch API client ([`client`]), a row's
//! request, batch line and media parts ([`request`]), an output line read
//! as a row's outcome ([`output`]), what its refusals ask of tally
//! ([`refusal`]), and its flags ([`flags`]). [`GeminiWire`] hands the pure
//! parts to the provider-neutral code.

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

pub use client::{Gemini, listed, listed_files};

use crate::jsonl::LineShape;
use crate::output::{Decode, Expect};
use crate::prompt::{InputError, PromptSpec};
use crate::provider::http::ProviderError;
use crate::provider::types::Observed;
use crate::provider::types::OnlineAnswer;
use crate::provider::wire::{MediaSlots, Wire};
use crate::refusal::Refusal;

/// Gemini's shapes and rules.
#[derive(Debug, Clone, Copy, Default)]
pub struct GeminiWire;

impl Decode for GeminiWire {
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
        Some(output::outcome(key, line, expect))
    }

    fn golden(&self, key: &str, line: &Value) -> pb::GoldenAnswer {
        output::golden_answer(key, line)
    }
}

impl Wire for GeminiWire {
    fn api(&self) -> Api {
        Api::Gemini
    }

    fn build_request(
        &self,
        payload: &str,
        prompt: Option<&PromptSpec>,
        _model: &str,
    ) -> Result<Value, InputError> {
        request::build_request(payload, prompt)
    }

    fn asks_for_json(&self, payload: &str, has_prompt: bool) -> bool {
        request::asks_for_json(payload, has_prompt)
    }

    fn line_shape(&self) -> LineShape {
        request::LINE
    }

    fn media_slots(&self) -> MediaSlots {
        MediaSlots {
            turns: "contents",
            parts: "parts",
        }
    }

    fn uploads_media(&self) -> bool {
        true
    }

    fn inline_part(&self, r: &MediaRef, bytes: &[u8]) -> Value {
        request::inline_part(r, bytes)
    }

    fn refuses_media(&self, _r: &MediaRef) -> Option<String> {
        None
    }

    fn file_part(&self, r: &MediaRef, uri: &str) -> Value {
        request::file_part(r, uri)
    }

    fn classify(&self, e: &ProviderError) -> Option<Refusal> {
        refusal::classify(e)
    }

    fn operation_names_output(&self) -> bool {
        true
    }

    fn expected_lines(&self, batch: &Observed) -> Option<u64> {
        output::expected_lines(&batch.resource)
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

    fn online_shed(&self, e: &ProviderError) -> bool {
        online::shed(e)
    }
}
