//! How many tokens this worker puts in one batch of a model, and how many
//! rows it claims for one batch. Pure.
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

/// How many rows a batch claim asks for. A claim whose rows do not all
/// fit its batch (large inline media against the byte bound) gives the
/// rest back, read for nothing: after a full batch the next claim asks for
/// the rows that batch took, and grows back by a quarter with each batch
/// that took every row of its claim and had room for more, until
/// `--claim-size` again. So the rows claimed stay close to the rows sent.
#[derive(Debug, Default)]
pub struct ClaimFit {
    fit: Option<usize>,
    /// A batch was packed: what a claim takes has been seen.
    known: bool,
}

impl ClaimFit {
    /// Whether a batch has been packed yet. Until one has, a worker runs
    /// one claim at a time up to its batch (its other jobs' claims would
    /// each be a whole `--claim-size` before any fit is known).
    pub fn known(&self) -> bool {
        self.known
    }

    /// The rows the next claim asks for, at most `claim_size`.
    pub fn rows(&self, claim_size: usize) -> usize {
        self.fit.map_or(claim_size, |f| f.min(claim_size)).max(1)
    }

    /// A batch took `sent` of its claim's `claimed` rows; `full` when a row
    /// did not fit, `room` when another row like those in it would have.
    pub fn packed(
        &mut self,
        claimed: usize,
        sent: usize,
        full: bool,
        room: bool,
        claim_size: usize,
    ) {
        self.known = true;
        if full {
            self.fit = Some(sent.max(1));
            return;
        }
        let Some(f) = self.fit.as_mut() else {
            return;
        };
        if sent == claimed && room {
            *f = f.saturating_add((*f / 4).max(1));
            if *f >= claim_size {
                self.fit = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Invariant: after a full batch a claim asks for the rows it took; it
    // grows back only after batches that took their whole claim with room
    // to spare, never past --claim-size.
    #[test]
    fn claims_shrink_to_what_fit_and_grow_back() {
        let mut c = ClaimFit::default();
        assert_eq!(c.rows(100), 100);
        assert!(!c.known());
        c.packed(100, 12, true, false, 100);
        assert!(c.known());
        assert_eq!(c.rows(100), 12, "what the full batch took");
        c.packed(12, 12, false, false, 100);
        assert_eq!(c.rows(100), 12, "no room for more: stays");
        c.packed(12, 10, false, true, 100);
        assert_eq!(c.rows(100), 12, "rows left out for other reasons: stays");
        let mut steps = 0;
        while c.rows(100) < 100 {
            c.packed(c.rows(100), c.rows(100), false, true, 100);
            steps += 1;
            assert!(steps < 20);
        }
        assert_eq!(c.rows(100), 100);
        assert_eq!(c.rows(10), 10, "never past the claim size");
        c.packed(100, 0, true, false, 100);
        assert_eq!(c.rows(100), 1, "at least one row");
    }

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
