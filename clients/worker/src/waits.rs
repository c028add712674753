//! How long a model waits after capacity refusals that name no delay (a
//! 429 with no `retry-after`). Pure.
//!
//! The first waits `--refusal-cooldown`; each one in a row doubles it, up
//! to [`LONGEST`]. A refusal that never names an end is not waited out for
//! ever: past [`MAX_IN_A_ROW`] in a row the ledger pauses (reason QUOTA)
//! with the provider's words, for an operator to resume. A batch of the
//! model made ends the run. Refusals of jobs that were already out while
//! a wait ran (met at once, side by side) are that wait's, not new ones.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The longest wait between two refusals (the server keeps a cool-down at
/// most this long).
pub const LONGEST: Duration = Duration::from_secs(600);
/// Refusals naming no delay, in a row, waited out before the ledger pauses.
pub const MAX_IN_A_ROW: u32 = 6;

/// What the next refusal naming no delay asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Wait this long, then try again.
    Wait(Duration),
    /// Pause the ledger: this many refusals in a row named no delay.
    Pause(u32),
}

/// Refusals naming no delay, in a row, per model: how many, and when the
/// last one's wait ends.
#[derive(Debug, Default)]
pub struct UnnamedWaits {
    in_a_row: HashMap<String, (u32, Instant)>,
}

impl UnnamedWaits {
    /// A create of `model` was refused with no delay named at `now`;
    /// `first` is the first wait.
    pub fn refused(&mut self, model: &str, first: Duration, now: Instant) -> Next {
        let (n, ends) = self.in_a_row.entry(model.to_owned()).or_insert((0, now));
        if *n > 0 && now < *ends {
            // A job already out when the last refusal came: its wait.
            return Next::Wait(*ends - now);
        }
        *n += 1;
        if *n > MAX_IN_A_ROW {
            let n = *n;
            self.in_a_row.remove(model);
            return Next::Pause(n);
        }
        let wait = first
            .saturating_mul(1 << (*n - 1).min(20))
            .min(LONGEST.max(first));
        *ends = now + wait;
        Next::Wait(wait)
    }

    /// A batch of `model` was made: the run of refusals is over.
    pub fn made(&mut self, model: &str) {
        self.in_a_row.remove(model);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Invariant: waits double from the first up to LONGEST; the refusal
    // after MAX_IN_A_ROW in a row pauses (and starts a new count); a batch
    // made, or another model, starts over; refusals while a wait runs are
    // that wait's.
    #[test]
    fn waits_double_then_the_ledger_pauses() {
        let mut w = UnnamedWaits::default();
        let first = Duration::from_secs(60);
        let mut now = Instant::now();
        let mut waits = Vec::new();
        for _ in 0..MAX_IN_A_ROW {
            let next = w.refused("m", first, now);
            let Next::Wait(d) = next else {
                panic!("{next:?}")
            };
            // A job out beside it meets the refusal too: the same wait.
            let side = now + Duration::from_secs(1);
            assert_eq!(
                w.refused("m", first, side),
                Next::Wait(d - Duration::from_secs(1))
            );
            waits.push(d.as_secs());
            now += d;
        }
        assert_eq!(waits, [60, 120, 240, 480, 600, 600]);
        assert_eq!(
            w.refused("other", first, now),
            Next::Wait(first),
            "per model"
        );
        assert_eq!(w.refused("m", first, now), Next::Pause(MAX_IN_A_ROW + 1));
        assert_eq!(
            w.refused("m", first, now),
            Next::Wait(first),
            "counted anew"
        );
        w.made("m");
        assert_eq!(
            w.refused("m", first, now + first),
            Next::Wait(first),
            "a batch made"
        );
    }
}
