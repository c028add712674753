//! The one interface the worker talks to providers through: upload an
//! input file, create a batch with a searchable tag, get, list, cancel and
//! delete batches, list and delete files, download an output, and the shape
//! of a batch's lines. Everything above it (recording the attempt before
//! the create, the order-free search before any release, refusals as wait /
//! fix / stop, reading partial output before any row fails, adoption) is
//! written once, for every provider.
//!
//! - [`gemini`]: the Gemini Batch API (files, `batchGenerateContent`,
//!   long-running operations); a batch's tag is its display name.
//! - [`openai`]: the OpenAI Batch API (`/v1/files`, `/v1/batches`), spoken
//!   by OpenAI and by OpenAI-compatible servers; a batch's tag is its
//!   `metadata`.
//! - [`anthropic`]: Anthropic's Message Batches (requests inline in the
//!   create, results as one stream at the end); a batch has no tag: its
//!   results' custom_ids say whose it is.
//! - [`http`]: the key, the retries and the error every client shares;
//!   [`rest`]: the client every provider's is built on;
//!   [`online`]: one synchronous call and what its refusal means;
//!   [`types`]: what a list, a GET or a synchronous call answers,
//!   whatever the provider;
//!   [`wire`]: what differs between providers in the pure work.
//!
//! This is the one place a provider is chosen: [`wire_of`] for its shapes
//! and rules, [`Provider`] for its client, [`ProviderFlags`] for its flags.
//! Adding a provider = one folder, one arm in each `match` here.

pub mod anthropic;
pub mod gemini;
pub mod http;
pub mod online;
pub mod openai;
pub mod rest;
pub mod types;
pub mod wire;

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use tally_core::provider::Api;

pub use http::{ApiKey, Patience, ProviderError};
pub use online::OnlineFail;
pub use types::{Listed, ListedFile, Observed, OnlineAnswer, Owner, Page, Upload, Uploaded};
pub use wire::Wire;

use crate::arg::UrlArg;

/// Records a create's new attempt before it is sent again (see
/// [`Provider::create_batch`]); answers whether it did.
pub type Resend<'a> = dyn Fn() -> futures::future::BoxFuture<'a, bool> + Send + Sync + 'a;
use crate::jsonl::LineSink;

/// The shapes and rules of `api`'s provider (OpenAI's synchronous calls
/// as chat completions: [`Provider::wire`] has the API its flags chose).
pub fn wire_of(api: Api) -> &'static dyn Wire {
    match api {
        Api::Gemini => &gemini::GeminiWire,
        Api::OpenAi => openai::wire(openai::online::OnlineApi::default()),
        Api::Anthropic => &anthropic::AnthropicWire,
    }
}

/// Where one provider's API is and where its key is kept, as its flags
/// say.
#[derive(Debug, Clone, Copy)]
pub struct Endpoint<'a> {
    pub base_url: &'a UrlArg,
    pub key_file: Option<&'a Path>,
    /// The flag naming `key_file` (`--gemini-api-key-file`).
    pub key_file_flag: &'static str,
    /// The variable holding the key when no file is named.
    pub key_env: &'static str,
}

/// Every provider's own flags (flattened into the worker's).
#[derive(Debug, Clone, clap::Args)]
pub struct ProviderFlags {
    #[command(flatten)]
    pub gemini: gemini::flags::GeminiFlags,
    #[command(flatten)]
    pub openai: openai::flags::OpenAiFlags,
    #[command(flatten)]
    pub anthropic: anthropic::flags::AnthropicFlags,
}

impl ProviderFlags {
    /// The endpoint of `api`'s provider.
    pub fn endpoint(&self, api: Api) -> Endpoint<'_> {
        match api {
            Api::Gemini => self.gemini.endpoint(),
            Api::OpenAi => self.openai.endpoint(),
            Api::Anthropic => self.anthropic.endpoint(),
        }
    }
}

