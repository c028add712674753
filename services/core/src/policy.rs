//! A ledger's policy: attempt caps, lease, backoff, classifier overrides,
//! alerting, job limit, prices and batch filling, with the documented defaults and the
//! validation that keeps absurd values out. Stored as JSON beside the ledger.

use crate::backoff::Backoff;
use crate::cache::ResultCache;
use crate::classify::{FailureKind, Override, Severity};
use crate::fill::BatchFill;
use crate::lane::{Lane, Lanes};
use crate::millis;
use crate::outbound::Reach;
pub use crate::price::{MAX_PRICE_PER_MILLION, Price};
use crate::route::Turnarounds;
use crate::spend::SpendCap;
use crate::status::{Budget, PerBudget};
use crate::usage::Usage;
use crate::violation::Violations;
use serde::{Deserialize, Serialize};
use std::time::Duration;

pub const DEFAULT_MODEL: &str = "gemini-flash-latest";
pub const MIN_LEASE: Duration = Duration::from_secs(1);
pub const MAX_LEASE: Duration = Duration::from_secs(7 * 24 * 3600);
pub const MAX_CAP: u32 = 100;
pub const MAX_BACKOFF: Duration = Duration::from_secs(7 * 24 * 3600);
/// Classifier overrides and price entries a policy may hold: a policy is
/// stored on its ledger and sent with every `Ledger`, so its size is bounded
/// (a list page of ledgers is cut by bytes as well).
pub const MAX_OVERRIDES: usize = 100;
pub const MAX_PRICES: usize = 100;
/// Bytes of an override's match strings and of a price's model name.
pub const MAX_MATCH_TEXT: usize = 256;
/// Bytes of `alert_url`.
pub const MAX_ALERT_URL: usize = 2048;

/// What tokens used under several models cost at a ledger's prices.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CostEstimate {
    /// USD of the priced models' tokens.
    pub cost_usd: f64,
    /// The models given that have no price, in the order given: their
    /// tokens are not in `cost_usd`, which is then a lower bound, never a
    /// silent zero.
    pub unpriced_models: Vec<String>,
}

/// A stored override (the classifier's [`Override`] in serializable form).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct OverrideRule {
    pub name: String,
    #[serde(default)]
    pub http_code: u32,
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub message_contains: String,
    #[serde(default)]
    pub finish_reason: String,
    /// Stored code of [`FailureKind`] (0: any).
    #[serde(default)]
    pub kind: i16,
    /// true: permanent; false: retryable.
    pub permanent: bool,
    /// Stored code of [`Budget`] (0: provider).
    #[serde(default)]
    pub budget: i16,
}

impl OverrideRule {
    pub fn to_override(&self) -> Override {
        Override {
            name: self.name.clone(),
            http_code: self.http_code,
            status: self.status.clone(),
            message_contains: self.message_contains.clone(),
            finish_reason: self.finish_reason.clone(),
            kind: failure_kind_from_code(self.kind),
            severity: Some(if self.permanent {
                Severity::Permanent
            } else {
                Severity::Retryable
            }),
            budget: Budget::from_code(self.budget),
        }
    }
}

/// Stored code of a failure kind (equal to `tally.v1.FailureKind`).
pub fn failure_kind_code(kind: FailureKind) -> i16 {
    match kind {
        FailureKind::ProviderError => 1,
        FailureKind::EmptyResponse => 2,
        FailureKind::InvalidOutput => 3,
        FailureKind::Blocked => 4,
        FailureKind::MissingFromOutput => 5,
        FailureKind::MediaUnreadable => 6,
        FailureKind::MediaUnavailable => 7,
        FailureKind::AnswerLost => 8,
    }
}

pub fn failure_kind_from_code(code: i16) -> Option<FailureKind> {
    match code {
        1 => Some(FailureKind::ProviderError),
        2 => Some(FailureKind::EmptyResponse),
        3 => Some(FailureKind::InvalidOutput),
        4 => Some(FailureKind::Blocked),
        5 => Some(FailureKind::MissingFromOutput),
        6 => Some(FailureKind::MediaUnreadable),
        7 => Some(FailureKind::MediaUnavailable),
        8 => Some(FailureKind::AnswerLost),
        _ => None,
    }
}

