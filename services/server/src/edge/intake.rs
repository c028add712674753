//! The intake layer: whether a request may be decoded at all, and how much
//! memory it may take, decided from its bytes before anything is decoded.
//!
//! - **Per-method size.** The 5-byte gRPC prefix gives the message's
//!   length; a request over its method's limit is refused at once
//!   (RESOURCE_EXHAUSTED, reason MESSAGE_TOO_LARGE) without reading the
//!   rest. The bulk methods ([`BULK`]) may send up to `max_message_bytes`;
//!   every other method `max_small_message_bytes`.
//! - **Judged, never passed unjudged.** The whole message is walked against
//!   its type's schema ([`crate::edge::wire`]) before it is decoded: every
//!   repeated field, at every depth, against its own bound ([`bound`]:
//!   rows per call for the request's rows, outcomes and keys,
//!   `MAX_DEPENDS_ON` for a row's dependencies, the golden set's sizes, …);
//!   groups, compressed messages, wire types a field does not have and
//!   truncated bytes are refused (INVALID_ARGUMENT, UNIMPLEMENTED for
//!   compression), never handed to a decoder that would skip or misjudge
//!   them.
//! - **A global budget** (`max_request_memory_bytes`) of request memory
//!   held at once across all calls, charged in two steps: the wire bytes,
//!   reserved from the announced length before the body is read, then what
//!   decoding and handling the message takes, [`DECODE_FACTOR`] times the
//!   decoded size the walk found. Both are held until the handler has
//!   answered. A request that does not fit now is shed with
//!   RESOURCE_EXHAUSTED and a RetryInfo (reason MEMORY_BUDGET); one that
//!   could never fit is refused without one (REQUEST_TOO_COSTLY).
//! - **Per-principal bytes.** The wire bytes are also taken from the
//!   caller's byte rate ([`crate::edge::principal`]).
//!
//! Only tally's own methods are read here; health and reflection (a
//! bidirectional stream whose body stays open) pass through untouched.
//! The layer sits inside the limits layer, so the body is read within the
//! call's slot and its request timeout (a client that trickles its body
//! is cut off there).