/// A provider client.
#[derive(Debug, Clone)]
pub enum Provider {
    Gemini(gemini::Gemini),
    OpenAi(openai::OpenAi),
    Anthropic(anthropic::Anthropic),
}

impl Provider {
    /// The client of `api`'s provider, as its `flags` say.
    pub fn new(
        api: Api,
        flags: &ProviderFlags,
        key: ApiKey,
        timeout: Duration,
    ) -> Result<Self, ProviderError> {
        let base_url = flags.endpoint(api).base_url;
        Ok(match api {
            Api::Gemini => Provider::Gemini(gemini::Gemini::new(base_url, key, timeout)?),
            Api::OpenAi => Provider::OpenAi(openai::OpenAi::new(
                base_url,
                key,
                timeout,
                flags.openai.openai_api,
            )?),
            Api::Anthropic => {
                Provider::Anthropic(anthropic::Anthropic::new(base_url, key, timeout)?)
            }
        })
    }

    /// Its shapes and rules.
    pub fn wire(&self) -> &'static dyn Wire {
        match self {
            Provider::OpenAi(o) => openai::wire(o.online),
            Provider::Gemini(_) | Provider::Anthropic(_) => wire_of(self.api()),
        }
    }

    pub fn api(&self) -> Api {
        match self {
            Provider::Gemini(_) => Api::Gemini,
            Provider::OpenAi(_) => Api::OpenAi,
            Provider::Anthropic(_) => Api::Anthropic,
        }
    }

    /// The provider account, as CreateJob names it.
    pub fn account(&self) -> String {
        match self {
            Provider::Gemini(g) => g.account(),
            Provider::OpenAi(o) => o.account(),
            Provider::Anthropic(a) => a.account(),
        }
    }

    /// The client it is built on.
    fn rest_mut(&mut self) -> &mut rest::Rest {
        match self {
            Provider::Gemini(g) => &mut g.rest,
            Provider::OpenAi(o) => &mut o.rest,
            Provider::Anthropic(a) => &mut a.rest,
        }
    }

    /// Where failed calls are counted.
    pub fn set_errors(&mut self, errors: crate::metrics::ProviderErrors) {
        self.rest_mut().errors = errors;
    }

    /// Sets how hard each call tries.
    pub fn set_patience(&mut self, patience: Patience) {
        self.rest_mut().patience = patience;
    }

    /// Whether a batch's requests go inline in its create (Anthropic)
    /// rather than in an uploaded input file.
    pub fn takes_requests_inline(&self) -> bool {
        matches!(self, Provider::Anthropic(_))
    }

    /// Uploads a batch's input file tagged `tag`; answers its name (empty
    /// where the requests go inline: nothing is uploaded).
    pub async fn upload_input(&self, tag: &str, bytes: &Bytes) -> Result<String, ProviderError> {
        match self {
            Provider::Gemini(g) => g.upload_jsonl(tag, bytes).await,
            Provider::OpenAi(o) => o.upload_input(tag, bytes).await,
            Provider::Anthropic(_) => Ok(String::new()),
        }
    }

    /// Creates the batch of `input_file` for `model`, tagged `tag` (where
    /// the provider keeps tags); `lines` are the input itself, for a
    /// provider that takes requests inline. Answers the batch's name.
    /// Never retried (see `job/create.rs`), but for a create the provider
    /// refused as sent too early (an input file not visible yet), sent
    /// again only once `resend` has recorded the new attempt (it answers
    /// false when it could not: the create is not sent again).
    pub async fn create_batch(
        &self,
        model: &str,
        tag: &str,
        input_file: &str,
        lines: &Bytes,
        resend: &Resend<'_>,
    ) -> Result<String, ProviderError> {
        match self {
            Provider::Gemini(g) => batch_name(&g.create_batch(model, tag, input_file).await?),
            Provider::OpenAi(o) => o.create_batch(model, tag, input_file, resend).await,
            Provider::Anthropic(a) => a.create_batch(lines).await,
        }
    }

    /// Sends one row's synchronous call (`body` from its wire's
    /// [`Wire::online_body`]) for `model`, waiting at most `timeout`.
    pub async fn call_online(
        &self,
        model: &str,
        body: &Value,
        timeout: Duration,
    ) -> Result<OnlineAnswer, OnlineFail> {
        match self {
            Provider::Gemini(g) => g.online(model, body, timeout).await,
            Provider::OpenAi(o) => o.online(body, timeout).await,
            Provider::Anthropic(a) => a.online(body, timeout).await,
        }
    }

    /// Whether batches carry tally's tag. Where they do not (Anthropic),
    /// whose an ended batch is shows in its results: [`Provider::owner`].
    pub fn tags_batches(&self) -> bool {
        !matches!(self, Provider::Anthropic(_))
    }

    /// Whose the untagged batch `name` is.
    pub async fn owner(&self, name: &str) -> Result<Owner, ProviderError> {
        match self {
            Provider::Anthropic(a) => a.owner(name).await,
            Provider::Gemini(_) | Provider::OpenAi(_) => Ok(Owner::Other),
        }
    }

    /// Makes a one-request probe batch tagged `tag` (a witness for
    /// [`crate::lookup`]). Not retried.
    pub async fn create_probe(&self, model: &str, tag: &str) -> Result<(), ProviderError> {
        match self {
            Provider::Gemini(g) => g.create_probe(model, tag).await.map(|_| ()),
            Provider::OpenAi(o) => o.create_probe(model, tag).await,
            Provider::Anthropic(a) => a.create_probe(model).await,
        }
    }

    /// One page of the account's batches, in whatever order the provider
    /// keeps them.
    pub async fn list_batches(&self, token: &str) -> Result<Page<Listed>, ProviderError> {
        match self {
            Provider::Gemini(g) => Ok(gemini::listed(&g.list_batches(token).await?)),
            Provider::OpenAi(o) => o.list_batches(token).await,
            Provider::Anthropic(a) => a.list_batches(token).await,
        }
    }

    /// The batch as GET answers it.
    pub async fn get_batch(&self, name: &str) -> Result<Observed, ProviderError> {
        let (resource, observation) = match self {
            Provider::Gemini(g) => {
                let r = g.get_batch(name).await?;
                let o = tally_core::operation::event_from_batch_resource(&r);
                (r, o)
            }
            Provider::OpenAi(o) => {
                let r = o.get_batch(name).await?;
                let obs = tally_core::operation::event_from_openai_batch(&r);
                (r, obs)
            }
            Provider::Anthropic(a) => {
                let r = a.get_batch(name).await?;
                let obs = tally_core::operation::event_from_anthropic_batch(&r);
                (r, obs)
            }
        };
        let observation = observation.map_err(|e| {
            ProviderError::Protocol(format!("the batch {name} cannot be read: {e}"))
        })?;
        Ok(Observed {
            observation,
            resource,
        })
    }

    /// Asks the provider to cancel the batch (harmless once it ended).
    pub async fn cancel_batch(&self, name: &str) -> Result<(), ProviderError> {
        match self {
            Provider::Gemini(g) => g.cancel_batch(name).await,
            Provider::OpenAi(o) => o.cancel_batch(name).await,
            Provider::Anthropic(a) => a.cancel_batch(name).await,
        }
    }

    /// Removes an ended batch from the account's list, where the provider
    /// can; a batch already gone is not an error.
    pub async fn delete_batch(&self, name: &str) -> Result<(), ProviderError> {
        match self {
            Provider::Gemini(g) => g.delete_batch(name).await,
            // OpenAI keeps every batch: nothing deletes one.
            Provider::OpenAi(_) => Ok(()),
            Provider::Anthropic(a) => a.delete_batch(name).await,
        }
    }

    /// Whether the janitor keeps the batch list short: where batches can
    /// be deleted and carry tally's tag (an untagged Anthropic batch would
    /// have to be read whole to be told; its batches are left to the
    /// provider's own retention).
    pub fn deletes_batches(&self) -> bool {
        matches!(self, Provider::Gemini(_))
    }

    /// One page of the account's files.
    pub async fn list_files(&self, token: &str) -> Result<Page<ListedFile>, ProviderError> {
        match self {
            Provider::Gemini(g) => Ok(gemini::listed_files(&g.list_files(token).await?)),
            Provider::OpenAi(o) => o.list_files(token).await,
            Provider::Anthropic(_) => Ok(Page {
                items: Vec::new(),
                next: None,
            }),
        }
    }

    /// Deletes a file; one already gone is not an error.
    pub async fn delete_file(&self, file: &str) -> Result<(), ProviderError> {
        match self {
            Provider::Gemini(g) => g.delete_file(file).await,
            Provider::OpenAi(o) => o.delete_file(file).await,
            Provider::Anthropic(_) => Ok(()),
        }
    }

    /// The size of an uploaded file, where the provider says (OpenAI).
    pub async fn file_bytes(&self, file: &str) -> Option<u64> {
        match self {
            Provider::Gemini(_) | Provider::Anthropic(_) => None,
            Provider::OpenAi(o) => o.file_bytes(file).await.ok(),
        }
    }

    /// Downloads a file line by line into `sink`.
    pub async fn download(
        &self,
        file: &str,
        sink: &mut (dyn LineSink + Send),
    ) -> Result<(), ProviderError> {
        match self {
            Provider::Gemini(g) => g.download(file, sink).await,
            Provider::OpenAi(o) => o.download(file, sink).await,
            Provider::Anthropic(a) => a.download(file, sink).await,
        }
    }

    /// Uploads a medium file (`display` its tag) for requests to
    /// reference, once the provider has processed it. Asked only of a
    /// provider whose wire [uploads media](Wire::uploads_media).
    pub async fn upload_media(
        &self,
        display: &str,
        mime_type: &str,
        bytes: &Bytes,
    ) -> Result<types::Upload, ProviderError> {
        match self {
            Provider::Gemini(g) => g.upload_media_ready(display, mime_type, bytes).await,
            Provider::OpenAi(_) | Provider::Anthropic(_) => Err(ProviderError::Protocol(
                "this provider takes no media uploads".into(),
            )),
        }
    }
}