/// A ledger's policy with every default resolved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Policy {
    pub model: String,
    pub caps: Caps,
    #[serde(with = "millis")]
    pub lease: Duration,
    pub backoff: Backoff,
    pub overrides: Vec<OverrideRule>,
    pub review_threshold: u64,
    pub alert_url: String,
    pub max_active_jobs: u32,
    pub prices: Vec<Price>,
    /// Limits on what the ledger may spend (none when unset).
    #[serde(default)]
    pub spend_cap: Option<SpendCap>,
    /// How long a partial batch waits for more rows (see [`crate::fill`]).
    #[serde(default)]
    pub batch_fill: BatchFill,
    /// The lanes the ledger's rows may take (see [`crate::lane`]).
    #[serde(default)]
    pub lanes: Lanes,
    /// When every row should be final, as milliseconds since the Unix
    /// epoch: with one, each claim routes rows by their chain's depth to
    /// the cheapest lane that still finishes it in time (see
    /// [`crate::route`]); without one, everything goes by batch.
    #[serde(default)]
    pub deadline_ms: Option<i64>,
    /// How long a link takes in each lane before the ledger has history of
    /// its own (default [`Turnarounds::default`]).
    #[serde(default)]
    pub turnarounds: Turnarounds,
    /// Serve rows from the result cache and keep their answers there (see
    /// [`crate::cache`]); none: off.
    #[serde(default)]
    pub result_cache: Option<ResultCache>,
    /// When a row answered again answers differently, ask again the
    /// dependants that used its old answer (`dependency_changed`); off:
    /// they are only marked as having used a changed input.
    #[serde(default)]
    pub rerun_dependants: bool,
}

/// Attempt caps per budget (serializable mirror of [`PerBudget`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Caps {
    pub provider: u32,
    pub content: u32,
    pub infra: u32,
}

impl Caps {
    pub fn per_budget(&self) -> PerBudget {
        PerBudget::new(self.provider, self.content, self.infra)
    }
}

impl Default for Caps {
    fn default() -> Self {
        Self {
            provider: 4,
            content: 1,
            infra: 4,
        }
    }
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            model: DEFAULT_MODEL.into(),
            caps: Caps::default(),
            lease: Duration::from_secs(30 * 60),
            backoff: Backoff::default(),
            overrides: Vec::new(),
            review_threshold: 0,
            alert_url: String::new(),
            max_active_jobs: 4,
            prices: Vec::new(),
            spend_cap: None,
            batch_fill: BatchFill::default(),
            lanes: Lanes::default(),
            deadline_ms: None,
            turnarounds: Turnarounds::default(),
            result_cache: None,
            rerun_dependants: false,
        }
    }
}

impl Policy {
    pub fn overrides(&self) -> Vec<Override> {
        self.overrides
            .iter()
            .map(OverrideRule::to_override)
            .collect()
    }

