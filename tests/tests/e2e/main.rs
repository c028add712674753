//! End to end: the real tally server on port 0, on a fresh database per test,
//! driven through the real generated gRPC client. One binary, so the private
//! PostgreSQL (used when DATABASE_URL is unset) starts once.
//!
//! - [`harness`]: server, client, builders, status and nothing-written
//!   assertions.
//! - [`bad_input`]: every LedgerService RPC refuses bad input with the right
//!   code and details, and writes nothing (DESIGN.md section 6).
//! - [`walkthrough`]: the README's grpcurl session as a test.
//! - [`claims`]: fencing, expiry, rescue, STALE and DUPLICATE, request-id
//!   replay, concurrent claimers (invariants 1, 3, 4).
//! - [`rows`]: listing, filters and paging, history with provenance,
//!   enrollment idempotency, dependencies and redrive (invariants 2, 5, 10).
//! - [`ledgers`]: ledgers, policy updates and etags, prompts.
//!
//! Not here: store-level invariant tests (`services/store/tests`), JobService
//! and OperationsService scenarios (their issues).

mod harness;

mod bad_input;
mod claims;
mod ledgers;
mod rows;
mod walkthrough;
