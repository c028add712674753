//! Delivery: how finished rows leave tally effectively once (DESIGN.md §3,
//! "Delivery"). The rules here are pure; the store keeps the log, the
//! cursors and the leases, and asks these functions what to write.
//!
//! - A row's **result version** numbers its final results: the first
//!   SUCCEEDED or PERMANENT is version 1, and a redrive of a final row (or a
//!   re-answer of a SUCCEEDED one) moves the version on, so the next final
//!   result has its own. `(ledger, key,
//!   version)` is what a sink deduplicates on.
//! - Each final result is appended to its ledger's **results log** at
//!   commit, in commit order. A [`Position`] names one result in the log.
//! - A **consumer** reads the log from its own cursor. What it is handed is
//!   **leased** until acknowledged; a lease not acknowledged within the
//!   visibility timeout is handed out again ([`plan_receive`]), to any
//!   instance of the consumer. A result whose row has moved on since (a
//!   redrive took it back, or a newer version exists) is **superseded** and
//!   passed over: the consumer gets the newer version when it is logged.
//! - A result the sink refuses for good is **dead-lettered** ([`nack`]), or
//!   when it was handed out `max_deliveries` times without an ack.
//! - A **webhook** consumer is driven by the server: it POSTs what it
//!   receives, signed ([`crate::webhook`]), and a 2xx acknowledges;
//!   failures back off per consumer ([`WEBHOOK_BACKOFF`]).

use crate::backoff::Backoff;
use crate::status::RowStatus;
use crate::violation::Violations;
use sha2::{Digest, Sha256};
use std::time::Duration;

/// Statuses whose results are delivered.
pub const FINISHED: [RowStatus; 2] = [RowStatus::Succeeded, RowStatus::Permanent];

/// Whether a row in `status` has a result to deliver.
pub const fn is_finished(status: RowStatus) -> bool {
    matches!(status, RowStatus::Succeeded | RowStatus::Permanent)
}

/// The version of a row's first final result.
pub const FIRST_VERSION: i32 = 1;

/// Bits of a [`Position`] that number a result inside its log entry.
pub const ORDINAL_BITS: u32 = 20;
/// Most results in one log entry (a settlement of more rows writes several).
pub const MAX_ENTRY_ROWS: usize = 10_000;

/// A place in a ledger's results log: the entry's sequence number and the
/// result's 1-based ordinal inside it, as one integer (`seq << 20 |
/// ordinal`), so positions compare in commit order. Position 0 is before
/// every result; `seq << 20` is before the entry `seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Position(i64);

impl Position {
    /// Before every result.
    pub const ORIGIN: Position = Position(0);

    /// The result `ordinal` (1-based; 0: before the entry) of entry `seq`.
    pub fn new(seq: i64, ordinal: u32) -> Option<Position> {
        let ok =
            (0..(1 << (63 - ORDINAL_BITS))).contains(&seq) && ordinal as usize <= MAX_ENTRY_ROWS;
        ok.then(|| Position((seq << ORDINAL_BITS) | i64::from(ordinal)))
    }

    /// A position as a caller wrote it (a saved cursor): refused when it
    /// cannot name a place in a log.
    pub fn parse(raw: i64) -> Result<Position, String> {
        let ordinal = (raw & ((1 << ORDINAL_BITS) - 1)) as usize;
        if raw < 0 {
            Err("must not be negative".into())
        } else if ordinal > MAX_ENTRY_ROWS {
            Err("is not a position a consumer was given".into())
        } else {
            Ok(Position(raw))
        }
    }

    pub const fn raw(self) -> i64 {
        self.0
    }

    /// The log entry's sequence number.
    pub const fn entry(self) -> i64 {
        self.0 >> ORDINAL_BITS
    }

    /// The 1-based ordinal inside the entry (0: before the entry).
    pub const fn ordinal(self) -> u32 {
        (self.0 & ((1 << ORDINAL_BITS) - 1)) as u32
    }
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Splits one settlement's finished rows (in order) into log entries of at
/// most [`MAX_ENTRY_ROWS`].
pub fn entries<T>(finished: &[T]) -> impl Iterator<Item = &[T]> {
    finished.chunks(MAX_ENTRY_ROWS)
}

// ---- consumers ------------------------------------------------------------

/// How a consumer is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Its callers receive and acknowledge (gRPC, `tallyctl consume`, the
    /// Python iterator).
    Pull,
    /// The server POSTs each result to a URL; a 2xx acknowledges.
    Webhook,
}

