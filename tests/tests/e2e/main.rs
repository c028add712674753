//! End to end: the real tally server on port 0, on a fresh database per test,
//! driven through the real generated gRPC client. One binary, so the private
//! PostgreSQL (used when DATABASE_URL is unset) starts once.
//!
//! - [`harness`]: server, client, builders, status and nothing-written
//!   assertions.
//! - [`bad_input`]: every LedgerService and DeliveryService RPC refuses bad
//!   input with the right code and details, and writes nothing (DESIGN.md
//!   section 6).
//! - [`walkthrough`]: services/server/README.md's grpcurl session as a
//!   test, and the walkthrough extended with failures.
//! - [`claims`]: fencing, expiry, rescue, STALE and DUPLICATE, request-id
//!   replay, concurrent claimers (invariants 1, 3, 4).
//! - [`rows`]: listing, filters and paging, history with provenance,
//!   enrollment idempotency, dependencies and redrive (invariants 2, 5, 10).
//! - [`ledgers`]: listing, policy updates and etags.
//!
//! DESIGN.md invariants checked here, through gRPC:
//!
//! | invariant | tests |
//! | --- | --- |
//! | 1 succeeded rows never change | `claims::a_succeeded_row_never_changes` |
//! | 2 re-enrollment changes nothing | `rows::enrolling_again_never_changes_a_row` |
//! | 3 one live claim per row | `claims::concurrent_claimers_never_share_a_row`, `claims::an_expired_claim_is_rescued_and_its_late_report_is_stale`, `claims::a_claim_past_its_lease_cannot_report_before_rescue`, `claims::released_rows_come_back_without_an_attempt` |
//! | 4 budgets capped | `claims::attempts_stop_at_each_budget_cap`, `ledgers::a_policy_update_takes_effect` |
//! | 5 dependencies, BLOCKED, redrive | `rows::dependencies_block_and_redrive_unblocks` |
//! | 6 every row settles | `rows::attempts_and_tokens_add_up`, `claims::the_sweeper_rescues_expired_claims_without_a_claimer` |
//! | 10 attempts and tokens add up | `rows::attempts_and_tokens_add_up`, `rows::get_row_shows_the_attempts_history_with_provenance`, `walkthrough::walkthrough_with_failures` |
//!
//! Every test of [`bad_input`] also checks "a rejected request writes
//! nothing" by comparing a digest of every table before and after the call.
//!
//! Not here: store-level invariant tests (`services/store/tests`), JobService
//! and OperationsService scenarios (their issues).

mod harness;

mod bad_input;
mod claims;
mod ledgers;
mod rows;
mod walkthrough;
