//! What the emulators' synchronous endpoints (Gemini `generateContent`,
//! OpenAI chat completions and responses, Anthropic Messages) share, beside
//! each one's wire shapes: the service tiers, the account's requests and
//! tokens per minute over a sliding minute, the `online` section of every
//! fault plan (shedding of flex requests, answers lost after the work was
//! done, 429 storms, latency) and the counters tests read. Pure: the
//! caller passes the time.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::rules::LostMode;
use crate::times::Fired;

/// The minute limits are counted over.
pub const WINDOW: Duration = Duration::from_secs(60);

/// A synchronous request's service tier, as the emulator grants it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    Standard,
    Flex,
    Priority,
}

impl Tier {
    pub fn name(self) -> &'static str {
        match self {
            Tier::Standard => "standard",
            Tier::Flex => "flex",
            Tier::Priority => "priority",
        }
    }
}

/// The account's limits: requests and (input plus requested output)
/// tokens per minute; 0 is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    pub rpm: u32,
    pub tpm: u64,
}

/// How long an answer takes, by tier (a fault plan's `latency_ms` may
/// override both).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Latency {
    pub standard: Duration,
    pub flex: Duration,
}

impl Default for Latency {
    fn default() -> Self {
        Self {
            standard: Duration::from_millis(20),
            flex: Duration::from_millis(50),
        }
    }
}

/// What an emulator's synchronous endpoints are started with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OnlineConfig {
    pub limits: Limits,
    pub latency: Latency,
}

/// The `online` section of a fault plan.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OnlineFaults {
    /// Limits for this plan (instead of the emulator's started ones).
    pub limits: Option<Limits>,
    /// Every answer takes this long (instead of the tier's latency).
    pub latency_ms: Option<u64>,
    /// Flex requests shed for lack of capacity (not charged): the next
    /// `times`, or every `every`-th.
    pub shed: Option<Shed>,
    /// Requests refused as rate limited whatever the window says (a storm).
    pub rate_limited: Option<Storm>,
    /// Requests answered by the model, then the answer lost (charged).
    pub lost: Option<Lost>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Shed {
    pub times: Option<u32>,
    /// Every n-th flex request (counted from the plan's start) is shed.
    pub every: Option<u32>,
    /// The `retry-after` sent with it, in seconds (none when absent).
    pub retry_after_secs: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Storm {
    pub times: Option<u32>,
    /// The wait the refusal names; 0: none (no `retry-after`, where the
    /// provider may send a 429 without one).
    #[serde(default = "one")]
    pub retry_after_secs: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lost {
    pub times: Option<u32>,
    #[serde(default)]
    pub mode: LostMode,
}

fn one() -> u32 {
    1
}

/// What the engine decides for one request before it is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Answer it after `latency`; `lost` says whether the answer is then
    /// lost (the work done and charged).
    Answer {
        latency: Duration,
        lost: Option<LostMode>,
    },
    /// 429: over the account's limits (or a storm); come back after this.
    RateLimited { retry_after: Duration },
    /// A flex request shed (not charged); the provider's `retry-after`,
    /// if it sends one.
    Shed { retry_after: Option<Duration> },
}

/// Counters tests and `GET /_emulator/stats` read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct OnlineStats {
    /// Requests that reached the model (answered, or answered and lost), by
    /// tier granted.
    pub answered: BTreeMap<Tier, u64>,
    /// Requests refused as over the limits (or by a storm).
    pub rate_limited: u64,
    /// Flex requests shed.
    pub shed: u64,
    /// Answers lost after the work was done.
    pub lost: u64,
    /// The most requests that arrived (refused or not) within any minute.
    pub peak_arrivals_per_minute: u64,
    /// The most requests admitted within any minute, and their tokens.
    pub peak_requests_per_minute: u64,
    pub peak_tokens_per_minute: u64,
    /// Each request's prompt (up to [`KEY_CHARS`] characters), the tiers
    /// its answers were given in: a row paid for twice shows twice.
    pub by_prompt: BTreeMap<String, Vec<Tier>>,
}

/// The characters of a prompt that name it in [`OnlineStats::by_prompt`].
pub const KEY_CHARS: usize = 200;

/// The name of a prompt in the stats.
pub fn prompt_key(prompt: &str) -> String {
    prompt.chars().take(KEY_CHARS).collect()
}

/// The sliding minute of one account (the emulators have one).
#[derive(Debug, Default)]
struct Window {
    admitted: VecDeque<(Instant, u64)>,
    tokens: u64,
    arrivals: VecDeque<Instant>,
}

