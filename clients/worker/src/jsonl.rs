//! The batch input file: one JSONL line per row (`{"key", "request"}`),
//! and packing lines into a batch bounded by rows and bytes. Pure.

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
    /// Did not fit this time (rows or bytes full): give them back.
    pub overflow: Vec<usize>,
    /// Larger than `max_bytes` alone: no batch can carry them.
    pub oversized: Vec<usize>,
}

/// Packs lines of `sizes` bytes in order into one batch of at most
/// `max_rows` lines and `max_bytes` bytes. A line that does not fit is put
/// aside (later smaller ones may still fit); one larger than `max_bytes`
/// on its own is oversized.
pub fn pack(sizes: &[usize], max_rows: usize, max_bytes: usize) -> Packing {
    let mut out = Packing::default();
    let mut bytes = 0usize;
    for (i, &size) in sizes.iter().enumerate() {
        if size > max_bytes {
            out.oversized.push(i);
        } else if out.batch.len() < max_rows && bytes + size <= max_bytes {
            bytes += size;
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

    /// Every index ends in exactly one of the three lists; the batch keeps
    /// both bounds; oversized lines are exactly those above the byte bound.
    #[test]
    fn packing_respects_both_bounds_and_loses_nothing() {
        let sizes = [10, 50, 200, 30, 30, 5, 1000];
        let p = pack(&sizes, 3, 100);
        assert_eq!(p.batch, vec![0, 1, 3]);
        assert_eq!(p.overflow, vec![4, 5]);
        assert_eq!(p.oversized, vec![2, 6]);
        let p = pack(&sizes, 10, 100);
        assert_eq!(p.batch, vec![0, 1, 3, 5]);
        assert_eq!(p.overflow, vec![4]);
        for max_rows in 0..8 {
            for max_bytes in [0, 5, 60, 100, 300, 2000] {
                let p = pack(&sizes, max_rows, max_bytes);
                let mut all: Vec<usize> = [&p.batch[..], &p.overflow, &p.oversized].concat();
                all.sort();
                assert_eq!(all, (0..sizes.len()).collect::<Vec<_>>());
                assert!(p.batch.len() <= max_rows);
                assert!(p.batch.iter().map(|&i| sizes[i]).sum::<usize>() <= max_bytes);
                assert!(p.oversized.iter().all(|&i| sizes[i] > max_bytes));
            }
        }
    }
}
