//! The plain HTTP listeners (the server's webhooks and metrics, the
//! worker's metrics and health), served so that no client
//! can hold them: a connection that does not send its request headers
//! within `--http-header-timeout` is closed (slowloris), and so is an idle
//! keep-alive connection after the same time; a request whose body and
//! answer take longer than `--http-body-timeout` is answered 408 and its
//! connection closed; at most `--http-max-connections` connections are
//! open per listener (one more is answered 503 and closed at once), and at
//! most `--http-max-connections-per-client` from one client address, so
//! one client holding keep-alives cannot take every slot; and a
//! connection is closed after `--http-max-connection-age` (after its
//! request in flight, if any), so keep-alive cannot pin a slot forever.
//!
//! hyper's own HTTP/1 server does the reading (its header read timeout);
//! this module owns the accept loop, the connection slots and shutdown.

use axum::response::IntoResponse as _;
use clap::Args;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// What a connection over the cap reads before it is closed.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\n\
content-type: text/plain\r\ncontent-length: 45\r\n\r\n\
too many connections (--http-max-connections)";

/// What a client over its own cap reads before it is closed.
const BUSY_CLIENT: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\n\
content-type: text/plain\r\ncontent-length: 73\r\n\r\n\
too many connections from this client (--http-max-connections-per-client)";

/// Largest request head (request line and headers) read, in bytes.
const MAX_HEAD_BYTES: usize = 16 * 1024;

/// Limits of the plain HTTP listeners (webhooks and metrics), each on its
/// own: see [`serve`].
#[derive(Debug, Clone, Args)]
pub struct HttpLimits {
    /// Longest a client may take to send a request's headers; also how long
    /// an idle keep-alive connection stays open. Then the connection is
    /// closed (slowloris).
    #[arg(long, env = "TALLY_HTTP_HEADER_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub http_header_timeout: Duration,

    /// Longest a request's body may take to arrive and be answered; then
    /// the answer is 408 and the connection is closed.
    #[arg(long, env = "TALLY_HTTP_BODY_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub http_body_timeout: Duration,

    /// Open connections per listener; one more is answered 503 and closed.
    #[arg(long, env = "TALLY_HTTP_MAX_CONNECTIONS", default_value_t = 256)]
    pub http_max_connections: usize,

    /// Open connections per listener from one client address; one more is
    /// answered 503 and closed.
    #[arg(
        long,
        env = "TALLY_HTTP_MAX_CONNECTIONS_PER_CLIENT",
        default_value_t = 16
    )]
    pub http_max_connections_per_client: usize,

    /// A keep-alive connection is closed after this long (after the request
    /// in flight, if any).
    #[arg(long, env = "TALLY_HTTP_MAX_CONNECTION_AGE", default_value = "5m", value_parser = parse_duration)]
    pub http_max_connection_age: Duration,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            http_header_timeout: Duration::from_secs(10),
            http_body_timeout: Duration::from_secs(30),
            http_max_connections: 256,
            http_max_connections_per_client: 16,
            http_max_connection_age: Duration::from_secs(5 * 60),
        }
    }
}

/// Parses `30s`, `5m`, `250ms`.
fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|e| format!("{e} (use forms like 30s, 5m, 1h)"))
}

/// Refuses HTTP limits that would make a listener unusable.
pub fn check(limits: &HttpLimits) -> Result<(), String> {
    if limits.http_max_connections == 0 || limits.http_max_connections_per_client == 0 {
        return Err(
            "--http-max-connections and --http-max-connections-per-client must be at least 1"
                .into(),
        );
    }
    for (flag, d) in [
        ("--http-header-timeout", limits.http_header_timeout),
        ("--http-body-timeout", limits.http_body_timeout),
        ("--http-max-connection-age", limits.http_max_connection_age),
    ] {
        if d.is_zero() {
            return Err(format!("{flag} must be longer than zero"));
        }
    }
    Ok(())
}

/// Serves `app` on `listener` until `stop`; requests in flight then finish
/// (within the body timeout).
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    limits: HttpLimits,
    name: &'static str,
    stop: CancellationToken,
) {
    let body_timeout = limits.http_body_timeout;
    let app = app.layer(axum::middleware::from_fn(
        move |req: axum::extract::Request, next: axum::middleware::Next| async move {
            match tokio::time::timeout(body_timeout, next.run(req)).await {
                Ok(response) => response,
                Err(_) => {
                    tracing::warn!(listener = name, timeout = ?body_timeout, "request timed out");
                    let mut response = (
                        http::StatusCode::REQUEST_TIMEOUT,
                        format!(
                            "the request was not received and answered within {} \
                             (--http-body-timeout)",
                            humantime::format_duration(body_timeout)
                        ),
                    )
                        .into_response();
                    response.headers_mut().insert(
                        http::header::CONNECTION,
                        http::HeaderValue::from_static("close"),
                    );
                    response
                }
            }
        },
    ));
    let slots = Arc::new(Semaphore::new(limits.http_max_connections));
    let clients = Clients::default();
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of file descriptors, say: wait instead of spinning.
                        tracing::warn!(listener = name, error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let Ok(slot) = slots.clone().try_acquire_owned() else {
                    tracing::warn!(listener = name, %peer, max = limits.http_max_connections,
                        "connection refused: too many open (--http-max-connections)");
                    // Best effort, never waiting on the client.
                    let _ = stream.try_write(BUSY);
                    continue;
                };
                let Some(client) = clients.take(peer.ip(), limits.http_max_connections_per_client) else {
                    tracing::warn!(listener = name, %peer, max = limits.http_max_connections_per_client,
                        "connection refused: too many open from this client \
                         (--http-max-connections-per-client)");
                    let _ = stream.try_write(BUSY_CLIENT);
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let app = app.clone();
                let limits = limits.clone();
                let stop = stop.clone();
                connections.spawn(async move {
                    connection(stream, app, &limits, stop).await;
                    drop((slot, client));
                });
            }
        }
    }
    // Stop accepting; let open connections finish their requests.
    drop(listener);
    let grace = limits.http_body_timeout + Duration::from_secs(1);
    let _ = tokio::time::timeout(grace, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
}

/// Open connections per client address.
#[derive(Clone, Default)]
struct Clients(Arc<Mutex<HashMap<IpAddr, usize>>>);

/// One open connection of a client; dropping it frees the client's slot.
struct ClientSlot {
    clients: Clients,
    ip: IpAddr,
}

impl Clients {
    /// A slot for one more connection from `ip`, unless it has `max`.
    fn take(&self, ip: IpAddr, max: usize) -> Option<ClientSlot> {
        let mut open = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = open.entry(ip).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(ClientSlot {
            clients: self.clone(),
            ip,
        })
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut open = self.clients.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// One connection, until the client closes it, a timeout or its age ends
/// it, or the server stops.
async fn connection(
    stream: tokio::net::TcpStream,
    app: axum::Router,
    limits: &HttpLimits,
    stop: CancellationToken,
) {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.http_header_timeout)
        .max_buf_size(MAX_HEAD_BYTES)
        .keep_alive(true);
    let conn = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app));
    tokio::pin!(conn);
    let age = tokio::time::sleep(limits.http_max_connection_age);
    tokio::pin!(age);
    tokio::select! {
        _ = conn.as_mut() => return,
        _ = stop.cancelled() => {}
        _ = &mut age => {}
    }
    // Close after the request in flight (an idle connection at once).
    conn.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(limits.http_body_timeout, conn).await;
}
