//! OperationsService and the webhook receiver against a real server on
//! port 0 and a fresh database per test: DESIGN.md invariants 7 (operation
//! state never moves backward; terminal is absorbing; every event is
//! recorded with its verdict) and 8 (a webhook delivered twice is applied
//! once; a bad signature or a stale timestamp is rejected before anything
//! is written). Each test's doc comment names what it checks.

mod common;
mod ingest;
mod watch;
mod webhooks;
