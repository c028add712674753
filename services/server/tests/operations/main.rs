//! OperationsService against a real server on port 0 and a fresh database
//! per test: DESIGN.md invariant 7 (operation state never moves backward;
//! terminal is absorbing; every event is recorded with its verdict). Each
//! test's doc comment names what it checks.

mod common;
mod ingest;
mod watch;
