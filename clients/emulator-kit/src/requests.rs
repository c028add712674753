//! Every API request an emulator took, whatever it answered: a refused
//! key, an unknown route, a fault's refusal and a success alike, so a
//! test can bound the calls a client made ("at most a handful in 60 s")
//! where the per-resource counters see only the calls that got that far.
//! The emulator's own `/_emulator` endpoints are not the provider's and
//! are not counted (a test polling the stats would count itself).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use serde::Serialize;

/// The counts `GET /_emulator/stats` shows as `requests`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RequestStats {
    /// Every request to the API, counted as it arrives (so a request
    /// whose caller hung up before the answer counts too).
    pub total: u64,
    /// Of those answered, the ones answered with a 4xx or 5xx status: a
    /// refused key, an unknown route, a refusal or a provider error.
    pub refused: u64,
    /// Requests answered, by HTTP status.
    pub by_status: BTreeMap<u16, u64>,
    /// Requests answered, by method, route and status
    /// (`"POST /v1/files 401"`, the route as the router names it, with
    /// `{id}` for an id; `(unknown route)` for a path the API has not).
    pub by_route: BTreeMap<String, u64>,
}

impl RequestStats {
    /// Counts a request arriving.
    pub fn arrived(&mut self) {
        self.total += 1;
    }

    /// Counts a request of `method` to `route` (None: a path the API has
    /// not) answered with `status`.
    pub fn answered(&mut self, method: &str, route: Option<&str>, status: u16) {
        if status >= 400 {
            self.refused += 1;
        }
        *self.by_status.entry(status).or_default() += 1;
        let route = route.unwrap_or("(unknown route)");
        *self
            .by_route
            .entry(format!("{method} {route} {status}"))
            .or_default() += 1;
    }

    /// Requests answered with `status`.
    pub fn with_status(&self, status: u16) -> u64 {
        self.by_status.get(&status).copied().unwrap_or(0)
    }
}

/// The prefix of the emulator's own endpoints, which are not counted.
const CONTROL: &str = "/_emulator/";

/// An emulator's request counts, shared by its layer and its stats.
#[derive(Debug, Clone, Default)]
pub struct RequestCounter(Arc<Mutex<RequestStats>>);

impl RequestCounter {
    /// The counts now.
    pub fn snapshot(&self) -> RequestStats {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RequestStats> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The route a request matched, carried on its response from
/// [`name_route`] out to [`count`].
#[derive(Debug, Clone)]
struct Route(String);

/// The layer that counts every request but the emulator's own endpoints,
/// as it arrives and as it is answered. Wraps the whole router (fallbacks
/// and key checks included), so nothing answered escapes it.
pub async fn count(
    State(counter): State<RequestCounter>,
    request: Request,
    next: Next,
) -> Response {
    if request.uri().path().starts_with(CONTROL) {
        return next.run(request).await;
    }
    let method = request.method().clone();
    counter.lock().arrived();
    let response = next.run(request).await;
    let route = response.extensions().get::<Route>().map(|r| r.0.as_str());
    let status = response.status().as_u16();
    counter.lock().answered(method.as_str(), route, status);
    response
}

/// A route layer that names the route a request matched on its answer,
/// for [`count`]'s `by_route`. Each emulator puts it last of its API
/// routes' layers (the outermost: it sees requests its key check refuses).
pub async fn name_route(request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned());
    let mut response = next.run(request).await;
    if let Some(route) = route {
        response.extensions_mut().insert(Route(route));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::StatusCode;
    use axum::routing::get;
    use tower::ServiceExt as _;

    // Invariant: every request but the emulator's own is counted once,
    // refused ones (a 401 from a key check, a fallback's 404) too, under
    // the route it matched; the control endpoints are not.
    #[tokio::test]
    async fn counts_every_request_but_the_emulators_own() {
        let counter = RequestCounter::default();
        let app = axum::Router::new()
            .route("/v1/ok", get(|| async { "ok" }))
            .route("/v1/key/{id}", get(|| async { StatusCode::UNAUTHORIZED }))
            .route_layer(axum::middleware::from_fn(name_route))
            .route("/_emulator/stats", get(|| async { "{}" }))
            .fallback(|| async { StatusCode::NOT_FOUND })
            .layer(axum::middleware::from_fn_with_state(counter.clone(), count));
        for path in [
            "/v1/ok",
            "/v1/key/a",
            "/nowhere",
            "/_emulator/stats",
            "/v1/ok",
        ] {
            let request = Request::get(path).body(Body::empty()).unwrap();
            app.clone().oneshot(request).await.unwrap();
        }
        let stats = counter.snapshot();
        assert_eq!(stats.total, 4);
        assert_eq!(stats.refused, 2);
        assert_eq!(
            stats.by_status,
            BTreeMap::from([(200, 2), (401, 1), (404, 1)])
        );
        let by_route = [
            ("GET /v1/ok 200", 2),
            ("GET /v1/key/{id} 401", 1),
            ("GET (unknown route) 404", 1),
        ];
        let by_route = by_route.map(|(k, n)| (k.to_owned(), n));
        assert_eq!(stats.by_route, BTreeMap::from(by_route));
        assert_eq!(stats.with_status(401), 1);
        assert_eq!(stats.with_status(500), 0);
    }
}
