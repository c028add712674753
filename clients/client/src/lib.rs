//! tally-client: the Rust client library for tally's `tally.v1` API.
//!
//! - [`connect`]: one lazily connected channel (TLS with the system roots or
//!   a private CA) with the bearer token, and the four service clients
//!   over it (DeliveryService's for `tallyctl consume`), for tally-worker and
//!   tallyctl alike;
//! - [`retry`]: retrying calls that failed for reasons that pass
//!   (UNAVAILABLE, RESOURCE_EXHAUSTED, …) with capped exponential backoff;
//! - [`operations`]: feeding provider observations into OperationsService,
//!   so the worker's reconciliation poller and the provider's webhooks meet
//!   in the same server-side reducer.
//!
//! Not here: key derivation helpers (tally-core `keys`), the worker itself
//! (tally-worker).

pub mod connect;
pub mod operations;
pub mod retry;

pub use connect::{
    AuthChannel, Bearer, Clients, ConnectError, MAX_MESSAGE_BYTES, Target, Tls, connect,
};
pub use operations::{
    IngestError, batch_resource_event, ingest_batch_resource, ingest_observation, observation_event,
};
pub use retry::{
    RetryPolicy, error_reason, is_transient, retry_delay, rows_per_call_limit, with_retry,
};
