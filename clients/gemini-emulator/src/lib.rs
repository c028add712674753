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
//! - signed Standard Webhooks deliveries of batch state changes;
//! - `GET /_emulator/stats`, `GET|POST /_emulator/faults` (no key) for demos.
//!
//! Layout: [`config`] what it is started with; [`faults`] the fault plan
//! and its matching; [`output`] answering rows and building output files;
//! [`files`] and [`batches`] files, uploads and batches as data;
//! [`webhooks`] event payloads; [`stats`] what tests check; `service` the
//! shared state and batch lifecycle; `routes` the thin HTTP handlers.
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
//! Not emulated: synchronous `generateContent` and dynamic (per-request)
//! webhooks.

pub mod batches;
pub mod config;
pub mod error;
pub mod faults;
pub mod files;
pub mod ids;
pub mod kind;
pub mod media;
pub mod output;
mod routes;
mod service;
pub mod stats;
pub mod webhooks;

pub use emulator_kit::{schema_instance, signing};

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use emulator_kit::serve::{Listener, Server};

pub use config::{EmulatorConfig, Models, Timing, WebhookPayload, WebhookTarget};
pub use faults::{
    CreateRefusal, FaultPlan, FaultPlanError, JobFault, JobMatch, JobRule, ListOrder,
    RowErrorFormat, RowFault, RowMatch, RowRule,
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
            "gemini emulator",
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

    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        self.shared.base_url.clone()
    }

    /// The API key it accepts.
    pub fn api_key(&self) -> &str {
        &self.shared.api_key
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
