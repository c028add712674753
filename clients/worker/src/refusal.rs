//! What a refused batch create asks of tally: wait, fix, stop, or retry
//! later; and which refusals of a sent batch's later calls stop. A
//! refusal never loops: every kind changes something before the same rows
//! go out again (a cool-down and a smaller batch, a smaller batch, a
//! paused ledger, or a pause before this worker's next claim). Each
//! provider's folder says which of its answers is which
//! (`provider/<name>/refusal.rs`). Pure.

use std::time::Duration;

use tally_proto::v1 as pb;

/// What to do about a refused create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Nothing is wrong with the request: the model cools down for every
    /// worker of the account (and the next batch is smaller), as long as
    /// the provider said (`retry-after`) or, when it named no delay,
    /// `--refusal-cooldown`.
    Wait(Option<Duration>),
    /// The batch is too large: send fewer rows.
    TooLarge,
    /// The request at this index of the batch is at fault (the row at
    /// that place, 0-based); the others are fine.
    Invalid(usize),
    /// No retry fixes it: the ledger pauses with the provider's words.
    Stop(pb::ProviderRefusal),
    /// Nothing was made and nothing is wrong with the rows, the account or
    /// the quota, but this batch cannot go (its input file is gone): the
    /// rows go back with no attempt and this worker claims nothing for
    /// `--refusal-cooldown`, so it never loops.
    Retry,
}

/// What a batch the provider made and then refused at validation (an
/// OpenAI batch `failed` with `errors.data`) asks of tally. Nothing ran:
/// no row is charged, so none spends an attempt unless it is at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Validation {
    /// Every row goes back with no attempt; the model cools down for
    /// `--refusal-cooldown` (a failed batch names no delay).
    Wait,
    /// Every row goes back with no attempt; the next batch is smaller.
    TooLarge,
    /// The rows at these lines (1-based, of the input file) are invalid
    /// input, with why; the others go back with no attempt.
    Lines(Vec<(u64, String)>),
    /// Every row goes back and the ledger pauses with the provider's words.
    Stop(pb::ProviderRefusal, String),
}

/// A call about a batch already sent: it carries no rows, so no smaller
/// batch or other row fixes its refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// The batch's poll.
    Poll,
    /// The provider's list, searched for a lost create.
    List,
    /// The batch's output (or its input, read back).
    Download,
}

/// Whether the refusal of `read` (its HTTP `code`, and `kind`, the
/// provider's classification of it as a create's refusal) is one no retry
/// fixes: the key refused, the account unable to pay. Then the ledger
/// pauses with the provider's words while the job keeps its rows (its
/// batch may have run). Not: a 404 (a batch gone is judged over
/// `--gone-after`), a 403 or 404 of an output not downloadable yet, rate
/// limits and anything that may pass.
pub(crate) fn read_refused(
    read: Read,
    code: Option<u16>,
    kind: Option<Refusal>,
) -> Option<pb::ProviderRefusal> {
    match (read, code) {
        (_, Some(404)) | (Read::Download, Some(403)) => None,
        _ => match kind {
            Some(Refusal::Stop(kind)) => Some(kind),
            _ => None,
        },
    }
}

/// Whether a 404's message names a model (the provider does not know it,
/// or takes no batches for it); a 404 that does not is a wrong base URL
/// or path, the caller's to fix, not the model's.
pub(crate) fn names_a_model(message: &str) -> bool {
    message.to_ascii_lowercase().contains("model")
}

/// Whether a 400's message says the request is too large (the provider's
/// words for it vary: "payload size exceeds the limit", "request is too
/// large", "exceeds the maximum").
pub(crate) fn too_large(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("too large")
        || m.contains("payload size")
        || m.contains("exceeds the maximum")
        || m.contains("exceeds the limit")
}

#[cfg(test)]
mod tests {
    use super::*;

    // Invariant: a read's refusal pauses only when no retry fixes it; a
    // gone batch, an output not downloadable yet and a wait do not.
    #[test]
    fn only_lasting_refusals_of_reads_pause() {
        let stop = Some(Refusal::Stop(pb::ProviderRefusal::Request));
        let billing = Some(Refusal::Stop(pb::ProviderRefusal::Billing));
        assert_eq!(
            read_refused(Read::Poll, Some(401), stop),
            Some(pb::ProviderRefusal::Request)
        );
        assert_eq!(
            read_refused(Read::List, Some(429), billing),
            Some(pb::ProviderRefusal::Billing)
        );
        assert_eq!(
            read_refused(Read::Poll, Some(403), billing),
            Some(pb::ProviderRefusal::Billing)
        );
        assert_eq!(read_refused(Read::Download, Some(403), billing), None);
        for read in [Read::Poll, Read::List, Read::Download] {
            assert_eq!(read_refused(read, Some(404), stop), None, "{read:?}");
            let wait = Some(Refusal::Wait(None));
            assert_eq!(read_refused(read, Some(429), wait), None, "{read:?}");
            assert_eq!(read_refused(read, Some(503), None), None, "{read:?}");
        }
    }

    // Invariant: the provider's several words for "too large" are all read
    // as such, and a message that only mentions size is not.
    #[test]
    fn too_large_reads_the_providers_words() {
        for m in [
            "Request payload size exceeds the limit: 20971520 bytes.",
            "request is too large",
            "input exceeds the maximum of 50000 requests",
        ] {
            assert!(too_large(m), "{m}");
        }
        assert!(!too_large("invalid size field"));
    }
}
