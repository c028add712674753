//! The tally server under test runs as a child process (this binary in
//! `serve` mode), so its resident memory is its own and is sampled from
//! /proc while the workloads run.

use anyhow::{Context as _, bail};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

pub struct Server {
    child: Child,
    pub addr: String,
    /// Its `/metrics` listener, `127.0.0.1:port`.
    pub metrics: String,
    pub peak_rss_kib: Arc<AtomicU64>,
    sampler: tokio::task::JoinHandle<()>,
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Resident set size of a process, in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

impl Server {
    pub async fn start(database_url: &str) -> anyhow::Result<Self> {
        let port = free_port()?;
        let metrics_port = free_port()?;
        let exe = std::env::current_exe()?;
        let child = Command::new(exe)
            .args([
                "serve",
                "--database-url",
                database_url,
                "--port",
                &port.to_string(),
                "--metrics-port",
                &metrics_port.to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("spawn the server")?;
        let addr = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(channel) = tonic::transport::Endpoint::from_shared(addr.clone())?
                .connect()
                .await
            {
                let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
                let ok = health
                    .check(tonic_health::pb::HealthCheckRequest::default())
                    .await
                    .map(|r| r.into_inner().status == 1)
                    .unwrap_or(false);
                if ok {
                    break;
                }
            }
            if Instant::now() > deadline {
                bail!("the server did not become healthy within a minute");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let pid = child.id().context("server pid")?;
        let peak = Arc::new(AtomicU64::new(0));
        let sampler_peak = peak.clone();
        let sampler = tokio::spawn(async move {
            while let Some(kib) = rss_kib(pid) {
                sampler_peak.fetch_max(kib, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        Ok(Self {
            child,
            addr,
            metrics: format!("127.0.0.1:{metrics_port}"),
            peak_rss_kib: peak,
            sampler,
        })
    }

    pub fn rss_now_kib(&self) -> u64 {
        self.child.id().and_then(rss_kib).unwrap_or(0)
    }

    pub fn peak_rss_mib(&self) -> f64 {
        self.peak_rss_kib.load(Ordering::Relaxed) as f64 / 1024.0
    }

    pub async fn stop(mut self) -> anyhow::Result<()> {
        self.sampler.abort();
        if let Some(pid) = self.child.id() {
            // SIGTERM: the server drains and exits.
            // SAFETY: kill(2) on our own child's pid has no memory effects.
            unsafe {
                libc::kill(pid as i32, libc::SIGTERM);
            }
        }
        let _ = tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await;
        Ok(())
    }
}

/// `serve` mode: run a tally server until SIGTERM.
pub async fn serve(database_url: String, port: u16, metrics_port: u16) -> anyhow::Result<()> {
    let mut args = tally_server::config::ServeArgs::for_tests(database_url);
    args.grpc_addr = format!("127.0.0.1:{port}").parse()?;
    args.metrics_addr = format!("127.0.0.1:{metrics_port}").parse()?;
    args.db_max_connections = 16;
    // The bench is one principal making thousands of calls a second (the
    // single-row phases): the per-principal rate check still runs, at a
    // rate it never reaches.
    args.limits.principal_call_rate = u32::MAX;
    // The online phase's account: its requests per minute, no token limit.
    args.provider.provider_rpm = vec![crate::online::RPM.to_string()];
    args.provider.provider_tpm = vec!["0".into()];
    let running = tally_server::startup::server::start(args).await?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    running.stop().await
}
