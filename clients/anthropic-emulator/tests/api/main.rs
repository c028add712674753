//! End-to-end tests of the emulator over real HTTP: one test binary, one
//! module per area.

mod common;
mod faults;
mod flow;
mod lifecycle;
