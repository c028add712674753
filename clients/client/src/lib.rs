//! tally-client: the Rust client library for tally's `tally.v1` API.
//!
//! - [`operations`]: feeding provider observations into OperationsService,
//!   so the worker's reconciliation poller and the provider's webhooks meet
//!   in the same server-side reducer.
//!
//! Not here (yet): key derivation helpers, retries on UNAVAILABLE, the
//! worker itself.

pub mod operations;

pub use operations::{IngestError, batch_resource_event, ingest_batch_resource};
