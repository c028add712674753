//! Spend caps: what a ledger may spend, what a claim is estimated to cost
//! before any of it is sent, and how many of a claim's rows fit.
//!
//! The rule: a claim *reserves* its estimated spend; ReportOutcomes
//! replaces a reported row's share of the reservation with the row's
//! actual usage; a row given back (released, or rescued after its lease
//! expired) gives its share back. A claim is granted only the rows whose
//! estimates fit under every cap, counting what was spent and what is
//! reserved by claims still out. So the provider is never sent work past a
//! cap *as estimated*; actual usage can exceed a row's estimate, and the
//! bound on the overshoot is the estimation error of the claims out at the
//! time (at most one claim's worth when workers claim one batch at a time).
//!
//! Estimates:
//! - input tokens: the row's payload bytes and its prompt's template and
//!   system instruction bytes, at [`BYTES_PER_TOKEN`] bytes a token
//!   (Google's rule of thumb for Gemini: about 4 characters a token),
//!   rounded up;
//! - output tokens: the cap's `output_tokens_per_row` (the answer's length
//!   cannot be known before it is made; set it near the prompt's
//!   `max_output_tokens`);
//! - cost: those tokens at the ledger's price for the row's model. A cost
//!   cap with a row whose model has no price cannot be kept: such a claim
//!   gets nothing and the ledger is paused, saying so.

use crate::price::Price;
use serde::{Deserialize, Serialize};

/// Bytes of text per token, for estimates.
pub const BYTES_PER_TOKEN: u64 = 4;

/// Output tokens a row is estimated at when the cap does not say.
pub const DEFAULT_OUTPUT_TOKENS_PER_ROW: i64 = 1024;

/// Rows a ledger must have answered before its own output per row is
/// used to forecast the rest.
pub const MIN_ANSWERED_FOR_HISTORY: i64 = 5;

/// The output tokens a row of the ledger is forecast at: what its answered
/// rows produced on average (output and thinking tokens, `used` over
/// `answered` rows) once there are enough of them, else the cap's
/// estimate, else [`DEFAULT_OUTPUT_TOKENS_PER_ROW`].
pub fn forecast_output_per_row(cap: Option<&SpendCap>, used: i64, answered: i64) -> i64 {
    if answered >= MIN_ANSWERED_FOR_HISTORY && used >= 0 {
        return (used / answered).max(1);
    }
    cap.map_or(DEFAULT_OUTPUT_TOKENS_PER_ROW, |c| c.output_tokens_per_row)
}

/// The warning fraction when the cap does not say.
pub const DEFAULT_WARN_FRACTION: f64 = 0.8;

/// Largest token cap (10^15) and cost cap (10^9 USD) accepted.
pub const MAX_TOKENS: i64 = 1_000_000_000_000_000;
pub const MAX_COST_USD: f64 = 1e9;

pub use crate::money::{MAX_SPEND_USD, usd};

/// A ledger's spend cap; a zero limit is no limit on that measure.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SpendCap {
    #[serde(default)]
    pub max_cost_usd: f64,
    #[serde(default)]
    pub max_input_tokens: i64,
    #[serde(default)]
    pub max_output_tokens: i64,
    /// Fraction of a limit at which a warning alert goes out.
    pub warn_fraction: f64,
    pub output_tokens_per_row: i64,
}

impl Default for SpendCap {
    fn default() -> Self {
        Self {
            max_cost_usd: 0.0,
            max_input_tokens: 0,
            max_output_tokens: 0,
            warn_fraction: DEFAULT_WARN_FRACTION,
            output_tokens_per_row: DEFAULT_OUTPUT_TOKENS_PER_ROW,
        }
    }
}

/// Spend in the three measures a cap limits.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Amount {
    pub cost_usd: f64,
    pub input_tokens: i64,
    pub output_tokens: i64,
}

impl Amount {
    pub fn plus(self, o: Amount) -> Amount {
        Amount {
            cost_usd: usd(self.cost_usd + o.cost_usd),
            input_tokens: self.input_tokens.saturating_add(o.input_tokens),
            output_tokens: self.output_tokens.saturating_add(o.output_tokens),
        }
    }

    /// `self` times `n` (a claim's per-row share times rows still held).
    pub fn times(self, n: i64) -> Amount {
        Amount {
            cost_usd: usd(self.cost_usd * n as f64),
            input_tokens: self.input_tokens.saturating_mul(n),
            output_tokens: self.output_tokens.saturating_mul(n),
        }
    }
}

