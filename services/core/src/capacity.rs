//! The provider account's requests and tokens per minute, handed out by
//! tally to the synchronous lanes of every worker and replica, so that
//! together they never pass the account's limits: a worker asks before it
//! sends, tally grants what fits in the minute, and a 429 cools the account
//! and model down for every worker ([`crate::job::provider_cooldown`]).
//!
//! The minute is counted over [`WINDOW`], a little longer than the
//! provider's, because a grant is sent a moment after it is made: grants
//! within any [`WINDOW`] never pass the limit, so sends within any minute
//! never do while each goes out within [`SEND_MARGIN`] of its grant.
//!
//! A request larger than the whole token limit is granted alone when
//! nothing else is in the window (the estimate is only an estimate, and
//! refusing it forever would strand its row); the provider decides.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::provider::{Api, route};

/// How long after its grant a request may go out and still count in the
/// grant's minute.
pub const SEND_MARGIN: Duration = Duration::from_secs(5);
/// The window grants are counted over.
pub const WINDOW: Duration = Duration::from_secs(60 + SEND_MARGIN.as_secs());
/// What a cool-down of every synchronous lane is stored under
/// (`model_cooldowns.lane`), beside a lane's own code: a 429 of a
/// synchronous call holds back every synchronous lane of the account and
/// model; a shed flex call only flex; a 429 at a batch create only batch.
pub const ALL_SYNC_LANES: i16 = 0;

/// Largest configurable limits.
pub const MAX_RPM: u32 = 100_000_000;
pub const MAX_TPM: u64 = 1_000_000_000_000;
/// Most per-model limits a server takes.
pub const MAX_MODEL_LIMITS: usize = 256;

/// An account's limits for one model: requests and tokens per minute; 0 is
/// no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RateLimits {
    pub rpm: u32,
    pub tpm: u64,
}

impl RateLimits {
    pub fn limits_anything(&self) -> bool {
        self.rpm > 0 || self.tpm > 0
    }

    /// The documented Tier 1 limits of `api`'s provider, the default until
    /// an operator sets the account's own: Gemini 1,000 RPM and 1,000,000
    /// TPM (its Flash models), OpenAI 500 RPM and 200,000 TPM (its mini
    /// models), Anthropic 50 RPM and 30,000 input TPM.
    pub const fn tier_one(api: Api) -> RateLimits {
        match api {
            Api::Gemini => RateLimits {
                rpm: 1_000,
                tpm: 1_000_000,
            },
            Api::OpenAi => RateLimits {
                rpm: 500,
                tpm: 200_000,
            },
            Api::Anthropic => RateLimits {
                rpm: 50,
                tpm: 30_000,
            },
        }
    }
}

/// Which limit `SyncLimits::set` sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    Requests,
    Tokens,
}

/// The limits of every model, as the server's flags configure them: a
/// model's own, else every model's, else its provider's Tier 1 figures.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncLimits {
    pub rpm: Option<u32>,
    pub tpm: Option<u64>,
    pub per_model: BTreeMap<String, (Option<u32>, Option<u64>)>,
}

impl SyncLimits {
    /// The limits of `model` (as the ledger names it).
    pub fn of(&self, model: &str) -> RateLimits {
        let tier = route(model)
            .api()
            .map_or(RateLimits::default(), RateLimits::tier_one);
        let (rpm, tpm) = self.per_model.get(model).copied().unwrap_or_default();
        RateLimits {
            rpm: rpm.or(self.rpm).unwrap_or(tier.rpm),
            tpm: tpm.or(self.tpm).unwrap_or(tier.tpm),
        }
    }

    /// Sets one limit from a flag value: `N` (every model without its own)
    /// or `MODEL=N`; 0 is no limit.
    pub fn set(&mut self, measure: Measure, spec: &str) -> Result<(), String> {
        let (model, n) = match spec.split_once('=') {
            Some((m, n)) => (Some(m.trim()), n.trim()),
            None => (None, spec.trim()),
        };
        let max = match measure {
            Measure::Requests => u64::from(MAX_RPM),
            Measure::Tokens => MAX_TPM,
        };
        let n: u64 = n.parse().ok().filter(|n| *n <= max).ok_or_else(|| {
            format!("{spec:?}: the limit must be a whole number, 0 to {max} (0: no limit)")
        })?;
        let slot = match model {
            None => None,
            Some("") => return Err(format!("{spec:?}: the model name before '=' is empty")),
            Some(m) if m.len() > 256 => {
                return Err(format!("{spec:?}: the model name is longer than 256 bytes"));
            }
            Some(m) => {
                if self.per_model.len() >= MAX_MODEL_LIMITS && !self.per_model.contains_key(m) {
                    return Err(format!("at most {MAX_MODEL_LIMITS} per-model limits"));
                }
                Some(self.per_model.entry(m.to_string()).or_default())
            }
        };
        match (measure, slot) {
            (Measure::Requests, None) => self.rpm = Some(n as u32),
            (Measure::Tokens, None) => self.tpm = Some(n),
            (Measure::Requests, Some(s)) => s.0 = Some(n as u32),
            (Measure::Tokens, Some(s)) => s.1 = Some(n),
        }
        Ok(())
    }
}

/// Grants within the window, one entry a second: how long ago, how many
/// requests, how many tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Granted {
    pub age: Duration,
    pub requests: u64,
    pub tokens: u64,
}

/// What an ask gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// How many of the asked requests (a prefix) may go now.
    pub requests: usize,
    /// Their tokens.
    pub tokens: u64,
    /// When the first request not granted could fit (absent when all were
    /// granted).
    pub retry_after: Option<Duration>,
}

