//! What an emulator is started with: the API key it accepts, the fault plan,
//! how long batches sit in each state, where webhooks go, and the seed that
//! makes output order reproducible.

use std::time::Duration;

use crate::faults::FaultPlan;

/// Everything [`crate::Emulator::start`] needs.
#[derive(Debug, Clone)]
pub struct EmulatorConfig {
    /// The only API key accepted (`x-goog-api-key` header or `?key=`).
    pub api_key: String,
    /// Faults to inject; replaceable at run time with `Emulator::set_faults`.
    pub faults: FaultPlan,
    /// How long a batch sits in PENDING and in RUNNING.
    pub timing: Timing,
    /// Where batch state changes are announced, if anywhere.
    pub webhook: Option<WebhookTarget>,
    /// Seeds the output shuffle, so a run is reproducible.
    pub seed: u64,
}

impl Default for EmulatorConfig {
    fn default() -> Self {
        Self {
            api_key: "emulator-key".to_owned(),
            faults: FaultPlan::default(),
            timing: Timing::default(),
            webhook: None,
            seed: 0,
        }
    }
}

/// Dwell times of a batch. A batch is created PENDING, becomes RUNNING after
/// `pending`, and reaches its terminal state `running` later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub pending: Duration,
    pub running: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            pending: Duration::from_millis(200),
            running: Duration::from_millis(500),
        }
    }
}

impl Timing {
    /// Short dwell times for tests.
    pub fn fast() -> Self {
        Self {
            pending: Duration::from_millis(20),
            running: Duration::from_millis(30),
        }
    }
}

/// A receiver of Standard Webhooks deliveries.
#[derive(Debug, Clone)]
pub struct WebhookTarget {
    /// Full URL the events are POSTed to.
    pub url: String,
    /// The signing secret, `whsec_<base64>`.
    pub secret: String,
    /// Deliver every event twice, with the same `webhook-id`.
    pub duplicate: bool,
    /// Deliver every event once more, with the same `webhook-id`, this long
    /// after the first delivery: a redelivery that arrives after later
    /// events of other batches and after the batch was read by polling (out
    /// of order, as real deliveries can be).
    pub redeliver_after: Option<Duration>,
    /// Tries per delivery before giving up (at least 1).
    pub max_attempts: u32,
    /// Delay before the first retry; doubled for each further one.
    pub retry_backoff: Duration,
}

impl WebhookTarget {
    /// A target with the usual defaults: no duplicates, no redelivery, 4
    /// tries starting at 50ms backoff.
    pub fn new(url: impl Into<String>, secret: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            secret: secret.into(),
            duplicate: false,
            redeliver_after: None,
            max_attempts: 4,
            retry_backoff: Duration::from_millis(50),
        }
    }
}
