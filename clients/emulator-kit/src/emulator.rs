//! The handle tests, the demo and the binaries hold: an emulator's shared
//! state served on a listener, with its stats, its fault plan and an
//! ordered shutdown. Each emulator names its state's [`Service`] and
//! exports `Emulator` as this handle over it.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::requests::{self, RequestCounter};
use crate::serve::{Listener, Server};
use crate::startup;

/// What an emulator's shared state gives its handle.
pub trait Service: Send + Sync + Sized + 'static {
    /// Starts its log lines, e.g. "gemini emulator".
    const NAME: &'static str;
    type Config;
    type Stats;
    type Plan;
    type PlanError;
    type ConfigError: std::error::Error;

    /// The state for `config`, answering at `base_url`.
    fn new(config: Self::Config, base_url: String) -> Result<Arc<Self>, Self::ConfigError>;
    /// Its routes and layers.
    fn router(self: Arc<Self>) -> axum::Router;
    fn served(&self) -> &Served;
    /// The (first) API key it accepts.
    fn api_key(&self) -> &str;
    fn stats(&self) -> Self::Stats;
    /// The fault plan in force.
    fn faults(&self) -> Self::Plan;
    fn set_faults(&self, plan: Self::Plan) -> Result<(), Self::PlanError>;
}

/// What every emulator's state holds for its handle.
#[derive(Debug)]
pub struct Served {
    /// `http://127.0.0.1:PORT`, without an API version.
    pub base_url: String,
    /// Cancelled at shutdown; every batch's stop token is a child of it.
    pub shutdown: CancellationToken,
    /// Its background work (batch lifecycles, webhook deliveries).
    pub tasks: TaskTracker,
    /// Every API request taken, counted by the layer
    /// [`Emulator::start`] puts around the emulator's router.
    pub requests: RequestCounter,
}

impl Served {
    pub fn new(base_url: String) -> Self {
        Self {
            base_url,
            shutdown: CancellationToken::new(),
            tasks: TaskTracker::new(),
            requests: RequestCounter::default(),
        }
    }
}

/// A running emulator. Dropping it stops its background work; prefer
/// [`Emulator::shutdown`], which also waits for it.
pub struct Emulator<S> {
    shared: Arc<S>,
    server: Server,
}

impl<S: Service> Emulator<S> {
    /// Binds `addr` (port 0 picks a free port) and starts serving, every
    /// request counted ([`requests`]).
    pub async fn start(addr: SocketAddr, config: S::Config) -> io::Result<Emulator<S>> {
        let listener = Listener::bind(addr).await?;
        let shared = S::new(config, listener.base_url())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let counter = shared.served().requests.clone();
        let app = Arc::clone(&shared)
            .router()
            .layer(axum::middleware::from_fn_with_state(
                counter,
                requests::count,
            ));
        let server = Server::spawn(
            S::NAME,
            listener,
            app,
            shared.served().shutdown.clone(),
            shared.served().tasks.clone(),
        );
        Ok(Emulator { shared, server })
    }

    /// The address it listens on (loopback if bound to an unspecified one).
    pub fn local_addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    /// `http://127.0.0.1:PORT`, without an API version: the SDKs' base URL;
    /// the emulator's own endpoints live under `{base_url}/_emulator`.
    pub fn base_url(&self) -> String {
        self.shared.served().base_url.clone()
    }

    /// The (first) API key it accepts.
    pub fn api_key(&self) -> &str {
        self.shared.api_key()
    }

    /// A snapshot of the counters and submission history.
    pub fn stats(&self) -> S::Stats {
        self.shared.stats()
    }

    /// Replaces the fault plan; its counters start afresh.
    pub fn set_faults(&self, plan: S::Plan) -> Result<(), S::PlanError> {
        self.shared.set_faults(plan)
    }

    /// Stops accepting, ends batch lifecycles and webhook deliveries, and
    /// waits (a few seconds at most) for them to finish.
    pub async fn shutdown(self) {
        self.server.shutdown().await;
    }

    /// What a binary does once started: logs `ready` with the base URL
    /// (scripts read it), serves until Ctrl-C or SIGTERM, then shuts down.
    pub async fn serve_until_signal(self) {
        startup::serve_until_signal(&self.base_url()).await;
        self.shutdown().await;
    }
}

