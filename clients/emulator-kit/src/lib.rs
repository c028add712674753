//! emulator-kit: what the provider emulators (`gemini-emulator`,
//! `openai-emulator`) share, so neither copies the other. Nothing here
//! knows a provider's wire shapes.
//!
//! Layout, foundations first: [`mix`] deterministic randomness and hashing;
//! [`schema_instance`] a JSON value that validates against a response
//! schema (JSON Schema or Gemini's OpenAPI subset); [`submissions`] the
//! per-key submission log tests check; [`signing`] the Standard Webhooks
//! signer; [`delivery`] signed webhook delivery with retries, duplicates
//! and late redeliveries; [`serve`] the listener, the served router and
//! its ordered shutdown; [`startup`] what the binaries do around their
//! flags; [`testing`] polling helpers for the emulators' tests. `mix`,
//! `schema_instance`, `submissions` and `signing` are pure.

pub mod delivery;
pub mod mix;
pub mod schema_instance;
pub mod serve;
pub mod signing;
pub mod startup;
pub mod submissions;
pub mod testing;
