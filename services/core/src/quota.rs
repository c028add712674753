//! Admission against the provider's quotas, shared by every worker.
//!
//! Gemini's Batch API limits a project to a number of concurrent batches
//! (100) and each model to a number of *enqueued tokens* (the input tokens
//! of its batches not yet finished; the figure depends on the project's
//! tier). A create over either limit is answered 429. Each worker would
//! find that wall alone; instead CreateJob admits a job only when the
//! batches and estimated tokens already at the provider, plus this job,
//! fit, and otherwise answers RESOURCE_EXHAUSTED with a RetryInfo computed
//! here from which jobs should finish next.
//!
//! What counts as "at the provider": every open job not yet known finished
//! (preparing and creating jobs included: they were admitted and are about
//! to be sent). A job's tokens are estimated from its rows' payload and
//! prompt bytes at [`crate::spend::BYTES_PER_TOKEN`] bytes per token.
//!
//! A job with nothing of its model in flight is always admitted, whatever
//! its estimate: the estimate is only an estimate, and refusing a job that
//! nothing will ever make room for would strand its rows. The provider
//! decides; a 429 then cools the model down ([`crate::job::provider_cooldown`]).
//! (The worker packs a batch under the model's limit, so one job alone
//! fits.)
//!
//! Quotas are a provider account's (the project behind a key): jobs of
//! other accounts never count. Within an account, teams (the principals
//! that make jobs) share it: with a `team_share` below 100%, a team with
//! something of the model in flight is admitted only while its own jobs
//! stay within that share of each limit, so one team cannot take the whole
//! quota; and another team's PREPARING jobs (admitted, not yet sent) count
//! only while young ([`PREPARING_HOLD`]), so a team that claims and stalls
//! cannot starve the others.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::job::JobState;
use crate::spend::BYTES_PER_TOKEN;

/// Gemini's documented limit of concurrent batch jobs per project.
pub const DEFAULT_MAX_BATCHES: u32 = 100;
/// The enqueued-token limit assumed for a model with no configured limit:
/// the smallest per-model figure of Gemini's Tier 1 table (3,000,000, the
/// Flash models'). Raise it per model for higher tiers.
pub const DEFAULT_ENQUEUED_TOKENS: i64 = 3_000_000;
/// Largest configurable limits.
pub const MAX_BATCHES_LIMIT: u32 = 1_000_000;
pub const MAX_TOKENS_LIMIT: i64 = 1_000_000_000_000;
/// Most per-model overrides a server takes.
pub const MAX_MODEL_OVERRIDES: usize = 256;
/// Shortest and longest RetryInfo of a refused admission (asking again
/// costs a claim and a CreateJob, so a long batch is waited for in steps).
pub const MIN_RETRY: Duration = Duration::from_secs(5);
pub const MAX_RETRY: Duration = Duration::from_secs(300);

/// How long another team's PREPARING job holds quota: a job is rendered
/// and uploaded in seconds; one that stays PREPARING longer is stalled and
/// stops counting against other teams.
pub const PREPARING_HOLD: Duration = Duration::from_secs(60);

/// The job states that hold the provider's quota (open and not known
/// finished at the provider).
pub const IN_FLIGHT: [JobState; 4] = [
    JobState::Preparing,
    JobState::Creating,
    JobState::Submitted,
    JobState::Running,
];

/// The codes of [`IN_FLIGHT`], to bind into SQL.
pub fn in_flight_codes() -> Vec<i16> {
    IN_FLIGHT.iter().map(|s| s.code()).collect()
}

/// A job's estimated input tokens from the bytes it sends.
pub fn estimate_tokens(bytes: u64) -> i64 {
    i64::try_from(bytes.div_ceil(BYTES_PER_TOKEN)).unwrap_or(i64::MAX)
}

/// The provider's limits as configured for the account's tier (server
/// flags). 0 means no limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderQuotas {
    /// Concurrent batches per project (all models together).
    pub max_batches: u32,
    /// Enqueued tokens per model, for models not in `per_model`.
    pub enqueued_tokens: i64,
    /// Enqueued tokens of named models.
    pub per_model: BTreeMap<String, i64>,
    /// The share of each limit one team may hold while it has something of
    /// the model in flight, in percent (1 to 100; 100: no share).
    pub team_share: u8,
}

