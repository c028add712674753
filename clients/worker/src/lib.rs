//! tally-worker: claims rows from a tally ledger, runs them as batch jobs at
//! one provider (Gemini, OpenAI or an OpenAI-compatible server, Anthropic:
//! see [`provider`]), and reports what became of every row. It holds no
//! state that matters: what it learns is written to tally before it acts on
//! it, so a worker killed at any line leaves nothing another cannot finish.
//!
//! Layout, from the bottom up — pure modules (unit-tested, no I/O):
//! - [`prompt`]: a row's prompt rendered (Jinja), whatever the provider;
//! - [`jsonl`]: batch lines written in a provider's shape, read as a
//!   stream, and packed under row, byte and token bounds;
//! - [`output`]: output lines matched to rows by request id, each turned
//!   into an outcome by the provider's decoder, answer text judged alike;
//! - `refusal`: what a refused call asks of tally (wait, fix, stop);
//!   `waits`: how long refusals naming no delay wait, until a pause;
//! - [`lookup`]: what a search of the provider's batch list proves (a
//!   batch made, or never made), whatever the list's order and lag;
//! - `tags`: the names tally gives its files, batches and requests;
//!   `bounds`: the sizes the worker refuses past;
//! - [`config`]: flags and environment; `arg`: flag values that never
//!   print as given.
//!
//! [`provider`]: each provider in its folder (client, request, output,
//! refusal, flags) behind one dispatch: the only place a provider is
//! chosen. [`metrics`]: `/metrics`, `/livez`, `/healthz`. [`media`]: a
//! row's files read from `--media-root` or allowed hosts; `attach` turns
//! them into the provider's parts.
//!
//! I/O above them: `ctx` what the tasks share; `holders` who holds the
//! ledger's jobs (this process, and whether another holder is gone); [`job`] one job's life from
//! claim to FinishJob (its create, reconcile, refused, settle, heartbeat,
//! golden, gone, end steps); `janitor` what tally leaves at the provider;
//! [`worker`] the loop ([`run_until`]).
//!
//! Not here: classification (the server classifies the facts the worker
//! reports), retry scheduling of rows (the ledger's backoff).

mod arg;
mod attach;
mod bounds;
pub mod config;
mod ctx;
mod holders;
mod janitor;
pub mod job;
pub mod jsonl;
pub mod lookup;
pub mod media;
pub mod metrics;
pub mod output;
pub mod prompt;
pub mod provider;
mod refusal;
mod tags;
mod waits;
pub mod worker;

pub use config::WorkerArgs;
pub use provider::ApiKey;
pub use worker::{RunReport, WorkerError, run_serving, run_until};