    /// Checks every field; field paths are prefixed with `prefix`
    /// (e.g. `policy`). `reach` says which alert targets the server may
    /// send to (see [`crate::outbound`]).
    pub fn validate(&self, prefix: &str, reach: Reach, v: &mut Violations) {
        let f = |name: &str| format!("{prefix}.{name}");
        if self.model.trim().is_empty() || self.model.len() > 128 {
            v.add(f("model"), "must be 1 to 128 characters");
        }
        for (name, cap) in [
            ("budgets.provider", self.caps.provider),
            ("budgets.content", self.caps.content),
            ("budgets.infra", self.caps.infra),
        ] {
            if !(1..=MAX_CAP).contains(&cap) {
                v.add(f(name), format!("must be 1 to {MAX_CAP}"));
            }
        }
        if self.lease < MIN_LEASE || self.lease > MAX_LEASE {
            v.add(f("lease"), "must be between 1s and 7 days");
        }
        let b = &self.backoff;
        if b.initial > MAX_BACKOFF {
            v.add(f("backoff.initial"), "must be at most 7 days");
        }
        if b.max > MAX_BACKOFF || b.max < b.initial {
            v.add(
                f("backoff.max"),
                "must be at least backoff.initial and at most 7 days",
            );
        }
        if !(1.0..=10.0).contains(&b.multiplier) {
            v.add(f("backoff.multiplier"), "must be between 1 and 10");
        }
        if !(0.0..=1.0).contains(&b.jitter) {
            v.add(f("backoff.jitter"), "must be between 0 and 1");
        }
        if self.overrides.len() > MAX_OVERRIDES {
            v.add(
                f("overrides"),
                format!("must have at most {MAX_OVERRIDES} entries"),
            );
        }
        for (i, o) in self.overrides.iter().enumerate().take(MAX_OVERRIDES) {
            let at = |name: &str| format!("{prefix}.overrides[{i}].{name}");
            for (name, text) in [
                ("status", &o.status),
                ("message_contains", &o.message_contains),
                ("finish_reason", &o.finish_reason),
            ] {
                if text.len() > MAX_MATCH_TEXT {
                    v.add(at(name), format!("must be at most {MAX_MATCH_TEXT} bytes"));
                }
            }
            if !crate::names::is_simple_id(&o.name, 63) {
                v.add(at("name"), "must be 1 to 63 characters of [a-z0-9_-]");
            }
            if !o.to_override().has_condition() {
                v.add(
                    at("name"),
                    "must set at least one of http_code, status, message_contains, finish_reason, kind",
                );
            }
        }
        if self.max_active_jobs == 0 || self.max_active_jobs > 10_000 {
            v.add(f("max_active_jobs"), "must be 1 to 10000");
        }
        if self.alert_url.len() > MAX_ALERT_URL {
            v.add(
                f("alert_url"),
                format!("must be at most {MAX_ALERT_URL} bytes"),
            );
        } else if !self.alert_url.is_empty()
            && let Err(why) = crate::outbound::check_target(&self.alert_url, reach)
        {
            v.add(f("alert_url"), why);
        }
        if self.prices.len() > MAX_PRICES {
            v.add(
                f("prices"),
                format!("must have at most {MAX_PRICES} entries"),
            );
        }
        for lane in Lane::ALL {
            let t = self.turnarounds.of(lane);
            if t.is_zero() || t > MAX_BACKOFF {
                v.add(
                    format!("{prefix}.turnarounds.{}", lane.name()),
                    "must be more than 0 and at most 7 days",
                );
            }
        }
        for (name, why) in self.batch_fill.problems() {
            v.add(format!("{prefix}.batch_fill.{name}"), why);
        }
        if let Some(cache) = &self.result_cache {
            for (name, why) in cache.problems() {
                v.add(format!("{prefix}.result_cache.{name}"), why);
            }
        }
        if let Some(cap) = &self.spend_cap {
            for (name, why) in cap.problems() {
                v.add(format!("{prefix}.spend_cap.{name}"), why);
            }
        }
        for (i, p) in self.prices.iter().enumerate().take(MAX_PRICES) {
            if p.model.trim().is_empty() || p.model.len() > MAX_MATCH_TEXT {
                v.add(
                    format!("{prefix}.prices[{i}].model"),
                    format!("must be 1 to {MAX_MATCH_TEXT} bytes"),
                );
            }
            let sane = |x: f64| x.is_finite() && (0.0..=MAX_PRICE_PER_MILLION).contains(&x);
            if ![
                p.input_per_million,
                p.output_per_million,
                p.cached_input_per_million,
                p.thinking_per_million,
            ]
            .into_iter()
            .all(sane)
            {
                v.add(
                    format!("{prefix}.prices[{i}]"),
                    format!("prices must be 0 to {MAX_PRICE_PER_MILLION} USD per million tokens"),
                );
            }
        }
    }

    /// The spend cap, if one limits anything.
    pub fn cap(&self) -> Option<&SpendCap> {
        self.spend_cap.as_ref().filter(|c| c.limits_anything())
    }

    /// The batch price of one model, if the table has it.
    pub fn price(&self, model: &str) -> Option<&Price> {
        self.prices
            .iter()
            .find(|p| p.model == model && p.lane == Lane::Batch)
    }

    /// The price of `model` in `lane`: the table's entry for the lane, else
    /// the batch price times the lane's factor ([`Lane::batch_factor`]).
    pub fn price_in(&self, model: &str, lane: Lane) -> Option<Price> {
        match self
            .prices
            .iter()
            .find(|p| p.model == model && p.lane == lane)
        {
            Some(p) => Some(p.clone()),
            None => self
                .price(model)
                .map(|p| p.scaled(lane.batch_factor(), lane)),
        }
    }

