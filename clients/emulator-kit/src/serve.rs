//! Serving an emulator's router: bind a listener (port 0 picks one), serve
//! it on a task until the emulator's shutdown token is cancelled, and stop
//! in order — stop accepting, let connections close, then wait for the
//! background tasks (batch lifecycles, webhook deliveries) — each with a
//! deadline. Shutdown is the caller's token, so the emulator's own tasks
//! and the server end on the same signal.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use axum::response::IntoResponse;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::rules::LostMode;

/// How long shutdown waits for connections, and then for background tasks.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// An answer lost on the way: the status line goes out, then the body
/// breaks, so hyper aborts the connection and the client reads no answer
/// (the emulators' "lost create answer" in its dropped form).
pub fn cut_answer() -> axum::response::Response {
    let broken = futures::stream::once(async {
        Err::<axum::body::Bytes, io::Error>(io::Error::other("answer lost"))
    });
    axum::response::Response::new(axum::body::Body::from_stream(broken))
}

/// Answers a synchronous request as the engine's `gate` says
/// ([`crate::online::Online::gate`]): a refusal at once (`refuse`), else
/// the model's answer after its latency (`answer`, told whether it will be
/// lost), lost the way the plan says (a 500 from `status500`, or a cut
/// connection).
pub async fn online_answer(
    gate: crate::online::Gate,
    refuse: impl FnOnce(crate::online::Gate) -> axum::response::Response,
    answer: impl FnOnce(bool) -> axum::response::Response,
    status500: impl FnOnce() -> axum::response::Response,
) -> axum::response::Response {
    match gate {
        crate::online::Gate::Answer { latency, lost } => {
            tokio::time::sleep(latency).await;
            let answered = answer(lost.is_some());
            match lost {
                None => answered,
                Some(LostMode::Status500) => status500(),
                Some(LostMode::Drop) => cut_answer(),
            }
        }
        refused => refuse(refused),
    }
}

/// Runs a synchronous answer to its end whatever the client does: a
/// provider that took a request does the work (and bills it) even when
/// the caller times out or hangs up, so the emulator counts it answered
/// too, and a test sees every call the provider would have charged.
pub async fn even_if_abandoned<F>(answer: F) -> axum::response::Response
where
    F: std::future::Future<Output = axum::response::Response> + Send + 'static,
{
    match tokio::spawn(answer).await {
        Ok(response) => response,
        Err(e) => {
            tracing::error!(error = %e, "a synchronous answer's task failed");
            axum::http::StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

/// A create's outcome: the batch made, or made with its answer lost.
#[derive(Debug, Clone, PartialEq)]
pub enum Created<T> {
    Batch(T),
    Lost(LostMode),
}

impl<T> Created<T> {
    /// The create's response: `ok` of the batch, the provider's 500 error,
    /// or an answer cut off.
    pub fn respond<E>(
        self,
        ok: impl FnOnce(T) -> axum::response::Response,
        status500: impl FnOnce() -> E,
    ) -> Result<axum::response::Response, E> {
        match self {
            Created::Batch(batch) => Ok(ok(batch)),
            Created::Lost(LostMode::Status500) => Err(status500()),
            Created::Lost(LostMode::Drop) => Ok(cut_answer()),
        }
    }
}

/// A bound listener, before the router that needs its address exists.
#[derive(Debug)]
pub struct Listener {
    listener: TcpListener,
    addr: SocketAddr,
}

impl Listener {
    /// Binds `addr`; port 0 picks a free port.
    pub async fn bind(addr: SocketAddr) -> io::Result<Listener> {
        let listener = TcpListener::bind(addr).await?;
        let mut addr = listener.local_addr()?;
        // A client cannot connect to 0.0.0.0; name loopback instead.
        if addr.ip().is_unspecified() {
            addr.set_ip(Ipv4Addr::LOCALHOST.into());
        }
        Ok(Listener { listener, addr })
    }

    /// The address it listens on (loopback if bound to an unspecified one).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// A router being served. Dropping it cancels the shutdown token (the
/// background work stops, unwaited); prefer [`Server::shutdown`].
#[derive(Debug)]
pub struct Server {
    name: &'static str,
    addr: SocketAddr,
    shutdown: CancellationToken,
    tasks: TaskTracker,
    server: Option<JoinHandle<io::Result<()>>>,
}

impl Server {
    /// Serves `app` on `listener` until `shutdown` is cancelled. `tasks`
    /// holds the emulator's background work, waited for at shutdown;
    /// `name` (e.g. "gemini emulator") starts its log lines.
    pub fn spawn(
        name: &'static str,
        listener: Listener,
        app: axum::Router,
        shutdown: CancellationToken,
        tasks: TaskTracker,
    ) -> Server {
        let Listener { listener, addr } = listener;
        let stop = shutdown.clone();
        let server = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await
        });
        tracing::info!(addr = %addr, "{name} listening");
        Server {
            name,
            addr,
            shutdown,
            tasks,
            server: Some(server),
        }
    }

    /// The address it listens on (loopback if bound to an unspecified one).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, ends the background work, and waits (a few seconds
    /// at most) for the connections and then the tasks to finish.
    pub async fn shutdown(mut self) {
        self.shutdown.cancel();
        if let Some(server) = self.server.take() {
            match tokio::time::timeout(SHUTDOWN_GRACE, server).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(error))) => tracing::warn!(%error, "emulator server ended with an error"),
                Ok(Err(error)) => tracing::warn!(%error, "emulator server task failed"),
                Err(_) => tracing::warn!("emulator connections did not close in time"),
            }
        }
        self.tasks.close();
        if tokio::time::timeout(SHUTDOWN_GRACE, self.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!("emulator background tasks did not finish in time");
        }
        tracing::info!("{} stopped", self.name);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn serves_until_shutdown_on_a_loopback_address() {
        let listener = Listener::bind("0.0.0.0:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr();
        assert!(addr.ip().is_loopback());
        assert_eq!(listener.base_url(), format!("http://{addr}"));
        let tasks = TaskTracker::new();
        let shutdown = CancellationToken::new();
        let background = shutdown.clone();
        tasks.spawn(async move { background.cancelled().await });
        let server = Server::spawn("test", listener, axum::Router::new(), shutdown, tasks);
        assert!(tokio::net::TcpStream::connect(addr).await.is_ok());
        tokio::time::timeout(Duration::from_secs(2), server.shutdown())
            .await
            .expect("shutdown ends the background task and the server");
        assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    }
}
