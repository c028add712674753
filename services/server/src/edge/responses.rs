//! Response byte budgets: no answer larger than its client can receive.
//!
//! A gRPC client refuses a message over its receive limit (4 MiB unless
//! raised), and a refused ClaimRows is worse than an error: its rows stay
//! leased to a claim nobody works. So:
//!
//! - **ClaimRows** takes the client's limit from the request
//!   (`max_response_bytes`, default [`DEFAULT_CLIENT_RECEIVE`]), capped at
//!   the server's `--max-response-bytes`, and the store stops taking rows
//!   where they would no longer fit ([`claim_budget`]); the rows left out
//!   stay runnable and the answer says `truncated`.
//! - **Lists** page by bytes as well as by count: a page ends before the
//!   row that would take it past [`page_budget`] ([`cut_page`]), and the
//!   next page token continues right after the last row returned.
//! - Every service's encoder refuses a message over `--max-response-bytes`
//!   (tonic's `max_encoding_message_size`), the last line of defence.

use crate::config::Limits;
use prost::Message;
use tally_core::keys::MAX_KEY_LEN;
use tally_core::payload::MAX_PAYLOAD_BYTES;
use tally_store::types::ByteBudget;

/// gRPC's default max receive message size: what a client that set
/// nothing accepts.
pub const DEFAULT_CLIENT_RECEIVE: usize = 4 * 1024 * 1024;

/// Kept free of rows in every budgeted response: the rest of the message
/// (a claim, a page token) and the gRPC frame. Checked by a test against
/// the largest such parts.
pub const ENVELOPE: usize = 4096;

/// The most a `ClaimedRow` encodes to beyond its key, payload, prompt name
/// and version and model bytes: field tags and length prefixes (at most 5
/// bytes each), the nested prompt and attempt counts, and the row's own tag
/// and length in the response. Checked by a test.
pub const CLAIMED_ROW_OVERHEAD: i32 = 96;

/// The most one claimed row encodes to (keys, payloads and names are
/// bounded at enrollment; names at [`MAX_NAME`] bytes).
pub const MAX_CLAIMED_ROW: usize =
    MAX_KEY_LEN + MAX_PAYLOAD_BYTES + 3 * MAX_NAME + CLAIMED_ROW_OVERHEAD as usize;

/// The smallest `max_response_bytes` a ClaimRows may ask for: one largest
/// row and the envelope, so every claim can hand out at least one row.
pub const MIN_CLAIM_RESPONSE: usize = MAX_CLAIMED_ROW + ENVELOPE;

/// Prompt names, versions and models are at most this many bytes.
const MAX_NAME: usize = 128;

/// The bytes of rows a ClaimRows may return, from the client's
/// `max_response_bytes` (0: [`DEFAULT_CLIENT_RECEIVE`]); `Err` with the
/// reason when the value is negative or below [`MIN_CLAIM_RESPONSE`].
pub fn claim_budget(requested: i64, limits: &Limits) -> Result<ByteBudget, String> {
    let client = match requested {
        0 => DEFAULT_CLIENT_RECEIVE,
        n if n < 0 => return Err("must not be negative (0 means 4 MiB)".into()),
        n => usize::try_from(n).unwrap_or(usize::MAX),
    };
    if client < MIN_CLAIM_RESPONSE {
        return Err(format!(
            "must be at least {MIN_CLAIM_RESPONSE} bytes (one largest row and the response \
             around it), or 0 for 4 MiB"
        ));
    }
    let limit = client.min(limits.max_response_bytes);
    Ok(ByteBudget {
        max_bytes: i64::try_from(limit - ENVELOPE).unwrap_or(i64::MAX),
        row_overhead: CLAIMED_ROW_OVERHEAD,
    })
}

/// The bytes of entries one list page may hold: what a default client
/// receives, less the envelope ([`check`] keeps the server's own limit at
/// least that).
pub const PAGE_BYTES: usize = DEFAULT_CLIENT_RECEIVE - ENVELOPE;

/// Cuts a page of `fetched` entries (converted by `encode`) at
/// [`PAGE_BYTES`]; returns the entries kept and the `got` to give
/// [`crate::edge::paging::next_token`]: a page cut short by bytes continues
/// after its last entry as a full one would.
pub fn page<S, T: Message>(fetched: &[S], size: i64, encode: impl Fn(&S) -> T) -> (Vec<T>, usize) {
    let (kept, cut) = cut_page(fetched.iter().map(encode).collect(), PAGE_BYTES);
    let got = if cut {
        usize::try_from(size).unwrap_or(usize::MAX)
    } else {
        fetched.len()
    };
    (kept, got)
}

