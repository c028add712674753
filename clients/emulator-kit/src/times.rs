//! Counted faults: a fault plan's `{"times": n}` (the next n calls, or every
//! call without `times`) and the counter that wears it out. Pure.

use serde::{Deserialize, Serialize};

/// `{"times": n}`; absent `times` means every time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Times {
    pub times: Option<u32>,
}

/// How often a counted fault has fired under the current plan.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fired(u32);

impl Fired {
    /// Whether the fault fires now (at most `times` times, or always
    /// without a limit); counts it if so.
    pub fn take(&mut self, times: Option<u32>) -> bool {
        let due = times.is_none_or(|n| self.0 < n);
        if due {
            self.0 += 1;
        }
        due
    }

    /// Whether a plan's optional `{"times": n}` section fires now.
    pub fn take_section(&mut self, section: Option<Times>) -> bool {
        section.is_some_and(|t| self.take(t.times))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Invariant: `times: n` fires exactly n times; no `times` fires always.
    #[test]
    fn counted_faults_wear_out_and_uncounted_ones_do_not() {
        let mut f = Fired::default();
        assert!(f.take(Some(2)));
        assert!(f.take(Some(2)));
        assert!(!f.take(Some(2)));
        let mut always = Fired::default();
        assert!((0..10).all(|_| always.take(None)));
        assert!(!Fired::default().take(Some(0)));
        let mut section = Fired::default();
        assert!(!section.take_section(None));
        assert!(section.take_section(Some(Times { times: Some(1) })));
        assert!(!section.take_section(Some(Times { times: Some(1) })));
    }
}
