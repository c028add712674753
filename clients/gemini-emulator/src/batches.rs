//! Batches as plain data: the state machine (terminal states absorb), the
//! long-running-operation JSON the API answers with (`BATCH_STATE_*`, counts
//! as strings with zeros omitted, `done` absent until finished), and list
//! page tokens.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Map, Value, json};

use crate::faults::{JobFault, ListOrder};
use crate::ids::Mix;
pub use crate::kind::BatchKind;
use crate::output::InputRow;

/// Where a finished batch's responses are.
#[derive(Debug, Clone, PartialEq)]
pub enum Responses {
    /// `files/<id>` of a JSONL responses file (input was a file).
    File(String),
    /// The responses themselves, in request order (input was inline).
    Inlined(Vec<Value>),
}

/// RFC 3339 in UTC with microseconds, as Google writes timestamps.
pub fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// The state of a batch on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BatchState {
    Pending,
    Running,
    Succeeded,
    Failed,
    Expired,
    Cancelled,
}

impl BatchState {
    pub fn wire(self) -> &'static str {
        match self {
            BatchState::Pending => "BATCH_STATE_PENDING",
            BatchState::Running => "BATCH_STATE_RUNNING",
            BatchState::Succeeded => "BATCH_STATE_SUCCEEDED",
            BatchState::Failed => "BATCH_STATE_FAILED",
            BatchState::Expired => "BATCH_STATE_EXPIRED",
            BatchState::Cancelled => "BATCH_STATE_CANCELLED",
        }
    }

    /// The webhook event type announcing this state.
    pub fn event_type(self) -> &'static str {
        match self {
            BatchState::Pending => "batch.pending",
            BatchState::Running => "batch.running",
            BatchState::Succeeded => "batch.succeeded",
            BatchState::Failed => "batch.failed",
            BatchState::Expired => "batch.expired",
            BatchState::Cancelled => "batch.cancelled",
        }
    }

    pub fn is_terminal(self) -> bool {
        match self {
            BatchState::Pending | BatchState::Running => false,
            BatchState::Succeeded
            | BatchState::Failed
            | BatchState::Expired
            | BatchState::Cancelled => true,
        }
    }
}

/// A failure of the batch as a whole: a `google.rpc.Status`-like error with
/// a gRPC code number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchError {
    pub code: i32,
    pub message: String,
}

/// One batch and everything the API reports about it.
#[derive(Debug, Clone)]
pub struct Batch {
    /// Creation sequence number, 1-based (the n of job faults' `nth`).
    pub seq: u64,
    /// The id in `batches/<id>`.
    pub id: String,
    /// The model without the `models/` prefix.
    pub model: String,
    pub display_name: String,
    pub kind: BatchKind,
    /// `files/<id>` of the input; `None` for inline requests.
    pub input_file: Option<String>,
    pub rows: Vec<InputRow>,
    pub fault: Option<JobFault>,
    pub state: BatchState,
    pub create_time: DateTime<Utc>,
    pub update_time: DateTime<Utc>,
    /// When it became RUNNING, if it did.
    pub running_time: Option<DateTime<Utc>>,
    /// How long it is meant to stay RUNNING (its counts move over it).
    pub running_for: chrono::Duration,
    pub end_time: Option<DateTime<Utc>>,
    /// The responses, once the batch finished with some.
    pub output: Option<Responses>,
    /// Deleted by the client: the batch runs on, but is no longer found.
    pub deleted: bool,
    pub successful: u64,
    pub failed: u64,
    pub error: Option<BatchError>,
}

impl Batch {
    pub fn name(&self) -> String {
        format!("batches/{}", self.id)
    }

    /// Moves to `to` at `now`. Refused (false) from a terminal state or to
    /// the same state. `update_time` strictly increases even if the clock
    /// does not.
    pub fn transition(&mut self, to: BatchState, now: DateTime<Utc>) -> bool {
        if self.state.is_terminal() || self.state == to {
            return false;
        }
        let at = if now > self.update_time {
            now
        } else {
            self.update_time + chrono::Duration::microseconds(1)
        };
        self.state = to;
        self.update_time = at;
        if to == BatchState::Running {
            self.running_time = Some(at);
        }
        if to.is_terminal() {
            self.end_time = Some(at);
            let error = match to {
                BatchState::Failed => Some((13, "batch failed")),
                BatchState::Expired => Some((4, "batch expired before it could be processed")),
                BatchState::Cancelled => Some((1, "batch was cancelled")),
                BatchState::Pending | BatchState::Running | BatchState::Succeeded => None,
            };
            if self.error.is_none() {
                self.error = error.map(|(code, message)| BatchError {
                    code,
                    message: message.to_owned(),
                });
            }
        }
        true
    }

