//! openai-emulator: a faithful local stand-in for the OpenAI Files and
//! Batch API, with deterministic, configurable fault injection. It models
//! the provider (its API reference and the official `openai` Python SDK),
//! never our worker. Tests start it in-process on port 0; the SDK suite
//! (`tests/sdk-openai`) runs the binary.
//!
//! The surface, under `{base_url}/v1`, every call with `Authorization:
//! Bearer <key>`: `POST|GET /files`, `GET|DELETE /files/{id}`,
//! `GET /files/{id}/content`, `POST|GET /batches`, `GET /batches/{id}`,
//! `POST /batches/{id}/cancel`; `POST /chat/completions` and
//! `POST /responses` (synchronous, with `service_tier`); signed Standard
//! Webhooks `batch.*` events;
//! `GET /_emulator/stats`, `GET|POST /_emulator/faults` (no key).
//!
//! Layout, foundations first: [`error`] the one error shape; [`ids`]
//! OpenAI-shaped ids; [`config`] what it is started with; [`faults`] the
//! fault plan and its matching; [`input`] validating input files;
//! [`answer`] answering one line; [`online`] the synchronous endpoints'
//! tiers, refusals and headers; [`files`] and [`batches`] resources as
//! data; [`seed`] an account's batches at start; [`webhooks`] event payloads; [`stats`] what tests check; `service`
//! the shared state and batch lifecycle; `routes` the thin handlers; `handle`
//! the kit's view of both. From
//! `emulator_kit`: schema instances, signing and delivery. Everything but
//! `service` and `routes` is pure.
//!
//! Options where the API promised nothing (list order, list lag, what
//! cancelling a finished batch answers, partial results of a cancel, how
//! long an upload takes to be visible to a create) live in the fault plan
//! or the config; so does an account that already holds many batches
//! ([`EmulatorConfig::seed_batches`]).

pub mod answer;
pub mod batches;
pub mod config;
pub mod error;
pub mod faults;
pub mod files;
mod handle;
pub mod ids;
pub mod input;
pub mod online;
mod routes;
pub mod seed;
mod service;
pub mod stats;
pub mod webhooks;

pub use config::{
    DEFAULT_API_KEY, EmulatorConfig, Latency, ListOrder, Models, OnlineConfig, Timing,
    WebhookTarget,
};
pub use emulator_kit::requests::RequestStats;
pub use faults::{
    BatchFault, BatchMatch, BatchRule, CancelFinished, FaultPlan, FaultPlanError,
    FileVisibilityLag, LineErrorSpec, LostAnswer, LostMode, RateLimit, RowFault, RowMatch, RowRule,
    Times,
};
pub use stats::{Outcome, Stats, Submission};

/// A running emulator: the kit's handle over this crate's state.
pub type Emulator = emulator_kit::emulator::Emulator<service::Shared>;