impl Default for ProviderQuotas {
    fn default() -> Self {
        Self {
            max_batches: DEFAULT_MAX_BATCHES,
            enqueued_tokens: DEFAULT_ENQUEUED_TOKENS,
            per_model: BTreeMap::new(),
            team_share: 100,
        }
    }
}

impl ProviderQuotas {
    /// No limits at all (admission off).
    pub fn unlimited() -> Self {
        Self {
            max_batches: 0,
            enqueued_tokens: 0,
            per_model: BTreeMap::new(),
            team_share: 100,
        }
    }

    /// `share` percent of `limit`, at least 1 when `limit` is positive.
    fn share_of(&self, limit: i64) -> i64 {
        (limit.saturating_mul(i64::from(self.team_share)) / 100).max(limit.min(1))
    }

    /// The enqueued-token limit of `model` (0: none).
    pub fn tokens_of(&self, model: &str) -> i64 {
        self.per_model
            .get(model)
            .copied()
            .unwrap_or(self.enqueued_tokens)
    }

    /// Whether admission needs to look at anything.
    pub fn limits_anything(&self) -> bool {
        self.max_batches > 0 || self.enqueued_tokens > 0 || self.per_model.values().any(|v| *v > 0)
    }

    /// Sets the enqueued-token limit from one flag value: `N` (every model
    /// without its own) or `MODEL=N`.
    pub fn set_tokens(&mut self, spec: &str) -> Result<(), String> {
        let (model, n) = match spec.split_once('=') {
            Some((m, n)) => (Some(m.trim()), n.trim()),
            None => (None, spec.trim()),
        };
        let n: i64 = n
            .parse()
            .ok()
            .filter(|n| (0..=MAX_TOKENS_LIMIT).contains(n))
            .ok_or_else(|| {
                format!("{spec:?}: the limit must be a whole number of tokens, 0 to {MAX_TOKENS_LIMIT} (0: no limit)")
            })?;
        match model {
            None => self.enqueued_tokens = n,
            Some("") => return Err(format!("{spec:?}: the model name before '=' is empty")),
            Some(m) if m.len() > 256 => {
                return Err(format!("{spec:?}: the model name is longer than 256 bytes"));
            }
            Some(m) => {
                if self.per_model.len() >= MAX_MODEL_OVERRIDES && !self.per_model.contains_key(m) {
                    return Err(format!("at most {MAX_MODEL_OVERRIDES} per-model limits"));
                }
                self.per_model.insert(m.to_string(), n);
            }
        }
        Ok(())
    }
}

/// A job at the provider (of the same account), as admission sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct InFlight {
    pub model: String,
    pub tokens: i64,
    /// Since the job was made.
    pub age: Duration,
    /// Made by the team asking now.
    pub mine: bool,
    /// Still PREPARING (admitted, not yet sent).
    pub preparing: bool,
}

impl InFlight {
    /// Whether the job holds quota against the team asking: its own jobs
    /// always; another team's unless it is a stalled PREPARING job.
    pub fn holds(&self) -> bool {
        self.mine || !self.preparing || self.age < PREPARING_HOLD
    }
}

/// Which limit refused a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    Batches,
    EnqueuedTokens,
    /// The team's share of a limit.
    TeamShare,
}

/// The answer of [`admit`].
#[derive(Debug, Clone, PartialEq)]
pub enum Admission {
    Admit,
    Refuse {
        limit: Limit,
        message: String,
        /// When enough should have finished for the job to fit.
        retry_after: Duration,
    },
}