    /// `batchStats` at `now`. While RUNNING, requests complete steadily
    /// over `running_for` (never all of them: the last few finish with the
    /// batch), as the provider's counts move during a run.
    fn stats(&self, now: DateTime<Utc>) -> Value {
        let n = self.rows.len() as u64;
        let (pending, successful, failed) = match self.state {
            BatchState::Pending => (n, 0, 0),
            BatchState::Running => {
                let done = match (self.running_time, self.running_for.num_milliseconds()) {
                    (Some(start), total) if total > 0 => {
                        let elapsed = (now - start).num_milliseconds().clamp(0, total);
                        (n * elapsed as u64 / total as u64).min(n.saturating_sub(1))
                    }
                    _ => 0,
                };
                (n - done, done, 0)
            }
            BatchState::Succeeded => (0, self.successful, self.failed),
            BatchState::Failed => (0, 0, n),
            BatchState::Expired | BatchState::Cancelled => (0, 0, 0),
        };
        let mut stats = Map::new();
        for (name, count) in [
            ("requestCount", n),
            ("successfulRequestCount", successful),
            ("failedRequestCount", failed),
            ("pendingRequestCount", pending),
        ] {
            // Proto3 JSON: int64 as strings, zero values omitted.
            if count > 0 {
                stats.insert(name.to_owned(), json!(count.to_string()));
            }
        }
        Value::Object(stats)
    }

    /// The `GenerateContentBatch` resource at `now`.
    pub fn resource(&self, now: DateTime<Utc>) -> Value {
        let input = match &self.input_file {
            Some(file) => json!({"fileName": file}),
            None => json!({"requests": {}}),
        };
        let mut batch = json!({
            "@type": self.kind.resource_type(),
            "name": self.name(),
            "model": format!("models/{}", self.model),
            "displayName": self.display_name,
            "inputConfig": input,
            "createTime": rfc3339(self.create_time),
            "updateTime": rfc3339(self.update_time),
            "batchStats": self.stats(now),
            "state": self.state.wire(),
        });
        if let Some(end) = self.end_time {
            batch["endTime"] = json!(rfc3339(end));
        }
        if let Some(out) = self.output_value() {
            batch["output"] = out;
        }
        batch
    }

    /// The `output` object: `responsesFile`, or the inlined responses.
    fn output_value(&self) -> Option<Value> {
        Some(match self.output.as_ref()? {
            Responses::File(file) => json!({"responsesFile": file}),
            Responses::Inlined(lines) => {
                json!({self.kind.inlined_field(): {"inlinedResponses": lines}})
            }
        })
    }

    /// `files/<id>` of the responses file, if the output is one.
    pub fn output_file(&self) -> Option<&str> {
        match self.output.as_ref()? {
            Responses::File(file) => Some(file),
            Responses::Inlined(_) => None,
        }
    }

    /// The long-running operation wrapping the batch, as seen at `now`.
    pub fn operation(&self, now: DateTime<Utc>) -> Value {
        let mut op = json!({"name": self.name(), "metadata": self.resource(now)});
        if self.state.is_terminal() {
            op["done"] = json!(true);
            match (self.output_value(), &self.error) {
                (Some(Value::Object(out)), _) if self.state == BatchState::Succeeded => {
                    let mut response = Map::new();
                    response.insert("@type".to_owned(), json!(self.kind.output_type()));
                    response.extend(out);
                    op["response"] = Value::Object(response);
                }
                (_, Some(err)) => {
                    op["error"] = json!({"code": err.code, "message": err.message});
                }
                _ => {}
            }
        }
        op
    }
}

/// A page token: the sequence number the next page starts below (lists are
/// newest first, so a batch created between pages never shifts a page).
pub fn page_token(next_below: u64) -> String {
    URL_SAFE_NO_PAD.encode(format!("below:{next_below}"))
}

/// Reads a page token; `None` if it is not one of ours.
pub fn parse_page_token(token: &str) -> Option<u64> {
    let bytes = URL_SAFE_NO_PAD.decode(token).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    text.strip_prefix("below:")?.parse().ok()
}

