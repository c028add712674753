//! OpenAI's Batch API (and the OpenAI-compatible servers that copy it), as
//! one folder: its client ([`client`]), a row's request, batch line and
//! media parts ([`request`]), an output line read as a row's outcome
//! ([`output`]), what its refusals ask of tally ([`refusal`]), an input
//! file not yet visible to a create ([`visible`]), its synchronous lanes
//! ([`online`], over chat completions or [`responses`]), what an answer
//! said whichever endpoint wrote it ([`said`]), and its flags
//! ([`flags`]). [`OpenAiWire`] hands the pure parts to the
//! provider-neutral code.

pub mod client;
pub mod flags;
pub mod online;
pub mod output;
pub mod refusal;
pub mod request;
pub mod responses;
pub mod said;
pub mod visible;

use serde_json::Value;
use tally_core::lane::Lane;
use tally_core::media::MediaRef;
use tally_core::provider::Api;
use tally_proto::v1 as pb;

pub use client::OpenAi;

use crate::jsonl::LineShape;
use crate::output::{Decode, Expect};
use crate::prompt::{InputError, PromptSpec};
use crate::provider::http::ProviderError;
use crate::provider::types::Observed;
use crate::provider::types::OnlineAnswer;
use crate::provider::wire::{BatchLimits, MediaSlots, Wire, counted_lines};
use crate::refusal::{Refusal, Validation};

/// Most requests in one OpenAI batch file.
pub const MAX_REQUESTS: usize = 50_000;
/// Largest OpenAI batch input file (200 MB).
pub const MAX_FILE_BYTES: usize = 200 * 1024 * 1024;

/// OpenAI's shapes and rules, its synchronous calls made for `online`.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenAiWire {
    pub online: online::OnlineApi,
}

/// The wire whose synchronous calls go to `online`.
pub fn wire(online: online::OnlineApi) -> &'static OpenAiWire {
    static CHAT: OpenAiWire = OpenAiWire {
        online: online::OnlineApi::Chat,
    };
    static RESPONSES: OpenAiWire = OpenAiWire {
        online: online::OnlineApi::Responses,
    };
    match online {
        online::OnlineApi::Chat => &CHAT,
        online::OnlineApi::Responses => &RESPONSES,
    }
}

impl Decode for OpenAiWire {
    fn id_field(&self) -> &'static str {
        request::LINE.id
    }

    fn outcome(
        &self,
        key: &str,
        line: &Value,
        raw: &str,
        expect: &Expect<'_>,
    ) -> Option<pb::RowOutcome> {
        output::outcome(key, line, raw, expect)
    }

    fn golden(&self, key: &str, line: &Value) -> pb::GoldenAnswer {
        output::golden_answer(key, line)
    }
}

impl Wire for OpenAiWire {
    fn api(&self) -> Api {
        Api::OpenAi
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

    fn batch_limits(&self) -> Option<BatchLimits> {
        Some(BatchLimits {
            what: "an OpenAI batch file",
            requests: MAX_REQUESTS,
            bytes: MAX_FILE_BYTES,
            shown: "200 MB",
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

    fn validation(&self, resource: &Value) -> Option<Validation> {
        refusal::validation(resource)
    }

    fn expected_lines(&self, batch: &Observed) -> Option<u64> {
        counted_lines(batch)
    }

    /// A batch that completed with no request counted completed or failed
    /// (one whose counts say it answered something but whose files are
    /// not named yet is asked again).
    fn answered_nothing(&self, batch: &Observed) -> bool {
        let counts = &batch.resource["request_counts"];
        let count = |k: &str| counts[k].as_i64().unwrap_or(0);
        batch.observation.state == tally_core::operation::OpState::Succeeded
            && count("completed") == 0
            && count("failed") == 0
    }

    fn online_body(&self, request: Value, lane: Lane) -> Result<Value, InputError> {
        online::body(request, lane, self.online)
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
