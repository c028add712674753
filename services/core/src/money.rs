//! Dollar amounts: every sum of costs is held in a finite range.

/// Where sums of dollars are held: far above any cap, far below where a
/// float loses whole dollars. No cost is ever infinite or NaN.
pub const MAX_SPEND_USD: f64 = 1e15;

/// `x` as a dollar amount: held in `0..=MAX_SPEND_USD`, NaN taken as the
/// most (a cost nobody can explain must stop a cap, not slip past it).
pub fn usd(x: f64) -> f64 {
    if x.is_nan() {
        MAX_SPEND_USD
    } else {
        x.clamp(0.0, MAX_SPEND_USD)
    }
}
