//! The integration tests of this crate, one executable (one link of tokio,
//! tonic and sqlx instead of one per file). Each module is one area.
//!
//! Run one area: `cargo test -p tally-store --test store <module>::`.

mod admission;
mod agreement;
mod bounded_reads;
mod cache;
mod common;
mod cooldown;
mod delivery;
mod enroll_copy;
mod golden;
mod held_rows;
mod inputs;
mod invariants;
mod jobs;
mod lanes;
mod media;
mod operations;
mod pause;
mod providers;
mod purge;
mod reanswer;
mod report_paths;
mod routing;
mod spend;
mod statistics;
