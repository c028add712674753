//! tally-worker: claims rows from a tally ledger, runs them as batch jobs at
//! one provider (Gemini, OpenAI or an OpenAI-compatible server: see
//! [`provider`]), and reports what became of every row. It holds no state that
//! matters: what it learns is written to tally before it acts on it, so a
//! worker killed at any line leaves nothing another cannot finish.
//!
//! Layout — pure modules (unit-tested, no I/O):
//! - [`prompt`]: rendering a row's prompt (Jinja) into a provider request
//!   (Gemini's, or OpenAI's in [`prompt::openai`]);
//! - [`jsonl`]: input lines and packing them under row and byte bounds;
//! - [`output`]: matching output lines to rows by key and turning each
//!   into an outcome for ReportOutcomes (OpenAI's in [`output::openai`]);
//! - [`lookup`]: what a search of the provider's batch list proves (a
//!   batch made, or never made), whatever the list's order and lag;
//! - `tags`: the names tally gives its files and batches; `gone`: when
//!   404s mean a batch is gone; `end`: how a job task ends;
//! - [`config`]: flags and environment.
//!
//! [`metrics`]: the worker's `/metrics`, `/livez` and `/healthz`.
//!
//! I/O: [`provider`] the one interface to every provider's Batch API over
//! REST (upload, create, get, list, delete, download, with the retries each
//! needs); `ctx` what the tasks
//! share; `create` a batch made without ever paying twice; [`job`] one
//! job's life from claim to its batch's end, `reconcile` from there to
//! FinishJob, `heartbeat` its claim's lease; `janitor` what tally leaves at
//! the provider; [`worker`] the loop ([`run_until`]).
//!
//! Not here: classification (the server classifies the facts the worker
//! reports), retry scheduling of rows (the ledger's backoff).

mod attach;
mod bounds;
pub mod config;
mod create;
mod ctx;
mod end;
mod golden;
mod gone;
mod heartbeat;
mod janitor;
pub mod job;
pub mod jsonl;
pub mod lookup;
pub mod media;
pub mod metrics;
pub mod output;
pub mod prompt;
pub mod provider;
mod reconcile;
mod refusal;
mod refused;
mod settle;
mod tags;
pub mod worker;

pub use config::WorkerArgs;
pub use provider::ApiKey;
pub use worker::{RunReport, WorkerError, run_serving, run_until};