impl Window {
    fn prune(&mut self, now: Instant) {
        while let Some((at, t)) = self.admitted.front().copied() {
            if now.duration_since(at) < WINDOW {
                break;
            }
            self.admitted.pop_front();
            self.tokens -= t;
        }
        while let Some(at) = self.arrivals.front().copied() {
            if now.duration_since(at) < WINDOW {
                break;
            }
            self.arrivals.pop_front();
        }
    }

    /// Admits a request of `tokens` now, or says when it would fit.
    fn admit(&mut self, now: Instant, tokens: u64, limits: Limits) -> Result<(), Duration> {
        let leaves = |at: Instant| WINDOW.saturating_sub(now.duration_since(at));
        if limits.rpm > 0 && self.admitted.len() as u64 >= u64::from(limits.rpm) {
            let oldest = self.admitted.front().map_or(now, |(at, _)| *at);
            return Err(leaves(oldest).max(Duration::from_millis(1)));
        }
        if limits.tpm > 0 && self.tokens + tokens > limits.tpm {
            // Wait until enough tokens leave the window (a request larger
            // than the whole limit never fits: a minute).
            let mut freed = 0;
            let need = (self.tokens + tokens).saturating_sub(limits.tpm);
            let wait = self
                .admitted
                .iter()
                .find(|(_, t)| {
                    freed += t;
                    freed >= need
                })
                .map_or(WINDOW, |(at, _)| leaves(*at));
            return Err(wait.max(Duration::from_millis(1)));
        }
        self.admitted.push_back((now, tokens));
        self.tokens += tokens;
        Ok(())
    }
}

/// The engine: one per emulator, behind its lock.
#[derive(Debug, Default)]
pub struct Online {
    limits: Limits,
    latency: Latency,
    faults: OnlineFaults,
    window: Window,
    shed: Fired,
    flex_seen: u64,
    storm: Fired,
    lost: Fired,
    stats: OnlineStats,
}

impl Online {
    pub fn new(config: OnlineConfig) -> Self {
        Self {
            limits: config.limits,
            latency: config.latency,
            ..Default::default()
        }
    }

    /// The engine started with `config`, under a plan's `online` section.
    pub fn configured(config: OnlineConfig, faults: OnlineFaults) -> Self {
        let mut online = Online::new(config);
        online.set_faults(faults);
        online
    }

    /// A new plan's `online` section (its counters start again).
    pub fn set_faults(&mut self, faults: OnlineFaults) {
        self.faults = faults;
        self.shed = Fired::default();
        self.storm = Fired::default();
        self.lost = Fired::default();
        self.flex_seen = 0;
    }

    pub fn faults(&self) -> &OnlineFaults {
        &self.faults
    }

    pub fn stats(&self) -> &OnlineStats {
        &self.stats
    }

    /// The limits in force (the plan's, else those started with).
    pub fn limits(&self) -> Limits {
        self.faults.limits.unwrap_or(self.limits)
    }

    /// Decides what becomes of a request in `tier` of `tokens` arriving at
    /// `now`, and counts it. Order: a storm, the account's window, flex
    /// shedding, then the answer (perhaps lost).
    pub fn gate(&mut self, now: Instant, tier: Tier, tokens: u64) -> Gate {
        self.window.prune(now);
        self.window.arrivals.push_back(now);
        let arrivals = self.window.arrivals.len() as u64;
        self.stats.peak_arrivals_per_minute = self.stats.peak_arrivals_per_minute.max(arrivals);
        if let Some(storm) = self.faults.rate_limited
            && self.storm.take(storm.times)
        {
            self.stats.rate_limited += 1;
            return Gate::RateLimited {
                retry_after: Duration::from_secs(u64::from(storm.retry_after_secs)),
            };
        }
        if let Err(retry_after) = self.window.admit(now, tokens, self.limits()) {
            self.stats.rate_limited += 1;
            return Gate::RateLimited { retry_after };
        }
        self.stats.peak_requests_per_minute = self
            .stats
            .peak_requests_per_minute
            .max(self.window.admitted.len() as u64);
        self.stats.peak_tokens_per_minute =
            self.stats.peak_tokens_per_minute.max(self.window.tokens);
        if tier == Tier::Flex
            && let Some(shed) = self.faults.shed
        {
            self.flex_seen += 1;
            let every = shed
                .every
                .is_some_and(|n| n > 0 && self.flex_seen.is_multiple_of(u64::from(n)));
            let counted = shed.every.is_none() && self.shed.take(shed.times);
            if every || counted {
                self.stats.shed += 1;
                return Gate::Shed {
                    retry_after: shed
                        .retry_after_secs
                        .map(|s| Duration::from_secs(u64::from(s))),
                };
            }
        }
        let latency = self.faults.latency_ms.map_or(
            match tier {
                Tier::Flex => self.latency.flex,
                Tier::Standard | Tier::Priority => self.latency.standard,
            },
            Duration::from_millis,
        );
        let lost = self
            .faults
            .lost
            .filter(|l| self.lost.take(l.times))
            .map(|l| l.mode);
        Gate::Answer { latency, lost }
    }

