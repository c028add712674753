//! gemini-emulator: a faithful local stand-in for the subset of the Gemini
//! API REST surface the tally worker uses, with deterministic, configurable
//! fault injection. Tests start it in-process on port 0; the demo runs the
//! binary.
//!
//! The surface (every call needs the API key, `x-goog-api-key` or `?key=`):
//! - `POST /upload/v1beta/files` — resumable upload (start, then
//!   `upload, finalize` at the returned `x-goog-upload-url`);
//! - `GET /v1beta/files/{id}` — the file; `GET /v1beta/files/{id}:download?alt=media`
//!   and `GET /download/v1beta/files/{id}:download?alt=media` — its bytes;
//! - `POST /v1beta/models/{model}:batchGenerateContent` — create a batch from a
//!   JSONL input file; `GET /v1beta/batches/{id}`, `GET /v1beta/batches`,
//!   `POST /v1beta/batches/{id}:cancel`;
//! - `POST /v1beta/models/{model}:generateContent` — one synchronous request
//!   with `serviceTier` (flex, priority), within the account's per-minute
//!   limits ([`online`]: its tiers and refusals);
//! - signed Standard Webhooks deliveries of batch state changes;
//! - `GET /_emulator/stats`, `GET|POST /_emulator/faults` (no key) for demos.
//!
//! Layout: [`config`] what it is started with; [`faults`] the fault plan
//! and its matching; [`output`] answering rows and building output files;
//! [`files`] and [`batches`] files, uploads and batches as data;
//! [`webhooks`] event payloads; [`stats`] what tests check; [`error`] the
//! provider's error bodies; `ids` resource names; `kind` what a batch does
//! (generate or embed); `service` the
//! shared state and batch lifecycle; `routes` the thin HTTP handlers;
//! `handle` the kit's view of both.
//! From `emulator_kit` (shared with the OpenAI emulator): [`schema_instance`]
//! minimal JSON values for response schemas, [`signing`] the Standard
//! Webhooks signer, and the webhook delivery. Everything but `service`,
//! `routes` and delivery is pure and unit-tested without a server.
//!
//! Options for what the provider never promised one way (see the README's
//! fidelity table): webhook payloads (`WebhookPayload`), the models a
//! project may batch (`Models`), list order, refusals of any status, 404s
//! for batches that exist (the fault plan).
//!
//! Not emulated: streaming, and dynamic (per-request) webhooks.

pub mod batches;
pub mod config;
pub mod error;
pub mod faults;
pub mod files;
mod handle;
pub mod ids;
pub mod kind;
pub mod media;
pub mod online;
pub mod output;
mod routes;
mod service;
pub mod stats;
pub mod webhooks;

pub use emulator_kit::{schema_instance, signing};

pub use config::{
    EmulatorConfig, Latency, Models, OnlineConfig, Timing, WebhookPayload, WebhookTarget,
};
pub use emulator_kit::requests::RequestStats;
pub use faults::{
    CreateRefusal, FaultPlan, FaultPlanError, JobFault, JobMatch, JobRule, ListOrder,
    RowErrorFormat, RowFault, RowMatch, RowRule,
};
pub use stats::{Outcome, Stats, Submission};

/// A running emulator: the kit's handle over this crate's state.
pub type Emulator = emulator_kit::emulator::Emulator<service::Shared>;
