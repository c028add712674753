//! DeliveryService's request checks: consumer names, settings, starts,
//! positions and durations, or INVALID_ARGUMENT with a field violation per
//! problem. Pure: no I/O.

use crate::edge::status::{invalid, invalid_field};
use crate::edge::wire_convert::{bounded_duration, duration};
use std::time::Duration;
use tally_core::delivery::{self, NackFate, Position, Requested, Settings, Start};
use tally_core::names;
use tally_core::outbound::{self, Reach};
use tally_core::violation::Violations;
use tally_core::webhook::Secret;
use tally_proto::v1 as pb;
use tonic::Status;

/// `ledgers/{ledger}/consumers/{consumer}` in `field` → (ledger, consumer).
pub fn consumer(field: &str, name: &str) -> Result<(String, String), Status> {
    names::parse_consumer(name)
        .map(|(l, c)| (l.to_string(), c.to_string()))
        .map_err(|e| invalid_field(field, e.to_string()))
}

/// A CreateConsumer request, checked.
pub struct NewConsumer {
    pub ledger: String,
    pub id: String,
    pub settings: Settings,
    /// The secret the caller gave (`None`: the server makes one).
    pub secret: Option<Secret>,
    pub start: Start,
}

pub fn create(req: &pb::CreateConsumerRequest, reach: Reach) -> Result<NewConsumer, Status> {
    let mut v = Violations::new();
    let ledger = names::parse_ledger(&req.parent)
        .map_err(|e| v.add("parent", e.to_string()))
        .ok();
    v.check("consumer_id", names::validate_consumer_id(&req.consumer_id));
    let c = req.consumer.clone().unwrap_or_default();
    let webhook = c.webhook.clone().unwrap_or_default();
    let visibility = bounded_duration(
        "consumer.visibility_timeout",
        c.visibility_timeout.as_ref(),
        delivery::MIN_VISIBILITY,
        delivery::MAX_VISIBILITY,
        &mut v,
    );
    if c.max_deliveries < 0 {
        v.add("consumer.max_deliveries", "must not be negative");
    }
    if webhook.max_batch_rows < 0 {
        v.add("consumer.webhook.max_batch_rows", "must not be negative");
    }
    let requested = Requested {
        visibility,
        max_deliveries: (c.max_deliveries > 0).then_some(c.max_deliveries as u32),
        webhook_url: Some(webhook.url.as_str()),
        webhook_batch: (webhook.max_batch_rows > 0).then_some(webhook.max_batch_rows as u32),
    };
    let mut inner = Violations::new();
    let settings = delivery::settings(
        &requested,
        |url| outbound::check_target(url, reach),
        &mut inner,
    );
    if let Err(bad) = inner.finish() {
        for f in bad {
            v.add(format!("consumer.{}", f.field), f.description);
        }
    }
    let secret = match webhook.secret.trim() {
        "" => None,
        text if webhook.url.trim().is_empty() => {
            let _ = text;
            v.add("consumer.webhook.secret", "is for webhook consumers only");
            None
        }
        text => Secret::parse(text)
            .map_err(|e| v.add("consumer.webhook.secret", e.to_string()))
            .ok(),
    };
    let start = start("start", req.start.as_ref(), &mut v);
    v.finish().map_err(invalid)?;
    match (ledger, settings, start) {
        (Some(ledger), Some(settings), Some(start)) => Ok(NewConsumer {
            ledger: ledger.to_string(),
            id: req.consumer_id.clone(),
            settings,
            secret,
            start,
        }),
        _ => Err(Status::internal("validation passed without its values")),
    }
}

/// A start (default: the beginning).
pub fn start(field: &str, s: Option<&pb::ConsumerStart>, v: &mut Violations) -> Option<Start> {
    use pb::consumer_start::At;
    match s.and_then(|s| s.at.as_ref()) {
        None | Some(At::Beginning(true)) => Some(Start::Beginning),
        Some(At::Now(true)) => Some(Start::Now),
        Some(At::Beginning(false) | At::Now(false)) => {
            v.add(field, "set `beginning`, `now` or `after_position`");
            None
        }
        Some(At::AfterPosition(p)) => Position::parse(*p)
            .map(Start::After)
            .map_err(|e| v.add(format!("{field}.after_position"), e))
            .ok(),
    }
}

