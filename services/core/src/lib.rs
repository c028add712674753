//! tally's domain, as pure functions and plain data: no I/O, no clock, no
//! randomness (time and jitter samples are arguments), no tokio, sqlx or
//! tonic. Everything here is tested without a database.
//!
//! - [`status`]: row statuses and attempt budgets.
//! - [`classify`]: failure facts in, a rule-named verdict out.
//! - [`transition`]: the row state machine (claim, report, release, expiry,
//!   job failure, dependency failure, redrive).
//! - [`report`]: a report's whole judgement (STALE, DUPLICATE, the verdict)
//!   for the rows it names.
//! - [`job`]: the job state machine (submit, provider states, finish,
//!   abandon, adopt).
//! - [`backoff`], [`policy`]: a ledger's retry policy with its defaults and
//!   validation; [`fill`]: whether a partial batch waits for more rows.
//! - [`keys`], [`names`], [`payload`], [`deps`]: what enrollment checks;
//!   [`media`]: the files a row references (images, documents).
//! - [`operation`]: the monotonic reducer for provider operations.
//! - [`provider`]: which provider runs a model; [`lane`]: the ways a row
//!   can be sent (batch, flex, standard, priority) and what each costs;
//!   [`capacity`]: the account's requests and tokens per minute, shared;
//!   [`route`]: the lane each row takes to meet a deadline, and the
//!   forecast finish; [`explain`]: that forecast in words.
//! - [`webhook`]: Standard Webhooks signing and verification.
//! - [`delivery`]: result versions, the results log's positions, and the
//!   rules of consumers (leases, redelivery, dead letters, webhook retries).
//! - [`alert`]: when a ledger's review threshold alerts, and what it says;
//!   [`outbound`]: which addresses alerts may reach.
//! - [`pause`]: why a ledger is paused, and what it still does while paused.
//! - [`scope`]: which ledgers, locks and prompts a caller may touch.
//! - [`summary`]: the one-line summaries.
//! - [`text`]: caller-supplied text made safe to show in logs and tables.
//! - [`usage`]: the bound on reported token counts and saturating sums.
//! - [`violation`]: how validation reports bad fields.
//! - [`golden`]: golden rows (which jobs carry them, when answers drift);
//!   [`cache`]: the result cache (a ledger's use of it, its key).
//! - [`price`]: what a model's tokens cost; [`money`]: dollar sums kept
//!   finite; [`spend`]: spend caps and what a claim may take under one;
//!   [`quota`]: admission against the provider's quotas.
//! - [`millis`]: durations as whole milliseconds in serde.

pub mod alert;
pub mod backoff;
pub mod cache;
pub mod capacity;
pub mod classify;
pub mod delivery;
pub mod deps;
pub mod explain;
pub mod fill;
pub mod golden;
pub mod job;
pub mod keys;
pub mod lane;
pub mod media;
pub mod millis;
pub mod money;
pub mod names;
pub mod operation;
pub mod outbound;
pub mod pause;
pub mod payload;
pub mod policy;
pub mod price;
pub mod provider;
pub mod quota;
pub mod report;
pub mod route;
pub mod scope;
pub mod spend;
pub mod status;
pub mod summary;
pub mod text;
pub mod transition;
pub mod usage;
pub mod violation;
pub mod webhook;
