//! tally-pg