use crate::config::Limits;
use crate::edge::auth::methods::{METHODS, Route};
use crate::edge::caller::Caller;
use crate::edge::middleware::{Inner, Middleware, ResponseFuture};
use crate::edge::principal::Principals;
use crate::edge::status;
use crate::edge::wire::{Cost, Plan, Schema, WireError};
use bytes::{Buf, Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tally_proto::v1 as pb;
use tokio::sync::Semaphore;
use tonic::body::Body;
use tonic::{Code, Status};

/// Methods whose requests may be large (rows, outcomes, keys, templates,
/// provider events, requests for the result cache).
pub const BULK: [&str; 8] = [
    "/tally.v1.LedgerService/EnrollRows",
    "/tally.v1.LedgerService/SettleFromCache",
    "/tally.v1.LedgerService/EstimateFromCache",
    "/tally.v1.LedgerService/ReportOutcomes",
    "/tally.v1.LedgerService/ReleaseClaim",
    "/tally.v1.LedgerService/RedriveRows",
    "/tally.v1.LedgerService/RegisterPrompt",
    "/tally.v1.OperationsService/IngestEvent",
];

/// Repeated fields holding one entry per row: bounded by
/// `max_rows_per_call`.
const PER_ROW: [(&str, &str); 6] = [
    ("tally.v1.EnrollRowsRequest", "rows"),
    ("tally.v1.AcquireCapacityRequest", "tokens"),
    ("tally.v1.ReportOutcomesRequest", "outcomes"),
    ("tally.v1.ReleaseClaimRequest", "keys"),
    ("tally.v1.RowKeys", "keys"),
    ("tally.v1.FinishJobRequest", "not_run"),
];

/// Most entries of a list of statuses or states in a filter (each has a
/// handful of values; repeats are harmless but not unbounded).
const MAX_STATES: usize = 32;
/// Most paths of an update mask.
const MAX_MASK_PATHS: usize = 64;

/// The bound of each repeated field a request can hold; `None` for a field
/// not listed (the schema then refuses to build, so a new repeated field
/// cannot go unbounded).
pub fn bound(limits: &Limits, message: &str, field: &str) -> Option<usize> {
    use tally_core::{deps, golden, policy};
    if PER_ROW.contains(&(message, field)) {
        return Some(limits.max_rows_per_call);
    }
    Some(match (message, field) {
        ("tally.v1.RowInput", "depends_on") => deps::MAX_DEPENDS_ON,
        ("tally.v1.RowInput", "dependency_names") => deps::MAX_DEPENDS_ON,
        ("tally.v1.RegisterPromptRequest", "media") => tally_core::media::MAX_MEDIA_PER_ROW,
        ("tally.v1.LookupMediaUploadsRequest", "sha256") => tally_core::media::MAX_LOOKUP,
        ("tally.v1.SettleFromCacheRequest", "requests")
        | ("tally.v1.EstimateFromCacheRequest", "requests") => tally_core::cache::MAX_LOOKUPS,
        ("tally.v1.MarkCreatingRequest", "media_sha256") => tally_core::media::MAX_BATCH_MEDIA,
        ("tally.v1.ReportGoldenResultsRequest", "answers") => golden::MAX_GOLDEN_ROWS,
        ("tally.v1.AdoptJobsRequest", "gone") => tally_store::holders::MAX_HOLDERS,
        ("tally.v1.GoldenSet", "rows") => golden::MAX_GOLDEN_ROWS,
        ("tally.v1.GoldenRow", "fields") => golden::MAX_FIELDS,
        // Output only (a set's drift), bounded like what it reports.
        ("tally.v1.GoldenDrift", "fields") => golden::MAX_FIELDS,
        ("tally.v1.LedgerPolicy", "overrides") => policy::MAX_OVERRIDES,
        ("tally.v1.LedgerPolicy", "prices") => policy::MAX_PRICES,
        ("tally.v1.LedgerPolicy", "lanes") => tally_core::lane::Lane::ALL.len(),
        ("tally.v1.RowFilter", "statuses")
        | ("tally.v1.ListJobsRequest", "states")
        | ("tally.v1.ListOperationsRequest", "states") => MAX_STATES,
        ("google.protobuf.FieldMask", "paths") => MAX_MASK_PATHS,
        ("tally.v1.AckResultsRequest", "positions")
        | ("tally.v1.NackResultsRequest", "positions") => tally_core::delivery::MAX_ACK_POSITIONS,
        _ => return None,
    })
}

/// The in-memory size of the message types requests repeat.
fn size(message: &str) -> Option<usize> {
    use std::mem::size_of;
    Some(match message {
        "tally.v1.RowInput" => size_of::<pb::RowInput>(),
        "tally.v1.RowOutcome" => size_of::<pb::RowOutcome>(),
        "tally.v1.GoldenAnswer" => size_of::<pb::GoldenAnswer>(),
        "tally.v1.GoldenRow" => size_of::<pb::GoldenRow>(),
        "tally.v1.GoldenFieldCount" => size_of::<pb::GoldenFieldCount>(),
        "tally.v1.ClassifierOverride" => size_of::<pb::ClassifierOverride>(),
        "tally.v1.ModelPrice" => size_of::<pb::ModelPrice>(),
        "tally.v1.WorkerProcess" => size_of::<pb::WorkerProcess>(),
        "tally.v1.CacheRequest" => size_of::<pb::CacheRequest>(),
        _ => return None,
    })
}

/// What handling a request takes beyond its wire bytes, as a multiple of
/// the decoded size the walk adds up: the decoded message itself, the
/// decoder's copy of the wire bytes, the store's inputs made from it and
/// the statement's encoded parameters. Measured with
/// `tests/bench/intake-rss.py` (deploy/README.md, "Memory"): a valid
/// enroll of 10,000 rows peaked at 0.75 to 0.93 of wire + 3 x decoded above
/// the idle server, from 4 to 64 MiB on the wire.
pub const DECODE_FACTOR: usize = 3;

/// How long a request shed for memory is asked to wait.
const RETRY_AFTER: Duration = Duration::from_secs(1);
/// The gRPC length prefix: a compressed flag and a big-endian u32.
const PREFIX: usize = 5;

/// Refuses intake limits that cannot work together.
pub fn check(limits: &Limits) -> Result<(), String> {
    if limits.max_small_message_bytes == 0 || limits.max_message_bytes == 0 {
        return Err("--max-message-bytes and --max-small-message-bytes must be positive".into());
    }
    if limits.max_request_memory_bytes < limits.max_message_bytes + PREFIX {
        return Err(format!(
            "--max-request-memory-bytes ({}) must hold at least one largest request \
             (--max-message-bytes {} plus 5)",
            limits.max_request_memory_bytes, limits.max_message_bytes
        ));
    }
    if u32::try_from(limits.max_request_memory_bytes).is_err() {
        return Err("--max-request-memory-bytes must be below 4 GiB".into());
    }
    schema(limits).map(|_| ())
}

/// The schema of every tally method's request.
pub fn schema(limits: &Limits) -> Result<Schema, String> {
    let methods: Vec<&str> = METHODS.iter().map(|m| m.path).collect();
    let bound = |message: &str, field: &str| bound(limits, message, field);
    Schema::build(&Plan {
        descriptor_sets: &[tally_proto::FILE_DESCRIPTOR_SET],
        methods: &methods,
        bound: &bound,
        size: &size,
    })
    .map_err(|e| format!("request schema: {e}"))
}

/// Why a request is refused before decoding.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    TooLarge {
        length: usize,
        limit: usize,
    },
    NoMemory {
        charge: usize,
    },
    /// More than the whole budget: it could never be served.
    TooCostly {
        charge: usize,
        budget: usize,
    },
    TooMany {
        path: String,
        count: usize,
        limit: usize,
        per_row: bool,
    },
    Malformed {
        path: String,
        reason: String,
    },
    Compressed,
}

