//! Exponential backoff with jitter. The jitter sample is an argument so the
//! function is pure and tests pin it.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// `initial * multiplier^(n-1)`, capped at `max`, then spread by
/// `± jitter` (a fraction of the delay).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Backoff {
    #[serde(with = "crate::millis")]
    pub initial: Duration,
    #[serde(with = "crate::millis")]
    pub max: Duration,
    pub multiplier: f64,
    pub jitter: f64,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            initial: Duration::from_secs(30),
            max: Duration::from_secs(3600),
            multiplier: 2.0,
            jitter: 0.2,
        }
    }
}

impl Backoff {
    /// The delay before retry number `failures` (1 for the first failure).
    /// `sample` is uniform in `[0, 1)`; 0.5 means "no jitter".
    pub fn delay(&self, failures: u32, sample: f64) -> Duration {
        let exponent = failures.saturating_sub(1).min(64) as i32;
        let base = self.initial.as_secs_f64() * self.multiplier.max(1.0).powi(exponent);
        let capped = base.min(self.max.as_secs_f64());
        let spread = self.jitter.clamp(0.0, 1.0) * (2.0 * sample.clamp(0.0, 1.0) - 1.0);
        let jittered = (capped * (1.0 + spread)).max(0.0);
        Duration::from_secs_f64(jittered.min(self.max.as_secs_f64() * 2.0))
    }

    /// The delay, or the provider's requested delay when that is longer.
    pub fn delay_honouring(
        &self,
        failures: u32,
        sample: f64,
        requested: Option<Duration>,
    ) -> Duration {
        let ours = self.delay(failures, sample);
        match requested {
            Some(r) if r > ours => r,
            Some(_) | None => ours,
        }
    }
}

/// A jitter sample in `[0, 1)` from an id and its try, so replicas spread
/// retries (of alerts, of webhook POSTs) without a random number
/// generator, and tests can pin them.
pub fn sample(id: i64, tries: i32) -> f64 {
    let x = (id as u64)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(tries as u64)
        .rotate_left(29);
    (x % 1000) as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn plain() -> Backoff {
        Backoff {
            initial: Duration::from_secs(10),
            max: Duration::from_secs(100),
            multiplier: 2.0,
            jitter: 0.0,
        }
    }

    #[test]
    fn grows_exponentially_and_caps() {
        let b = plain();
        let delays: Vec<u64> = (1..=6).map(|n| b.delay(n, 0.5).as_secs()).collect();
        assert_eq!(delays, [10, 20, 40, 80, 100, 100]);
    }

    #[test]
    fn a_longer_provider_delay_wins_and_a_shorter_one_does_not() {
        let b = plain();
        assert_eq!(
            b.delay_honouring(1, 0.5, Some(Duration::from_secs(60))),
            Duration::from_secs(60)
        );
        assert_eq!(
            b.delay_honouring(1, 0.5, Some(Duration::from_secs(1))),
            Duration::from_secs(10)
        );
    }

    #[test]
    fn zero_initial_means_immediately() {
        let b = Backoff {
            initial: Duration::ZERO,
            ..plain()
        };
        assert_eq!(b.delay(3, 0.9), Duration::ZERO);
    }

    proptest! {
        #[test]
        fn jitter_stays_within_its_fraction(n in 1u32..20, sample in 0.0f64..1.0, jitter in 0.0f64..1.0) {
            let b = Backoff { jitter, ..plain() };
            let mid = b.delay(n, 0.5).as_secs_f64();
            let d = b.delay(n, sample).as_secs_f64();
            prop_assert!(d >= mid * (1.0 - jitter) - 1e-6);
            prop_assert!(d <= mid * (1.0 + jitter) + 1e-6);
        }

        #[test]
        fn never_decreases_with_more_failures_without_jitter(n in 1u32..60) {
            let b = plain();
            prop_assert!(b.delay(n + 1, 0.5) >= b.delay(n, 0.5));
        }
    }
}
