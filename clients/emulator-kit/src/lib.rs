//! emulator-kit: what the provider emulators (`gemini-emulator`,
//! `openai-emulator`) share, so neither copies the other. Nothing here
//! knows a provider's wire shapes.
//!
//! Layout, foundations first: [`mix`] deterministic randomness and hashing;
//! [`schema_instance`] a JSON value that validates against a response
//! schema (JSON Schema or Gemini's OpenAPI subset); [`signing`] the
//! Standard Webhooks signer; [`delivery`] signed webhook delivery with
//! retries, duplicates and late redeliveries. All but `delivery` are pure.

pub mod delivery;
pub mod mix;
pub mod schema_instance;
pub mod signing;
