//! What an emulator is started with: the API keys it accepts, the fault
//! plan, how long batches sit in each state, where webhooks go, the seed of
//! its answers, the models batches may name, and the list order.

use std::time::Duration;

use crate::faults::FaultPlan;
pub use emulator_kit::online::{Latency, OnlineConfig};

/// A receiver of Standard Webhooks deliveries and how to deliver to it
/// (OpenAI's events offer no payload choice).
pub type WebhookTarget = emulator_kit::delivery::WebhookTarget;

/// Everything [`crate::Emulator::start`] needs.
#[derive(Debug, Clone)]
pub struct EmulatorConfig {
    /// Keys accepted as `Authorization: Bearer <key>` (at least one).
    pub api_keys: Vec<String>,
    /// Faults to inject; replaceable at run time with `Emulator::set_faults`.
    pub faults: FaultPlan,
    /// How long a batch sits in each state.
    pub timing: Timing,
    /// Where `batch.*` events are delivered (signed), if anywhere.
    pub webhook: Option<WebhookTarget>,
    /// Seeds the answers' text, so a run is reproducible.
    pub seed: u64,
    /// The models batch lines may name.
    pub models: Models,
    /// The order `GET /v1/batches` pages in (a fault plan may override it).
    pub list_order: ListOrder,
    /// The synchronous endpoints' limits and latency.
    pub online: OnlineConfig,
    /// Batches the account already holds at start: completed batches of
    /// another client (no metadata, no rows), made one second apart
    /// before the start, so a search has a long list to page through.
    pub seed_batches: u64,
}

/// The key the binary accepts unless told otherwise.
pub const DEFAULT_API_KEY: &str = "sk-emulator";

impl Default for EmulatorConfig {
    fn default() -> Self {
        Self {
            api_keys: vec![DEFAULT_API_KEY.to_owned()],
            faults: FaultPlan::default(),
            timing: Timing::default(),
            webhook: None,
            seed: 0,
            models: known_models(),
            list_order: ListOrder::default(),
            online: OnlineConfig::default(),
            seed_batches: 0,
        }
    }
}

/// The models batch lines may name (by default [`KNOWN_MODELS`]). A line
/// naming another fails the batch at validation with a `model_not_found`
/// error naming the line.
pub use emulator_kit::models::Models;

/// Models of the API that take batches (the default of [`Models`]).
pub const KNOWN_MODELS: &[&str] = &[
    "gpt-4o",
    "gpt-4o-mini",
    "gpt-4.1",
    "gpt-4.1-mini",
    "gpt-4.1-nano",
    "gpt-5",
    "gpt-5-mini",
    "gpt-5-nano",
    "o3",
    "o4-mini",
    "gpt-3.5-turbo-instruct",
    "text-embedding-3-small",
    "text-embedding-3-large",
];

/// The default of [`EmulatorConfig::models`]: [`KNOWN_MODELS`].
pub fn known_models() -> Models {
    Models::only(KNOWN_MODELS)
}

pub use emulator_kit::rules::ListOrder;

/// Dwell times of a batch in each state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub validating: Duration,
    pub in_progress: Duration,
    pub finalizing: Duration,
    pub cancelling: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            validating: Duration::from_millis(200),
            in_progress: Duration::from_millis(500),
            finalizing: Duration::from_millis(100),
            cancelling: Duration::from_millis(200),
        }
    }
}

impl Timing {
    /// Short dwell times for tests.
    pub fn fast() -> Self {
        Self {
            validating: Duration::from_millis(10),
            in_progress: Duration::from_millis(20),
            finalizing: Duration::from_millis(10),
            cancelling: Duration::from_millis(10),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_accept_dated_snapshots_of_known_names() {
        let m = known_models();
        assert!(m.allows("gpt-4o-mini"));
        assert!(m.allows("gpt-4o-2024-08-06"));
        assert!(!m.allows("gpt-4o-turbo"));
        assert!(!m.allows("gpt-9"));
        assert!(Models::Any.allows("gpt-9"));
        assert_eq!(Models::parse("*"), Ok(Models::Any));
    }
}
