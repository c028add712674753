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
//! Quotas are a provider account's (the project behind a key), and the
//! account is the worker's word: another team may name it too, honestly
//! (a shared key) or not. So only the asking team's own jobs in the
//! account count: each team holds `team_share` percent of each limit
//! (100: the whole). Teams sharing a key set shares that add up to 100 to
//! stay under the provider's limits together; where they still meet it,
//! its 429 cools the model down for the team that met it. No job another
//! team makes, or claims to make, can block a team's creates.
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
    /// The share of each limit one team holds, in percent (1 to 100;
    /// 100: the whole).
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

    /// Where a limit of `held` comes from: the flag, and the share when it
    /// is not the whole.
    fn of_flags(&self, flag: &str, limit: i64) -> String {
        if self.team_share >= 100 {
            format!(" ({flag})")
        } else {
            format!(
                " ({}% of {flag} {limit}, --provider-team-share)",
                self.team_share
            )
        }
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

/// A job of the asking team at the provider (in the same account), as
/// admission sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct InFlight {
    pub model: String,
    pub tokens: i64,
    /// Since the job was made.
    pub age: Duration,
}

/// Which limit refused a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    Batches,
    EnqueuedTokens,
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
/// the provider now, given the asking team's jobs in flight in the account
/// (all models). `typical` is how long a recent batch of the model took
/// (the median): a job in flight is expected to finish `typical` after it
/// was made (any moment once older than that). With no history (`None`),
/// any job may finish any moment: the RetryInfo is the shortest.
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
    let max = quotas.max_batches as usize;
    let held = quotas.share_of(max as i64) as usize;
    if max > 0 && in_flight.len() >= held {
        // The (len - held + 1)th job to finish makes room.
        let mut waits: Vec<Duration> = in_flight.iter().map(remaining).collect();
        waits.sort();
        let retry_after = waits[in_flight.len() - held];
        return Admission::Refuse {
            limit: Limit::Batches,
            message: format!(
                "this team has {} batches at the provider in this account and its limit is {held}{}; \
                 retry in about {}s, when one should have finished",
                in_flight.len(),
                quotas.of_flags("--provider-max-batches", max as i64),
                retry_after.as_secs()
            ),
            retry_after,
        };
    }
    let limit = quotas.tokens_of(model);
    let allowed = quotas.share_of(limit);
    let mut same: Vec<&InFlight> = in_flight.iter().filter(|j| j.model == model).collect();
    let enqueued: i64 = same.iter().map(|j| j.tokens.max(0)).sum();
    if limit <= 0 || same.is_empty() || enqueued.saturating_add(tokens) <= allowed {
        return Admission::Admit;
    }
    same.sort_by_key(|j| remaining(j));
    let retry_after = room_after(&same, enqueued, tokens, allowed, &remaining);
    Admission::Refuse {
        limit: Limit::EnqueuedTokens,
        message: format!(
            "this team has about {enqueued} input tokens of model {model:?} enqueued at the provider in {} batches; \
             this job's ~{tokens} more would pass its limit of {allowed}{}; \
             retry in about {}s, when enough should have finished",
            same.len(),
            quotas.of_flags("--provider-enqueued-tokens", limit),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn job(model: &str, tokens: i64, age_secs: u64) -> InFlight {
        InFlight {
            model: model.into(),
            tokens,
            age: Duration::from_secs(age_secs),
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

    // Invariant: with a team share, a team is admitted only within its
    // share of each limit, and the refusal names the share.
    #[test]
    fn a_team_stays_within_its_share() {
        let mut q = quotas(10, 1000);
        q.team_share = 50;
        let a = [job("m", 300, 10), job("m", 100, 10)];
        assert_eq!(admit(&q, "m", 100, &a, TYPICAL), Admission::Admit);
        match admit(&q, "m", 101, &a, TYPICAL) {
            Admission::Refuse {
                limit: Limit::EnqueuedTokens,
                message,
                ..
            } => assert!(message.contains("limit of 500 (50% of"), "{message}"),
            other => panic!("{other:?}"),
        }
        // The batch share: 5 of 10.
        let five: Vec<InFlight> = (0..5).map(|_| job("m", 1, 10)).collect();
        match admit(&q, "m", 1, &five, TYPICAL) {
            Admission::Refuse {
                limit: Limit::Batches,
                message,
                ..
            } => assert!(message.contains("--provider-team-share"), "{message}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(admit(&q, "m", 1, &five[..4], TYPICAL), Admission::Admit);
        // A share never strands a team: alone, any size goes.
        assert_eq!(admit(&q, "m", 1_000_000, &[], TYPICAL), Admission::Admit);
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