/// Keeps the longest prefix of `items` whose encoded size in a repeated
/// field stays within `budget` (the first item always, so a page is never
/// empty while there are items); says whether any were dropped.
pub fn cut_page<T: Message>(mut items: Vec<T>, budget: usize) -> (Vec<T>, bool) {
    let mut used = 0usize;
    let mut keep = 0;
    for item in &items {
        let len = item.encoded_len();
        // Tag (1 byte) and length prefix of the entry.
        let entry = 1 + prost::length_delimiter_len(len) + len;
        if keep > 0 && used + entry > budget {
            break;
        }
        used += entry;
        keep += 1;
    }
    let cut = keep < items.len();
    items.truncate(keep);
    (items, cut)
}

/// The most one `RowVerdict` encodes to beyond its key's bytes (the longest
/// rule, an override's, a timestamp and the largest counters), with its tag
/// and length in the response. Checked by a test.
pub const VERDICT_OVERHEAD: usize = 192;

/// The bytes of rows a ReportOutcomes' `claim_next` may return: the claim's
/// `budget` less the most the verdicts of keys of `key_lens` bytes can take
/// in the same answer. `Err` with the reason when one largest row would no
/// longer fit beside them.
pub fn claim_next_budget(
    budget: ByteBudget,
    key_lens: impl Iterator<Item = usize>,
) -> Result<ByteBudget, String> {
    let verdicts: usize = key_lens.map(|k| k + VERDICT_OVERHEAD).sum();
    let left = budget.max_bytes - i64::try_from(verdicts).unwrap_or(i64::MAX);
    if left < MAX_CLAIMED_ROW as i64 {
        return Err(format!(
            "leaves {} bytes beside the report's verdicts (up to {verdicts} bytes), less than one \
             largest row ({MAX_CLAIMED_ROW}): raise it, report fewer outcomes, or claim with \
             ClaimRows",
            left.max(0)
        ));
    }
    Ok(ByteBudget {
        max_bytes: left,
        ..budget
    })
}

