//! The natural-key vectors shared with the Python client
//! (`tests/vectors/keys.json`): both clients must derive the same key from
//! the same parts, or a Python enrolment and a Rust one would enroll the
//! same work twice under different keys.

use tally_core::keys::{derive_key, validate_key};

#[test]
fn rust_derives_every_shared_vector() {
    let text = include_str!("../../../../tests/vectors/keys.json");
    let doc: serde_json::Value = serde_json::from_str(text).expect("vectors are JSON");
    let vectors = doc["vectors"].as_array().expect("a vectors list");
    assert!(vectors.len() >= 10, "the vectors cover the edge cases");
    for v in vectors {
        let parts: Vec<&str> = v["parts"]
            .as_array()
            .expect("parts")
            .iter()
            .map(|p| p.as_str().expect("a string part"))
            .collect();
        let key = derive_key(&parts);
        assert_eq!(key, v["key"].as_str().expect("a key"), "{parts:?}");
        assert_eq!(validate_key(&key), Ok(()));
    }
}
