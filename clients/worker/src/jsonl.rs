//! JSONL, whatever the provider: reading a file as a stream of lines
//! ([`LineSplitter`] into a [`LineSink`]), and packing a batch's input
//! lines under its bounds of rows, bytes and estimated tokens ([`Packer`]).
//! Each provider names its lines' fields ([`LineShape`]). Pure.

use serde_json::Value;

/// The fields of one provider's batch input line:
/// `{"<id>": …, <fixed> "<request>": …}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineShape {
    /// The field naming the request (`key`, `custom_id`).
    pub id: &'static str,
    /// Members written as they are between the id and the request, each
    /// followed by a comma (`"method":"POST",`), or empty.
    pub fixed: &'static str,
    /// The field holding the request (`request`, `body`, `params`).
    pub request: &'static str,
}

/// Appends one input line of `shape` (newline included) to `body`, written
/// straight into it (no copy of the request); answers its length.
pub fn write_line(body: &mut Vec<u8>, shape: &LineShape, id: &str, request: &Value) -> usize {
    let start = body.len();
    // Writing a str and a Value into a Vec cannot fail.
    body.push(b'{');
    let _ = serde_json::to_writer(&mut *body, shape.id);
    body.push(b':');
    let _ = serde_json::to_writer(&mut *body, id);
    body.push(b',');
    body.extend_from_slice(shape.fixed.as_bytes());
    let _ = serde_json::to_writer(&mut *body, shape.request);
    body.push(b':');
    let _ = serde_json::to_writer(&mut *body, request);
    body.extend_from_slice(b"}\n");
    body.len() - start
}

/// Where the lines of a file read as a stream go (a batch's output): each
/// line without its newline; `reset` when the read starts again from the
/// beginning (a retried download); `too_long` for a line longer than the
/// reader keeps (skipped).
pub trait LineSink {
    fn reset(&mut self);
    fn line(&mut self, line: &[u8]);
    fn too_long(&mut self);
}

/// Splits a stream of chunks into lines for a [`LineSink`], keeping at most
/// `max_line` bytes of an unfinished line.
#[derive(Debug)]
pub struct LineSplitter {
    carry: Vec<u8>,
    skipping: bool,
    max_line: usize,
}

impl LineSplitter {
    pub fn new(max_line: usize) -> Self {
        Self {
            carry: Vec::new(),
            skipping: false,
            max_line,
        }
    }

    /// Feeds one chunk.
    pub fn chunk(&mut self, chunk: &[u8], sink: &mut (dyn LineSink + Send)) {
        let mut rest = chunk;
        while let Some(pos) = rest.iter().position(|&b| b == b'\n') {
            let (head, tail) = rest.split_at(pos);
            if self.skipping {
                self.skipping = false;
            } else if self.carry.is_empty() {
                sink.line(head);
            } else {
                self.carry.extend_from_slice(head);
                sink.line(&self.carry);
                self.carry.clear();
            }
            rest = &tail[1..];
        }
        if self.skipping {
            return;
        }
        if self.carry.len() + rest.len() > self.max_line {
            sink.too_long();
            self.carry = Vec::new();
            self.skipping = true;
        } else {
            self.carry.extend_from_slice(rest);
        }
    }

    /// The end of the stream: a last line without its newline.
    pub fn finish(mut self, sink: &mut (dyn LineSink + Send)) {
        if !self.skipping && !self.carry.is_empty() {
            sink.line(&std::mem::take(&mut self.carry));
        }
    }
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

/// Where one line goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    Batch,
    Overflow,
    Oversized,
}

/// Packs lines one at a time, in order, into one batch within `limits`
/// (what [`pack`] does over a whole list), so a caller can render each
/// line into the batch and drop it at once when it does not fit.
#[derive(Debug, Clone)]
pub struct Packer {
    limits: Limits,
    rows: usize,
    bytes: usize,
    tokens: u64,
}

impl Packer {
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            rows: 0,
            bytes: 0,
            tokens: 0,
        }
    }

    /// Where a line of `size` bytes goes. A line that does not fit is put
    /// aside (later smaller ones may still fit); one larger than the byte
    /// bound or the provider's token limit on its own is oversized.
    pub fn offer(&mut self, size: usize) -> Fit {
        let l = self.limits;
        let tokens = tokens_of(size);
        let fits_tokens = l.tokens == 0 || self.rows == 0 || self.tokens + tokens <= l.tokens;
        if size > l.bytes || (l.hard_tokens > 0 && tokens > l.hard_tokens) {
            Fit::Oversized
        } else if self.rows < l.rows && self.bytes + size <= l.bytes && fits_tokens {
            self.rows += 1;
            self.bytes += size;
            self.tokens += tokens;
            Fit::Batch
        } else {
            Fit::Overflow
        }
    }

    /// Whether another line of the average size of those taken would
    /// still fit.
    pub fn room_for_another(&self) -> bool {
        let l = self.limits;
        let size = self.bytes.checked_div(self.rows).unwrap_or(0);
        let tokens = tokens_of(size);
        self.rows < l.rows
            && self.bytes + size <= l.bytes
            && (l.tokens == 0 || self.tokens + tokens <= l.tokens)
    }

    /// The batch's estimated input tokens so far.
    pub fn tokens(&self) -> u64 {
        self.tokens
    }
}

/// Packs lines of `sizes` bytes in order into one batch within `limits`
/// (see [`Packer::offer`]).
pub fn pack(sizes: &[usize], limits: Limits) -> Packing {
    let mut out = Packing::default();
    let mut packer = Packer::new(limits);
    for (i, &size) in sizes.iter().enumerate() {
        match packer.offer(size) {
            Fit::Batch => out.batch.push(i),
            Fit::Overflow => out.overflow.push(i),
            Fit::Oversized => out.oversized.push(i),
        }
    }
    out.tokens = packer.tokens();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Lines(Vec<String>, usize);

    impl LineSink for Lines {
        fn reset(&mut self) {
            self.0.clear();
        }
        fn line(&mut self, line: &[u8]) {
            self.0.push(String::from_utf8_lossy(line).into_owned());
        }
        fn too_long(&mut self) {
            self.1 += 1;
        }
    }

    /// Lines come out whole whatever the chunking; a line over the bound is
    /// skipped (counted), and the next one is read.
    #[test]
    fn lines_are_whole_whatever_the_chunks() {
        let text = b"a1\nbb2\n\ncccc3\nd4";
        for size in 1..text.len() {
            let mut sink = Lines::default();
            let mut split = LineSplitter::new(100);
            for c in text.chunks(size) {
                split.chunk(c, &mut sink);
            }
            split.finish(&mut sink);
            assert_eq!(sink.0, ["a1", "bb2", "", "cccc3", "d4"], "chunks of {size}");
        }
        let mut sink = Lines::default();
        let mut split = LineSplitter::new(4);
        for c in b"ok\ntoo-long-line\nok2\n".chunks(3) {
            split.chunk(c, &mut sink);
        }
        split.finish(&mut sink);
        assert_eq!(sink.0, ["ok", "ok2"]);
        assert_eq!(sink.1, 1);
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
