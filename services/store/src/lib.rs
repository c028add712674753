//! tally-store
