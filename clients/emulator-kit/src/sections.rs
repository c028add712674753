//! The fault-plan sections every emulator takes (the README's table):
//! [`SharedSections`], flattened into each emulator's `FaultPlan`, and
//! [`SharedFaults`], the same sections compiled with their counters. Each
//! emulator names only its `rate_limit` type, which adds the headers its
//! provider sends. Pure.

use serde::{Deserialize, Deserializer, Serialize};

use crate::online::OnlineFaults;
use crate::rules::{LostAnswer, LostMode, RuleError, check_share, share_of};
use crate::times::{Fired, Times};

/// What a plan's `rate_limit` section holds, whatever headers it adds.
pub trait RateLimitSection: Clone {
    /// How many creates it refuses.
    fn times(&self) -> u32;
}

/// `{"times": n, "retry_after_secs": s}`: the next n creates answer 429.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    pub times: u32,
    /// Seconds the refusal asks the client to wait (default 1).
    #[serde(default = "one")]
    pub retry_after_secs: u64,
}

impl RateLimitSection for RateLimit {
    fn times(&self) -> u32 {
        self.times
    }
}

fn one() -> u64 {
    1
}

/// `enqueued_tokens` (Gemini, OpenAI): the per-model limit on the input
/// tokens of a project's unfinished batches. Written `{"limit": n,
/// "retry_after_secs": s}` or as the bare limit; `retry_after_secs`
/// (default 1) is the delay of Gemini's 429 (OpenAI fails the batch
/// instead and sends none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "TokensForm")]
pub struct EnqueuedTokens {
    pub limit: u64,
    pub retry_after_secs: u64,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum TokensForm {
    Bare(u64),
    Full(FullTokens),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FullTokens {
    limit: u64,
    #[serde(default = "one")]
    retry_after_secs: u64,
}

impl From<TokensForm> for EnqueuedTokens {
    fn from(form: TokensForm) -> Self {
        match form {
            TokensForm::Bare(limit) => Self {
                limit,
                retry_after_secs: 1,
            },
            TokensForm::Full(FullTokens {
                limit,
                retry_after_secs,
            }) => Self {
                limit,
                retry_after_secs,
            },
        }
    }
}

/// The sections every emulator's plan takes, as written in JSON (flattened
/// into the plan: `{"rate_limit": …, "list_lag_ms": …}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SharedSections<R> {
    /// The next `times` creates answer 429. `create_429` is Gemini's older
    /// name.
    #[serde(alias = "create_429")]
    pub rate_limit: Option<R>,
    /// The next `times` creates make the batch, then lose the answer (the
    /// client never learns its id).
    pub create_answer_lost: Option<LostAnswer>,
    /// The next `times` GETs of an existing batch answer 404 (every one
    /// without `times`).
    pub get_not_found: Option<Times>,
    /// A new batch is left out of lists this long (a GET finds it at once).
    pub list_lag_ms: u64,
    /// The share (0 to 1) of a batch's rows, first in row order, answered
    /// when it is cancelled while running; the rest never ran. The older
    /// `partial_on_cancel: true` is the same as 0.5 (the first half).
    #[serde(alias = "partial_on_cancel", deserialize_with = "share_or_flag")]
    pub finished_on_cancel: f64,
    /// The synchronous endpoints' faults.
    pub online: OnlineFaults,
}

impl<R> Default for SharedSections<R> {
    fn default() -> Self {
        Self {
            rate_limit: None,
            create_answer_lost: None,
            get_not_found: None,
            list_lag_ms: 0,
            finished_on_cancel: 0.0,
            online: OnlineFaults::default(),
        }
    }
}

/// A share, or the older flag: `true` is half, `false` none.
fn share_or_flag<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum ShareOrFlag {
        Share(f64),
        Flag(bool),
    }
    Ok(match ShareOrFlag::deserialize(d)? {
        ShareOrFlag::Share(share) => share,
        ShareOrFlag::Flag(true) => 0.5,
        ShareOrFlag::Flag(false) => 0.0,
    })
}

/// The shared sections compiled, with their counters.
#[derive(Debug)]
pub struct SharedFaults<R> {
    sections: SharedSections<R>,
    rate_limits: Fired,
    lost: Fired,
    not_found: Fired,
}