    /// The estimated cost of `usage` split by model and lane, at this
    /// policy's prices.
    pub fn estimate_cost<'a>(
        &self,
        by_model: impl IntoIterator<Item = (&'a str, Lane, &'a Usage)>,
    ) -> CostEstimate {
        let mut estimate = CostEstimate::default();
        for (model, lane, usage) in by_model {
            match self.price_in(model, lane) {
                Some(p) => {
                    estimate.cost_usd = crate::money::usd(estimate.cost_usd + p.cost_of(usage));
                }
                None if !estimate.unpriced_models.iter().any(|m| m == model) => {
                    estimate.unpriced_models.push(model.to_owned())
                }
                None => {}
            }
        }
        estimate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_documented_values() {
        let p = Policy::default();
        let mut v = Violations::new();
        p.validate("policy", Reach::PublicOnly, &mut v);
        assert!(v.is_empty(), "{v:?}");
        assert_eq!(p.caps.per_budget(), PerBudget::new(4, 1, 4));
        assert_eq!(p.max_active_jobs, 4);
    }

    #[test]
    fn absurd_values_are_named() {
        let p = Policy {
            caps: Caps {
                provider: 0,
                content: 1,
                infra: 1000,
            },
            lease: Duration::ZERO,
            alert_url: "ftp://x".into(),
            overrides: vec![OverrideRule {
                name: "Bad Name".into(),
                permanent: true,
                ..OverrideRule::default()
            }],
            ..Policy::default()
        };
        let mut v = Violations::new();
        p.validate("policy", Reach::PublicOnly, &mut v);
        let fields: Vec<String> = v
            .finish()
            .unwrap_err()
            .into_iter()
            .map(|f| f.field)
            .collect();
        assert_eq!(
            fields,
            [
                "policy.budgets.provider",
                "policy.budgets.infra",
                "policy.lease",
                "policy.overrides[0].name",
                "policy.overrides[0].name",
                "policy.alert_url"
            ]
        );
    }

    /// A policy travels in every `Ledger`, so its lists and texts are bounded:
    /// one entry past each bound is named, and the bounds themselves pass.
    #[test]
    fn lists_and_texts_are_bounded() {
        let rule = |i: usize| OverrideRule {
            name: format!("r{i}"),
            http_code: 500,
            permanent: true,
            ..OverrideRule::default()
        };
        let price = |i: usize| Price {
            model: format!("m{i}"),
            input_per_million: 1.0,
            output_per_million: 1.0,
            cached_input_per_million: 0.0,
            thinking_per_million: 0.0,
            lane: Lane::Batch,
        };
        let fields = |p: &Policy| -> Vec<String> {
            let mut v = Violations::new();
            p.validate("policy", Reach::PublicOnly, &mut v);
            v.finish()
                .err()
                .unwrap_or_default()
                .into_iter()
                .map(|f| f.field)
                .collect()
        };
        let at_bounds = Policy {
            overrides: (0..MAX_OVERRIDES).map(rule).collect(),
            prices: (0..MAX_PRICES).map(price).collect(),
            ..Policy::default()
        };
        assert!(fields(&at_bounds).is_empty());
        let mut long = rule(0);
        long.message_contains = "x".repeat(MAX_MATCH_TEXT + 1);
        let mut long_price = price(0);
        long_price.model = "m".repeat(MAX_MATCH_TEXT + 1);
        let past = Policy {
            overrides: std::iter::once(long)
                .chain((1..=MAX_OVERRIDES).map(rule))
                .collect(),
            prices: std::iter::once(long_price)
                .chain((1..=MAX_PRICES).map(price))
                .collect(),
            alert_url: format!("https://example.com/{}", "a".repeat(MAX_ALERT_URL)),
            ..Policy::default()
        };
        assert_eq!(
            fields(&past),
            [
                "policy.overrides",
                "policy.overrides[0].message_contains",
                "policy.alert_url",
                "policy.prices",
                "policy.prices[0].model",
            ]
        );
    }

    #[test]
    fn round_trips_through_json() {
        let p = Policy {
            overrides: vec![OverrideRule {
                name: "teapot".into(),
                http_code: 418,
                permanent: true,
                ..OverrideRule::default()
            }],
            ..Policy::default()
        };
        let text = serde_json::to_string(&p).unwrap();
        assert_eq!(serde_json::from_str::<Policy>(&text).unwrap(), p);
    }

    #[test]
    fn cached_and_thinking_tokens_have_their_own_prices_with_safe_fallbacks() {
        let mut p = Price {
            model: "m".into(),
            input_per_million: 1.0,
            output_per_million: 4.0,
            cached_input_per_million: 0.25,
            thinking_per_million: 3.0,
            lane: Lane::Batch,
        };
        // 1M input of which 0.5M cached, 1M output, 1M thinking.
        let cost = p.cost(1_000_000, 1_000_000, 1_000_000, 500_000);
        assert!((cost - (0.5 + 0.125 + 4.0 + 3.0)).abs() < 1e-9, "{cost}");
        // Unset prices fall back: cached as input, thinking as output.
        p.cached_input_per_million = 0.0;
        p.thinking_per_million = 0.0;
        let cost = p.cost(1_000_000, 0, 1_000_000, 500_000);
        assert!((cost - (1.0 + 4.0)).abs() < 1e-9, "{cost}");
        // More cached than input (a bad count) never goes negative.
        assert!(p.cost(10, 0, 0, 99) >= 0.0);
        assert_eq!(p.cost(-5, -5, -5, -5), 0.0);
    }

    // Invariant: cache writes (Anthropic's, part of the input) cost 1.25
    // times fresh input, cache reads their own price, and no count makes
    // a cost negative or counts a token twice.
    #[test]
    fn cache_writes_cost_a_quarter_more_than_input() {
        let p = Price {
            model: "claude".into(),
            input_per_million: 1.0,
            output_per_million: 4.0,
            cached_input_per_million: 0.1,
            thinking_per_million: 0.0,
            lane: Lane::Batch,
        };
        // 1M input: 0.5M fresh, 0.25M read from the cache, 0.25M written.
        let u = Usage {
            input: 1_000_000,
            cached: 250_000,
            cache_write: 250_000,
            ..Usage::default()
        };
        let cost = p.cost_of(&u);
        assert!((cost - (0.5 + 0.025 + 0.3125)).abs() < 1e-9, "{cost}");
        let odd = Usage {
            input: 10,
            cached: 8,
            cache_write: 99,
            ..Usage::default()
        };
        assert!((p.cost_of(&odd) - (8.0 * 0.1 + 2.0 * 1.25) / 1e6).abs() < 1e-12);
    }

    fn price(model: &str, input: f64, output: f64) -> Price {
        Price {
            model: model.into(),
            input_per_million: input,
            output_per_million: output,
            cached_input_per_million: 0.0,
            thinking_per_million: 0.0,
            lane: Lane::Batch,
        }
    }

    // Invariant: a lane's own price wins; a lane without one costs the
    // batch price times its factor; the estimate sums each lane at its
    // price.
    #[test]
    fn each_lane_costs_its_own_price_or_the_batch_price_times_its_factor() {
        let flex = Price {
            lane: Lane::Flex,
            ..price("m", 0.5, 1.0)
        };
        let p = Policy {
            prices: vec![price("m", 1.0, 2.0), flex.clone()],
            ..Policy::default()
        };
        assert_eq!(p.price_in("m", Lane::Flex), Some(flex));
        assert_eq!(p.price("m"), Some(&price("m", 1.0, 2.0)));
        let standard = p.price_in("m", Lane::Standard).unwrap();
        assert_eq!(
            (
                standard.input_per_million,
                standard.output_per_million,
                standard.lane
            ),
            (2.0, 4.0, Lane::Standard)
        );
        assert_eq!(p.price_in("other", Lane::Flex), None);
        let u = Usage {
            input: 1_000_000,
            ..Usage::default()
        };
        let e = p.estimate_cost([("m", Lane::Batch, &u), ("m", Lane::Standard, &u)]);
        assert!((e.cost_usd - 3.0).abs() < 1e-9, "{e:?}");
    }

    #[test]
    fn a_cost_estimate_sums_priced_models_and_names_the_unpriced() {
        let p = Policy {
            prices: vec![price("flash", 1.0, 2.0), price("pro", 10.0, 20.0)],
            ..Policy::default()
        };
        let flash = Usage {
            input: 1_000_000,
            output: 500_000,
            thinking: 250_000,
            cached: 0,
            cache_write: 0,
        };
        let pro = Usage {
            input: 100_000,
            ..Usage::default()
        };
        let other = Usage {
            output: 7,
            ..Usage::default()
        };
        let e = p.estimate_cost([
            ("flash", Lane::Batch, &flash),
            ("mystery", Lane::Batch, &other),
            ("pro", Lane::Batch, &pro),
        ]);
        // flash: 1 + 0.5 * 2 + 0.25 * 2 (thinking at the output price); pro: 0.1 * 10.
        assert!((e.cost_usd - (1.0 + 1.0 + 0.5 + 1.0)).abs() < 1e-9, "{e:?}");
        assert_eq!(e.unpriced_models, vec!["mystery".to_string()]);
        assert_eq!(
            e.cost_usd,
            p.prices[0].cost_of(&flash) + p.prices[1].cost_of(&pro)
        );
    }

    #[test]
    fn no_usage_costs_nothing_and_an_empty_price_table_prices_nothing() {
        let p = Policy {
            prices: vec![price("flash", 1.0, 2.0)],
            ..Policy::default()
        };
        assert_eq!(p.estimate_cost([]), CostEstimate::default());
        let u = Usage {
            input: 5,
            ..Usage::default()
        };
        let e =
            Policy::default().estimate_cost([("flash", Lane::Batch, &u), ("pro", Lane::Batch, &u)]);
        assert_eq!(e.cost_usd, 0.0);
        assert_eq!(
            e.unpriced_models,
            vec!["flash".to_string(), "pro".to_string()]
        );
    }
}
