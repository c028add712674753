//! What a model's tokens cost: a price per million tokens, bounded so no
//! cost is infinite or NaN.

use crate::lane::Lane;
use crate::money::usd;
use crate::usage::Usage;
use serde::{Deserialize, Serialize};

/// Highest price accepted, in USD per million tokens (a dollar a token):
/// with the bound on reported counts it keeps every cost finite.
pub const MAX_PRICE_PER_MILLION: f64 = 1_000_000.0;

/// What a token written to the provider's cache costs against one of
/// fresh input (Anthropic's five-minute cache writes).
pub const CACHE_WRITE_FACTOR: f64 = 1.25;

/// USD per million tokens of one model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Price {
    pub model: String,
    pub input_per_million: f64,
    pub output_per_million: f64,
    /// Input tokens served from the context cache; 0 prices them as
    /// input (an upper bound).
    #[serde(default)]
    pub cached_input_per_million: f64,
    /// Thinking tokens; 0 prices them as output (as Gemini bills them).
    #[serde(default)]
    pub thinking_per_million: f64,
    /// The lane this price is for (batch when the table says none).
    #[serde(default)]
    pub lane: Lane,
}

impl Price {
    /// This price times `factor`, for `lane` (a lane priced from batch).
    pub fn scaled(&self, factor: f64, lane: Lane) -> Price {
        let x = |p: f64| (p * factor).min(MAX_PRICE_PER_MILLION);
        Price {
            model: self.model.clone(),
            input_per_million: x(self.input_per_million),
            output_per_million: x(self.output_per_million),
            cached_input_per_million: x(self.cached_input_per_million),
            thinking_per_million: x(self.thinking_per_million),
            lane,
        }
    }

    /// The estimated cost in USD of tokens as the provider counts them:
    /// `input` includes `cached` (Gemini's `promptTokenCount` does), and
    /// `output` excludes `thinking` (`candidatesTokenCount` does).
    pub fn cost(&self, input: i64, output: i64, thinking: i64, cached: i64) -> f64 {
        let or = |price: f64, fallback: f64| if price > 0.0 { price } else { fallback };
        let cached = cached.clamp(0, input.max(0));
        let fresh = input.max(0) - cached;
        let per = |tokens: i64, price: f64| tokens.max(0) as f64 / 1e6 * price;
        usd(per(fresh, self.input_per_million)
            + per(
                cached,
                or(self.cached_input_per_million, self.input_per_million),
            )
            + per(output, self.output_per_million)
            + per(
                thinking,
                or(self.thinking_per_million, self.output_per_million),
            ))
    }

    /// [`Price::cost`] of a [`Usage`], its cache writes (part of its
    /// input, beside the cached tokens) at [`CACHE_WRITE_FACTOR`] times the
    /// input price.
    pub fn cost_of(&self, u: &Usage) -> f64 {
        let input = u.input.max(0);
        let cached = u.cached.clamp(0, input);
        let written = u.cache_write.clamp(0, input - cached);
        let writes = written as f64 / 1e6 * self.input_per_million * CACHE_WRITE_FACTOR;
        usd(self.cost(input - written, u.output, u.thinking, cached) + writes)
    }
}
