//! When a batch that answers 404 is really gone.
//!
//! A single 404 on `GET batches/{id}` proves little: a key rotated to
//! another project, a misrouted request or a replica behind answer the same.
//! A batch is taken for gone only when every GET for at least `--gone-after`
//! answered 404, and at least [`MIN_SIGHTINGS`] of them did; any other
//! answer in between starts the count again. Pure: the caller passes the
//! clock.

use std::time::{Duration, Instant};

/// Fewest consecutive 404s before a batch is taken for gone.
pub const MIN_SIGHTINGS: u32 = 3;

/// Consecutive 404s of one batch.
#[derive(Debug, Clone, Default)]
pub struct GoneWatch {
    first: Option<Instant>,
    sightings: u32,
}

impl GoneWatch {
    /// Any answer but 404: the batch is there (or the question failed for
    /// another reason); the count starts again.
    pub fn seen(&mut self) {
        *self = GoneWatch::default();
    }

    /// A 404 at `now`. True once the 404s have lasted `window` and were
    /// seen at least [`MIN_SIGHTINGS`] times.
    pub fn not_found(&mut self, now: Instant, window: Duration) -> bool {
        let first = *self.first.get_or_insert(now);
        self.sightings = self.sightings.saturating_add(1);
        self.sightings >= MIN_SIGHTINGS && now.duration_since(first) >= window
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Invariant: a batch is gone only after 404s lasting the whole window,
    // seen at least MIN_SIGHTINGS times, with nothing else in between.
    #[test]
    fn gone_needs_lasting_repeated_404s() {
        let window = Duration::from_secs(60);
        let t0 = Instant::now();
        let mut w = GoneWatch::default();
        assert!(!w.not_found(t0, window), "one 404 is no proof");
        assert!(!w.not_found(t0 + Duration::from_secs(61), window), "two");
        assert!(w.not_found(t0 + Duration::from_secs(62), window));

        let mut w = GoneWatch::default();
        for i in 0..10 {
            assert!(!w.not_found(t0 + Duration::from_secs(i), window), "{i}");
        }
        w.seen();
        assert!(!w.not_found(t0 + Duration::from_secs(100), window));
        assert!(!w.not_found(t0 + Duration::from_secs(120), window));
        assert!(
            !w.not_found(t0 + Duration::from_secs(159), window),
            "the window starts again after an answer"
        );
        assert!(w.not_found(t0 + Duration::from_secs(160), window));
    }

    #[test]
    fn a_zero_window_still_needs_the_sightings() {
        let mut w = GoneWatch::default();
        let t0 = Instant::now();
        assert!(!w.not_found(t0, Duration::ZERO));
        assert!(!w.not_found(t0, Duration::ZERO));
        assert!(w.not_found(t0, Duration::ZERO));
    }
}