impl Refusal {
    fn of(e: WireError) -> Refusal {
        match e {
            WireError::TooMany {
                path,
                field,
                count,
                limit,
            } => Refusal::TooMany {
                path,
                count,
                limit,
                per_row: PER_ROW
                    .iter()
                    .any(|(m, f)| field.strip_prefix(m) == Some(&format!(".{f}"))),
            },
            WireError::Malformed { path, reason } => Refusal::Malformed {
                path,
                reason: reason.to_string(),
            },
        }
    }

    pub fn status(&self, method: &str) -> Status {
        let meta = |pairs: &[(&str, String)]| -> HashMap<String, String> {
            let mut m: HashMap<String, String> = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect();
            m.insert("method".into(), method.to_string());
            m
        };
        match self {
            Refusal::TooLarge { length, limit } => status::refused(
                Code::ResourceExhausted,
                "MESSAGE_TOO_LARGE",
                format!("the request is {length} bytes; {method} accepts at most {limit}"),
                meta(&[("limit", limit.to_string())]),
                None,
            ),
            Refusal::NoMemory { charge } => status::refused(
                Code::ResourceExhausted,
                "MEMORY_BUDGET",
                format!(
                    "the server is holding as much request memory as it may; \
                     retry this request (about {charge} bytes to handle) shortly"
                ),
                meta(&[]),
                Some(RETRY_AFTER),
            ),
            Refusal::TooCostly { charge, budget } => status::refused(
                Code::ResourceExhausted,
                "REQUEST_TOO_COSTLY",
                format!(
                    "the request would take about {charge} bytes of memory to handle, more \
                     than the server's whole budget of {budget} (max_request_memory_bytes); \
                     send fewer or smaller entries per call"
                ),
                meta(&[
                    ("limit", "max_request_memory_bytes".into()),
                    ("value", budget.to_string()),
                ]),
                None,
            ),
            Refusal::TooMany {
                path,
                count,
                limit,
                per_row,
            } if *per_row => status::too_many_rows(
                path.clone(),
                format!("has {count} entries; the limit is {limit} per call (max_rows_per_call)"),
                meta(&[
                    ("limit", "max_rows_per_call".into()),
                    ("value", limit.to_string()),
                ]),
            ),
            Refusal::TooMany {
                path, count, limit, ..
            } => status::invalid_field(
                path.clone(),
                format!("has {count} entries; the limit is {limit}"),
            ),
            Refusal::Malformed { path, reason } => status::invalid_field(
                if path.is_empty() {
                    "request".to_string()
                } else {
                    path.clone()
                },
                format!("is not a valid encoding of the request: {reason}"),
            ),
            Refusal::Compressed => status::refused(
                Code::Unimplemented,
                "COMPRESSION_UNSUPPORTED",
                "compressed requests are not accepted; send them uncompressed",
                meta(&[]),
                None,
            ),
        }
    }
}

