//! An account that already holds many batches (`--seed-batches`): completed
//! batches of another client, no metadata and no rows, one second apart
//! and all made before the start, in creation order. About 300 bytes each
//! (100,000: some 30 MB). Pure.

use crate::batches::{Batch, Counts, Status, Usage};
use crate::ids::hex_id;

/// `n` completed batches, the last made a second before `now` (unix
/// seconds), with sequence numbers `1..=n` and ids drawn from `nonce`.
pub fn batches(n: u64, nonce: u64, now: i64) -> Vec<Batch> {
    (1..=n)
        .map(|seq| {
            let made = now - i64::try_from(n - seq + 1).unwrap_or(i64::MAX / 2);
            Batch {
                id: hex_id("batch_", nonce, seq),
                seq,
                endpoint: "/v1/chat/completions".into(),
                input_file_id: String::new(),
                metadata: None,
                output_expires_after: None,
                model: None,
                status: Status::Completed,
                created_at: made,
                listed_from_ms: 0,
                in_progress_at: Some(made),
                finalizing_at: Some(made),
                completed_at: Some(made),
                failed_at: None,
                expired_at: None,
                cancelling_at: None,
                cancelled_at: None,
                errors: Vec::new(),
                output_file_id: None,
                error_file_id: None,
                counts: Counts::default(),
                usage: Usage::default(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Invariant: seeded batches are distinct, ended, made before the start
    // in creation order, and take the first sequence numbers.
    #[test]
    fn seeded_batches_are_ended_and_older_than_the_start() {
        let b = batches(3, 9, 1_000);
        assert_eq!(
            b.iter().map(|b| b.created_at).collect::<Vec<_>>(),
            [997, 998, 999]
        );
        assert_eq!(b.iter().map(|b| b.seq).collect::<Vec<_>>(), [1, 2, 3]);
        assert!(b.iter().all(|b| b.status.is_terminal()));
        assert_ne!(b[0].id, b[1].id);
        assert!(batches(0, 9, 1_000).is_empty());
    }
}
