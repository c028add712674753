//! JobService: batch jobs, their events and named locks.
//!
//! - [`service`]: the tonic service ([`Jobs`]) and its thin handlers.
//! - [`validate`]: request checks (job names and the claims fencing them,
//!   batch names, final states, lock TTLs); ledger and
//!   claim names are checked by [`crate::ledger::validate`].
//! - [`convert`]: jobs, job events, locks and job states to `tally.v1`
//!   messages; a job's claim, pause and golden rows are converted by
//!   [`crate::ledger`].
//! - [`media`]: the media uploads register's requests (checks and
//!   conversions).
//! - [`watch`]: which job events a WatchJobs stream shows ([`crate::tasks::tail`]
//!   follows the log, [`crate::tasks::wakeup`] wakes it).

pub mod convert;
pub mod media;
pub mod service;
pub mod validate;
pub mod watch;

pub use service::Jobs;