impl<R: RateLimitSection> SharedFaults<R> {
    pub fn compile(sections: SharedSections<R>) -> Result<Self, RuleError> {
        check_share("finished_on_cancel", sections.finished_on_cancel)?;
        Ok(Self {
            sections,
            rate_limits: Fired::default(),
            lost: Fired::default(),
            not_found: Fired::default(),
        })
    }

    /// The rate-limit refusal of this create, if one is due (and counts it).
    pub fn take_rate_limit(&mut self) -> Option<R> {
        let rl = self.sections.rate_limit.as_ref()?;
        self.rate_limits.take(Some(rl.times())).then(|| rl.clone())
    }

    /// How this create's answer is lost, if it is (the batch is made
    /// anyway).
    pub fn take_lost_answer(&mut self) -> Option<LostMode> {
        let lost = self.sections.create_answer_lost?;
        self.lost.take(Some(lost.times)).then_some(lost.mode)
    }

    /// Whether this GET of an existing batch answers 404.
    pub fn take_get_not_found(&mut self) -> bool {
        self.not_found.take_section(self.sections.get_not_found)
    }

    /// How long a new batch stays out of lists.
    pub fn list_lag(&self) -> chrono::Duration {
        chrono::Duration::milliseconds(i64::try_from(self.sections.list_lag_ms).unwrap_or(i64::MAX))
    }

    /// How many of a running batch's `rows` a cancel leaves answered.
    pub fn finished_on_cancel(&self, rows: usize) -> usize {
        share_of(self.sections.finished_on_cancel, rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn compiled(v: serde_json::Value) -> SharedFaults<RateLimit> {
        SharedFaults::compile(serde_json::from_value(v).unwrap()).unwrap()
    }

    // Invariant: each counted section fires as often as its `times` says.
    #[test]
    fn counted_sections_wear_out() {
        let mut f = compiled(json!({
            "rate_limit": {"times": 2, "retry_after_secs": 3},
            "create_answer_lost": {"mode": "drop"},
            "get_not_found": {"times": 1},
            "list_lag_ms": 1500
        }));
        assert_eq!(f.take_rate_limit().map(|r| r.retry_after_secs), Some(3));
        assert!(f.take_rate_limit().is_some());
        assert_eq!(f.take_rate_limit(), None);
        assert_eq!(f.take_lost_answer(), Some(LostMode::Drop));
        assert_eq!(f.take_lost_answer(), None);
        assert!(f.take_get_not_found());
        assert!(!f.take_get_not_found());
        assert_eq!(f.list_lag(), chrono::Duration::milliseconds(1500));
        assert_eq!(compiled(json!({})).take_rate_limit(), None);
    }

    // Invariant: the older names parse to the same sections as the shared
    // ones; the flag `partial_on_cancel` is the share 0.5 (or 0).
    #[test]
    fn older_names_still_parse() {
        let old: SharedSections<RateLimit> =
            serde_json::from_value(json!({"create_429": {"times": 1}, "partial_on_cancel": true}))
                .unwrap();
        let new: SharedSections<RateLimit> =
            serde_json::from_value(json!({"rate_limit": {"times": 1}, "finished_on_cancel": 0.5}))
                .unwrap();
        assert_eq!(old, new);
        let off: SharedSections<RateLimit> =
            serde_json::from_value(json!({"partial_on_cancel": false})).unwrap();
        assert_eq!(off, SharedSections::default());
        assert_eq!(
            compiled(json!({"partial_on_cancel": true})).finished_on_cancel(5),
            2
        );
    }

    #[test]
    fn enqueued_tokens_take_the_bare_limit_or_the_object() {
        let bare: EnqueuedTokens = serde_json::from_value(json!(200)).unwrap();
        let full: EnqueuedTokens = serde_json::from_value(json!({"limit": 200})).unwrap();
        assert_eq!(bare, full);
        assert_eq!(full.retry_after_secs, 1);
        assert!(serde_json::from_value::<EnqueuedTokens>(json!({"limit": 1, "x": 2})).is_err());
    }

    #[test]
    fn a_share_outside_0_to_1_is_refused() {
        let bad: SharedSections<RateLimit> =
            serde_json::from_value(json!({"finished_on_cancel": 1.5})).unwrap();
        assert!(matches!(
            SharedFaults::compile(bad),
            Err(RuleError::BadShare { .. })
        ));
    }
}
