//! Deterministic randomness: a small mixing PRNG (splitmix64) for output
//! shuffles and for picking values, and a process-independent text hash.
//! Not for anything secret.

/// splitmix64: tiny, fast, and good enough to shuffle lines and pick enum
/// values. Not for anything secret.
#[derive(Debug, Clone)]
pub struct Mix(u64);

impl Mix {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// A stable 64-bit hash of text (FNV-1a), independent of the process.
pub fn hash_str(text: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Returns `items` shuffled deterministically by `seed`; two or more items
/// never keep their original order (output order must not be input order).
pub fn shuffled<T>(items: Vec<T>, seed: u64) -> Vec<T> {
    let n = items.len();
    if n < 2 {
        return items;
    }
    let mut mix = Mix::new(seed);
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = mix.below(i + 1);
        order.swap(i, j);
    }
    if order.iter().enumerate().all(|(i, &o)| i == o) {
        order.rotate_left(1);
    }
    let mut slots: Vec<Option<T>> = items.into_iter().map(Some).collect();
    order
        .into_iter()
        .map(|i| slots[i].take().expect("a permutation takes each item once"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shuffle_is_deterministic_and_never_the_identity() {
        for n in 2..40 {
            for seed in 0..20 {
                let a = shuffled((0..n).collect::<Vec<usize>>(), seed);
                let b = shuffled((0..n).collect::<Vec<usize>>(), seed);
                assert_eq!(a, b);
                assert_ne!(a, (0..n).collect::<Vec<_>>(), "n={n} seed={seed}");
                let mut sorted = a.clone();
                sorted.sort();
                assert_eq!(sorted, (0..n).collect::<Vec<_>>());
            }
        }
    }
}