/// Where a ledger stands against its cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Below,
    /// At or above the warning fraction of some limit.
    Warning,
    /// At or above some limit: nothing more is handed out.
    Reached,
}

/// What a row is, for its estimate.
#[derive(Debug, Clone, Copy)]
pub struct RowSize {
    pub payload_bytes: u64,
    /// The prompt's template and system instruction.
    pub prompt_bytes: u64,
}

impl SpendCap {
    /// Whether any limit is set.
    pub fn limits_anything(&self) -> bool {
        self.max_cost_usd > 0.0 || self.max_input_tokens > 0 || self.max_output_tokens > 0
    }

    /// Field errors of a cap given in a policy (paths under `prefix`).
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if !(self.max_cost_usd.is_finite() && (0.0..=MAX_COST_USD).contains(&self.max_cost_usd)) {
            out.push(("max_cost_usd", format!("must be 0 to {MAX_COST_USD}")));
        }
        for (name, v) in [
            ("max_input_tokens", self.max_input_tokens),
            ("max_output_tokens", self.max_output_tokens),
        ] {
            if !(0..=MAX_TOKENS).contains(&v) {
                out.push((name, format!("must be 0 to {MAX_TOKENS}")));
            }
        }
        if out.is_empty() && !self.limits_anything() {
            out.push((
                "max_cost_usd",
                "a spend cap needs at least one of max_cost_usd, max_input_tokens, max_output_tokens above 0 (or leave spend_cap unset)".into(),
            ));
        }
        if !(self.warn_fraction > 0.0 && self.warn_fraction <= 1.0) {
            out.push(("warn_fraction", "must be above 0 and at most 1".into()));
        }
        if !(1..=1_000_000).contains(&self.output_tokens_per_row) {
            out.push(("output_tokens_per_row", "must be 1 to 1000000".into()));
        }
        out
    }

    /// A row's estimated spend. `None` when the cap limits cost and the
    /// row's model has no price.
    pub fn estimate(&self, row: RowSize, price: Option<&Price>) -> Option<Amount> {
        let bytes = row.payload_bytes.saturating_add(row.prompt_bytes);
        let input = i64::try_from(bytes.div_ceil(BYTES_PER_TOKEN)).unwrap_or(i64::MAX);
        let output = self.output_tokens_per_row;
        let cost = match price {
            Some(p) => p.cost(input, output, 0, 0),
            None if self.max_cost_usd > 0.0 => return None,
            None => 0.0,
        };
        Some(Amount {
            cost_usd: cost,
            input_tokens: input,
            output_tokens: output,
        })
    }

    /// How `used` (spent plus reserved) stands against the limits.
    pub fn level(&self, used: Amount) -> Level {
        let fractions = self.fractions(used);
        if fractions.iter().any(|f| *f >= 1.0) {
            Level::Reached
        } else if fractions.iter().any(|f| *f >= self.warn_fraction) {
            Level::Warning
        } else {
            Level::Below
        }
    }

    /// `used` as a fraction of each set limit.
    fn fractions(&self, used: Amount) -> Vec<f64> {
        let mut out = Vec::with_capacity(3);
        if self.max_cost_usd > 0.0 {
            out.push(used.cost_usd / self.max_cost_usd);
        }
        if self.max_input_tokens > 0 {
            out.push(used.input_tokens as f64 / self.max_input_tokens as f64);
        }
        if self.max_output_tokens > 0 {
            out.push(used.output_tokens as f64 / self.max_output_tokens as f64);
        }
        out
    }

    /// Whether `used + more` stays within every limit.
    pub fn fits(&self, used: Amount, more: Amount) -> bool {
        let total = used.plus(more);
        (self.max_cost_usd <= 0.0 || total.cost_usd <= self.max_cost_usd)
            && (self.max_input_tokens <= 0 || total.input_tokens <= self.max_input_tokens)
            && (self.max_output_tokens <= 0 || total.output_tokens <= self.max_output_tokens)
    }

    /// How many of `rows` (in order) fit after `used`, and their estimated
    /// spend. A row without an estimate (no price) stops the count.
    pub fn take_fitting(&self, used: Amount, rows: &[Option<Amount>]) -> (usize, Amount) {
        let mut taken = Amount::default();
        for (n, row) in rows.iter().enumerate() {
            match row {
                Some(est) if self.fits(used, taken.plus(*est)) => taken = taken.plus(*est),
                _ => return (n, taken),
            }
        }
        (rows.len(), taken)
    }
}

