//! tally's domain, as pure functions and plain data: no I/O, no clock, no
//! randomness (time and jitter samples are arguments), no tokio, sqlx or
//! tonic. Everything here is tested without a database.
//!
//! - [`webhook`]: Standard Webhooks signing and verification.
//! - [`operation`]: the monotonic reducer for provider operations, state
//!   spellings and operation-name normalization.
//! - the row state machine, classifier, backoff, keys and validation live in
//!   their own modules.

pub mod operation;
pub mod webhook;