/// Refuses a response limit that could not hold a default list page or one
/// largest claimed row.
pub fn check(limits: &Limits) -> Result<(), String> {
    if limits.max_response_bytes < DEFAULT_CLIENT_RECEIVE {
        return Err(format!(
            "--max-response-bytes must be at least {DEFAULT_CLIENT_RECEIVE} (gRPC's default \
             receive limit, which list pages are sized for)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tally_proto::v1 as pb;

    fn text(n: usize) -> String {
        "x".repeat(n)
    }

    /// Invariant: a claimed row never encodes to more than its text bytes
    /// plus CLAIMED_ROW_OVERHEAD, whatever its lengths and counters.
    #[test]
    fn the_claimed_row_overhead_is_an_upper_bound() {
        let lengths = [0, 1, 127, 128, 16_383, 16_384, MAX_PAYLOAD_BYTES];
        for &payload in &lengths {
            for &other in &[0usize, 1, 127, 128] {
                for counter in [0, 1, i32::MAX, -1] {
                    let row = pb::ClaimedRow {
                        key: text(other.min(MAX_KEY_LEN)),
                        payload: text(payload),
                        prompt: Some(pb::PromptRef {
                            name: text(other),
                            version: text(other),
                        }),
                        model: text(other),
                        attempts: Some(pb::AttemptCounts {
                            provider: counter,
                            content: counter,
                            infra: counter,
                            total: counter,
                        }),
                        ..Default::default()
                    };
                    let response = pb::ClaimRowsResponse {
                        rows: vec![row],
                        ..Default::default()
                    };
                    let text_bytes = other * 4 + payload;
                    assert!(
                        response.encoded_len() <= text_bytes + CLAIMED_ROW_OVERHEAD as usize,
                        "payload {payload}, names {other}, counter {counter}: {} bytes",
                        response.encoded_len()
                    );
                }
            }
        }
    }

    /// Invariant: the largest claim record, page token and flags fit the
    /// envelope, so rows within the budget make a response within the limit.
    #[test]
    fn the_envelope_holds_the_rest_of_a_response() {
        let time = Some(prost_types::Timestamp {
            seconds: i64::MAX,
            nanos: i32::MAX,
        });
        let claim = pb::Claim {
            name: format!("ledgers/{}/claims/{}", text(MAX_NAME), uuid::Uuid::nil()),
            worker: text(MAX_NAME),
            model: text(MAX_NAME),
            create_time: time,
            expire_time: time,
            job: format!("ledgers/{}/jobs/{}", text(MAX_NAME), text(64)),
            state: pb::ClaimState::Active as i32,
            row_count: i32::MAX,
            held_count: i32::MAX,
            ..Default::default()
        };
        let claim = pb::ClaimRowsResponse {
            claim: Some(claim),
            truncated: true,
            ..Default::default()
        };
        // The gRPC frame adds 5 bytes.
        assert!(
            claim.encoded_len() + 5 < ENVELOPE / 2,
            "{}",
            claim.encoded_len()
        );
        let token = crate::edge::paging::encode(
            &format!("rows:{}", text(MAX_NAME)),
            &text(16),
            &text(MAX_KEY_LEN),
        );
        let page = pb::ListRowsResponse {
            rows: vec![],
            next_page_token: token,
        };
        assert!(
            page.encoded_len() + 5 < ENVELOPE / 2,
            "{}",
            page.encoded_len()
        );
    }

    #[test]
    fn claim_budgets() {
        let limits = Limits::default();
        let b = claim_budget(0, &limits).unwrap();
        assert_eq!(b.max_bytes as usize, DEFAULT_CLIENT_RECEIVE - ENVELOPE);
        let b = claim_budget(i64::MAX, &limits).unwrap();
        assert_eq!(b.max_bytes as usize, limits.max_response_bytes - ENVELOPE);
        assert!(claim_budget(-1, &limits).is_err());
        assert!(claim_budget(MIN_CLAIM_RESPONSE as i64 - 1, &limits).is_err());
        assert!(claim_budget(MIN_CLAIM_RESPONSE as i64, &limits).is_ok());
    }

    /// Invariant: a verdict never encodes to more than its key's bytes plus
    /// VERDICT_OVERHEAD, with the longest rule (an override's) and the
    /// largest timestamp and counters.
    #[test]
    fn the_verdict_overhead_is_an_upper_bound() {
        let verdict = pb::RowVerdict {
            key: text(MAX_KEY_LEN),
            verdict: pb::Verdict::Duplicate as i32,
            rule: format!("override:{}", text(63)),
            budget: pb::Budget::Provider as i32,
            next_attempt_time: Some(prost_types::Timestamp {
                seconds: i64::MIN,
                nanos: i32::MIN,
            }),
            attempts: Some(pb::AttemptCounts {
                provider: -1,
                content: -1,
                infra: -1,
                total: -1,
            }),
        };
        let response = pb::ReportOutcomesResponse {
            verdicts: vec![verdict],
            ..Default::default()
        };
        assert!(
            response.encoded_len() <= MAX_KEY_LEN + VERDICT_OVERHEAD,
            "{} bytes",
            response.encoded_len()
        );
    }

    #[test]
    fn claim_next_budgets_leave_room_for_the_verdicts() {
        let limits = Limits::default();
        let b = claim_budget(0, &limits).unwrap();
        let next = claim_next_budget(b, [10, 20].into_iter()).unwrap();
        assert_eq!(
            next.max_bytes,
            b.max_bytes - 30 - 2 * VERDICT_OVERHEAD as i64
        );
        let tight = claim_budget(MIN_CLAIM_RESPONSE as i64, &limits).unwrap();
        let err = claim_next_budget(tight, [10].into_iter()).unwrap_err();
        assert!(err.contains("less than one largest row"), "{err}");
    }

    /// Pages stop before the entry that would pass the budget, keep at
    /// least one entry, and say when they stopped short.
    #[test]
    fn pages_are_cut_by_bytes() {
        let rows = |n: usize| -> Vec<pb::Row> {
            (0..n)
                .map(|i| pb::Row {
                    key: format!("k{i}"),
                    payload: text(1000),
                    ..Default::default()
                })
                .collect()
        };
        let one = rows(1)[0].encoded_len() + 3;
        let (kept, cut) = cut_page(rows(10), one * 3);
        assert_eq!((kept.len(), cut), (3, true));
        let (kept, cut) = cut_page(rows(10), one * 3 - 1);
        assert_eq!((kept.len(), cut), (2, true));
        let (kept, cut) = cut_page(rows(10), 1);
        assert_eq!((kept.len(), cut), (1, true), "the first entry always");
        let (kept, cut) = cut_page(rows(3), one * 3);
        assert_eq!((kept.len(), cut), (3, false));
    }
}
