//! The batch input file: one JSONL line per row (`{"key", "request"}`),
//! and packing lines into a batch bounded by rows, bytes and estimated
//! tokens. Pure.

use serde_json::{Value, json};

/// One input line, newline included.
pub fn line(key: &str, request: &Value) -> String {
    let mut s = json!({"key": key, "request": request}).to_string();
    s.push('\n');
    s
}

/// Which lines (by index) go in the batch, which wait for a later one, and
/// which can never fit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Packing {
    /// In the batch, in input order.
    pub batch: Vec<usize>,
    /// Did not fit this time (rows, bytes or tokens full): give them back.
    pub overflow: Vec<usize>,
    /// Larger than the byte bound, or than the provider's token limit,
    /// alone: no batch can carry them.
    pub oversized: Vec<usize>,
    /// The batch's estimated input tokens.
    pub tokens: u64,
}

/// What one batch may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub rows: usize,
    pub bytes: usize,
    /// Estimated input tokens the batch may carry (0: no bound); the first
    /// line goes in whatever its size (a bound learned from refusals may be
    /// below one line).
    pub tokens: u64,
    /// The provider's token limit (0: none): a line above it alone is
    /// oversized.
    pub hard_tokens: u64,
}

/// A line's estimated input tokens (the server's estimate: bytes per token).
pub fn tokens_of(size: usize) -> u64 {
    tally_core::quota::estimate_tokens(size as u64).max(0) as u64
}

/// Packs lines of `sizes` bytes in order into one batch within `limits`.
/// A line that does not fit is put aside (later smaller ones may still
/// fit); one larger than the byte bound or the provider's token limit on
/// its own is oversized.
pub fn pack(sizes: &[usize], limits: Limits) -> Packing {
    let mut out = Packing::default();
    let mut bytes = 0usize;
    for (i, &size) in sizes.iter().enumerate() {
        let tokens = tokens_of(size);
        let fits_tokens =
            limits.tokens == 0 || out.batch.is_empty() || out.tokens + tokens <= limits.tokens;
        if size > limits.bytes || (limits.hard_tokens > 0 && tokens > limits.hard_tokens) {
            out.oversized.push(i);
        } else if out.batch.len() < limits.rows && bytes + size <= limits.bytes && fits_tokens {
            bytes += size;
            out.tokens += tokens;
            out.batch.push(i);
        } else {
            out.overflow.push(i);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A line is one JSON object with the key and the request, ending in a
    /// newline, with no newline inside.
    #[test]
    fn a_line_holds_key_and_request() {
        let l = line("k1", &json!({"contents": [{"parts": [{"text": "a\nb"}]}]}));
        assert!(l.ends_with('\n'));
        assert_eq!(l.matches('\n').count(), 1);
        let v: Value = serde_json::from_str(l.trim_end()).unwrap();
        assert_eq!(v["key"], json!("k1"));
        assert_eq!(
            v["request"]["contents"][0]["parts"][0]["text"],
            json!("a\nb")
        );
    }

    fn limits(rows: usize, bytes: usize) -> Limits {
        Limits {
            rows,
            bytes,
            tokens: 0,
            hard_tokens: 0,
        }
    }

    /// Every index ends in exactly one of the three lists; the batch keeps
    /// both bounds; oversized lines are exactly those above the byte bound.
    #[test]
    fn packing_respects_both_bounds_and_loses_nothing() {
        let sizes = [10, 50, 200, 30, 30, 5, 1000];
        let p = pack(&sizes, limits(3, 100));
        assert_eq!(p.batch, vec![0, 1, 3]);
        assert_eq!(p.overflow, vec![4, 5]);
        assert_eq!(p.oversized, vec![2, 6]);
        let p = pack(&sizes, limits(10, 100));
        assert_eq!(p.batch, vec![0, 1, 3, 5]);
        assert_eq!(p.overflow, vec![4]);
        for max_rows in 0..8 {
            for max_bytes in [0, 5, 60, 100, 300, 2000] {
                let p = pack(&sizes, limits(max_rows, max_bytes));
                let mut all: Vec<usize> = [&p.batch[..], &p.overflow, &p.oversized].concat();
                all.sort();
                assert_eq!(all, (0..sizes.len()).collect::<Vec<_>>());
                assert!(p.batch.len() <= max_rows);
                assert!(p.batch.iter().map(|&i| sizes[i]).sum::<usize>() <= max_bytes);
                assert!(p.oversized.iter().all(|&i| sizes[i] > max_bytes));
            }
        }
    }

    /// The token bound: the batch stays under it (but for a first line
    /// above it, which always goes), a line above the provider's limit is
    /// oversized, and the batch's tokens are counted.
    #[test]
    fn packing_keeps_the_token_bound() {
        // 40, 400, 80, 40 bytes: 10, 100, 20, 10 tokens.
        let sizes = [40, 400, 80, 40];
        let p = pack(
            &sizes,
            Limits {
                tokens: 30,
                ..limits(10, 10_000)
            },
        );
        assert_eq!((p.batch.clone(), p.tokens), (vec![0, 2], 30));
        assert_eq!(p.overflow, vec![1, 3]);
        let p = pack(
            &sizes,
            Limits {
                tokens: 5,
                hard_tokens: 50,
                ..limits(10, 10_000)
            },
        );
        assert_eq!(p.batch, vec![0], "the first line goes whatever the bound");
        assert_eq!(p.oversized, vec![1], "above the provider's limit alone");
        assert_eq!(p.overflow, vec![2, 3]);
    }
}
