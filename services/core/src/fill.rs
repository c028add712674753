//! Batches that fill: whether a claim for a provider batch should go now
//! with the rows runnable, or wait (within a bound) for more to join it.
//! At a real provider every batch waits its own turnaround and takes a slot
//! of the ledger's concurrent-job budget, so a handful of retries sent as
//! fifteen batches costs fifteen windows; sent as one, one.
//!
//! A partial batch waits while more rows can become runnable soon: rows
//! still arriving (the newest enrolled row is younger than `quiet`), retries
//! whose backoff ends within the bound, or rows of the ledger still at the
//! provider (their failures come back as retries). It goes once it is full,
//! once its oldest row has waited `max_wait`, or once nothing more can come.

use crate::millis;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Longest `max_wait` and `quiet` a policy may set.
pub const MAX_FILL_WAIT: Duration = Duration::from_secs(24 * 3600);

/// A ledger's batch-fill bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchFill {
    /// The longest a runnable row waits for others to fill its batch; zero
    /// turns filling off (a claim takes what is runnable at once).
    #[serde(with = "millis")]
    pub max_wait: Duration,
    /// A batch waits while its newest row was enrolled less than this long
    /// ago (rows enrolled a few seconds apart share one batch).
    #[serde(with = "millis")]
    pub quiet: Duration,
    /// A batch of at least this many rows goes at once, full or not (0: only
    /// a full claim does).
    #[serde(default)]
    pub min_rows: u32,
}

impl Default for BatchFill {
    /// Fit for the real batch APIs, whose turnaround is minutes to a day:
    /// ten minutes is small beside one turnaround more.
    fn default() -> Self {
        BatchFill {
            max_wait: Duration::from_secs(600),
            quiet: Duration::from_secs(5),
            min_rows: 0,
        }
    }
}

impl BatchFill {
    pub fn is_on(&self) -> bool {
        !self.max_wait.is_zero()
    }

    /// Field problems, by name under the policy's `batch_fill`.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if self.max_wait > MAX_FILL_WAIT {
            out.push(("max_wait", "must be at most 24 hours".to_string()));
        }
        if self.quiet > MAX_FILL_WAIT {
            out.push(("quiet", "must be at most 24 hours".to_string()));
        }
        out
    }
}

/// What the queue looks like to a claim, as the store reads it. Times are
/// ages relative to now on the database clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Queue {
    /// Rows runnable now (counted up to the claim's size).
    pub runnable: u64,
    /// How long the oldest runnable row has been runnable.
    pub oldest_age: Duration,
    /// How long ago the newest runnable row was enrolled (`Duration::MAX`
    /// when every runnable row is a retry or a freed dependant: nothing
    /// more arrives with those).
    pub newest_age: Duration,
    /// When the first retry not yet runnable becomes runnable, if one does
    /// within the bound.
    pub next_retry_in: Option<Duration>,
    /// Whether rows of the ledger are at the provider (a live claim holding
    /// rows of a job).
    pub at_provider: bool,
}

/// Why a partial batch waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitFor {
    /// Rows are still being enrolled (or freed).
    Arriving,
    /// Retries become runnable soon.
    Retries,
    /// Rows of the ledger are at the provider; their retries may join.
    AtProvider,
}

impl WaitFor {
    /// As the API names it (`FillWait.reason`).
    pub fn code(self) -> &'static str {
        match self {
            WaitFor::Arriving => "arriving",
            WaitFor::Retries => "retries",
            WaitFor::AtProvider => "at_provider",
        }
    }

    /// In words, for logs.
    pub fn describe(code: &str) -> &'static str {
        match code {
            "arriving" => "rows are still arriving",
            "retries" => "retries become runnable soon",
            "at_provider" => "rows of the ledger are still at the provider",
            _ => "more rows can become runnable soon",
        }
    }
}

/// A claim's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    /// Take the rows runnable now.
    Go,
    /// Take nothing; ask again in at most `within` (the bound, or sooner
    /// when what it waits for is due sooner).
    Wait { for_: WaitFor, within: Duration },
}