/// The size limit of `path`'s requests.
pub fn limit_of(limits: &Limits, path: &str) -> usize {
    if BULK.contains(&path) {
        limits.max_message_bytes
    } else {
        limits.max_small_message_bytes
    }
}

/// What a whole, uncompressed message of `path` costs, or why it is
/// refused.
pub fn judge(schema: &Schema, path: &str, message: &[u8]) -> Result<Cost, Refusal> {
    schema.walk(path, message).map_err(Refusal::of)
}

/// The memory a message of `wire` bytes costing `cost` is charged.
pub fn charge(wire: usize, cost: Cost) -> usize {
    wire.saturating_add(cost.decoded_bytes.saturating_mul(DECODE_FACTOR))
}

/// The intake layer's work (a tower layer as [`crate::edge::middleware::Wrap`]).
#[derive(Clone)]
pub struct Intake {
    limits: Arc<Limits>,
    schema: Arc<Schema>,
    budget: Arc<Semaphore>,
    principals: Principals,
}

impl Intake {
    pub fn new(limits: &Limits, principals: Principals) -> Result<Self, String> {
        Ok(Self {
            limits: Arc::new(limits.clone()),
            schema: Arc::new(schema(limits)?),
            budget: Arc::new(Semaphore::new(limits.max_request_memory_bytes)),
            principals,
        })
    }
}

/// Reads `body` until `want` bytes are buffered (or it ends).
async fn fill(body: &mut Body, buf: &mut BytesMut, want: usize) -> Result<(), Status> {
    while buf.len() < want {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(mut data) = frame.into_data() {
                    buf.extend_from_slice(&data.copy_to_bytes(data.remaining()));
                }
            }
            Some(Err(e)) => return Err(Status::cancelled(format!("reading the request: {e}"))),
            None => return Ok(()),
        }
    }
    Ok(())
}