/// Whether a job of `model` with `tokens` estimated input tokens may go to
/// the provider now, given every job in flight (all models). `typical` is
/// how long a recent batch of the model took (the median): a job in flight
/// is expected to finish `typical` after it was made (any moment once older
/// than that). With no history (`None`), any job may finish any moment:
/// the RetryInfo is the shortest.
pub fn admit(
    quotas: &ProviderQuotas,
    model: &str,
    tokens: i64,
    in_flight: &[InFlight],
    typical: Option<Duration>,
) -> Admission {
    let remaining = |j: &InFlight| {
        typical
            .map_or(MIN_RETRY, |t| t.saturating_sub(j.age))
            .clamp(MIN_RETRY, MAX_RETRY)
    };
    let in_flight: Vec<&InFlight> = in_flight.iter().filter(|j| j.holds()).collect();
    let max = quotas.max_batches as usize;
    if max > 0 && in_flight.len() >= max {
        // The (len - max + 1)th job to finish makes room.
        let mut waits: Vec<Duration> = in_flight.iter().map(|j| remaining(j)).collect();
        waits.sort();
        let retry_after = waits[in_flight.len() - max];
        return Admission::Refuse {
            limit: Limit::Batches,
            message: format!(
                "{} batches are at the provider and the project's limit (--provider-max-batches) is {max}; \
                 retry in about {}s, when one should have finished",
                in_flight.len(),
                retry_after.as_secs()
            ),
            retry_after,
        };
    }
    if let Some(refusal) = over_share(quotas, model, tokens, &in_flight, &remaining) {
        return refusal;
    }
    let limit = quotas.tokens_of(model);
    let mut same: Vec<&InFlight> = in_flight
        .iter()
        .copied()
        .filter(|j| j.model == model)
        .collect();
    let enqueued: i64 = same.iter().map(|j| j.tokens.max(0)).sum();
    if limit <= 0 || same.is_empty() || enqueued.saturating_add(tokens) <= limit {
        return Admission::Admit;
    }
    same.sort_by_key(|j| remaining(j));
    let retry_after = room_after(&same, enqueued, tokens, limit, &remaining);
    Admission::Refuse {
        limit: Limit::EnqueuedTokens,
        message: format!(
            "model {model:?} has about {enqueued} input tokens enqueued at the provider in {} batches; \
             this job's ~{tokens} more would pass its limit of {limit} (--provider-enqueued-tokens); \
             retry in about {}s, when enough should have finished",
            same.len(),
            retry_after.as_secs()
        ),
        retry_after,
    }
}

/// When enough of `jobs` (sorted by time left) should have finished for
/// `tokens` more to fit under `limit`, `enqueued` being theirs now.
fn room_after(
    jobs: &[&InFlight],
    enqueued: i64,
    tokens: i64,
    limit: i64,
    remaining: &impl Fn(&InFlight) -> Duration,
) -> Duration {
    let mut left = enqueued;
    let mut retry_after = MAX_RETRY;
    for j in jobs {
        left -= j.tokens.max(0);
        retry_after = remaining(j);
        if left.saturating_add(tokens) <= limit {
            break;
        }
    }
    retry_after
}

