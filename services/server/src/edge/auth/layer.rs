//! The tower layer that authenticates every gRPC request before any handler
//! sees it: reads the `authorization` header and the verified client
//! certificate, asks [`Authenticator::decide`], and either answers the
//! refusal itself or passes the request on with a [`Caller`] in its
//! extensions and a tracing span naming method and caller.

use super::{Authenticator, Decision, Role, subject};
use crate::edge::caller::Caller;
use crate::edge::middleware::{Inner, Middleware, ResponseFuture, answer};
use crate::metrics::{Metrics, ReasonLabels};
use std::net::SocketAddr;
use std::sync::Arc;
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
use tracing::Instrument as _;

/// The auth layer's work (a tower layer as [`crate::edge::middleware::Wrap`]).
#[derive(Clone)]
pub struct Authenticate {
    auth: Arc<Authenticator>,
    metrics: Metrics,
}

impl Authenticate {
    pub fn new(auth: Arc<Authenticator>, metrics: Metrics) -> Self {
        Self { auth, metrics }
    }
}

impl<B> Middleware<B> for Authenticate {
    fn call<S: Inner<B>>(
        &self,
        mut req: http::Request<B>,
        mut inner: S,
    ) -> ResponseFuture<S::Error> {
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
                answer(denial.status(&path).into_http())
            }
            Decision::Allow(principal) => {
                let caller = principal.as_ref().map_or("", |p| p.name.as_str());
                let span = tracing::info_span!("rpc", method = %path, caller = %caller);
                if let Some(p) = principal {
                    // `--auth disabled` (no roles) shows everything.
                    let uses_claims = p.roles.is_empty()
                        || p.roles.has(Role::Worker)
                        || p.roles.has(Role::Operator);
                    let lists_ledgers = p.roles.is_empty()
                        || p.roles.has(Role::Enroller)
                        || p.roles.has(Role::Operator);
                    req.extensions_mut().insert(Caller {
                        name: p.name,
                        scope: p.scope,
                        uses_claims,
                        lists_ledgers,
                    });
                }
                Box::pin(inner.call(req).instrument(span))
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