/// ReceiveResults, checked: the consumer, rows, wait, visibility override.
pub struct Receive {
    pub ledger: String,
    pub consumer: String,
    pub max_rows: u32,
    pub wait: Duration,
    pub visibility: Option<Duration>,
    pub include_payload: bool,
}

pub fn receive(req: &pb::ReceiveResultsRequest) -> Result<Receive, Status> {
    let mut v = Violations::new();
    let named = names::parse_consumer(&req.consumer)
        .map_err(|e| v.add("consumer", e.to_string()))
        .ok();
    let max_rows = u32::try_from(req.max_rows)
        .map_err(|_| "must not be negative".to_string())
        .and_then(delivery::receive_rows)
        .map_err(|e| v.add("max_rows", e))
        .ok();
    let wait = match req.wait.as_ref() {
        None => Some(Duration::ZERO),
        Some(w) => duration(w)
            .ok_or_else(|| "must not be negative".to_string())
            .and_then(delivery::receive_wait)
            .map_err(|e| v.add("wait", e))
            .ok(),
    };
    let visibility = bounded_duration(
        "visibility_timeout",
        req.visibility_timeout.as_ref(),
        delivery::MIN_VISIBILITY,
        delivery::MAX_VISIBILITY,
        &mut v,
    );
    v.finish().map_err(invalid)?;
    match (named, max_rows, wait) {
        (Some((ledger, consumer)), Some(max_rows), Some(wait)) => Ok(Receive {
            ledger: ledger.to_string(),
            consumer: consumer.to_string(),
            max_rows,
            wait,
            visibility,
            include_payload: req.include_payload,
        }),
        _ => Err(Status::internal("validation passed without its values")),
    }
}

/// Positions as a caller sent them (at most [`delivery::MAX_ACK_POSITIONS`]).
fn positions(field: &str, raw: &[i64], v: &mut Violations) -> Vec<Position> {
    if raw.len() > delivery::MAX_ACK_POSITIONS {
        v.add(
            field,
            format!("at most {} a call", delivery::MAX_ACK_POSITIONS),
        );
        return Vec::new();
    }
    let mut out = Vec::with_capacity(raw.len());
    for (i, p) in raw.iter().enumerate() {
        match Position::parse(*p) {
            Ok(p) if p > Position::ORIGIN => out.push(p),
            Ok(_) => v.add(
                format!("{field}[{i}]"),
                "is not a position a consumer was given",
            ),
            Err(e) => v.add(format!("{field}[{i}]"), e),
        }
        if v.is_full() {
            break;
        }
    }
    out
}

/// AckResults, checked: (ledger, consumer, positions, up to).
pub fn ack(
    req: &pb::AckResultsRequest,
) -> Result<(String, String, Vec<Position>, Option<Position>), Status> {
    let mut v = Violations::new();
    let named = names::parse_consumer(&req.consumer)
        .map_err(|e| v.add("consumer", e.to_string()))
        .ok();
    let list = positions("positions", &req.positions, &mut v);
    let up_to = match req.up_to_position {
        0 => None,
        p => Position::parse(p)
            .map_err(|e| v.add("up_to_position", e))
            .ok(),
    };
    if list.is_empty() && up_to.is_none() && v.is_empty() {
        v.add(
            "positions",
            "name at least one position, or set up_to_position",
        );
    }
    v.finish().map_err(invalid)?;
    let (ledger, consumer) = named.ok_or_else(|| Status::internal("no consumer"))?;
    Ok((ledger.to_string(), consumer.to_string(), list, up_to))
}