/// Why a claim on a capped ledger got fewer rows than it could have: the
/// message recorded with the pause.
pub fn pause_message(cap: &SpendCap, used: Amount, unpriced: Option<&str>) -> String {
    if let Some(model) = unpriced {
        return format!(
            "spend cap: no price for model {model:?}, so its rows cannot be estimated against max_cost_usd; add the model to policy.prices"
        );
    }
    let mut parts = Vec::new();
    if cap.max_cost_usd > 0.0 {
        parts.push(format!("${:.4} of ${:.4}", used.cost_usd, cap.max_cost_usd));
    }
    if cap.max_input_tokens > 0 {
        parts.push(format!(
            "{} of {} input tokens",
            used.input_tokens, cap.max_input_tokens
        ));
    }
    if cap.max_output_tokens > 0 {
        parts.push(format!(
            "{} of {} output tokens",
            used.output_tokens, cap.max_output_tokens
        ));
    }
    format!(
        "spend cap reached: spent and reserved {}; raise the cap and resume the ledger",
        parts.join(", ")
    )
}

/// The kinds of spend alert, as queued and as `reason` in the body.
pub const ALERT_WARNING: &str = "spend_cap_warning";
pub const ALERT_REACHED: &str = "spend_cap_reached";

fn amount_json(a: Amount) -> serde_json::Value {
    serde_json::json!({
        "cost_usd": a.cost_usd,
        "input_tokens": a.input_tokens,
        "output_tokens": a.output_tokens,
    })
}