/// The `name` of a created batch's answer.
fn batch_name(op: &Value) -> Result<String, ProviderError> {
    op["name"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| ProviderError::Protocol(format!("a batch without a name: {op}")))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    // Invariant: every provider's batch line is one JSON object on one
    // line, holding the request id and the request in that provider's
    // field names, and its length is what the writer answers.
    #[test]
    fn every_providers_line_holds_the_id_and_the_request() {
        let req = json!({"messages": [{"role": "user", "content": "x\ny"}]});
        for api in Api::ALL {
            let wire = wire_of(api);
            assert_eq!(wire.api(), api);
            let shape = wire.line_shape();
            let mut body = b"x".to_vec();
            let n = crate::jsonl::write_line(&mut body, &shape, "k\"1", &req);
            assert_eq!(n, body.len() - 1);
            assert!(body.ends_with(b"\n") && !body[1..body.len() - 1].contains(&b'\n'));
            let line: Value = serde_json::from_slice(&body[1..]).unwrap();
            assert_eq!(line[shape.id], "k\"1", "{api}");
            assert_eq!(line[shape.request], req, "{api}");
            assert_eq!(wire.id_field(), shape.id, "{api}: output read by its id");
        }
        let mut body = Vec::new();
        crate::jsonl::write_line(&mut body, &openai::request::LINE, "k", &req);
        let line: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(line["method"], "POST");
        assert_eq!(line["url"], openai::request::ENDPOINT);
    }
}
