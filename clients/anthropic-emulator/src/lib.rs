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
//! (JSONL); every response names a `request-id`; `GET /_emulator/stats`,
//! `GET|POST /_emulator/faults` (no key).
//!
//! Layout, foundations first: [`error`] the one error shape and its types;
//! [`ids`] Anthropic-shaped ids; [`faults`] the fault plan and its
//! matching; [`config`] what it is started with; [`requests`] a create's
//! requests and their checks; [`page`] cursor pages; [`stats`] what tests
//! check; [`batches`] a batch as data; [`answer`] one request's result;
//! `service` the shared state and batch lifecycle; `routes` the layers and
//! thin handlers. From `emulator_kit`: ids, counted faults, models, prompt
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
pub mod ids;
pub mod page;
pub mod requests;
mod routes;
mod service;
pub mod stats;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use emulator_kit::serve::{Listener, Server};

pub use config::{API_VERSIONS, DEFAULT_API_KEY, EmulatorConfig, Models, Timing};
pub use error::ErrorType;
pub use faults::{
    BatchFault, BatchMatch, BatchRule, FaultPlan, FaultPlanError, LostAnswer, LostMode, RateLimit,
    RowFault, RowMatch, RowRule, Times,
};
pub use stats::{Outcome, Stats, Submission};

use service::Shared;

/// A running emulator. Dropping it stops its background work; prefer
/// [`Emulator::shutdown`], which also waits for it.
pub struct Emulator {
    shared: Arc<Shared>,
    server: Server,
}

impl Emulator {
    /// Binds `addr` (port 0 picks a free port) and starts serving.
    pub async fn start(addr: SocketAddr, config: EmulatorConfig) -> io::Result<Emulator> {
        let listener = Listener::bind(addr).await?;
        let shared = Shared::new(config, listener.base_url())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let app = routes::router(Arc::clone(&shared));
        let server = Server::spawn(
            "anthropic emulator",
            listener,
            app,
            shared.shutdown.clone(),
            shared.tasks.clone(),
        );
        Ok(Emulator { shared, server })
    }

    /// The address it listens on (loopback if bound to an unspecified one).
    pub fn local_addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    /// `http://127.0.0.1:PORT`, *without* `/v1`: what the SDK's `base_url`
    /// wants (it adds `/v1/…` itself); the emulator's own endpoints live
    /// under `{base_url}/_emulator`.
    pub fn base_url(&self) -> String {
        self.shared.base_url.clone()
    }

    /// The first API key it accepts.
    pub fn api_key(&self) -> &str {
        &self.shared.api_keys[0]
    }

    /// A snapshot of the counters, submission history and models.
    pub fn stats(&self) -> Stats {
        self.shared.stats()
    }

    /// Replaces the fault plan; its counters start afresh.
    pub fn set_faults(&self, plan: FaultPlan) -> Result<(), FaultPlanError> {
        self.shared.set_faults(plan)
    }

    /// Stops accepting, ends batch lifecycles, and waits (a few seconds at
    /// most) for them to finish.
    pub async fn shutdown(self) {
        self.server.shutdown().await;
    }
}