impl Kind {
    pub const fn code(self) -> i16 {
        match self {
            Kind::Pull => 1,
            Kind::Webhook => 2,
        }
    }

    pub const fn from_code(code: i16) -> Option<Kind> {
        match code {
            1 => Some(Kind::Pull),
            2 => Some(Kind::Webhook),
            _ => None,
        }
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            Kind::Pull => "pull",
            Kind::Webhook => "webhook",
        }
    }
}

/// Where a new consumer starts, or a reset puts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// Every result the log holds.
    Beginning,
    /// Only results logged from now on.
    Now,
    /// Every result after this position.
    After(Position),
}

pub const DEFAULT_VISIBILITY: Duration = Duration::from_secs(30);
pub const MIN_VISIBILITY: Duration = Duration::from_secs(1);
pub const MAX_VISIBILITY: Duration = Duration::from_secs(12 * 3600);
/// Deliveries of one result without an ack before it is dead-lettered.
pub const DEFAULT_MAX_DELIVERIES: u32 = 16;
pub const MAX_MAX_DELIVERIES: u32 = 1000;
/// Results leased to a consumer at once: a receive hands out only
/// redeliveries beyond it. Bounds the leases a consumer can pile up.
pub const MAX_IN_FLIGHT: i64 = 10_000;
pub const DEFAULT_RECEIVE_ROWS: u32 = 100;
pub const MAX_RECEIVE_ROWS: u32 = 1000;
/// Longest a receive waits for a result (a long poll).
pub const MAX_WAIT: Duration = Duration::from_secs(20);
/// Positions in one ack or nack.
pub const MAX_ACK_POSITIONS: usize = 10_000;
/// Longest a nack may hold a result back.
pub const MAX_RETRY_AFTER: Duration = MAX_VISIBILITY;
/// Rows a webhook POST carries at most.
pub const MAX_WEBHOOK_BATCH: u32 = 500;
pub const DEFAULT_WEBHOOK_BATCH: u32 = 100;
/// Consumers per ledger.
pub const MAX_CONSUMERS_PER_LEDGER: i64 = 100;
/// Longest reason kept with a nack or dead letter.
pub const MAX_REASON: usize = 1024;

/// A consumer's settings, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub kind: Kind,
    pub visibility: Duration,
    /// 0: never dead-letter for redeliveries.
    pub max_deliveries: u32,
    /// Webhook consumers only.
    pub webhook: Option<WebhookTarget>,
}

/// Where a webhook consumer POSTs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookTarget {
    pub url: String,
    /// Results per POST.
    pub batch: u32,
}

/// A consumer's settings as a request gives them (`None`: the default).
#[derive(Debug, Clone, Default)]
pub struct Requested<'a> {
    pub visibility: Option<Duration>,
    pub max_deliveries: Option<u32>,
    pub webhook_url: Option<&'a str>,
    pub webhook_batch: Option<u32>,
}

/// Checks requested settings; `check_url` judges a webhook URL (the
/// server's outbound rules, [`crate::outbound`]). Field names are
/// relative to the consumer message.
pub fn settings(
    req: &Requested<'_>,
    check_url: impl Fn(&str) -> Result<(), String>,
    v: &mut Violations,
) -> Option<Settings> {
    let before = v.len();
    let visibility = req.visibility.unwrap_or(DEFAULT_VISIBILITY);
    if !(MIN_VISIBILITY..=MAX_VISIBILITY).contains(&visibility) {
        v.add(
            "visibility_timeout",
            format!(
                "must be between {}s and {}h",
                MIN_VISIBILITY.as_secs(),
                MAX_VISIBILITY.as_secs() / 3600
            ),
        );
    }
    let max_deliveries = req.max_deliveries.unwrap_or(DEFAULT_MAX_DELIVERIES);
    if max_deliveries > MAX_MAX_DELIVERIES {
        v.add(
            "max_deliveries",
            format!("must be at most {MAX_MAX_DELIVERIES} (0: never dead-letter)"),
        );
    }
    let webhook = match req.webhook_url.map(str::trim).filter(|u| !u.is_empty()) {
        None => {
            if req.webhook_batch.is_some_and(|b| b > 0) {
                v.add("webhook.max_batch_rows", "is for webhook consumers only");
            }
            None
        }
        Some(url) => {
            if url.len() > 2048 {
                v.add("webhook.url", "must be at most 2048 bytes");
            } else if let Err(why) = check_url(url) {
                v.add("webhook.url", why);
            }
            let batch = req
                .webhook_batch
                .filter(|b| *b > 0)
                .unwrap_or(DEFAULT_WEBHOOK_BATCH);
            if batch > MAX_WEBHOOK_BATCH {
                v.add(
                    "webhook.max_batch_rows",
                    format!("must be at most {MAX_WEBHOOK_BATCH}"),
                );
            }
            Some(WebhookTarget {
                url: url.to_string(),
                batch,
            })
        }
    };
    (v.len() == before).then(|| Settings {
        kind: if webhook.is_some() {
            Kind::Webhook
        } else {
            Kind::Pull
        },
        visibility,
        max_deliveries,
        webhook,
    })
}

