//! openai-emulator: a faithful local stand-in for the OpenAI Files and
//! Batch API, with deterministic, configurable fault injection. It models
//! the provider (its API reference and the official `openai` Python SDK),
//! never our worker. Tests start it in-process on port 0; the SDK suite
//! (`tests/sdk-openai`) runs the binary.
//!
//! The surface, under `{base_url}/v1`, every call with `Authorization:
//! Bearer <key>`: `POST|GET /files`, `GET|DELETE /files/{id}`,
//! `GET /files/{id}/content`, `POST|GET /batches`, `GET /batches/{id}`,
//! `POST /batches/{id}/cancel`; signed Standard Webhooks `batch.*` events;
//! `GET /_emulator/stats`, `GET|POST /_emulator/faults` (no key).
//!
//! Layout, foundations first: [`error`] the one error shape; [`ids`]
//! OpenAI-shaped ids; [`config`] what it is started with; [`faults`] the
//! fault plan and its matching; [`input`] validating input files;
//! [`answer`] answering one line; [`files`] and [`batches`] resources as
//! data; [`webhooks`] event payloads; [`stats`] what tests check; `service`
//! the shared state and batch lifecycle; `routes` the thin handlers. From
//! `emulator_kit`: schema instances, signing and delivery. Everything but
//! `service` and `routes` is pure.
//!
//! Options where the API promised nothing (list order, list lag, what
//! cancelling a finished batch answers, partial results of a cancel) live
//! in the fault plan or the config.

pub mod answer;
pub mod batches;
pub mod config;
pub mod error;
pub mod faults;
pub mod files;
pub mod ids;
pub mod input;
mod routes;
mod service;
pub mod stats;
pub mod webhooks;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use emulator_kit::serve::{Listener, Server};

pub use config::{DEFAULT_API_KEY, EmulatorConfig, ListOrder, Models, Timing, WebhookTarget};
pub use faults::{
    BatchFault, BatchMatch, BatchRule, CancelFinished, FaultPlan, FaultPlanError, LineErrorSpec,
    LostAnswer, LostMode, RateLimit, RowFault, RowMatch, RowRule, Times,
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
            "openai emulator",
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

    /// `http://127.0.0.1:PORT`, *without* `/v1`: the API lives under
    /// `{base_url}/v1` (what the SDK's `base_url` wants), the emulator's own
    /// endpoints under `{base_url}/_emulator`.
    pub fn base_url(&self) -> String {
        self.shared.base_url.clone()
    }

    /// The first API key it accepts.
    pub fn api_key(&self) -> &str {
        &self.shared.api_keys[0]
    }

    /// A snapshot of the counters and submission history.
    pub fn stats(&self) -> Stats {
        self.shared.stats()
    }

    /// Replaces the fault plan; its counters start afresh.
    pub fn set_faults(&self, plan: FaultPlan) -> Result<(), FaultPlanError> {
        self.shared.set_faults(plan)
    }

    /// Stops accepting, ends batch lifecycles and webhook deliveries, and
    /// waits (a few seconds at most) for them to finish.
    pub async fn shutdown(self) {
        self.server.shutdown().await;
    }
}
