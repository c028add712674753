//! Bad input for every LedgerService and DeliveryService RPC (DESIGN.md
//! section 6): each case
//! asserts the status code, the `google.rpc` detail naming the field or
//! resource, and that the database is exactly as it was before the call.
//! One or a few tests per RPC, each on its own server.

mod claims;
mod delivery;
mod enroll;
mod ledgers;
mod prompts;
mod reads;
mod redrive;
mod report;

/// Malformed ledger names: empty, no or a wrong collection, no id, an
/// uppercase id, an id starting with a digit, a longer name, an underscore.
pub const BAD_LEDGER_NAMES: [&str; 8] = [
    "",
    "reviews",
    "ledger/reviews",
    "ledgers/",
    "ledgers/Reviews",
    "ledgers/9lives",
    "ledgers/reviews/rows/a",
    "ledgers/reviews_nightly",
];

/// Keys that are malformed: empty, 257 characters, a slash, a space, a
/// non-ASCII letter.
pub fn bad_keys() -> Vec<String> {
    vec![
        String::new(),
        "k".repeat(257),
        "a/b".into(),
        "a b".into(),
        "é".into(),
    ]
}
