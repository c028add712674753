//! OperationsService: provider batch operations and their event log.
//!
//! - [`service`]: the tonic service ([`Operations`]), its thin handlers,
//!   the WatchOperations stream and the ingest metrics (which the webhook
//!   receiver records too).
//! - [`validate`]: request checks (operation names, IngestEvent's event).
//! - [`convert`]: operations, events and transitions to `tally.v1`
//!   messages, operation states, microsecond times and page cursors.

pub mod convert;
pub mod service;
pub mod validate;

pub use service::Operations;
