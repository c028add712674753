//! The integration tests of this crate, one executable (one link of tokio,
//! tonic and sqlx instead of one per file). Each module is one area.
//!
//! Run one area: `cargo test -p tallyctl --test tallyctl <module>::`.

mod cli;
mod consume;
mod formats_e2e;
