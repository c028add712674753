//! The integration tests of this crate, one executable (one link of tokio,
//! tonic and sqlx instead of one per file). Each module is one area.
//!
//! Run one area: `cargo test -p tally-server --test server <module>::`.

mod bounds;
mod cache;
mod crash;
mod delete;
mod delivery;
mod fill;
mod health_check;
mod intake;
mod jobs;
mod metrics;
mod operations;
mod pause;
mod process;
mod report_claim;
mod routing;
mod security;
mod takeover;
