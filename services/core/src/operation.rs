//! Provider operations (the Gemini and OpenAI batches behind jobs) and the one reducer
//! every change of their state goes through.
//!
//! An operation's state reaches us by two paths: webhooks, delivered at
//! least once and in no particular order, and the reconciliation poller,
//! which may read a state older than one a webhook already brought. Neither
//! path may write a state directly. Both turn what they received into an
//! [`OpEvent`] (via [`parse_gemini_webhook`] or
//! [`event_from_batch_resource`]) under a name from [`normalize_name`], and
//! [`reduce`] decides: apply it, drop it with a reason, or record it without
//! applying. One guard at the confluence is what keeps a finished batch from
//! flipping back to running, whichever path the stale news came by.
//!
//! - [`OpState`]: the lifecycle, its ranks, and every spelling of it.
//! - [`normalize_name`]: `batches/{id}` from any prefix or URL.
//! - [`reduce`]: the monotonic reducer (DESIGN.md §3, "Operation").
//! - [`parse_gemini_webhook`], [`event_from_batch_resource`]: provider
//!   payloads to events, with the provider's quirks (DESIGN.md §10);
//!   [`parse_openai_webhook`], [`event_from_openai_batch`] the same for the
//!   OpenAI Batch API; [`event_from_anthropic_batch`] for Anthropic's
//!   Message Batches (which send no webhooks).
//!
//! What does not live here: storing events and verdicts, the
//! compare-and-swap on the version, and moving the linked job on (the store);
//! signature checks (`webhook`); fetching batches (the worker).

mod anthropic;
mod gemini;
mod name;
mod openai;
mod payload;
#[cfg(test)]
mod proptests;
mod reducer;
mod state;

pub use anthropic::{anthropic_batch_name, anthropic_state, event_from_anthropic_batch};
pub use gemini::{event_from_batch_resource, parse_gemini_webhook};
pub use name::{MAX_ID_LEN, NameError, normalize_name};
pub use openai::{event_from_openai_batch, openai_batch_name, openai_state, parse_openai_webhook};
pub use payload::{BatchObservation, BatchStats, PayloadError, WebhookEvent};
pub use reducer::{Decision, DropReason, EPOCH, OpEvent, OpSnapshot, reduce};
pub use state::OpState;
