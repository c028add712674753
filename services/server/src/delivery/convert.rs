//! Consumers, results handed out, dead letters and webhook POSTs as
//! `tally.v1` messages (a result's row status and usage with LedgerService's
//! conversions). Pure: no I/O.

use crate::edge::wire_convert::{duration_to_proto, opt_timestamp, timestamp};
use crate::ledger::convert::{status_to_proto, usage_to_proto};
use std::time::Duration;
use tally_core::delivery::Kind;
use tally_core::names;
use tally_proto::v1 as pb;
use tally_store::consumers::{ConsumerRecord, DeadLetter, Delivery, PostLogEntry};

pub fn kind_to_proto(k: Kind) -> pb::ConsumerKind {
    match k {
        Kind::Pull => pb::ConsumerKind::Pull,
        Kind::Webhook => pb::ConsumerKind::Webhook,
    }
}

/// A consumer; `secret` only in CreateConsumer's answer (when the server
/// made it), never again.
pub fn consumer_to_proto(c: &ConsumerRecord, secret: Option<String>) -> pb::Consumer {
    let lag_age = c
        .oldest_unacked
        .map(|t| (c.now - t).to_std().unwrap_or(Duration::ZERO))
        .unwrap_or(Duration::ZERO);
    pb::Consumer {
        name: names::consumer_name(&c.ledger, &c.name),
        kind: kind_to_proto(c.kind) as i32,
        visibility_timeout: Some(duration_to_proto(c.visibility)),
        max_deliveries: c.max_deliveries as i32,
        webhook: c.webhook.as_ref().map(|w| pb::WebhookTarget {
            url: w.url.clone(),
            secret: secret.unwrap_or_default(),
            max_batch_rows: w.batch as i32,
        }),
        read_position: c.read_position.raw(),
        acked_position: c.acked_position.raw(),
        in_flight: c.in_flight,
        dead_letters: c.dead_letters,
        lag_rows: c.lag_rows,
        lag_age: Some(duration_to_proto(lag_age)),
        failures: c.failures,
        next_post_time: opt_timestamp(c.next_post_time),
        create_time: Some(timestamp(c.create_time)),
        update_time: Some(timestamp(c.update_time)),
        creator: c.actor.clone(),
    }
}

pub fn delivery_to_proto(ledger: &str, d: &Delivery) -> pb::ResultDelivery {
    pb::ResultDelivery {
        position: d.position.raw(),
        row: names::row_name(ledger, &d.key),
        key: d.key.clone(),
        version: d.version,
        status: status_to_proto(d.status) as i32,
        result: d.result.clone().unwrap_or_default(),
        rule: d.rule.clone(),
        error: d.last_error.clone(),
        model: d.model.clone(),
        prompt: (!d.prompt_name.is_empty()).then(|| pb::PromptRef {
            name: d.prompt_name.clone(),
            version: d.prompt_version.clone(),
        }),
        attempts: d.attempts,
        usage: Some(usage_to_proto(&d.usage)),
        finish_time: Some(timestamp(d.finish_time)),
        delivery_count: d.deliveries,
        lease_expire_time: Some(timestamp(d.visible_time)),
        payload: d.payload.clone().unwrap_or_default(),
    }
}

pub fn dead_letter_to_proto(ledger: &str, d: &DeadLetter) -> pb::DeadLetter {
    pb::DeadLetter {
        position: d.position.raw(),
        row: d
            .key
            .as_deref()
            .map(|k| names::row_name(ledger, k))
            .unwrap_or_default(),
        version: d.version,
        delivery_count: d.deliveries,
        reason: d.reason.clone(),
        time: Some(timestamp(d.time)),
    }
}

pub fn post_to_proto(p: &PostLogEntry) -> pb::WebhookDelivery {
    pb::WebhookDelivery {
        message_id: p.message_id.clone(),
        results: p.rows,
        first_position: p.first.raw(),
        last_position: p.last.raw(),
        http_status: p.http_status.unwrap_or(0),
        error: p.error.clone(),
        duration: Some(duration_to_proto(Duration::from_millis(
            p.duration_ms.max(0) as u64,
        ))),
        time: Some(timestamp(p.time)),
    }
}