/// What one receive asks for, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceiveLimits {
    pub max_rows: u32,
    /// The answer's byte budget; the first result is handed out whatever
    /// its size.
    pub max_bytes: u64,
    /// 0: never dead-letter.
    pub max_deliveries: u32,
    /// Whether new results may be leased (in-flight below [`MAX_IN_FLIGHT`]);
    /// redeliveries are handed out either way.
    pub room: i64,
}

/// A receive's `max_rows` (0: the default).
pub fn receive_rows(requested: u32) -> Result<u32, String> {
    match requested {
        0 => Ok(DEFAULT_RECEIVE_ROWS),
        n if n <= MAX_RECEIVE_ROWS => Ok(n),
        _ => Err(format!("must be at most {MAX_RECEIVE_ROWS}")),
    }
}

/// A receive's wait (a long poll): at most [`MAX_WAIT`].
pub fn receive_wait(requested: Duration) -> Result<Duration, String> {
    if requested > MAX_WAIT {
        Err(format!("must be at most {}s", MAX_WAIT.as_secs()))
    } else {
        Ok(requested)
    }
}

/// A result that may be handed out: a lease that is visible again, or a
/// result after the cursor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub position: Position,
    pub row_id: i64,
    /// The version the log entry names.
    pub version: i32,
    /// Times handed out already (0: a result after the cursor).
    pub deliveries: i32,
    /// The row as it is now (`None`: gone).
    pub now: Option<RowNow>,
    /// Bytes it adds to the answer.
    pub size: u64,
}

/// What a candidate's row is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowNow {
    pub status: RowStatus,
    pub result_version: i32,
}

impl Candidate {
    /// Whether the row still has this result: finished, at this version.
    pub fn current(&self) -> bool {
        self.now
            .is_some_and(|r| is_finished(r.status) && r.result_version == self.version)
    }
}

/// Why a result was dead-lettered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeadReason {
    /// Handed out this many times without an ack.
    MaxDeliveries(u32),
    /// The sink refused it for good (a nack), with its reason.
    Refused(String),
}

impl DeadReason {
    pub fn describe(&self) -> String {
        match self {
            DeadReason::MaxDeliveries(n) => {
                format!("max_deliveries: handed out {n} times without an ack")
            }
            DeadReason::Refused(why) if why.is_empty() => "refused by the consumer".into(),
            DeadReason::Refused(why) => format!("refused by the consumer: {why}"),
        }
    }
}

/// What a receive does: indexes into the candidates it was given.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    /// Redeliveries handed out again (their leases renewed).
    pub redeliver: Vec<usize>,
    /// Results after the cursor handed out (leased).
    pub deliver: Vec<usize>,
    /// Leases of superseded results, dropped.
    pub drop_leases: Vec<usize>,
    /// Leases dead-lettered (handed out `max_deliveries` times).
    pub dead: Vec<usize>,
    /// The cursor after this receive: past every result after the cursor
    /// that was handed out or superseded, up to the first one that did not
    /// fit (`None`: unchanged).
    pub read_position: Option<Position>,
}

impl Plan {
    /// Results handed out, redeliveries first.
    pub fn handed_out(&self) -> impl Iterator<Item = (usize, bool)> + '_ {
        self.redeliver
            .iter()
            .map(|i| (*i, true))
            .chain(self.deliver.iter().map(|i| (*i, false)))
    }
}

