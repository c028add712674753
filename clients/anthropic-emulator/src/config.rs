//! What an emulator is started with: the API keys it accepts, the fault
//! plan, how long batches sit in each state and when they expire, the seed
//! of its answers and the models requests may name.

use std::time::Duration;

use crate::faults::FaultPlan;

/// The models requests may name (`*`, any, by default). A request naming
/// another is `errored` with `not_found_error` in the results, as the
/// Messages API answers an unknown model.
pub use emulator_kit::models::Models;

/// Everything [`crate::Emulator::start`] needs.
#[derive(Debug, Clone)]
pub struct EmulatorConfig {
    /// Keys accepted as `x-api-key: <key>` or `Authorization: Bearer <key>`
    /// (at least one).
    pub api_keys: Vec<String>,
    /// Faults to inject; replaceable at run time with `Emulator::set_faults`.
    pub faults: FaultPlan,
    /// How long a batch sits in each state, and when it expires.
    pub timing: Timing,
    /// Seeds the answers' text and the results' order, so a run is
    /// reproducible.
    pub seed: u64,
    /// The models requests may name.
    pub models: Models,
    /// The synchronous endpoint's limits and latency.
    pub online: OnlineConfig,
}

pub use emulator_kit::online::{Latency, OnlineConfig};

/// The key the binary accepts unless told otherwise.
pub const DEFAULT_API_KEY: &str = "sk-ant-emulator";

/// The `anthropic-version` values accepted: the API's documented versions
/// and the one the pinned Python SDK (2.x) sends.
pub const API_VERSIONS: &[&str] = &["2023-01-01", "2023-06-01", "2026-10-21"];

impl Default for EmulatorConfig {
    fn default() -> Self {
        Self {
            api_keys: vec![DEFAULT_API_KEY.to_owned()],
            faults: FaultPlan::default(),
            timing: Timing::default(),
            seed: 0,
            models: Models::Any,
            online: OnlineConfig::default(),
        }
    }
}

/// Dwell times of a batch, and its expiry horizon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// `in_progress` until the batch ends on its own.
    pub in_progress: Duration,
    /// `canceling` until a canceled batch ends.
    pub canceling: Duration,
    /// A batch still in progress this long after its creation expires
    /// (`expires_at` = `created_at` + this; the API's is 24 hours).
    pub expires_after: Duration,
    /// An ended batch's results stay available this long after its
    /// creation (the API's 29 days); then it is archived (`archived_at`)
    /// and its results answer 404.
    pub results_kept: Duration,
}

/// How long the API keeps a batch's results: 29 days after its creation.
pub const RESULTS_KEPT: Duration = Duration::from_secs(29 * 24 * 3600);

impl Default for Timing {
    fn default() -> Self {
        Self {
            in_progress: Duration::from_millis(500),
            canceling: Duration::from_millis(200),
            expires_after: Duration::from_secs(24 * 3600),
            results_kept: RESULTS_KEPT,
        }
    }
}

impl Timing {
    /// Short dwell times for tests (the 24-hour horizon kept).
    pub fn fast() -> Self {
        Self {
            in_progress: Duration::from_millis(20),
            canceling: Duration::from_millis(10),
            ..Self::default()
        }
    }
}