/// A batch list's page token: the list position the next page starts
/// after.
pub fn list_token(after: u128) -> String {
    URL_SAFE_NO_PAD.encode(format!("after:{after}"))
}

/// Reads a batch list's page token; `None` if it is not one of ours.
pub fn parse_list_token(token: &str) -> Option<u128> {
    let bytes = URL_SAFE_NO_PAD.decode(token).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    text.strip_prefix("after:")?.parse().ok()
}

/// Where a batch stands in a list of `order`: pages walk up these keys, so
/// a batch created between two pages never shifts one (with newest first
/// it is simply not listed by later pages; with oldest first it comes at
/// the end; shuffled, wherever its key falls).
pub fn list_key(batch: &Batch, order: ListOrder, seed: u64) -> u128 {
    let seq = u128::from(batch.seq);
    match order {
        ListOrder::NewestFirst => u128::from(u64::MAX - batch.seq),
        ListOrder::OldestFirst => seq,
        ListOrder::Shuffled => {
            let mixed = Mix::new(seed ^ batch.seq.wrapping_mul(0x9E37_79B9_7F4A_7C15)).next_u64();
            (u128::from(mixed) << 64) | seq
        }
    }
}

/// One page of batches in `order`: the batches (by reference) and the next
/// page token if more remain. Deleted ones are left out, and so are those
/// `listed` refuses (list lag).
pub fn page(
    batches: &[Batch],
    size: usize,
    after: Option<u128>,
    order: ListOrder,
    seed: u64,
    listed: impl Fn(&Batch) -> bool,
) -> (Vec<&Batch>, Option<String>) {
    let mut keyed: Vec<(u128, &Batch)> = batches
        .iter()
        .filter(|b| !b.deleted && listed(b))
        .map(|b| (list_key(b, order, seed), b))
        .filter(|(k, _)| after.is_none_or(|a| *k > a))
        .collect();
    keyed.sort_unstable_by_key(|(k, _)| *k);
    let more = keyed.len() > size;
    keyed.truncate(size);
    let token = match (more, keyed.last()) {
        (true, Some((last, _))) => Some(list_token(*last)),
        _ => None,
    };
    (keyed.into_iter().map(|(_, b)| b).collect(), token)
}

