//! Ids shaped like Anthropic's: `msgbatch_01`, `msg_01` and `req_01`
//! followed by 22 base-62 characters. Derived from a nonce and a sequence
//! number (`emulator_kit::ids`), so distinct within and across runs.

use emulator_kit::ids::draw;

const BASE62: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

fn id(prefix: &str, nonce: u64, seq: u64) -> String {
    format!("{prefix}01{}", draw(BASE62, 22, nonce, seq))
}

/// `msgbatch_01…`.
pub fn batch_id(nonce: u64, seq: u64) -> String {
    id("msgbatch_", nonce, seq)
}

/// `msg_01…`, a result's Message.
pub fn message_id(nonce: u64, seq: u64) -> String {
    id("msg_", nonce, seq)
}

/// `req_01…`, the `request-id` of a response.
pub fn request_id(nonce: u64, seq: u64) -> String {
    id("req_", nonce, seq)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Invariant: ids carry Anthropic's prefixes and length, distinct per
    // sequence number and stable for the same one.
    #[test]
    fn ids_have_the_providers_shapes() {
        let b = batch_id(1, 2);
        assert!(b.starts_with("msgbatch_01") && b.len() == 9 + 2 + 22, "{b}");
        assert!(message_id(1, 2).starts_with("msg_01"));
        assert!(request_id(1, 2).starts_with("req_01"));
        assert_ne!(batch_id(1, 2), batch_id(1, 3));
        assert_eq!(batch_id(1, 2), b);
    }
}
