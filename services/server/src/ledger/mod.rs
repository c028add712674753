//! LedgerService: ledgers, rows, claims, prompts and golden rows.
//!
//! - [`service`]: the tonic service ([`Ledgers`]) and its thin handlers.
//! - [`validate`]: request checks, each a request to store inputs or
//!   INVALID_ARGUMENT naming every bad field; also the ledger and claim
//!   names and the lease that JobService checks the same way.
//! - [`convert`]: store records and domain types to and from `tally.v1`
//!   messages (ledger, policy, row, claim, prompt, verdict, failure).
//! - [`golden`]: golden rows on the wire, checked and converted
//!   (SetGoldenRows, GetGoldenRows, and JobService's ReportGoldenResults).
//!
//! Timestamps and durations are [`crate::edge::wire_convert`].

pub mod convert;
pub mod golden;
pub mod metrics;
pub mod service;
pub mod validate;

pub use service::Ledgers;