/// The longest prefix of `asks` (each request's estimated tokens) that fits
/// in the window beside `recent` (grants within [`WINDOW`], any order)
/// under `limits`, unless the account and model cool down for `cooldown`.
pub fn grant(
    limits: RateLimits,
    recent: &[Granted],
    asks: &[u64],
    cooldown: Option<Duration>,
) -> Grant {
    if let Some(wait) = cooldown.filter(|d| !d.is_zero() && !asks.is_empty()) {
        return Grant {
            requests: 0,
            tokens: 0,
            retry_after: Some(wait),
        };
    }
    let in_window: Vec<&Granted> = recent.iter().filter(|g| g.age < WINDOW).collect();
    let used_requests: u64 = in_window.iter().map(|g| g.requests).sum();
    let used_tokens: u64 = in_window.iter().map(|g| g.tokens).sum();
    let fits = |requests: u64, tokens: u64, alone: bool| {
        (limits.rpm == 0 || requests <= u64::from(limits.rpm))
            && (limits.tpm == 0 || tokens <= limits.tpm || alone)
    };
    let (mut n, mut tokens) = (0usize, 0u64);
    for ask in asks {
        let alone = used_requests == 0 && n == 0;
        if !fits(
            used_requests + n as u64 + 1,
            used_tokens.saturating_add(tokens).saturating_add(*ask),
            alone,
        ) {
            break;
        }
        n += 1;
        tokens = tokens.saturating_add(*ask);
    }
    let retry_after = (n < asks.len()).then(|| {
        // The oldest grants leave first: wait until enough have left for
        // the next request.
        let next = asks[n];
        let mut oldest: Vec<&&Granted> = in_window.iter().collect();
        oldest.sort_by_key(|g| std::cmp::Reverse(g.age));
        let (mut freed_r, mut freed_t) = (0u64, 0u64);
        oldest
            .iter()
            .find(|g| {
                freed_r += g.requests;
                freed_t += g.tokens;
                fits(
                    used_requests + n as u64 + 1 - freed_r.min(used_requests),
                    (used_tokens + tokens + next).saturating_sub(freed_t),
                    false,
                )
            })
            .map_or(WINDOW, |g| WINDOW.saturating_sub(g.age))
            .max(Duration::from_secs(1))
    });
    Grant {
        requests: n,
        tokens,
        retry_after,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(age_s: u64, requests: u64, tokens: u64) -> Granted {
        Granted {
            age: Duration::from_secs(age_s),
            requests,
            tokens,
        }
    }

    // Invariant: grants in the window plus this grant never pass the RPM,
    // and the wait is until the oldest grant leaves the window.
    #[test]
    fn requests_are_granted_up_to_the_rpm() {
        let limits = RateLimits { rpm: 10, tpm: 0 };
        let got = grant(limits, &[g(50, 6, 0), g(10, 2, 0)], &[1, 1, 1, 1], None);
        assert_eq!(got.requests, 2);
        assert_eq!(got.retry_after, Some(WINDOW - Duration::from_secs(50)));
        let old = grant(limits, &[g(70, 10, 0)], &[1; 4], None);
        assert_eq!((old.requests, old.retry_after), (4, None));
    }

    // Invariant: tokens of the window plus the grant never pass the TPM,
    // but a request alone in an empty window always goes.
    #[test]
    fn tokens_are_granted_up_to_the_tpm() {
        let limits = RateLimits { rpm: 0, tpm: 100 };
        let got = grant(limits, &[g(5, 1, 60)], &[30, 30], None);
        assert_eq!((got.requests, got.tokens), (1, 30));
        assert!(got.retry_after.is_some());
        let huge = grant(limits, &[], &[500, 1], None);
        assert_eq!(huge.requests, 1, "alone in an empty window");
        assert_eq!(grant(limits, &[g(1, 1, 1)], &[500], None).requests, 0);
    }

    // Invariant: a cool-down grants nothing and says how long; no limit
    // grants everything.
    #[test]
    fn a_cooldown_grants_nothing_and_no_limit_grants_all() {
        let limits = RateLimits { rpm: 10, tpm: 10 };
        let cooled = grant(limits, &[], &[1], Some(Duration::from_secs(7)));
        assert_eq!(
            (cooled.requests, cooled.retry_after),
            (0, Some(Duration::from_secs(7)))
        );
        let free = grant(
            RateLimits::default(),
            &[g(1, 1000, 1 << 40)],
            &[5; 100],
            None,
        );
        assert_eq!((free.requests, free.retry_after), (100, None));
    }

    // Invariant: a model's own limit wins over every model's, which wins
    // over its provider's Tier 1 figures; bad flag values are named.
    #[test]
    fn limits_resolve_model_then_all_then_provider() {
        let mut l = SyncLimits::default();
        assert_eq!(l.of("gpt-4o-mini"), RateLimits::tier_one(Api::OpenAi));
        assert_eq!(l.of("claude-x").rpm, 50);
        l.set(Measure::Requests, "600").unwrap();
        l.set(Measure::Tokens, "gpt-4o-mini=0").unwrap();
        assert_eq!(l.of("gpt-4o-mini"), RateLimits { rpm: 600, tpm: 0 });
        assert_eq!(l.of("gemini-x").rpm, 600);
        assert_eq!(l.of("gemini-x").tpm, 1_000_000);
        assert!(l.set(Measure::Requests, "x=-1").is_err());
        assert!(l.set(Measure::Requests, "=5").is_err());
    }
}
