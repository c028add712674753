//! The integration tests of this crate, one executable (one link of tokio,
//! tonic and sqlx instead of one per file). Each module is one area.
//!
//! Run one area: `cargo test -p tally-worker --test worker <module>::`.

mod common;
mod e2e_anthropic;
mod e2e_cache;
mod e2e_create;
mod e2e_faults;
mod e2e_fill;
mod e2e_golden;
mod e2e_limits;
mod e2e_logs;
mod e2e_media;
mod e2e_metrics;
mod e2e_online;
mod e2e_openai;
mod e2e_output;
mod e2e_partial;
mod e2e_pause;
mod e2e_providers;
mod e2e_quota;
mod e2e_refusals;
mod e2e_responses;
mod e2e_restart;
mod e2e_search;
mod e2e_sixty;
mod e2e_spend;
mod e2e_stuck;
mod e2e_tpm;
mod e2e_trace;
mod png;
