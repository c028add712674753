//! DeliveryService: a ledger's named consumers and the results they are
//! handed (issue 52; the rules are `tally_core::delivery`, the statements
//! `tally_store::consumers`).
//!
//! - [`service`]: the tonic service ([`Deliveries`]) and its thin handlers;
//!   ReceiveResults' long poll.
//! - [`validate`]: request checks (consumer names, settings, positions,
//!   starts), INVALID_ARGUMENT with field violations, nothing written.
//! - [`convert`]: consumers, results, dead letters and webhook POSTs to
//!   `tally.v1` messages.
//!
//! The webhook sender that drives WEBHOOK consumers is a background task:
//! [`crate::tasks::webhooks`].

pub mod convert;
pub mod service;
pub mod validate;

pub use service::Deliveries;
