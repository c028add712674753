//! Resource ids that look like Google's (lowercase alphanumerics). The
//! deterministic mixing lives in `emulator_kit::mix`, re-exported here.

pub use emulator_kit::mix::{Mix, hash_str, shuffled};

/// A Google-looking resource id: 16 lowercase alphanumerics derived from
/// `nonce` and a sequence number.
pub fn resource_id(nonce: u64, seq: u64) -> String {
    emulator_kit::ids::draw(b"abcdefghijklmnopqrstuvwxyz0123456789", 16, nonce, seq)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_google_looking_and_distinct() {
        let a = resource_id(7, 1);
        let b = resource_id(7, 2);
        assert_eq!(a.len(), 16);
        assert!(
            a.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        );
        assert_ne!(a, b);
        assert_eq!(a, resource_id(7, 1));
    }
}
