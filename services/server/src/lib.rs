//! The tally server.
//!
//! - [`config`]: flags and `TALLY_*` variables.
//! - [`server`]: assembly (checks, listeners, services and layers) and the
//!   orderly shutdown; [`background`]: the tasks it runs beside serving.
//! - [`database`]: a configured PostgreSQL or the private one.
//! - The three gRPC services, each laid out the same way: `service.rs`
//!   (the tonic service and its thin handlers), `validate.rs` (request
//!   checks, INVALID_ARGUMENT with field violations) and `convert.rs`
//!   (store records to and from `tally.v1` messages):
//!   - LedgerService in [`ledger`], with [`ledger::golden`] for golden
//!     rows on the wire ([`ledger_metrics`]: what its handlers count);
//!   - JobService in [`job`], with [`job::watch`] choosing the job events
//!     a WatchJobs stream shows;
//!   - OperationsService in [`operations`].
//!
//!   A service whose messages embed another's resource (a job's claim,
//!   pause and golden rows) uses that service's conversions. Only the
//!   conversions every service shares, protobuf's `Timestamp` and
//!   `Duration`, are in [`wire_convert`].
//! - [`alerts`]: evaluates review thresholds and delivers alerts.
//! - [`webhook`]: the signed provider webhook receiver on its own HTTP
//!   listener ([`http_listener`]: its timeouts and connection cap, shared
//!   with the metrics listener); [`wakeup`]: the one LISTEN hub for both
//!   commit-ordered logs; [`tail`]: following a log for a watch stream
//!   (WatchJobs and WatchOperations).
//! - [`purger`]: the background purge of deleted ledgers; [`backlog`]:
//!   the backlog gauges' refresher; [`maintenance`]: vacuuming the
//!   runnable queue.
//! - [`status`]: the one mapping from errors to gRPC statuses.
//! - [`auth`]: who may call what (one tower layer, one table); [`limits`]:
//!   concurrency, timeouts and stream ages (another layer), with
//!   [`principal`]: what one caller may take over all its connections;
//!   [`tls`]: TLS and mTLS settings; [`rpc_metrics`]: per-call counts and
//!   durations ([`rpc_trace`]: each call's trace span)
//!   (a third layer); [`connections`]: the gRPC port's connection cap, and
//!   connections that never call or stop reading are cut off; [`intake`]:
//!   request sizes, the request-memory budget and every list's entries
//!   judged from the wire before decoding ([`wire`]). The four layers
//!   share their tower plumbing ([`middleware`]).
//! - [`responses`]: response byte budgets (claims stop, pages end, before
//!   a client's receive limit).
//! - [`health`], [`metrics`], [`paging`], [`caller`]; [`health_check`]:
//!   the `tally-server health` client for a container's HEALTHCHECK.
//!
//! Not here: SQL (`tally-store`) and domain rules (`tally-core`).

pub mod alerts;
pub mod auth;
pub mod background;
pub mod backlog;
pub mod caller;
pub mod config;
pub mod connections;
pub mod database;
pub mod health;
pub mod health_check;
pub use tally_telemetry::http_listener;
pub mod intake;
pub mod job;
pub mod ledger;
pub mod ledger_metrics;
pub mod limits;
pub mod maintenance;
pub mod metrics;
pub mod middleware;
pub mod operations;
pub mod paging;
pub mod principal;
pub mod purger;
pub mod responses;
pub mod rpc_metrics;
pub mod rpc_trace;
pub mod server;
pub mod status;
pub mod tail;
pub mod tls;
pub mod wakeup;
pub mod webhook;
pub mod wire;
pub mod wire_convert;