impl Middleware<Body> for Intake {
    fn call<S: Inner<Body>>(
        &self,
        req: http::Request<Body>,
        mut inner: S,
    ) -> ResponseFuture<S::Error> {
        let path = req.uri().path().to_string();
        if !matches!(Route::of(&path), Route::Tally(_)) {
            return Box::pin(inner.call(req));
        }
        let layer = self.clone();
        Box::pin(async move {
            let (parts, mut body) = req.into_parts();
            let limit = limit_of(&layer.limits, &path);
            let mut buf = BytesMut::with_capacity(PREFIX);
            let refuse = |s: Status| Ok(s.into_http());
            if let Err(s) = fill(&mut body, &mut buf, PREFIX).await {
                return refuse(s);
            }
            if buf.is_empty() {
                // No message at all: the decoder says so, decoding nothing.
                let req = http::Request::from_parts(parts, Body::new(Full::new(buf.freeze())));
                return inner.call(req).await;
            }
            if buf.len() < PREFIX {
                return refuse(
                    Refusal::Malformed {
                        path: String::new(),
                        reason: "the body ended inside the message's length prefix".into(),
                    }
                    .status(&path),
                );
            }
            if buf[0] != 0 {
                return refuse(Refusal::Compressed.status(&path));
            }
            let length = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
            if length > limit {
                return refuse(Refusal::TooLarge { length, limit }.status(&path));
            }
            let whole = PREFIX + length;
            if let Some(caller) = parts.extensions.get::<Caller>()
                && let Err(s) = layer.principals.take_bytes(&caller.name, whole, &path)
            {
                return refuse(s);
            }
            let permits = u32::try_from(whole).expect("limits are below 4 GiB");
            let Ok(wire_held) = layer.budget.clone().try_acquire_many_owned(permits) else {
                return refuse(Refusal::NoMemory { charge: whole }.status(&path));
            };
            buf.reserve(whole - buf.len());
            if let Err(s) = fill(&mut body, &mut buf, whole).await {
                return refuse(s);
            }
            if buf.len() != whole {
                // A unary or server-streaming request is one whole message.
                let reason = if buf.len() < whole {
                    format!(
                        "the body ended after {} of {length} bytes",
                        buf.len() - PREFIX
                    )
                } else {
                    "more than one message".to_string()
                };
                return refuse(
                    Refusal::Malformed {
                        path: String::new(),
                        reason,
                    }
                    .status(&path),
                );
            }
            let cost = match judge(&layer.schema, &path, &buf[PREFIX..]) {
                Ok(cost) => cost,
                Err(r) => return refuse(r.status(&path)),
            };
            let total = charge(whole, cost);
            let budget = layer.limits.max_request_memory_bytes;
            if total > budget {
                return refuse(
                    Refusal::TooCostly {
                        charge: total,
                        budget,
                    }
                    .status(&path),
                );
            }
            let more = u32::try_from(total - whole).expect("the budget is below 4 GiB");
            let decode_held = if more == 0 {
                None
            } else {
                match layer.budget.clone().try_acquire_many_owned(more) {
                    Ok(held) => Some(held),
                    Err(_) => return refuse(Refusal::NoMemory { charge: total }.status(&path)),
                }
            };
            let bytes: Bytes = buf.freeze();
            let req = http::Request::from_parts(parts, Body::new(Full::new(bytes)));
            let answered = inner.call(req).await;
            drop((wire_held, decode_held));
            answered
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use tally_proto::v1 as pb;

    fn limits() -> Limits {
        Limits {
            max_rows_per_call: 3,
            ..Limits::default()
        }
    }

    /// Bulk methods get the large limit; every other method the small one.
    #[test]
    fn each_method_has_its_size_limit() {
        let l = limits();
        assert_eq!(
            limit_of(&l, "/tally.v1.LedgerService/EnrollRows"),
            l.max_message_bytes
        );
        assert_eq!(
            limit_of(&l, "/tally.v1.LedgerService/GetLedger"),
            l.max_small_message_bytes
        );
        assert!(l.max_small_message_bytes < l.max_message_bytes);
    }

    /// Invariant: every repeated field of every tally request, at every
    /// depth, has a bound (the schema builds), and every tally method has
    /// a schema.
    #[test]
    fn every_request_field_is_bounded() {
        let s = schema(&Limits::default()).unwrap();
        for m in METHODS {
            assert!(s.knows(m.path), "{}", m.path);
        }
    }

    /// More entries than max_rows_per_call are refused from the bytes,
    /// naming the field; at the limit they pass.
    #[test]
    fn too_many_rows_are_counted_before_decoding() {
        let l = limits();
        let s = schema(&l).unwrap();
        let enroll = |n: usize| {
            pb::EnrollRowsRequest {
                parent: "ledgers/l".into(),
                rows: vec![pb::RowInput::default(); n],
            }
            .encode_to_vec()
        };
        let path = "/tally.v1.LedgerService/EnrollRows";
        assert!(judge(&s, path, &enroll(3)).is_ok());
        assert_eq!(
            judge(&s, path, &enroll(4)),
            Err(Refusal::TooMany {
                path: "rows".into(),
                count: 4,
                limit: 3,
                per_row: true,
            })
        );
        let redrive = pb::RedriveRowsRequest {
            parent: "ledgers/l".into(),
            target: Some(pb::redrive_rows_request::Target::Keys(pb::RowKeys {
                keys: vec!["a".into(); 4],
            })),
            ..Default::default()
        };
        assert!(matches!(
            judge(&s, "/tally.v1.LedgerService/RedriveRows", &redrive.encode_to_vec()),
            Err(Refusal::TooMany { path, per_row: true, .. }) if path == "keys.keys"
        ));
    }

    /// A list over the per-call limit says the limit in a form a client can
    /// act on (ErrorInfo TOO_MANY_ROWS, `value`) and still names the field.
    #[test]
    fn too_many_rows_carry_the_limit() {
        use tonic_types::StatusExt;
        let refusal = Refusal::TooMany {
            path: "outcomes".into(),
            count: 120,
            limit: 100,
            per_row: true,
        };
        let st = refusal.status("/tally.v1.LedgerService/ReportOutcomes");
        assert_eq!(st.code(), Code::InvalidArgument);
        let details = st.get_error_details();
        let info = details.error_info().expect("an ErrorInfo");
        assert_eq!(info.reason, "TOO_MANY_ROWS");
        assert_eq!(info.metadata.get("value").map(String::as_str), Some("100"));
        let bad = details.bad_request().expect("a BadRequest");
        assert_eq!(bad.field_violations[0].field, "outcomes");
        // A list that is not one row per entry has no such ErrorInfo.
        let other = Refusal::TooMany {
            path: "answers".into(),
            count: 9,
            limit: 8,
            per_row: false,
        };
        assert!(other.status("m").get_error_details().error_info().is_none());
    }

    /// Invariant: nested lists are bounded on their own: a row's
    /// dependencies, golden answers, a golden row's fields.
    #[test]
    fn nested_lists_have_their_own_bounds() {
        let s = schema(&Limits::default()).unwrap();
        let deps = pb::EnrollRowsRequest {
            parent: "ledgers/l".into(),
            rows: vec![pb::RowInput {
                depends_on: vec![String::new(); tally_core::deps::MAX_DEPENDS_ON + 1],
                ..Default::default()
            }],
        };
        let status = judge(
            &s,
            "/tally.v1.LedgerService/EnrollRows",
            &deps.encode_to_vec(),
        )
        .unwrap_err()
        .status("m");
        assert_eq!(status.code(), Code::InvalidArgument);
        assert!(
            status.message().contains("rows[0].depends_on"),
            "{}",
            status.message()
        );
        let answers = pb::ReportGoldenResultsRequest {
            answers: vec![pb::GoldenAnswer::default(); tally_core::golden::MAX_GOLDEN_ROWS + 1],
            ..Default::default()
        };
        assert!(matches!(
            judge(&s, "/tally.v1.JobService/ReportGoldenResults", &answers.encode_to_vec()),
            Err(Refusal::TooMany { path, per_row: false, .. }) if path == "answers"
        ));
    }

    /// The charge grows with what decoding allocates, not only with the
    /// wire: empty rows cost far more than their two bytes.
    #[test]
    fn the_charge_is_the_decoded_size() {
        let s = schema(&Limits::default()).unwrap();
        let rows = pb::EnrollRowsRequest {
            parent: String::new(),
            rows: vec![pb::RowInput::default(); 1000],
        }
        .encode_to_vec();
        let cost = judge(&s, "/tally.v1.LedgerService/EnrollRows", &rows).unwrap();
        assert_eq!(rows.len(), 2000);
        assert!(
            charge(rows.len(), cost) > 1000 * std::mem::size_of::<pb::RowInput>() * DECODE_FACTOR
        );
    }

    /// The budget must hold one largest request.
    #[test]
    fn a_budget_smaller_than_one_request_is_refused() {
        let mut l = limits();
        assert!(check(&l).is_ok());
        l.max_request_memory_bytes = l.max_message_bytes;
        assert!(
            check(&l)
                .unwrap_err()
                .contains("--max-request-memory-bytes")
        );
    }
}
