//! Ids shaped like OpenAI's: `file-` and 22 alphanumerics, `batch_` and 32
//! hex digits, `batch_req_…`, `chatcmpl-…`, `evt_…`. Derived from a nonce
//! and a sequence number, so distinct within and across runs.

use emulator_kit::ids::draw;

const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const HEX: &[u8] = b"0123456789abcdef";

/// `file-` + 22 alphanumerics.
pub fn file_id(nonce: u64, seq: u64) -> String {
    format!("file-{}", draw(ALNUM, 22, nonce, seq))
}

/// `{prefix}` + 32 hex digits (`batch_`, `batch_req_`, `evt_`, `wh_`, …).
pub fn hex_id(prefix: &str, nonce: u64, seq: u64) -> String {
    format!("{prefix}{}", draw(HEX, 32, nonce, seq))
}

/// `chatcmpl-` + 29 alphanumerics.
pub fn completion_id(nonce: u64, seq: u64) -> String {
    format!("chatcmpl-{}", draw(ALNUM, 29, nonce, seq))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_have_the_providers_shapes() {
        let f = file_id(1, 2);
        assert!(f.starts_with("file-") && f.len() == 27, "{f}");
        let b = hex_id("batch_", 1, 2);
        assert_eq!(b.len(), 6 + 32);
        assert_ne!(hex_id("batch_", 1, 2), hex_id("batch_", 1, 3));
        assert_eq!(file_id(1, 2), f);
    }
}
