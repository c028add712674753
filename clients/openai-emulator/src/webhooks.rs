//! `batch.*` webhook events as OpenAI documents them: `{id, object:
//! "event", type, created_at, data: {id}}`, one per terminal state. The
//! delivery id (`webhook-id`) is stable per event, so a duplicate or a
//! redelivery carries the same one. Delivery is `emulator_kit::delivery`.

use emulator_kit::delivery::Event;
use emulator_kit::mix::hash_str;
use serde_json::json;

use crate::batches::Batch;

/// The event announcing `batch`'s terminal state, or `None` if it has not
/// reached one.
pub fn event_for(batch: &Batch, now: i64) -> Option<Event> {
    let kind = batch.status.event_type()?;
    let seed = hash_str(&format!("{}/{kind}", batch.id));
    Some(Event {
        id: format!("wh_{seed:016x}{:016x}", hash_str(&batch.id)),
        body: json!({
            "id": format!("evt_{seed:016x}"),
            "object": "event",
            "type": kind,
            "created_at": now,
            "data": {"id": batch.id},
        }),
    })
}
