//! emulator-kit: what the provider emulators (`gemini-emulator`,
//! `openai-emulator`, `anthropic-emulator`) share, so none copies another.
//! Nothing here knows a provider's wire shapes.
//!
//! Layout, foundations first: [`mix`] deterministic randomness and hashing;
//! [`ids`] resource ids from a per-run nonce; [`times`] counted faults
//! (`{"times": n}`); [`rules`] the shared fault-plan vocabulary (row
//! matches, row and batch rules) and its engine; [`models`] the models
//! batches may name;
//! [`schema_instance`] a JSON value that validates against a response
//! schema (JSON Schema or Gemini's OpenAPI subset); [`text`] a request's
//! prompt text, token estimate and seeded answer; [`submissions`] the
//! per-key submission log tests check (and `submission_queries!`, its
//! queries on each emulator's `Stats`); [`signing`] the Standard Webhooks
//! signer; [`delivery`] signed webhook delivery with retries, duplicates
//! and late redeliveries; [`requests`] every API request counted,
//! refused ones too; [`serve`] the listener, the served router and
//! its ordered shutdown; [`online`] the synchronous endpoints' tiers,
//! per-minute limits, shedding, lost answers and counters; [`sections`]
//! the plan sections every emulator takes, with their counters;
//! [`lifecycle`] a
//! batch's dwell times, cancel
//! and stop tokens; [`startup`] what the binaries do around their
//! flags; [`emulator`] the handle over an emulator's served state (and
//! `state_access!`, the accessors of its locked state);
//! [`control`] its own `/_emulator` endpoints; [`testing`] polling helpers for the emulators' tests. `mix`,
//! `times`, `rules`, `sections`, `models`, `online`, `schema_instance`, `text`,
//! `submissions` and `signing` are pure.

pub mod control;
pub mod delivery;
pub mod emulator;
pub mod ids;
pub mod lifecycle;
pub mod mix;
pub mod models;
pub mod online;
pub mod requests;
pub mod rules;
pub mod schema_instance;
pub mod sections;
pub mod serve;
pub mod signing;
pub mod startup;
pub mod submissions;
pub mod testing;
pub mod text;
pub mod times;