/// The refusal when the asking team, with something of `model` in flight,
/// would pass its share of the batch or token limit.
fn over_share(
    quotas: &ProviderQuotas,
    model: &str,
    tokens: i64,
    in_flight: &[&InFlight],
    remaining: &impl Fn(&InFlight) -> Duration,
) -> Option<Admission> {
    if quotas.team_share >= 100 {
        return None;
    }
    let mut mine: Vec<&InFlight> = in_flight
        .iter()
        .copied()
        .filter(|j| j.mine && j.model == model)
        .collect();
    if mine.is_empty() {
        return None;
    }
    mine.sort_by_key(|j| remaining(j));
    let share = quotas.team_share;
    let max = i64::from(quotas.max_batches);
    let all_mine = in_flight.iter().filter(|j| j.mine).count() as i64;
    if max > 0 && all_mine >= quotas.share_of(max) {
        return Some(Admission::Refuse {
            limit: Limit::TeamShare,
            message: format!(
                "this team has {all_mine} batches at the provider, its share ({share}% of --provider-max-batches {max}); \
                 retry when one has finished"
            ),
            retry_after: remaining(mine[0]),
        });
    }
    let limit = quotas.tokens_of(model);
    let enqueued: i64 = mine.iter().map(|j| j.tokens.max(0)).sum();
    let allowed = quotas.share_of(limit);
    if limit <= 0 || enqueued.saturating_add(tokens) <= allowed {
        return None;
    }
    let retry_after = room_after(&mine, enqueued, tokens, allowed, remaining);
    Some(Admission::Refuse {
        limit: Limit::TeamShare,
        message: format!(
            "this team has about {enqueued} input tokens of model {model:?} enqueued; this job's ~{tokens} more would pass its share \
             ({share}% of {limit}, --provider-team-share); retry in about {}s",
            retry_after.as_secs()
        ),
        retry_after,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(model: &str, tokens: i64, age_secs: u64) -> InFlight {
        InFlight {
            model: model.into(),
            tokens,
            age: Duration::from_secs(age_secs),
            mine: false,
            preparing: false,
        }
    }

    fn mine(model: &str, tokens: i64, age_secs: u64) -> InFlight {
        InFlight {
            mine: true,
            ..job(model, tokens, age_secs)
        }
    }

    const TYPICAL: Option<Duration> = Some(Duration::from_secs(100));

    fn quotas(batches: u32, tokens: i64) -> ProviderQuotas {
        ProviderQuotas {
            max_batches: batches,
            enqueued_tokens: tokens,
            per_model: BTreeMap::new(),
            team_share: 100,
        }
    }

    // Invariant: with a team share, a team holding something of the model
    // is admitted only within its share of each limit; a team with nothing
    // in flight is admitted (the global rules still apply), so the share
    // never strands a team.
    #[test]
    fn a_team_stays_within_its_share() {
        let mut q = quotas(10, 1000);
        q.team_share = 50;
        let a = [mine("m", 300, 10), job("m", 100, 10)];
        assert_eq!(admit(&q, "m", 200, &a, TYPICAL), Admission::Admit);
        assert!(matches!(
            admit(&q, "m", 201, &a, TYPICAL),
            Admission::Refuse {
                limit: Limit::TeamShare,
                ..
            }
        ));
        // Another team (nothing of its own in flight) still gets the rest.
        let other = [job("m", 300, 10), job("m", 100, 10)];
        assert_eq!(admit(&q, "m", 600, &other, TYPICAL), Admission::Admit);
        // The batch share: 5 of 10.
        let five: Vec<InFlight> = (0..5).map(|_| mine("m", 1, 10)).collect();
        assert!(matches!(
            admit(&q, "m", 1, &five, TYPICAL),
            Admission::Refuse {
                limit: Limit::TeamShare,
                ..
            }
        ));
        assert_eq!(admit(&q, "m", 1, &five[..4], TYPICAL), Admission::Admit);
    }

    // Invariant: another team's PREPARING job holds quota only while young;
    // a team's own PREPARING jobs always count.
    #[test]
    fn stalled_preparing_jobs_of_other_teams_do_not_starve() {
        let q = quotas(1, 0);
        let stalled = InFlight {
            preparing: true,
            ..job("m", 1, PREPARING_HOLD.as_secs())
        };
        assert_eq!(
            admit(&q, "m", 1, std::slice::from_ref(&stalled), TYPICAL),
            Admission::Admit
        );
        let young = InFlight {
            age: Duration::from_secs(1),
            ..stalled.clone()
        };
        assert!(matches!(
            admit(&q, "m", 1, &[young], TYPICAL),
            Admission::Refuse { .. }
        ));
        let own = InFlight {
            mine: true,
            ..stalled
        };
        assert!(matches!(
            admit(&q, "m", 1, &[own], TYPICAL),
            Admission::Refuse { .. }
        ));
    }

    // Invariant: a job is admitted exactly when in-flight plus it fits both
    // limits, or nothing of its model is in flight.
    #[test]
    fn admits_what_fits() {
        let q = quotas(3, 1000);
        let a = [job("m", 400, 10), job("m", 300, 20)];
        assert_eq!(admit(&q, "m", 300, &a, TYPICAL), Admission::Admit);
        assert!(matches!(
            admit(&q, "m", 301, &a, TYPICAL),
            Admission::Refuse {
                limit: Limit::EnqueuedTokens,
                ..
            }
        ));
        // Other models' tokens do not count against this one.
        let b = [job("other", 5000, 10)];
        assert_eq!(admit(&q, "m", 1000, &b, TYPICAL), Admission::Admit);
        // Alone, any size goes (the provider decides).
        assert_eq!(admit(&q, "m", 1_000_000, &[], TYPICAL), Admission::Admit);
        assert_eq!(admit(&q, "m", 1_000_000, &b, TYPICAL), Admission::Admit);
    }

    // Invariant: the batch limit counts every model's batches.
    #[test]
    fn batch_limit_counts_all_models() {
        let q = quotas(2, 0);
        let a = [job("x", 1, 90), job("y", 1, 30)];
        match admit(&q, "m", 1, &a, TYPICAL) {
            Admission::Refuse {
                limit: Limit::Batches,
                retry_after,
                ..
            } => assert_eq!(retry_after, Duration::from_secs(10)),
            other => panic!("{other:?}"),
        }
        assert_eq!(admit(&q, "m", 1, &a[..1], TYPICAL), Admission::Admit);
        assert_eq!(admit(&quotas(0, 0), "m", 1, &a, TYPICAL), Admission::Admit);
    }

    // Invariant: RetryInfo is when enough of the model's tokens should have
    // finished, in expected finishing order, clamped.
    #[test]
    fn retry_after_is_when_enough_finishes() {
        let q = quotas(0, 1000);
        // Expected to finish in 80s (300 tokens), 40s (300), 5s (400; overdue).
        let a = [job("m", 300, 20), job("m", 300, 60), job("m", 400, 150)];
        let wait = |tokens| match admit(&q, "m", tokens, &a, TYPICAL) {
            Admission::Refuse { retry_after, .. } => retry_after.as_secs(),
            Admission::Admit => 0,
        };
        assert_eq!(wait(0), 0);
        assert_eq!(wait(1), MIN_RETRY.as_secs()); // the overdue one frees 400
        assert_eq!(wait(400), 5);
        assert_eq!(wait(401), 40);
        assert_eq!(wait(1000), 80);
        let slow = [job("m", 1000, 0)];
        let wait_with = |typical| match admit(&q, "m", 1, &slow, typical) {
            Admission::Refuse { retry_after, .. } => retry_after,
            other => panic!("{other:?}"),
        };
        assert_eq!(wait_with(Some(Duration::from_secs(86_400))), MAX_RETRY);
        // Nothing of the model finished yet: ask again soon.
        assert_eq!(wait_with(None), MIN_RETRY);
    }

    // Invariant: flag values parse into the default or a model's limit;
    // anything else is refused with the value named.
    #[test]
    fn token_flags() {
        let mut q = ProviderQuotas::default();
        q.set_tokens("2000000").unwrap();
        q.set_tokens("gemini-2.5-pro = 5000000").unwrap();
        q.set_tokens("gemini-2.5-flash-lite=0").unwrap();
        assert_eq!(q.tokens_of("gemini-2.5-flash"), 2_000_000);
        assert_eq!(q.tokens_of("gemini-2.5-pro"), 5_000_000);
        assert_eq!(q.tokens_of("gemini-2.5-flash-lite"), 0);
        for bad in ["", "-1", "x", "=5", "m=1.5", "m=99999999999999999"] {
            let e = q.set_tokens(bad).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
        assert!(ProviderQuotas::default().limits_anything());
        assert!(!ProviderQuotas::unlimited().limits_anything());
    }

    #[test]
    fn estimates_tokens_from_bytes() {
        assert_eq!(estimate_tokens(0), 0);
        assert_eq!(estimate_tokens(1), 1);
        assert_eq!(estimate_tokens(4000), 1000);
        assert_eq!(in_flight_codes().len(), IN_FLIGHT.len());
    }
}
