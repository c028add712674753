//! Provider operations: the one door every change of an operation's state
//! goes through, and the event log behind it.
//!
//! [`Store::ingest_event`] is read → decide → compare-and-swap:
//!
//! 1. the delivery id (if any) is inserted into `operation_deliveries`; a
//!    conflict means the webhook was delivered before (`duplicate_event`);
//! 2. the operation's state, provider time and version are read;
//! 3. [`tally_core::operation::reduce`] (pure) decides: applied, dropped or
//!    recorded;
//! 4. an applied event is written conditioned on the version read
//!    (`UPDATE … WHERE name = $1 AND version = $2`), or, on first sighting,
//!    inserted with `ON CONFLICT DO NOTHING`; zero rows means another writer
//!    got there first, and steps 2–4 run again on what it wrote. A drop needs
//!    no guard: the operation only moves forward, and an event dropped
//!    against a state is dropped against every later one too;
//! 5. an applied state moves the linked job on (JobService's
//!    `job_link::follow_provider`) in the same transaction ([`job_link`]);
//! 6. the event is appended to `operation_events` with its verdict and
//!    reason, under a sequence number assigned in commit order (see
//!    [`crate::event_log`]), and an applied event wakes watchers with `NOTIFY`.
//!
//! Readers: [`Store::get_operation`], [`Store::list_operations`],
//! [`Store::list_operation_events`], [`Store::operation_transitions`]
//! (WatchOperations pages) and [`Store::last_operation_sequence`].

//!
//! Files: `records` (what goes in and comes out, and their stored codes),
//! `ingest` (the reducer's write path above), `read` (the readers),
//! `job_link` (the job each operation moves on).

mod ingest;
mod job_link;
mod read;
mod records;
pub(crate) use job_link::catch_up;
pub use records::*;

pub use job_link::{ProviderMove as JobMove, ProviderMove, follow_provider};

use crate::codes::Code;

/// An event the reducer applied, as SQL compares with it.
const APPLIED: Code = Code::new(EventVerdict::Applied.code());

/// How many times one event re-reads after losing the compare-and-swap
/// before giving up with ABORTED (each loss means another event for the
/// same operation was applied, so this only trips under absurd contention).
const MAX_CAS_ATTEMPTS: u32 = 64;

/// How many times a whole ingest transaction is retried after a deadlock
/// or serialization failure.
const MAX_TX_ATTEMPTS: u32 = 5;

/// Longest text kept per event field; longer provider text is cut.
const MAX_RAW_STATE: usize = 128;
const MAX_OUTPUT_FILE: usize = 2048;
const MAX_ERROR_CODE: usize = 256;
const MAX_ERROR_MESSAGE: usize = 4096;
/// Longest delivery id accepted (callers reject longer ones).
pub const MAX_EVENT_ID: usize = 256;
