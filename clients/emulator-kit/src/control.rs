//! The emulator's own endpoints, the same in every emulator and open
//! without a key: `GET /_emulator/stats` (the counters and submission
//! history), `GET /_emulator/faults` (the plan in force) and
//! `POST /_emulator/faults` (a new plan, its counters afresh). Only the
//! error body of a refused plan and the body of a taken one are the
//! emulator's.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::emulator::Service;

/// The `/_emulator` routes of `S`: a plan that does not parse or compile
/// is answered by `invalid` (the emulator's 400 with the reason), a plan
/// taken with `taken`.
pub fn routes<S>(invalid: fn(String) -> Response, taken: Value) -> Router<Arc<S>>
where
    S: Service,
    S::Stats: Serialize,
    S::Plan: Serialize + DeserializeOwned,
    S::PlanError: std::fmt::Display,
{
    let set = move |State(shared): State<Arc<S>>, body: Bytes| {
        let taken = taken.clone();
        async move {
            let plan: S::Plan = match serde_json::from_slice(&body) {
                Ok(plan) => plan,
                Err(e) => return invalid(e.to_string()),
            };
            match shared.set_faults(plan) {
                Ok(()) => axum::Json(taken).into_response(),
                Err(e) => invalid(e.to_string()),
            }
        }
    };
    Router::new()
        .route(
            "/_emulator/stats",
            get(|State(shared): State<Arc<S>>| async move { axum::Json(shared.stats()) }),
        )
        .route(
            "/_emulator/faults",
            get(|State(shared): State<Arc<S>>| async move { axum::Json(shared.faults()) })
                .post(set),
        )
}
