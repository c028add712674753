//! The tally server.
//!
//! - [`config`]: flags and `TALLY_*` variables.
//! - [`server`]: assembly (checks, listeners, services and layers) and the
//!   orderly shutdown; [`background`]: the tasks it runs beside serving.
//! - [`database`]: a configured PostgreSQL or the private one.
//! - [`ledger_service`]: LedgerService handlers; [`validate`] checks their
//!   requests and [`convert`] translates messages.
//! - [`golden_convert`]: golden rows on the wire (SetGoldenRows,
//!   GetGoldenRows, ReportGoldenResults).
//! - [`job_service`]: JobService handlers; [`job_convert`] checks and
//!   translates; [`watch`] fans job events out to WatchJobs streams;
//!   [`alerts`] evaluates review thresholds and delivers alerts.
//! - [`operations_service`]: OperationsService handlers and their message
//!   translations; [`webhook`]: the signed provider webhook receiver on its
//!   own HTTP listener ([`http_listener`]: its timeouts and connection
//!   cap, shared with the metrics listener); [`wakeup`]: LISTEN/NOTIFY
//!   wake-ups for watch streams.
//! - [`purger`]: the background purge of deleted ledgers.
//! - [`status`]: the one mapping from errors to gRPC statuses.
//! - [`auth`]: who may call what (one tower layer, one table); [`limits`]:
//!   concurrency, timeouts and stream ages (another layer); [`tls`]: TLS
//!   and mTLS settings; [`rpc_metrics`]: per-call counts and durations
//!   ([`rpc_trace`]: each call's trace span)
//!   (a third layer); [`write_timeout`]: clients that stop reading are
//!   cut off; [`intake`]: request sizes, the request-memory budget and row
//!   counts read from the wire before decoding ([`wire`]). The four
//!   layers share their tower plumbing ([`middleware`]).
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
pub mod convert;
pub mod database;
pub mod golden_convert;
pub mod health;
pub mod health_check;
pub use tally_telemetry::http_listener;
pub mod intake;
pub mod job_convert;
pub mod job_service;
pub mod ledger_metrics;
pub mod ledger_service;
pub mod limits;
pub mod maintenance;
pub mod metrics;
pub mod middleware;
pub mod operations_service;
pub mod paging;
pub mod purger;
pub mod responses;
pub mod rpc_metrics;
pub mod rpc_trace;
pub mod server;
pub mod status;
pub mod tls;
pub mod validate;
pub mod wakeup;
pub mod watch;
pub mod webhook;
pub mod wire;
pub mod write_timeout;
