//! The tower layer that authenticates every gRPC request before any handler
//! sees it: reads the `authorization` header and the verified client
//! certificate, asks [`Authenticator::decide`], and either answers the
//! refusal itself or passes the request on with a [`Caller`] in its
//! extensions and a tracing span naming method and caller.

use super::{Authenticator, Decision, Role, subject};
use crate::caller::Caller;
use crate::metrics::{Metrics, ReasonLabels};
use futures::future::BoxFuture;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};
use tonic::body::Body;
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
use tower::{Layer, Service};
use tracing::Instrument as _;

#[derive(Clone)]
pub struct AuthLayer {
    auth: Arc<Authenticator>,
    metrics: Metrics,
}

impl AuthLayer {
    pub fn new(auth: Arc<Authenticator>, metrics: Metrics) -> Self {
        Self { auth, metrics }
    }
}

impl<S> Layer<S> for AuthLayer {
    type Service = Auth<S>;

    fn layer(&self, inner: S) -> Auth<S> {
        Auth {
            inner,
            auth: self.auth.clone(),
            metrics: self.metrics.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Auth<S> {
    inner: S,
    auth: Arc<Authenticator>,
    metrics: Metrics,
}

impl<S, B> Service<http::Request<B>> for Auth<S>
where
    S: Service<http::Request<B>, Response = http::Response<Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        let path = req.uri().path().to_string();
        let subject = peer_subject(req.extensions());
        let authorization = req
            .headers()
            .get(http::header::AUTHORIZATION)
            .map(|v| v.as_bytes());
        match self
            .auth
            .decide(&path, authorization, subject.as_deref(), chrono::Utc::now())
        {
            Decision::Deny(denial) => {
                let reason = denial.reason();
                tracing::warn!(
                    method = %path,
                    peer = ?peer_addr(req.extensions()),
                    certificate = subject.as_deref().unwrap_or(""),
                    reason,
                    "call refused"
                );
                self.metrics
                    .rpc_refused
                    .get_or_create(&ReasonLabels { reason })
                    .inc();
                let response = denial.status(&path).into_http();
                Box::pin(async move { Ok(response) })
            }
            Decision::Allow(principal) => {
                let caller = principal.as_ref().map_or("", |p| p.name.as_str());
                let span = tracing::info_span!("rpc", method = %path, caller = %caller);
                if let Some(p) = principal {
                    // `--auth disabled` (no roles) shows everything.
                    let uses_claims = p.roles.is_empty()
                        || p.roles.has(Role::Worker)
                        || p.roles.has(Role::Operator);
                    req.extensions_mut().insert(Caller {
                        name: p.name,
                        scope: p.scope,
                        uses_claims,
                    });
                }
                // The clone that was not polled ready stays behind (tower's
                // usual dance), so the one we call is the ready one.
                let clone = self.inner.clone();
                let mut ready = std::mem::replace(&mut self.inner, clone);
                Box::pin(ready.call(req).instrument(span))
            }
        }
    }
}

/// The subject CN of the client certificate rustls verified, if any.
fn peer_subject(ext: &http::Extensions) -> Option<String> {
    let certs = ext.get::<TlsConnectInfo<TcpConnectInfo>>()?.peer_certs()?;
    subject::common_name(certs.first()?.as_ref())
}

/// The remote address of the connection (plain or TLS).
pub fn peer_addr(ext: &http::Extensions) -> Option<SocketAddr> {
    if let Some(tcp) = ext.get::<TcpConnectInfo>() {
        return tcp.remote_addr();
    }
    ext.get::<TlsConnectInfo<TcpConnectInfo>>()?
        .get_ref()
        .remote_addr()
}
