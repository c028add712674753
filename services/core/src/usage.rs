//! Token counts: the [`Usage`] record, the bound a single attempt's counts
//! must stay under, and saturating sums, so no report and no summary can
//! overflow an `i64`.
//!
//! Why 10^12: the largest context windows are a few million tokens and a
//! batch line is one request, so a count above a trillion per attempt is a
//! bug or an attack, never a real usage. With that bound a row's running
//! total needs over nine million attempts to reach `i64::MAX`, and sums over
//! a ledger saturate instead of overflowing.

/// Tokens as the provider counts them: `input` includes `cached` (Gemini's
/// `promptTokenCount` does), and `output` excludes `thinking`
/// (`candidatesTokenCount` does).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub input: i64,
    pub output: i64,
    pub thinking: i64,
    pub cached: i64,
    /// Input tokens written to the provider's cache (Anthropic), also in
    /// `input`; priced as cache writes, not stored apart.
    pub cache_write: i64,
}

impl Usage {
    /// Adds `other`'s counts (each saturating, [`add`]).
    pub fn add(&mut self, other: &Usage) {
        self.input = add(self.input, other.input);
        self.output = add(self.output, other.output);
        self.thinking = add(self.thinking, other.thinking);
        self.cached = add(self.cached, other.cached);
        self.cache_write = add(self.cache_write, other.cache_write);
    }

    pub fn is_zero(&self) -> bool {
        *self == Usage::default()
    }
}

/// Most tokens of one kind (input, output, thinking, cached) that one
/// attempt may report.
pub const MAX_TOKENS_PER_ATTEMPT: i64 = 1_000_000_000_000;

/// Why a reported count is refused, if it is.
pub fn check_count(n: i64) -> Result<(), String> {
    if n < 0 {
        Err("token counts must not be negative".into())
    } else if n > MAX_TOKENS_PER_ATTEMPT {
        Err(format!(
            "token counts must be at most {MAX_TOKENS_PER_ATTEMPT} per attempt"
        ))
    } else {
        Ok(())
    }
}

/// `a + b`, held at `i64::MAX` (sums of counts are never negative).
pub fn add(a: i64, b: i64) -> i64 {
    a.saturating_add(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_between_zero_and_the_bound_are_accepted() {
        // Invariant: exactly [0, MAX_TOKENS_PER_ATTEMPT] passes.
        assert!(check_count(0).is_ok());
        assert!(check_count(MAX_TOKENS_PER_ATTEMPT).is_ok());
        assert!(check_count(-1).unwrap_err().contains("negative"));
        let err = check_count(MAX_TOKENS_PER_ATTEMPT + 1).unwrap_err();
        assert!(err.contains("1000000000000"), "{err}");
        assert!(check_count(i64::MAX).is_err());
    }

    #[test]
    fn sums_saturate_instead_of_overflowing() {
        // Invariant: adding counts never wraps or panics.
        assert_eq!(add(i64::MAX, i64::MAX), i64::MAX);
        assert_eq!(add(1, 2), 3);
    }
}