/// Implements [`Service`] for an emulator crate's `service::Shared` by
/// delegating to its `served` field, its inherent methods (`build`, `key`,
/// and those [`state_access!`] writes) and its `routes::router`: the state never
/// names its routes, so the two stay out of an import circle. Invoked from
/// the crate's `handle` module with the emulator's log name.
// `crate` is the calling emulator's, on purpose.
#[allow(clippy::crate_in_macro_def)]
#[macro_export]
macro_rules! service_handle {
    ($name:literal) => {
        use std::sync::Arc;
        use $crate::emulator::{Served, Service};

        impl Service for crate::service::Shared {
            const NAME: &'static str = $name;
            type Config = crate::config::EmulatorConfig;
            type Stats = crate::stats::Stats;
            type Plan = crate::faults::FaultPlan;
            type PlanError = crate::faults::FaultPlanError;
            type ConfigError = crate::service::ConfigError;

            fn new(config: Self::Config, base_url: String) -> Result<Arc<Self>, Self::ConfigError> {
                Self::build(config, base_url)
            }
            fn router(self: Arc<Self>) -> axum::Router {
                crate::routes::router(self)
            }
            fn served(&self) -> &Served {
                &self.served
            }
            fn api_key(&self) -> &str {
                self.key()
            }
            fn stats(&self) -> Self::Stats {
                self.stats_now()
            }
            fn faults(&self) -> Self::Plan {
                crate::service::Shared::faults(self)
            }
            fn set_faults(&self, plan: Self::Plan) -> Result<(), Self::PlanError> {
                self.put_faults(plan)
            }
        }
    };
}

/// Writes, in an emulator's `service` module, the `Shared` methods over its
/// locked state that the handle needs: `lock` (a poisoned lock still
/// serves: an emulator's state stays consistent enough), `stats_now`,
/// `faults` and `put_faults`. The contract: `Shared::state` is a
/// `Mutex<State>`; `State` holds `faults` (the crate's compiled
/// `faults::Faults`), `online` (the kit's [`crate::online::Online`]) and
/// `stats` (the crate's `stats::Stats`, whose `online` field the
/// limiter's counters fill and whose `requests` field the served
/// request counter fills); `Shared::served` is the kit's [`Served`]; the
/// plan's `shared.online` configures the limiter's faults.
// `crate` is the calling emulator's, on purpose.
#[allow(clippy::crate_in_macro_def)]
#[macro_export]
macro_rules! state_access {
    () => {
        impl Shared {
            fn lock(&self) -> std::sync::MutexGuard<'_, State> {
                self.state.lock().unwrap_or_else(|e| e.into_inner())
            }

            pub(crate) fn stats_now(&self) -> crate::stats::Stats {
                let state = self.lock();
                crate::stats::Stats {
                    online: state.online.stats().clone(),
                    requests: self.served.requests.snapshot(),
                    ..state.stats.clone()
                }
            }

            pub(crate) fn faults(&self) -> crate::faults::FaultPlan {
                self.lock().faults.plan().clone()
            }

            pub(crate) fn put_faults(
                &self,
                plan: crate::faults::FaultPlan,
            ) -> Result<(), crate::faults::FaultPlanError> {
                let faults = crate::faults::Faults::compile(plan)?;
                let mut state = self.lock();
                state.online.set_faults(faults.plan().shared.online.clone());
                state.faults = faults;
                Ok(())
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A service that counts in its stats how often its plan was set.
    struct Counter {
        served: Served,
        plans: Mutex<u32>,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("refused")]
    struct Refused;

    impl Service for Counter {
        const NAME: &'static str = "test emulator";
        type Config = bool;
        type Stats = u32;
        type Plan = u32;
        type PlanError = Refused;
        type ConfigError = Refused;

        fn new(ok: bool, base_url: String) -> Result<Arc<Self>, Refused> {
            ok.then(|| {
                Arc::new(Counter {
                    served: Served::new(base_url),
                    plans: Mutex::new(0),
                })
            })
            .ok_or(Refused)
        }
        fn router(self: Arc<Self>) -> axum::Router {
            axum::Router::new().route("/", axum::routing::get(|| async { "hello" }))
        }
        fn served(&self) -> &Served {
            &self.served
        }
        fn api_key(&self) -> &str {
            "key"
        }
        fn stats(&self) -> u32 {
            *self.plans.lock().unwrap()
        }
        fn faults(&self) -> u32 {
            0
        }
        fn set_faults(&self, plan: u32) -> Result<(), Refused> {
            if plan == 0 {
                return Err(Refused);
            }
            *self.plans.lock().unwrap() += 1;
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_handle_serves_its_service_until_shutdown() {
        let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let err = Emulator::<Counter>::start(addr, false).await.err().unwrap();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        let emu = Emulator::<Counter>::start(addr, true).await.unwrap();
        assert_eq!(emu.base_url(), format!("http://{}", emu.local_addr()));
        let mut conn = tokio::net::TcpStream::connect(emu.local_addr())
            .await
            .unwrap();
        conn.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
        let mut answer = String::new();
        conn.read_to_string(&mut answer).await.unwrap();
        assert!(
            answer.starts_with("HTTP/1.0 200") && answer.ends_with("hello"),
            "{answer}"
        );
        assert!(emu.set_faults(0).is_err());
        emu.set_faults(3).unwrap();
        assert_eq!(emu.stats(), 1);
        let token = emu.shared.served().shutdown.clone();
        emu.shutdown().await;
        assert!(token.is_cancelled());
    }
}