/// Decides a receive. `again` are visible leases (oldest position first),
/// `fresh` the results after the cursor (in position order). Redeliveries
/// go first; superseded results are passed over (and their leases
/// dropped); a lease handed out `max_deliveries` times is dead-lettered
/// instead of handed out again; results are handed out while they fit
/// `limits` (the first always); new results only while there is room.
pub fn plan_receive(again: &[Candidate], fresh: &[Candidate], limits: &ReceiveLimits) -> Plan {
    let mut plan = Plan::default();
    let mut rows = 0u32;
    let mut bytes = 0u64;
    let mut fits = |c: &Candidate| {
        let first = rows == 0;
        if rows >= limits.max_rows || (!first && bytes.saturating_add(c.size) > limits.max_bytes) {
            return false;
        }
        rows += 1;
        bytes = bytes.saturating_add(c.size);
        true
    };
    for (i, c) in again.iter().enumerate() {
        if !c.current() {
            plan.drop_leases.push(i);
        } else if limits.max_deliveries > 0 && c.deliveries >= limits.max_deliveries as i32 {
            plan.dead.push(i);
        } else if fits(c) {
            plan.redeliver.push(i);
        }
    }
    let mut room = limits.room;
    for (i, c) in fresh.iter().enumerate() {
        if c.current() {
            if room <= 0 || !fits(c) {
                break;
            }
            room -= 1;
            plan.deliver.push(i);
        }
        plan.read_position = Some(c.position);
    }
    plan
}

/// What a nack asks for one leased result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NackFate {
    /// Visible again after this long.
    Retry(Duration),
    /// Dead-lettered.
    Dead(DeadReason),
}

/// A nack: dead-letter, or hand out again after `retry_after` (at most
/// [`MAX_RETRY_AFTER`]).
pub fn nack(dead_letter: bool, retry_after: Duration, reason: &str) -> Result<NackFate, String> {
    if retry_after > MAX_RETRY_AFTER {
        return Err(format!(
            "must be at most {}h",
            MAX_RETRY_AFTER.as_secs() / 3600
        ));
    }
    Ok(if dead_letter {
        NackFate::Dead(DeadReason::Refused(reason.to_string()))
    } else {
        NackFate::Retry(retry_after)
    })
}

/// An ack "up to `up_to`" may name only what was handed out: a position
/// after the cursor was never delivered (skipping it is a reset).
pub fn check_ack_up_to(up_to: Position, read_position: Position) -> Result<(), String> {
    if up_to > read_position {
        Err(format!(
            "position {up_to} was never handed out (the consumer has read to {read_position}); \
             ResetConsumer skips results"
        ))
    } else {
        Ok(())
    }
}

/// The acknowledged watermark: every position at or below it is
/// acknowledged, dead-lettered or passed over. Below the oldest lease, or
/// the cursor when nothing is leased.
pub fn acked_position(read_position: Position, oldest_lease: Option<Position>) -> Position {
    match oldest_lease {
        Some(p) if p <= read_position => Position(p.0.saturating_sub(1).max(0)),
        Some(_) | None => read_position,
    }
}

// ---- webhooks --------------------------------------------------------------

/// Between failed POSTs of a webhook consumer: 1s doubling to 5 minutes,
/// ±20%. The consumer as a whole waits (a receiver that is down is not sent
/// other results meanwhile), so a thirty-second outage costs about five
/// tries, not one per result.
pub const WEBHOOK_BACKOFF: Backoff = Backoff {
    initial: Duration::from_secs(1),
    max: Duration::from_secs(300),
    multiplier: 2.0,
    jitter: 0.2,
};

/// How long a webhook's POST holds its results before they are visible
/// again (its own time limit is shorter).
pub const WEBHOOK_LEASE: Duration = Duration::from_secs(60);

/// Most entries of a webhook consumer's delivery log; older ones go.
pub const DELIVERY_LOG_KEPT: i64 = 200;

/// What a webhook POST came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PostOutcome {
    /// 2xx: the results are acknowledged.
    Accepted(u16),
    /// Any other answer, none, or a destination the server may not reach
    /// (a name may resolve elsewhere later): retried after the consumer's
    /// backoff, each result until its `max_deliveries`.
    Failed(String),
}