    /// Records that a request for `prompt` was answered in `tier` (lost or
    /// not: the work was done).
    pub fn answered(&mut self, prompt: &str, tier: Tier, lost: bool) {
        *self.stats.answered.entry(tier).or_default() += 1;
        if lost {
            self.stats.lost += 1;
        }
        self.stats
            .by_prompt
            .entry(prompt_key(prompt))
            .or_default()
            .push(tier);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(g: Gate) -> bool {
        matches!(g, Gate::Answer { .. })
    }

    // Invariant: within any minute no more than `rpm` requests are admitted;
    // the refusal says when the oldest leaves the window.
    #[test]
    fn the_minute_admits_rpm_requests_and_names_the_wait() {
        let t0 = Instant::now();
        let mut o = Online::new(OnlineConfig {
            limits: Limits { rpm: 3, tpm: 0 },
            ..Default::default()
        });
        for i in 0..3 {
            assert!(answer(o.gate(
                t0 + Duration::from_secs(i),
                Tier::Standard,
                1
            )));
        }
        match o.gate(t0 + Duration::from_secs(10), Tier::Standard, 1) {
            Gate::RateLimited { retry_after } => assert_eq!(retry_after, Duration::from_secs(50)),
            other => panic!("{other:?}"),
        }
        assert!(answer(o.gate(
            t0 + Duration::from_secs(60),
            Tier::Standard,
            1
        )));
        assert_eq!(o.stats().peak_requests_per_minute, 3);
        assert_eq!(o.stats().peak_arrivals_per_minute, 4);
        assert_eq!(o.stats().rate_limited, 1);
    }

    // Invariant: tokens in the window never pass `tpm`.
    #[test]
    fn tokens_per_minute_are_kept() {
        let t0 = Instant::now();
        let mut o = Online::new(OnlineConfig {
            limits: Limits { rpm: 0, tpm: 100 },
            ..Default::default()
        });
        assert!(answer(o.gate(t0, Tier::Standard, 60)));
        assert!(!answer(o.gate(t0, Tier::Standard, 41)));
        assert!(answer(o.gate(t0, Tier::Standard, 40)));
        assert_eq!(o.stats().peak_tokens_per_minute, 100);
    }

    // Invariant: only flex requests are shed, `every` n-th of them.
    #[test]
    fn flex_requests_are_shed_standard_ones_never() {
        let t0 = Instant::now();
        let mut o = Online::default();
        o.set_faults(OnlineFaults {
            shed: Some(Shed {
                every: Some(2),
                ..Default::default()
            }),
            ..Default::default()
        });
        let shed: Vec<bool> = (0..4)
            .map(|_| matches!(o.gate(t0, Tier::Flex, 1), Gate::Shed { .. }))
            .collect();
        assert_eq!(shed, [false, true, false, true]);
        assert!(answer(o.gate(t0, Tier::Standard, 1)));
        assert_eq!(o.stats().shed, 2);
    }

    // Invariant: a storm refuses `times` requests, then the window decides;
    // a lost answer is still answered (counted) work.
    #[test]
    fn storms_wear_out_and_lost_answers_count_as_answered() {
        let t0 = Instant::now();
        let mut o = Online::default();
        o.set_faults(OnlineFaults {
            rate_limited: Some(Storm {
                times: Some(2),
                retry_after_secs: 1,
            }),
            lost: Some(Lost {
                times: Some(1),
                mode: LostMode::Drop,
            }),
            ..Default::default()
        });
        assert!(matches!(
            o.gate(t0, Tier::Standard, 1),
            Gate::RateLimited { .. }
        ));
        assert!(matches!(
            o.gate(t0, Tier::Standard, 1),
            Gate::RateLimited { .. }
        ));
        let Gate::Answer { lost, .. } = o.gate(t0, Tier::Standard, 1) else {
            panic!("answered");
        };
        assert_eq!(lost, Some(LostMode::Drop));
        o.answered("p", Tier::Standard, true);
        let Gate::Answer { lost, .. } = o.gate(t0, Tier::Standard, 1) else {
            panic!("answered");
        };
        assert_eq!(lost, None);
        assert_eq!((o.stats().lost, o.stats().by_prompt["p"].len()), (1, 1));
    }
}
