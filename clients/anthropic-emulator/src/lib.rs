//! anthropic-emulator: a faithful local stand-in for the Anthropic Message
//! Batches API, with deterministic, configurable fault injection. It models
//! the provider (its API reference and the official `anthropic` Python
//! SDK), never our worker. Tests start it in-process on port 0; the SDK
//! suite (`tests/sdk-anthropic`) runs the binary. Anthropic sends no batch
//! webhooks, so neither does the emulator.
//!
//! The surface, under `{base_url}/v1`, every call with `x-api-key: <key>`
//! (or `Authorization: Bearer <key>`) and `anthropic-version`:
//! `POST|GET /messages/batches`, `GET|DELETE /messages/batches/{id}`,
//! `POST /messages/batches/{id}/cancel`, `GET /messages/batches/{id}/results`
//! (JSONL); `POST /messages` (synchronous, within the account's per-minute
//! limits: [`online`]); every response names a `request-id`; `GET /_emulator/stats`,
//! `GET|POST /_emulator/faults` (no key).
//!
//! Layout, foundations first: [`error`] the one error shape and its types;
//! [`ids`] Anthropic-shaped ids; [`faults`] the fault plan and its
//! matching; [`config`] what it is started with; [`requests`] a create's
//! requests and their checks; [`page`] cursor pages; [`stats`] what tests
//! check; [`batches`] a batch as data; [`answer`] one request's result;
//! `service` the shared state and batch lifecycle; `routes` the layers and
//! thin handlers; `handle` the kit's view of both. From `emulator_kit`: ids, counted faults, models, prompt
//! text, schema instances, serving. Everything but `service` and `routes`
//! is pure.
//!
//! Options where the API promised nothing (list lag, how many requests of
//! a canceled or expired batch still finish, what a results call before the
//! end answers) live in the fault plan or the config; see the README.

pub mod answer;
pub mod batches;
pub mod config;
pub mod error;
pub mod faults;
mod handle;
pub mod ids;
pub mod online;
pub mod page;
pub mod requests;
mod routes;
mod service;
pub mod stats;

pub use config::{
    API_VERSIONS, DEFAULT_API_KEY, EmulatorConfig, Latency, Models, OnlineConfig, Timing,
};
pub use emulator_kit::requests::RequestStats;
pub use error::ErrorType;
pub use faults::{
    BatchFault, BatchMatch, BatchRule, FaultPlan, FaultPlanError, LostAnswer, LostMode, RateLimit,
    RowFault, RowMatch, RowRule, Times,
};
pub use stats::{Outcome, Stats, Submission};

/// A running emulator: the kit's handle over this crate's state.
pub type Emulator = emulator_kit::emulator::Emulator<service::Shared>;