/// The HTTP status's verdict.
pub fn post_outcome(status: u16) -> PostOutcome {
    if (200..300).contains(&status) {
        PostOutcome::Accepted(status)
    } else if (300..400).contains(&status) {
        PostOutcome::Failed(format!("answered {status} (redirects are not followed)"))
    } else {
        PostOutcome::Failed(format!("answered {status}"))
    }
}

/// The consumer's wait after `failures` consecutive failed POSTs.
pub fn webhook_retry(failures: u32, sample: f64) -> Duration {
    WEBHOOK_BACKOFF.delay(failures.max(1), sample)
}

/// The `webhook-id` of a POST: the same for the same results (a retry of
/// the same batch), so a receiver may deduplicate on it as well as on each
/// result's (ledger, key, version).
pub fn message_id(consumer: &str, results: &[(Position, i32)]) -> String {
    let mut h = Sha256::new();
    h.update(consumer.as_bytes());
    for (p, v) in results {
        h.update(p.raw().to_be_bytes());
        h.update(v.to_be_bytes());
    }
    format!("msg_{}", &hex::encode(h.finalize())[..32])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(pos: i64, version: i32, deliveries: i32, now: Option<(RowStatus, i32)>) -> Candidate {
        Candidate {
            position: Position::new(pos, 1).unwrap(),
            row_id: pos,
            version,
            deliveries,
            now: now.map(|(status, result_version)| RowNow {
                status,
                result_version,
            }),
            size: 10,
        }
    }

    fn ok(pos: i64) -> Candidate {
        cand(pos, 1, 0, Some((RowStatus::Succeeded, 1)))
    }

    fn limits(max_rows: u32) -> ReceiveLimits {
        ReceiveLimits {
            max_rows,
            max_bytes: 1 << 20,
            max_deliveries: 3,
            room: MAX_IN_FLIGHT,
        }
    }

    #[test]
    fn positions_order_by_entry_then_ordinal() {
        // Invariant: a position's integer order is commit order: every
        // result of an earlier entry comes before any of a later one.
        let a = Position::new(5, MAX_ENTRY_ROWS as u32).unwrap();
        let b = Position::new(6, 1).unwrap();
        assert!(a < b && Position::ORIGIN < a);
        assert_eq!((b.entry(), b.ordinal()), (6, 1));
        assert_eq!(Position::parse(b.raw()), Ok(b));
        assert!(Position::parse(-1).is_err());
        assert!(Position::parse((6 << ORDINAL_BITS) | (MAX_ENTRY_ROWS as i64 + 1)).is_err());
        assert!(Position::new(1, MAX_ENTRY_ROWS as u32 + 1).is_none());
        assert_eq!(
            entries(&[0u8; 25_001]).map(<[u8]>::len).collect::<Vec<_>>(),
            [10_000, 10_000, 5_001]
        );
    }

    #[test]
    fn redeliveries_go_first_and_the_cursor_stops_at_the_first_result_left_behind() {
        // Invariant: nothing after the cursor is skipped: the cursor moves
        // only past results handed out or superseded, in order, and a result
        // that did not fit stays after it.
        let again = [cand(1, 1, 1, Some((RowStatus::Succeeded, 1)))];
        let fresh = [ok(2), ok(3), ok(4)];
        let plan = plan_receive(&again, &fresh, &limits(3));
        assert_eq!(plan.redeliver, [0]);
        assert_eq!(plan.deliver, [0, 1]);
        assert_eq!(plan.read_position, Some(fresh[1].position));
        let order: Vec<_> = plan.handed_out().collect();
        assert_eq!(order, [(0, true), (0, false), (1, false)]);
    }

    #[test]
    fn superseded_results_are_passed_over_not_handed_out() {
        // Invariant: a result whose row was redriven (not final now) or has
        // a newer version is never handed out; the cursor passes it and its
        // lease goes.
        let again = [cand(1, 1, 1, Some((RowStatus::Pending, 2)))];
        let fresh = [
            cand(2, 1, 0, Some((RowStatus::Permanent, 2))),
            cand(3, 1, 0, None),
            cand(4, 2, 0, Some((RowStatus::Succeeded, 2))),
        ];
        let plan = plan_receive(&again, &fresh, &limits(10));
        assert_eq!(plan.drop_leases, [0]);
        assert!(plan.redeliver.is_empty());
        assert_eq!(plan.deliver, [2]);
        assert_eq!(plan.read_position, Some(fresh[2].position));
    }

    #[test]
    fn a_lease_handed_out_max_deliveries_times_is_dead_lettered() {
        // Invariant: redelivery is bounded: at max_deliveries the result
        // goes to the dead letters instead of out again; 0 means never.
        let again = [
            cand(1, 1, 3, Some((RowStatus::Succeeded, 1))),
            cand(2, 1, 2, Some((RowStatus::Succeeded, 1))),
        ];
        let plan = plan_receive(&again, &[], &limits(10));
        assert_eq!(
            (plan.dead.as_slice(), plan.redeliver.as_slice()),
            (&[0][..], &[1][..])
        );
        let unbounded = ReceiveLimits {
            max_deliveries: 0,
            ..limits(10)
        };
        assert_eq!(plan_receive(&again, &[], &unbounded).redeliver, [0, 1]);
    }

    #[test]
    fn the_byte_budget_cuts_but_the_first_result_always_goes() {
        // Invariant: an answer stays within its byte budget, except that one
        // result larger than the budget still goes alone (else it would
        // block the consumer for ever).
        let mut big = ok(1);
        big.size = 1000;
        let fresh = [big, ok(2)];
        let tight = ReceiveLimits {
            max_bytes: 100,
            ..limits(10)
        };
        let plan = plan_receive(&[], &fresh, &tight);
        assert_eq!(plan.deliver, [0]);
        assert_eq!(plan.read_position, Some(fresh[0].position));
    }

    #[test]
    fn no_room_hands_out_only_redeliveries() {
        // Invariant: a consumer's leases are bounded: without room nothing
        // new is leased and the cursor stays, but visible leases still go.
        let again = [cand(1, 1, 1, Some((RowStatus::Succeeded, 1)))];
        let full = ReceiveLimits {
            room: 0,
            ..limits(10)
        };
        let plan = plan_receive(&again, &[ok(2)], &full);
        assert_eq!((plan.redeliver.len(), plan.deliver.len()), (1, 0));
        assert_eq!(plan.read_position, None);
    }

    #[test]
    fn acked_watermark_is_below_the_oldest_lease() {
        let read = Position::new(9, 3).unwrap();
        assert_eq!(acked_position(read, None), read);
        let lease = Position::new(4, 2).unwrap();
        assert_eq!(acked_position(read, Some(lease)).raw(), lease.raw() - 1);
        assert!(check_ack_up_to(read, read).is_ok());
        assert!(check_ack_up_to(Position::new(9, 4).unwrap(), read).is_err());
    }

    #[test]
    fn settings_take_defaults_and_refuse_what_is_out_of_range() {
        let mut v = Violations::new();
        let s = settings(&Requested::default(), |_| Ok(()), &mut v).unwrap();
        assert_eq!(
            (s.kind, s.visibility, s.max_deliveries),
            (Kind::Pull, DEFAULT_VISIBILITY, DEFAULT_MAX_DELIVERIES)
        );
        let hook = Requested {
            webhook_url: Some("https://hooks.example.com/x"),
            ..Requested::default()
        };
        let s = settings(&hook, |_| Ok(()), &mut v).unwrap();
        assert_eq!(s.kind, Kind::Webhook);
        assert_eq!(s.webhook.unwrap().batch, DEFAULT_WEBHOOK_BATCH);
        let bad = Requested {
            visibility: Some(Duration::from_millis(10)),
            max_deliveries: Some(5000),
            webhook_url: Some("http://10.0.0.1/"),
            webhook_batch: Some(MAX_WEBHOOK_BATCH + 1),
        };
        assert!(settings(&bad, |_| Err("private".into()), &mut v).is_none());
        let fields: Vec<String> = v
            .finish()
            .unwrap_err()
            .violations
            .into_iter()
            .map(|f| f.field)
            .collect();
        assert_eq!(
            fields,
            [
                "visibility_timeout",
                "max_deliveries",
                "webhook.url",
                "webhook.max_batch_rows"
            ]
        );
    }

    #[test]
    fn receive_and_nack_bounds() {
        assert_eq!(receive_rows(0), Ok(DEFAULT_RECEIVE_ROWS));
        assert!(receive_rows(MAX_RECEIVE_ROWS + 1).is_err());
        assert!(receive_wait(MAX_WAIT + Duration::from_secs(1)).is_err());
        assert_eq!(
            nack(false, Duration::from_secs(5), ""),
            Ok(NackFate::Retry(Duration::from_secs(5)))
        );
        assert!(matches!(
            nack(true, Duration::ZERO, "bad"),
            Ok(NackFate::Dead(DeadReason::Refused(_)))
        ));
        assert!(nack(false, MAX_RETRY_AFTER + Duration::from_secs(1), "").is_err());
    }

    #[test]
    fn webhook_retries_back_off_and_ids_are_stable() {
        // Invariant: retries are bounded in rate: the wait doubles from 1s
        // and is capped at 5 minutes; a retried batch keeps its id.
        assert_eq!(webhook_retry(1, 0.5), Duration::from_secs(1));
        assert_eq!(webhook_retry(3, 0.5), Duration::from_secs(4));
        assert_eq!(webhook_retry(40, 0.5), Duration::from_secs(300));
        let r = [(Position::new(1, 1).unwrap(), 1)];
        assert_eq!(message_id("c", &r), message_id("c", &r));
        assert_ne!(message_id("c", &r), message_id("d", &r));
        assert_eq!(post_outcome(204), PostOutcome::Accepted(204));
        assert!(matches!(post_outcome(302), PostOutcome::Failed(_)));
        assert!(matches!(post_outcome(500), PostOutcome::Failed(_)));
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    fn candidates(spec: Vec<(bool, u64, i32)>, from: i64) -> Vec<Candidate> {
        spec.into_iter()
            .enumerate()
            .map(|(i, (current, size, deliveries))| Candidate {
                position: Position::new(from + i as i64, 1).unwrap(),
                row_id: from + i as i64,
                version: 1,
                deliveries,
                now: Some(RowNow {
                    status: RowStatus::Succeeded,
                    result_version: if current { 1 } else { 2 },
                }),
                size,
            })
            .collect()
    }

    proptest! {
        // Invariant: whatever the limits, a receive never skips a result:
        // every result after the cursor that the new cursor passes was
        // handed out or superseded; it hands out only current results,
        // within max_rows, within the byte budget (but for a lone first
        // result), new ones only within room, and dead-letters exactly the
        // leases at max_deliveries.
        #[test]
        fn a_receive_never_skips_and_stays_within_its_limits(
            again in prop::collection::vec((any::<bool>(), 1u64..400, 1i32..6), 0..12),
            fresh in prop::collection::vec((any::<bool>(), 1u64..400, Just(0)), 0..40),
            max_rows in 1u32..20,
            max_bytes in 1u64..3000,
            max_deliveries in 0u32..6,
            room in 0i64..30,
        ) {
            let again = candidates(again, 1);
            let fresh = candidates(fresh, 100);
            let limits = ReceiveLimits { max_rows, max_bytes, max_deliveries, room };
            let plan = plan_receive(&again, &fresh, &limits);
            let handed: Vec<&Candidate> = plan
                .handed_out()
                .map(|(i, a)| if a { &again[i] } else { &fresh[i] })
                .collect();
            prop_assert!(handed.len() as u32 <= max_rows);
            prop_assert!(handed.iter().all(|c| c.current()));
            let bytes: u64 = handed.iter().map(|c| c.size).sum();
            prop_assert!(handed.len() <= 1 || bytes <= max_bytes);
            prop_assert!(plan.deliver.len() as i64 <= room.max(0));
            if let Some(read) = plan.read_position {
                for (i, c) in fresh.iter().enumerate() {
                    if c.position <= read {
                        prop_assert!(!c.current() || plan.deliver.contains(&i), "skipped {i}");
                    } else {
                        prop_assert!(!plan.deliver.contains(&i));
                    }
                }
            } else {
                prop_assert!(plan.deliver.is_empty());
            }
            for (i, c) in again.iter().enumerate() {
                let dead = c.current() && max_deliveries > 0 && c.deliveries >= max_deliveries as i32;
                prop_assert_eq!(plan.dead.contains(&i), dead);
                prop_assert_eq!(plan.drop_leases.contains(&i), !c.current());
            }
        }
    }
}
