//! The per-key submission log the emulators keep for tests' invariants:
//! every time a row key (Gemini's `key`, the others' `custom_id`) is sent in
//! a batch, and what the emulator answered for it. What counts as an
//! answer the client paid for is the emulator's own `answered` predicate;
//! the bookkeeping is the same. Pure.

use std::collections::BTreeMap;

use serde::Serialize;

/// One row key sent in one batch, and what became of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Submission<O> {
    /// The batch's id as the provider names it.
    pub batch: String,
    pub outcome: O,
}

/// Every submission of each row key, in batch creation order.
pub type Submissions<O> = BTreeMap<String, Vec<Submission<O>>>;

/// What the emulators do with their [`Submissions`]. A trait so the log
/// stays a plain map in each emulator's public `Stats`.
pub trait SubmissionLog<O> {
    /// Records that `key` was sent in `batch`, its outcome `pending`.
    fn submit(&mut self, key: &str, batch: &str, pending: O);

    /// Sets the outcome of each key's latest submission to `batch`; keys
    /// never sent in it are passed over.
    fn settle(&mut self, batch: &str, outcomes: impl IntoIterator<Item = (String, O)>);

    /// Keys sent again after a submission was `answered`: rows paid for
    /// twice. Empty when the client never pays for a row twice.
    fn resubmitted_after(&self, answered: impl Fn(&O) -> bool) -> Vec<String>;

    /// How many times `key` was submitted.
    fn count(&self, key: &str) -> usize;

    /// The outcome of the last submission of `key`.
    fn last_outcome(&self, key: &str) -> Option<O>
    where
        O: Copy;
}

impl<O> SubmissionLog<O> for Submissions<O> {
    fn submit(&mut self, key: &str, batch: &str, pending: O) {
        self.entry(key.to_owned()).or_default().push(Submission {
            batch: batch.to_owned(),
            outcome: pending,
        });
    }

    fn settle(&mut self, batch: &str, outcomes: impl IntoIterator<Item = (String, O)>) {
        for (key, outcome) in outcomes {
            if let Some(sub) = self
                .get_mut(&key)
                .and_then(|subs| subs.iter_mut().rev().find(|s| s.batch == batch))
            {
                sub.outcome = outcome;
            }
        }
    }

    fn resubmitted_after(&self, answered: impl Fn(&O) -> bool) -> Vec<String> {
        self.iter()
            .filter(|(_, subs)| {
                subs.iter()
                    .position(|s| answered(&s.outcome))
                    .is_some_and(|first| first + 1 < subs.len())
            })
            .map(|(key, _)| key.clone())
            .collect()
    }

    fn count(&self, key: &str) -> usize {
        self.get(key).map_or(0, Vec::len)
    }

    fn last_outcome(&self, key: &str) -> Option<O>
    where
        O: Copy,
    {
        self.get(key)
            .and_then(|subs| subs.last())
            .map(|s| s.outcome)
    }
}

/// Writes the queries tests make of an emulator's `Stats` (its
/// `submissions` field a [`Submissions`] of `$outcome`), so each `Stats`
/// keeps them as its own methods: `resubmitted_after_success` (keys sent
/// again after a submission `$answered` held for: rows paid twice; empty
/// when the client never pays for a row twice), `submission_count` and
/// `last_outcome`.
#[macro_export]
macro_rules! submission_queries {
    ($stats:ty, $outcome:ty, $answered:expr) => {
        impl $stats {
            /// Row keys sent again in a later batch after an earlier batch
            /// answered them (billed): rows paid twice.
            pub fn resubmitted_after_success(&self) -> Vec<String> {
                let answered: fn(&$outcome) -> bool = $answered;
                $crate::submissions::SubmissionLog::resubmitted_after(&self.submissions, answered)
            }

            /// How many times `key` was submitted.
            pub fn submission_count(&self, key: &str) -> usize {
                $crate::submissions::SubmissionLog::count(&self.submissions, key)
            }

            /// The outcome of the last submission of `key`.
            pub fn last_outcome(&self, key: &str) -> Option<$outcome> {
                $crate::submissions::SubmissionLog::last_outcome(&self.submissions, key)
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settles_the_latest_submission_to_a_batch() {
        let mut log = Submissions::<u16>::new();
        log.submit("a", "b1", 0);
        log.submit("a", "b2", 0);
        log.settle("b1", [("a".to_owned(), 200), ("never".to_owned(), 500)]);
        assert_eq!(log["a"][0].outcome, 200);
        assert_eq!(log["a"][1].outcome, 0);
        assert!(!log.contains_key("never"));
        assert_eq!(log.count("a"), 2);
        assert_eq!(log.count("never"), 0);
        assert_eq!(log.last_outcome("a"), Some(0));
        assert_eq!(log.last_outcome("never"), None);
    }

    #[test]
    fn finds_keys_sent_again_after_an_answer() {
        let mut log = Submissions::<u16>::new();
        log.submit("ok", "b1", 429);
        log.submit("ok", "b2", 200);
        log.submit("twice", "b1", 200);
        log.submit("twice", "b2", 0);
        assert_eq!(log.resubmitted_after(|&o| o == 200), vec!["twice"]);
    }
}