/// A PENDING generation batch of `rows` rows from a file, for tests.
#[cfg(test)]
pub fn test_batch(seq: u64, rows: usize) -> Batch {
    let t = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
    Batch {
        seq,
        id: format!("b{seq}"),
        model: "gemini-2.5-flash".into(),
        display_name: format!("job-{seq}"),
        kind: BatchKind::Generate,
        input_file: Some("files/in".into()),
        rows: (0..rows)
            .map(|i| InputRow {
                key: format!("k{i}"),
                request: json!({"contents": []}),
                inline: None,
            })
            .collect(),
        fault: None,
        state: BatchState::Pending,
        create_time: t,
        update_time: t,
        running_time: None,
        running_for: chrono::Duration::seconds(10),
        end_time: None,
        output: None,
        deleted: false,
        successful: 0,
        failed: 0,
        error: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(seq: u64, rows: usize) -> Batch {
        test_batch(seq, rows)
    }

    #[test]
    fn pending_operation_has_no_done_and_string_counts() {
        let b = batch(1, 3);
        let op = b.operation(b.update_time);
        assert_eq!(op["name"], "batches/b1");
        assert!(op.get("done").is_none());
        assert_eq!(op["metadata"]["state"], "BATCH_STATE_PENDING");
        assert_eq!(op["metadata"]["model"], "models/gemini-2.5-flash");
        assert_eq!(
            op["metadata"]["batchStats"],
            json!({"requestCount": "3", "pendingRequestCount": "3"})
        );
        assert!(op["metadata"].get("endTime").is_none());
    }

    #[test]
    fn running_counts_progress_but_never_finish_before_the_batch() {
        let mut b = batch(1, 10);
        let t = b.update_time;
        b.transition(BatchState::Running, t);
        let start = b.running_time.unwrap();
        let at = |ms| {
            b.operation(start + chrono::Duration::milliseconds(ms))["metadata"]["batchStats"]
                .clone()
        };
        assert_eq!(
            at(0),
            json!({"requestCount": "10", "pendingRequestCount": "10"})
        );
        assert_eq!(
            at(5_000),
            json!({"requestCount": "10", "successfulRequestCount": "5", "pendingRequestCount": "5"})
        );
        assert_eq!(
            at(60_000),
            json!({"requestCount": "10", "successfulRequestCount": "9", "pendingRequestCount": "1"})
        );
    }

    #[test]
    fn transitions_move_update_time_and_terminal_absorbs() {
        let mut b = batch(1, 2);
        let created = b.update_time;
        assert!(b.transition(BatchState::Running, created));
        assert!(b.update_time > created, "update time strictly increases");
        assert_eq!(b.running_time, Some(b.update_time));
        let later = b.update_time + chrono::Duration::milliseconds(5);
        b.output = Some(Responses::File("files/out".into()));
        b.successful = 1;
        b.failed = 1;
        assert!(b.transition(BatchState::Succeeded, later));
        assert!(!b.transition(BatchState::Cancelled, later));
        let op = b.operation(b.update_time);
        assert_eq!(op["done"], true);
        assert_eq!(op["response"]["responsesFile"], "files/out");
        assert_eq!(op["metadata"]["output"]["responsesFile"], "files/out");
        assert!(op.get("error").is_none());
        assert_eq!(
            op["metadata"]["batchStats"],
            json!({"requestCount": "2", "successfulRequestCount": "1", "failedRequestCount": "1"})
        );
        assert_eq!(op["metadata"]["endTime"], op["metadata"]["updateTime"]);
    }

    #[test]
    fn failed_expired_and_cancelled_carry_errors() {
        for (to, code) in [
            (BatchState::Failed, 13),
            (BatchState::Expired, 4),
            (BatchState::Cancelled, 1),
        ] {
            let mut b = batch(1, 1);
            let t = b.update_time;
            assert!(b.transition(to, t));
            let op = b.operation(b.update_time);
            assert_eq!(op["done"], true);
            assert_eq!(op["error"]["code"], code);
            assert!(op.get("response").is_none());
            assert_eq!(op["metadata"]["state"], to.wire());
        }
    }

    #[test]
    fn pages_are_newest_first_and_stable_under_inserts() {
        let order = ListOrder::NewestFirst;
        let mut all: Vec<Batch> = (1..=5).map(|s| batch(s, 1)).collect();
        let (p1, t1) = page(&all, 2, None, order, 0, |_| true);
        assert_eq!(p1.iter().map(|b| b.seq).collect::<Vec<_>>(), vec![5, 4]);
        let after = parse_list_token(t1.as_deref().unwrap()).unwrap();
        all.push(batch(6, 1));
        let (p2, t2) = page(&all, 2, Some(after), order, 0, |_| true);
        assert_eq!(p2.iter().map(|b| b.seq).collect::<Vec<_>>(), vec![3, 2]);
        let (p3, t3) = page(&all, 2, parse_list_token(&t2.unwrap()), order, 0, |_| true);
        assert_eq!(p3.iter().map(|b| b.seq).collect::<Vec<_>>(), vec![1]);
        assert!(t3.is_none());
        let (exact, none) = page(&all[..2], 2, None, order, 0, |_| true);
        assert_eq!(exact.len(), 2);
        assert!(none.is_none());
        assert_eq!(parse_list_token("garbage!"), None);
    }

    // Invariant: whatever the order, walking every page lists each batch
    // exactly once; the orders differ.
    #[test]
    fn every_order_lists_every_batch_once() {
        let all: Vec<Batch> = (1..=23).map(|s| batch(s, 1)).collect();
        let walk = |order| {
            let mut seen = Vec::new();
            let mut after = None;
            loop {
                let (items, token) = page(&all, 5, after, order, 7, |_| true);
                seen.extend(items.iter().map(|b| b.seq));
                match token {
                    Some(t) => after = parse_list_token(&t),
                    None => return seen,
                }
            }
        };
        let newest = walk(ListOrder::NewestFirst);
        let oldest = walk(ListOrder::OldestFirst);
        let shuffled = walk(ListOrder::Shuffled);
        for seen in [&newest, &oldest, &shuffled] {
            let mut sorted = seen.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (1..=23).collect::<Vec<_>>());
        }
        assert_eq!(oldest, (1..=23).collect::<Vec<_>>());
        assert_eq!(newest, (1..=23).rev().collect::<Vec<_>>());
        assert_ne!(shuffled, oldest);
        assert_ne!(shuffled, newest);
    }
}
