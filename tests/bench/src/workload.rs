//! What both sides process: the same keys, ~300-byte payloads, and the same
//! outcome mix (90% success with a ~200-byte result, 7% transient, 3%
//! permanent), decided by a hash of key and attempt so both sides see the
//! same sequence.

/// A ~300-byte JSON object.
pub fn payload(key: &str) -> String {
    let filler = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor ";
    let mut text = String::with_capacity(300);
    while text.len() < 260 {
        text.push_str(filler);
    }
    text.truncate(260);
    format!(r#"{{"id":"{key}","text":"{text}"}}"#)
}

/// A ~200-byte JSON result.
pub fn result(key: &str) -> String {
    format!(
        r#"{{"id":"{key}","label":"praise","confidence":0.93,"summary":"the reviewer likes the app and asks for a dark mode; mentions sync issues on older phones and slow startup after the last update"}}"#
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mix {
    Success,
    Transient,
    Permanent,
}

/// The outcome of one attempt at one row.
pub fn outcome(key: &str, attempt: u64) -> Mix {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h = (h ^ attempt).wrapping_mul(0x0100_0000_01b3);
    match h % 100 {
        0..=89 => Mix::Success,
        90..=96 => Mix::Transient,
        _ => Mix::Permanent,
    }
}

/// Keys `{prefix}-{n}` for n in `range`.
pub fn keys(prefix: &str, range: std::ops::Range<u64>) -> Vec<String> {
    range.map(|n| format!("{prefix}-{n:09}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_and_results_have_the_documented_sizes() {
        let p = payload("k-000000001");
        assert!((290..=320).contains(&p.len()), "{}", p.len());
        let r = result("k-000000001");
        assert!((180..=220).contains(&r.len()), "{}", r.len());
    }

    #[test]
    fn the_mix_is_roughly_90_7_3() {
        let ks = keys("k", 0..100_000);
        let mut counts = [0usize; 3];
        for k in &ks {
            counts[outcome(k, 1) as usize] += 1;
        }
        assert!((88_000..92_000).contains(&counts[0]), "{counts:?}");
        assert!((6_000..8_000).contains(&counts[1]), "{counts:?}");
        assert!((2_000..4_000).contains(&counts[2]), "{counts:?}");
    }
}