/// The JSON an alert about a ledger's spend carries (delivered like the
/// review-threshold alerts: POSTed to the policy's `alert_url`).
pub fn alert_body(
    ledger: &str,
    reason: &str,
    cap: &SpendCap,
    spent: Amount,
    reserved: Amount,
    message: &str,
    time: chrono::DateTime<chrono::Utc>,
) -> serde_json::Value {
    serde_json::json!({
        "type": "tally.ledger.spend_cap",
        "reason": reason,
        "ledger": crate::names::ledger_name(ledger),
        "cap": {
            "max_cost_usd": cap.max_cost_usd,
            "max_input_tokens": cap.max_input_tokens,
            "max_output_tokens": cap.max_output_tokens,
            "warn_fraction": cap.warn_fraction,
        },
        "spent": amount_json(spent),
        "reserved": amount_json(reserved),
        "message": message,
        "time": time.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Invariant: a forecast's output per row is the ledger's own average
    // once it has answered enough rows, the cap's estimate (or the
    // default) before.
    #[test]
    fn the_forecast_output_comes_from_history_once_there_is_some() {
        let cap = SpendCap {
            output_tokens_per_row: 300,
            ..SpendCap::default()
        };
        assert_eq!(
            forecast_output_per_row(None, 0, 0),
            DEFAULT_OUTPUT_TOKENS_PER_ROW
        );
        assert_eq!(
            forecast_output_per_row(Some(&cap), 400, 4),
            300,
            "too few rows"
        );
        assert_eq!(forecast_output_per_row(Some(&cap), 500, 5), 100);
        assert_eq!(forecast_output_per_row(None, 0, 10), 1, "never zero");
    }

    /// Invariant: dollar sums saturate: the largest prices times the
    /// largest counts, summed without end, stay finite, and a cap check
    /// over them is a verdict (never NaN's silent "below").
    #[test]
    fn dollar_sums_saturate_and_caps_still_decide() {
        let p = Price {
            model: "m".into(),
            input_per_million: crate::price::MAX_PRICE_PER_MILLION,
            output_per_million: crate::price::MAX_PRICE_PER_MILLION,
            cached_input_per_million: 0.0,
            thinking_per_million: 0.0,
            lane: crate::lane::Lane::Batch,
        };
        let most = i64::MAX;
        let one = p.cost(most, most, most, 0);
        assert!(one.is_finite() && one <= MAX_SPEND_USD);
        let row = Amount {
            cost_usd: one,
            input_tokens: most,
            output_tokens: most,
        };
        let mut total = Amount::default();
        for _ in 0..1000 {
            total = total.plus(row);
        }
        assert_eq!(total.cost_usd, MAX_SPEND_USD);
        assert_eq!(row.times(i64::MAX).cost_usd, MAX_SPEND_USD);
        assert_eq!(usd(f64::NAN), MAX_SPEND_USD);
        assert_eq!(usd(f64::INFINITY), MAX_SPEND_USD);
        assert_eq!(usd(-1.0), 0.0);
        let c = cap(100.0);
        assert_eq!(c.level(total), Level::Reached);
        let nan = Amount {
            cost_usd: f64::NAN,
            ..Amount::default()
        };
        assert_eq!(c.level(Amount::default().plus(nan)), Level::Reached);
        assert!(!c.fits(Amount::default(), nan));
    }

    fn price() -> Price {
        Price {
            model: "m".into(),
            input_per_million: 1.0,
            output_per_million: 4.0,
            cached_input_per_million: 0.0,
            thinking_per_million: 0.0,
            lane: crate::lane::Lane::Batch,
        }
    }

    fn cap(usd: f64) -> SpendCap {
        SpendCap {
            max_cost_usd: usd,
            output_tokens_per_row: 100,
            ..SpendCap::default()
        }
    }

    /// Input is estimated at 4 bytes a token rounded up, over the payload
    /// and the prompt; output at the cap's per-row figure; cost at the
    /// model's price.
    #[test]
    fn a_row_is_estimated_from_its_bytes_and_price() {
        let row = RowSize {
            payload_bytes: 401,
            prompt_bytes: 99,
        };
        let est = cap(1.0).estimate(row, Some(&price())).unwrap();
        assert_eq!(est.input_tokens, 125);
        assert_eq!(est.output_tokens, 100);
        assert!((est.cost_usd - (125.0 + 400.0) / 1e6).abs() < 1e-15);
        // A cost cap cannot estimate an unpriced model; a token cap can.
        assert!(cap(1.0).estimate(row, None).is_none());
        let tokens = SpendCap {
            max_input_tokens: 1000,
            ..SpendCap::default()
        };
        assert_eq!(tokens.estimate(row, None).unwrap().cost_usd, 0.0);
    }

    /// Rows are taken in order while their sum fits under every limit,
    /// counting what is already used; the first that does not fit (or has
    /// no estimate) stops the count.
    #[test]
    fn only_the_rows_that_fit_are_taken() {
        let c = SpendCap {
            max_input_tokens: 100,
            ..SpendCap::default()
        };
        let row = |n| {
            Some(Amount {
                input_tokens: n,
                ..Amount::default()
            })
        };
        let used = Amount {
            input_tokens: 40,
            ..Amount::default()
        };
        let (n, sum) = c.take_fitting(used, &[row(20), row(30), row(20), row(1)]);
        assert_eq!(n, 2);
        assert_eq!(sum.input_tokens, 50);
        assert_eq!(c.take_fitting(used, &[row(61)]).0, 0);
        assert_eq!(
            c.take_fitting(used, &[row(60)]).0,
            1,
            "exactly at the cap fits"
        );
        assert_eq!(c.take_fitting(used, &[row(1), None, row(1)]).0, 1);
    }

    /// The level is the worst over the set limits.
    #[test]
    fn levels_warn_then_stop() {
        let c = SpendCap {
            max_cost_usd: 10.0,
            max_output_tokens: 1000,
            ..SpendCap::default()
        };
        let at = |usd, out| {
            c.level(Amount {
                cost_usd: usd,
                input_tokens: 0,
                output_tokens: out,
            })
        };
        assert_eq!(at(1.0, 100), Level::Below);
        assert_eq!(at(8.0, 100), Level::Warning);
        assert_eq!(at(1.0, 850), Level::Warning);
        assert_eq!(at(10.0, 0), Level::Reached);
        assert_eq!(at(0.0, 1000), Level::Reached);
    }

    /// A cap must limit something, within bounds.
    #[test]
    fn caps_are_validated() {
        assert!(cap(5.0).problems().is_empty());
        assert!(!SpendCap::default().problems().is_empty());
        assert!(!cap(f64::NAN).problems().is_empty());
        assert!(!cap(-1.0).problems().is_empty());
        let bad = SpendCap {
            warn_fraction: 0.0,
            ..cap(5.0)
        };
        assert_eq!(bad.problems()[0].0, "warn_fraction");
        let bad = SpendCap {
            output_tokens_per_row: 0,
            ..cap(5.0)
        };
        assert_eq!(bad.problems()[0].0, "output_tokens_per_row");
    }
}