/// NackResults, checked: (ledger, consumer, positions, what becomes of
/// them).
pub fn nack(
    req: &pb::NackResultsRequest,
) -> Result<(String, String, Vec<Position>, NackFate), Status> {
    let mut v = Violations::new();
    let named = names::parse_consumer(&req.consumer)
        .map_err(|e| v.add("consumer", e.to_string()))
        .ok();
    let list = positions("positions", &req.positions, &mut v);
    if list.is_empty() && v.is_empty() {
        v.add("positions", "name at least one position");
    }
    if req.reason.len() > delivery::MAX_REASON {
        v.add(
            "reason",
            format!("must be at most {} bytes", delivery::MAX_REASON),
        );
    }
    let retry_after = match req.retry_after.as_ref() {
        None => Some(Duration::ZERO),
        Some(d) => duration(d).map(Some).unwrap_or_else(|| {
            v.add("retry_after", "must not be negative");
            None
        }),
    };
    let fate = retry_after.and_then(|after| {
        delivery::nack(
            req.dead_letter,
            after,
            &tally_core::text::escape(&req.reason, delivery::MAX_REASON),
        )
        .map_err(|e| v.add("retry_after", e))
        .ok()
    });
    v.finish().map_err(invalid)?;
    match (named, fate) {
        (Some((ledger, consumer)), Some(fate)) => {
            Ok((ledger.to_string(), consumer.to_string(), list, fate))
        }
        _ => Err(Status::internal("validation passed without its values")),
    }
}

/// ResetConsumer, checked: (ledger, consumer, where to).
pub fn reset(req: &pb::ResetConsumerRequest) -> Result<(String, String, Start), Status> {
    let mut v = Violations::new();
    let named = names::parse_consumer(&req.name)
        .map_err(|e| v.add("name", e.to_string()))
        .ok();
    if req.to.as_ref().and_then(|t| t.at.as_ref()).is_none() {
        v.add("to", "set `beginning`, `now` or `after_position`");
    }
    let to = start("to", req.to.as_ref(), &mut v);
    v.finish().map_err(invalid)?;
    match (named, to) {
        (Some((ledger, consumer)), Some(to)) => Ok((ledger.to_string(), consumer.to_string(), to)),
        _ => Err(Status::internal("validation passed without its values")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create_req(url: &str, secret: &str) -> pb::CreateConsumerRequest {
        pb::CreateConsumerRequest {
            parent: "ledgers/l".into(),
            consumer_id: "sink".into(),
            consumer: Some(pb::Consumer {
                webhook: Some(pb::WebhookTarget {
                    url: url.into(),
                    secret: secret.into(),
                    max_batch_rows: 0,
                }),
                ..Default::default()
            }),
            start: None,
        }
    }

    #[test]
    fn a_webhook_to_a_private_address_is_refused_unless_allowed() {
        // Invariant: webhook destinations pass the outbound rules alert
        // URLs pass (a literal private address, unless the server allows).
        let e = create(&create_req("http://10.0.0.1/hook", ""), Reach::PublicOnly)
            .err()
            .unwrap();
        assert!(
            e.message().contains("consumer.webhook.url"),
            "{}",
            e.message()
        );
        assert!(create(&create_req("http://10.0.0.1/hook", ""), Reach::AnyHost).is_ok());
        let ok = create(
            &create_req("https://hooks.example.com/x", ""),
            Reach::PublicOnly,
        )
        .unwrap();
        assert!(ok.secret.is_none() && ok.start == Start::Beginning);
    }

    #[test]
    fn bad_input_names_every_field() {
        let mut req = create_req("", "whsec_bad");
        req.parent = "ledgers/-".into();
        req.consumer_id = "Bad".into();
        req.start = Some(pb::ConsumerStart {
            at: Some(pb::consumer_start::At::AfterPosition(-5)),
        });
        let e = create(&req, Reach::AnyHost).err().unwrap();
        let m = e.message();
        for field in [
            "parent",
            "consumer_id",
            "consumer.webhook.secret",
            "start.after_position",
        ] {
            assert!(m.contains(field), "{field}: {m}");
        }
        let r = receive(&pb::ReceiveResultsRequest {
            consumer: "ledgers/l/consumers/c".into(),
            max_rows: 5000,
            wait: Some(prost_types::Duration {
                seconds: 60,
                nanos: 0,
            }),
            ..Default::default()
        })
        .err()
        .unwrap();
        assert!(r.message().contains("max_rows") && r.message().contains("wait"));
        let a = ack(&pb::AckResultsRequest {
            consumer: "ledgers/l/consumers/c".into(),
            positions: vec![0, -1],
            up_to_position: 0,
        })
        .err()
        .unwrap();
        assert!(a.message().contains("positions[0]") && a.message().contains("positions[1]"));
        assert!(
            reset(&pb::ResetConsumerRequest {
                name: "ledgers/l/consumers/c".into(),
                to: None
            })
            .is_err()
        );
    }
}