/// Whether a claim of up to `claim_rows` rows goes now.
pub fn decide(fill: &BatchFill, claim_rows: u64, q: &Queue) -> Fill {
    if !fill.is_on() || q.runnable == 0 || q.runnable >= claim_rows.max(1) {
        return Fill::Go;
    }
    if fill.min_rows > 0 && q.runnable >= u64::from(fill.min_rows) {
        return Fill::Go;
    }
    let Some(left) = fill
        .max_wait
        .checked_sub(q.oldest_age)
        .filter(|d| !d.is_zero())
    else {
        return Fill::Go;
    };
    if q.newest_age < fill.quiet {
        let within = (fill.quiet - q.newest_age).min(left);
        return Fill::Wait {
            for_: WaitFor::Arriving,
            within,
        };
    }
    if let Some(next) = q.next_retry_in.filter(|d| *d < left) {
        return Fill::Wait {
            for_: WaitFor::Retries,
            within: next,
        };
    }
    if q.at_provider {
        return Fill::Wait {
            for_: WaitFor::AtProvider,
            within: left,
        };
    }
    Fill::Go
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    fn quiet_queue(runnable: u64) -> Queue {
        Queue {
            runnable,
            oldest_age: S(60),
            newest_age: S(60),
            next_retry_in: None,
            at_provider: false,
        }
    }

    // Invariant: a full claim, an empty queue, filling off, or a batch of
    // min_rows goes at once: filling only ever holds a partial batch.
    #[test]
    fn full_empty_or_off_goes() {
        let f = BatchFill::default();
        let busy = Queue {
            at_provider: true,
            newest_age: S(0),
            ..quiet_queue(10)
        };
        assert_eq!(decide(&f, 10, &busy), Fill::Go, "full");
        assert_eq!(
            decide(
                &f,
                10,
                &Queue {
                    runnable: 0,
                    ..busy
                }
            ),
            Fill::Go,
            "empty"
        );
        let off = BatchFill {
            max_wait: Duration::ZERO,
            ..f
        };
        assert_eq!(decide(&off, 100, &busy), Fill::Go, "off");
        let min = BatchFill { min_rows: 5, ..f };
        assert_eq!(decide(&min, 100, &busy), Fill::Go, "min_rows");
    }

    // Invariant: a partial batch waits for what can come within the bound
    // (arriving rows, retries due, rows at the provider), never past it.
    #[test]
    fn a_partial_batch_waits_within_the_bound() {
        let f = BatchFill::default();
        let arriving = Queue {
            newest_age: S(1),
            ..quiet_queue(3)
        };
        assert_eq!(
            decide(&f, 100, &arriving),
            Fill::Wait {
                for_: WaitFor::Arriving,
                within: S(4)
            }
        );
        let retries = Queue {
            next_retry_in: Some(S(20)),
            ..quiet_queue(3)
        };
        assert_eq!(
            decide(&f, 100, &retries),
            Fill::Wait {
                for_: WaitFor::Retries,
                within: S(20)
            }
        );
        let out = Queue {
            at_provider: true,
            ..quiet_queue(3)
        };
        assert_eq!(
            decide(&f, 100, &out),
            Fill::Wait {
                for_: WaitFor::AtProvider,
                within: S(540)
            }
        );
        let late_retry = Queue {
            next_retry_in: Some(S(600)),
            ..quiet_queue(3)
        };
        assert_eq!(decide(&f, 100, &late_retry), Fill::Go, "due past the bound");
        let waited = Queue {
            oldest_age: S(600),
            ..out
        };
        assert_eq!(decide(&f, 100, &waited), Fill::Go, "the bound passed");
        assert_eq!(
            decide(&f, 100, &quiet_queue(3)),
            Fill::Go,
            "nothing can come"
        );
    }

    #[test]
    fn bounds_are_checked() {
        let f = BatchFill {
            max_wait: S(25 * 3600),
            quiet: S(25 * 3600),
            min_rows: 0,
        };
        assert_eq!(f.problems().len(), 2);
        assert!(BatchFill::default().problems().is_empty());
    }
}
