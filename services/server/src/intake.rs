//! The intake layer: how much memory one request may take, decided from
//! its bytes before anything is decoded.
//!
//! - **Per-method size.** The 5-byte gRPC prefix gives the message's
//!   length; a request over its method's limit is refused at once
//!   (RESOURCE_EXHAUSTED, reason MESSAGE_TOO_LARGE) without reading the
//!   rest. The bulk methods ([`BULK`]) may send up to `max_message_bytes`;
//!   every other method `max_small_message_bytes`.
//! - **A global budget** (`max_request_memory_bytes`) of request bytes
//!   held at once across all calls, reserved from the announced length
//!   before the body is read and held until the handler has answered. A
//!   request that does not fit now is shed with RESOURCE_EXHAUSTED and a
//!   RetryInfo (reason MEMORY_BUDGET), like the limits layer's refusals.
//! - **Counts before decoding.** For the methods whose requests carry one
//!   entry per row ([`COUNTED`]), the entries are counted on the wire
//!   ([`crate::wire`]); more than `max_rows_per_call` is INVALID_ARGUMENT
//!   with a field violation, so 4 million empty rows (8 MB on the wire,
//!   over 500 MB decoded) never reach the decoder.
//!
//! Only tally's own methods are read here; health and reflection (a
//! bidirectional stream whose body stays open) pass through untouched.
//! The layer sits inside the limits layer, so the body is read within the
//! call's slot and its request timeout (a client that trickles its body
//! is cut off there).

use crate::auth::methods::Route;
use crate::config::Limits;
use crate::middleware::{Inner, Middleware, ResponseFuture};
use crate::status;
use bytes::{Buf, Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tonic::body::Body;
use tonic::{Code, Status};

/// Methods whose requests may be large (rows, outcomes, keys, templates,
/// provider events).
pub const BULK: [&str; 6] = [
    "/tally.v1.LedgerService/EnrollRows",
    "/tally.v1.LedgerService/ReportOutcomes",
    "/tally.v1.LedgerService/ReleaseClaim",
    "/tally.v1.LedgerService/RedriveRows",
    "/tally.v1.LedgerService/RegisterPrompt",
    "/tally.v1.OperationsService/IngestEvent",
];

/// Methods whose top-level repeated field holds one entry per row: (path,
/// field number, field name).
pub const COUNTED: [(&str, u32, &str); 3] = [
    ("/tally.v1.LedgerService/EnrollRows", 2, "rows"),
    ("/tally.v1.LedgerService/ReportOutcomes", 2, "outcomes"),
    ("/tally.v1.LedgerService/ReleaseClaim", 2, "keys"),
];

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
    if u32::try_from(limits.max_message_bytes + PREFIX).is_err() {
        return Err("--max-message-bytes must be below 4 GiB".into());
    }
    Ok(())
}

/// Why a request is refused before decoding.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    TooLarge {
        length: usize,
        limit: usize,
    },
    NoMemory {
        length: usize,
    },
    TooMany {
        field: &'static str,
        count: usize,
        limit: usize,
    },
}

impl Refusal {
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
            Refusal::NoMemory { length } => status::refused(
                Code::ResourceExhausted,
                "MEMORY_BUDGET",
                format!(
                    "the server is holding as many request bytes as it may; \
                     retry this {length}-byte request shortly"
                ),
                meta(&[]),
                Some(RETRY_AFTER),
            ),
            Refusal::TooMany {
                field,
                count,
                limit,
            } => status::invalid_field(
                *field,
                format!("has {count} entries; the limit is {limit} per call (max_rows_per_call)"),
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

/// The count check of a whole, uncompressed message of `path`.
pub fn check_count(limits: &Limits, path: &str, message: &[u8]) -> Result<(), Refusal> {
    let Some((_, number, field)) = COUNTED.iter().find(|(p, _, _)| *p == path) else {
        return Ok(());
    };
    match crate::wire::count_field(message, *number) {
        Some(count) if count > limits.max_rows_per_call => Err(Refusal::TooMany {
            field,
            count,
            limit: limits.max_rows_per_call,
        }),
        // Malformed bytes are the decoder's to report.
        _ => Ok(()),
    }
}

/// The intake layer's work (a tower layer as [`crate::middleware::Wrap`]).
#[derive(Clone)]
pub struct Intake {
    limits: Arc<Limits>,
    budget: Arc<Semaphore>,
}

impl Intake {
    pub fn new(limits: &Limits) -> Self {
        Self {
            limits: Arc::new(limits.clone()),
            budget: Arc::new(Semaphore::new(limits.max_request_memory_bytes)),
        }
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
            if buf.len() < PREFIX {
                // An empty or cut body: the decoder says what is wrong.
                let req = http::Request::from_parts(parts, Body::new(Full::new(buf.freeze())));
                return inner.call(req).await;
            }
            let compressed = buf[0] != 0;
            let length = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
            if length > limit {
                return refuse(Refusal::TooLarge { length, limit }.status(&path));
            }
            let whole = PREFIX + length;
            let permits = u32::try_from(whole).expect("limits are below 4 GiB");
            let Ok(held) = layer.budget.clone().try_acquire_many_owned(permits) else {
                return refuse(Refusal::NoMemory { length }.status(&path));
            };
            buf.reserve(whole - buf.len());
            if let Err(s) = fill(&mut body, &mut buf, whole).await {
                return refuse(s);
            }
            if buf.len() > whole {
                // A unary request is one message.
                return refuse(
                    Refusal::TooLarge {
                        length: buf.len() - PREFIX,
                        limit,
                    }
                    .status(&path),
                );
            }
            if !compressed
                && buf.len() == whole
                && let Err(r) = check_count(&layer.limits, &path, &buf[PREFIX..])
            {
                return refuse(r.status(&path));
            }
            let bytes: Bytes = buf.freeze();
            let req = http::Request::from_parts(parts, Body::new(Full::new(bytes)));
            let answered = inner.call(req).await;
            drop(held);
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

    /// More entries than max_rows_per_call are refused from the bytes,
    /// naming the field; at the limit they pass.
    #[test]
    fn too_many_rows_are_counted_before_decoding() {
        let l = limits();
        let enroll = |n: usize| {
            pb::EnrollRowsRequest {
                parent: "ledgers/l".into(),
                rows: vec![pb::RowInput::default(); n],
            }
            .encode_to_vec()
        };
        let path = "/tally.v1.LedgerService/EnrollRows";
        assert_eq!(check_count(&l, path, &enroll(3)), Ok(()));
        assert_eq!(
            check_count(&l, path, &enroll(4)),
            Err(Refusal::TooMany {
                field: "rows",
                count: 4,
                limit: 3
            })
        );
        // Other methods are not counted.
        assert_eq!(
            check_count(&l, "/tally.v1.LedgerService/GetLedger", &enroll(9)),
            Ok(())
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
