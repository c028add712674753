//! The tally server: six rooms, each using only the rooms listed before it.
//!
//! 1. [`config`]: flags and `TALLY_*` variables ([`config::roles`]: the
//!    roles tokens and certificates hold; [`config::health`]: the
//!    `tally-server health` flags).
//! 2. [`metrics`]: the Prometheus registry every room records into.
//! 3. [`edge`]: what every gRPC call passes through before a handler sees
//!    it, in the order of the layers: connections, TLS identity,
//!    [`edge::auth`] (who may call what), [`edge::limits`] and
//!    [`edge::principal`] (what one caller may take), [`edge::intake`]
//!    (every request judged from the wire before decoding), per-call
//!    metrics and traces; and what every answer passes through:
//!    [`edge::status`] (errors to gRPC statuses), [`edge::responses`]
//!    (response byte budgets), [`edge::paging`] (page tokens),
//!    [`edge::wire_convert`] (protobuf's well-known types).
//! 4. [`tasks`]: what runs beside serving: the health probe, the backlog
//!    gauges, review alerts and webhook consumers' POSTs, the purger of
//!    deleted ledgers, the runnable
//!    queue's vacuum, and the one LISTEN hub ([`tasks::wakeup`]) that watch
//!    streams follow ([`tasks::tail`]).
//! 5. The services, each laid out the same way: `service.rs` (the tonic
//!    service and its thin handlers), `validate.rs` (request checks,
//!    INVALID_ARGUMENT with field violations) and `convert.rs` (store
//!    records to and from `tally.v1` messages):
//!    - LedgerService in [`ledger`] ([`ledger::golden`]: golden rows on the
//!      wire; [`ledger::metrics`]: what its handlers count);
//!    - JobService in [`job`] ([`job::watch`]: the events a WatchJobs
//!      stream shows);
//!    - OperationsService in [`operations`];
//!    - DeliveryService in [`delivery`] (its webhook sender is
//!      [`tasks::webhooks`]);
//!    - the signed provider webhook receiver in [`webhook`], on its own
//!      HTTP listener ([`http_listener`]: timeouts and connection cap,
//!      shared with the metrics listener).
//!
//!    A service whose messages embed another's resource (a job's claim,
//!    pause and golden rows) uses that service's conversions.
//! 6. [`startup`]: assembly (checks, listeners, services and layers), the
//!    background tasks started beside serving, the database (configured or
//!    private), TLS, the orderly shutdown, and the `tally-server health`
//!    check for a container's HEALTHCHECK.
//!
//! Not here: SQL (`tally-store`) and domain rules (`tally-core`).
//! `python3 tests/circles.py` checks that no module imports one that
//! imports it back.

pub mod config;
pub mod metrics;

pub mod edge;

pub mod tasks;

pub use tally_telemetry::http_listener;
pub mod delivery;
pub mod job;
pub mod ledger;
pub mod operations;
pub mod webhook;

pub mod startup;
