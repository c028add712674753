//! How many tokens this worker puts in one batch of a model. Pure.
//!
//! The provider refuses a batch whose input, with the model's batches not
//! yet finished, passes the project's enqueued-token limit; a batch larger
//! than the limit alone is refused however long it waits. So a batch is
//! packed under the limit tally admits the model under (CreateJob's
//! `provider_token_limit`), and below that under a bound learned from
//! refusals: a create refused for size or quota halves the next batch; each
//! batch made grows the bound back by a quarter, until it reaches the
//! limit again (additive steps would take too long at millions of tokens).

use std::collections::HashMap;

/// Token bounds per model, below the limits tally admits them under.
#[derive(Debug, Default)]
pub struct TokenBounds {
    /// Models whose bound is below their limit.
    learned: HashMap<String, u64>,
}

impl TokenBounds {
    /// The most tokens the next batch of `model` may carry: the learned
    /// bound, else `limit` (0: none).
    pub fn bound(&self, model: &str, limit: u64) -> u64 {
        match (self.learned.get(model), limit) {
            (Some(&b), 0) => b,
            (Some(&b), l) => b.min(l),
            (None, l) => l,
        }
    }

    /// A create of `sent` tokens was refused for size or quota: the next
    /// batch carries at most half as many (at least one token: a batch
    /// always takes its first row).
    pub fn refused(&mut self, model: &str, sent: u64) {
        let half = (sent / 2).max(1);
        let b = self.learned.entry(model.to_owned()).or_insert(half);
        *b = (*b).min(half);
    }

    /// A batch of `model` was made: the bound grows by a quarter, and is
    /// forgotten once it reaches `limit`.
    pub fn created(&mut self, model: &str, limit: u64) {
        let Some(b) = self.learned.get_mut(model) else {
            return;
        };
        *b = b.saturating_add((*b / 4).max(1));
        if limit > 0 && *b >= limit {
            self.learned.remove(model);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Invariant: each refusal at least halves what the next batch may
    // carry; successes grow it back to the limit and no further.
    #[test]
    fn refusals_halve_and_successes_grow_back() {
        let mut b = TokenBounds::default();
        assert_eq!(b.bound("m", 1000), 1000);
        assert_eq!(b.bound("m", 0), 0, "no limit, nothing learned");
        b.refused("m", 1000);
        assert_eq!(b.bound("m", 1000), 500);
        b.refused("m", 800);
        assert_eq!(b.bound("m", 1000), 400, "never grows on a refusal");
        b.refused("m", 500);
        assert_eq!(b.bound("m", 1000), 250);
        assert_eq!(b.bound("other", 1000), 1000, "per model");
        let mut steps = 0;
        while b.bound("m", 1000) < 1000 {
            b.created("m", 1000);
            steps += 1;
            assert!(steps < 20);
        }
        assert_eq!(b.bound("m", 1000), 1000);
        b.refused("m", 1);
        assert_eq!(b.bound("m", 1000), 1, "at least one token: one row");
    }
}
