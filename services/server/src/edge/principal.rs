//! Per-principal limits: what one caller (a token's name, a client
//! certificate's subject) may take from everyone else, over all of its
//! connections at once. The per-connection limit alone lets a caller open
//! more connections; these follow the caller.
//!
//! - **Calls in flight** (`--max-calls-per-principal`): unary calls and
//!   streams at once; one more is RESOURCE_EXHAUSTED `PRINCIPAL_CALL_LIMIT`.
//! - **Call rate** (`--principal-call-rate`, calls per second, with a
//!   burst of as many): RESOURCE_EXHAUSTED `RATE_LIMITED` with a RetryInfo
//!   saying when the next call fits.
//! - **Byte rate** (`--principal-byte-rate`, request bytes per second, with
//!   a burst of one largest request or one second, whichever is more):
//!   the same refusal, decided from a request's length prefix before its
//!   body is read (by the intake layer).
//!
//! Tokens sharing a name are one principal. Without authentication there
//! is no principal (every caller is `anonymous`, the whole server): the
//! server-wide limits apply. Health is never counted.

use crate::config::Limits;
use crate::edge::status;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tonic::{Code, Status};

/// A token bucket: up to `burst` at once, refilled at `rate` a second.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(burst: f64, now: Instant) -> Self {
        Self {
            tokens: burst,
            at: now,
        }
    }

    /// Takes `n`, or says how long until `n` are there.
    fn take(&mut self, n: f64, rate: f64, burst: f64, now: Instant) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate).min(burst);
        self.at = now;
        if self.tokens >= n {
            self.tokens -= n;
            Ok(())
        } else {
            Err(Duration::from_secs_f64(
                ((n - self.tokens) / rate).max(0.001),
            ))
        }
    }
}

#[derive(Debug)]
struct Entry {
    in_flight: usize,
    calls: Bucket,
    bytes: Bucket,
}

/// The per-principal limits and what each principal holds now.
#[derive(Clone)]
pub struct Principals {
    inner: Arc<Inner>,
}

struct Inner {
    max_in_flight: usize,
    call_rate: f64,
    byte_rate: f64,
    byte_burst: f64,
    table: Mutex<HashMap<String, Entry>>,
}

/// A principal's call in flight; dropping it frees the slot.
pub struct Slot {
    inner: Arc<Inner>,
    name: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut table = self.inner.table.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = table.get_mut(&self.name) {
            e.in_flight = e.in_flight.saturating_sub(1);
        }
    }
}

/// Refuses per-principal limits that would make the server unusable.
pub fn check(limits: &Limits) -> Result<(), String> {
    if limits.max_calls_per_principal == 0 {
        return Err("--max-calls-per-principal must be at least 1".into());
    }
    if limits.principal_call_rate == 0 || limits.principal_byte_rate == 0 {
        return Err("--principal-call-rate and --principal-byte-rate must be at least 1".into());
    }
    Ok(())
}

/// Entries kept before idle ones (nothing in flight, buckets full again)
/// are dropped.
const PRUNE_AT: usize = 4096;

impl Principals {
    pub fn new(limits: &Limits) -> Self {
        let byte_rate = limits.principal_byte_rate as f64;
        // One largest request (with its prefix) must always fit.
        let byte_burst = byte_rate.max((limits.max_message_bytes + 5) as f64);
        Self {
            inner: Arc::new(Inner {
                max_in_flight: limits.max_calls_per_principal,
                call_rate: limits.principal_call_rate as f64,
                byte_rate,
                byte_burst,
                table: Mutex::new(HashMap::new()),
            }),
        }
    }

    fn with_entry<T>(&self, name: &str, f: impl FnOnce(&Inner, &mut Entry) -> T) -> T {
        let i = &self.inner;
        let now = Instant::now();
        let mut table = i.table.lock().unwrap_or_else(|e| e.into_inner());
        if table.len() >= PRUNE_AT && !table.contains_key(name) {
            table.retain(|_, e| {
                let idle = now.saturating_duration_since(e.calls.at).as_secs_f64();
                e.in_flight > 0
                    || e.calls.tokens + idle * i.call_rate < i.call_rate
                    || e.bytes.tokens + idle * i.byte_rate < i.byte_burst
            });
        }
        let entry = table.entry(name.to_string()).or_insert_with(|| Entry {
            in_flight: 0,
            calls: Bucket::full(i.call_rate, now),
            bytes: Bucket::full(i.byte_burst, now),
        });
        f(i, entry)
    }

    /// Admits one call of principal `name` to `method`, or refuses it.
    pub fn admit(&self, name: &str, method: &str) -> Result<Slot, Status> {
        let now = Instant::now();
        self.with_entry(name, |i, e| {
            if e.in_flight >= i.max_in_flight {
                return Err(refused(
                    "PRINCIPAL_CALL_LIMIT",
                    "max_calls_per_principal",
                    i.max_in_flight.to_string(),
                    format!(
                        "{name} has {} calls in flight (max_calls_per_principal); wait for one \
                         to finish",
                        i.max_in_flight
                    ),
                    method,
                    Duration::from_secs(1),
                ));
            }
            if let Err(wait) = e.calls.take(1.0, i.call_rate, i.call_rate, now) {
                return Err(refused(
                    "RATE_LIMITED",
                    "principal_call_rate",
                    format!("{}", i.call_rate),
                    format!(
                        "{name} is over {} calls per second (principal_call_rate); retry after \
                         the RetryInfo delay",
                        i.call_rate
                    ),
                    method,
                    wait,
                ));
            }
            e.in_flight += 1;
            Ok(Slot {
                inner: self.inner.clone(),
                name: name.to_string(),
            })
        })
    }

    /// Takes `bytes` request bytes from principal `name`'s byte rate.
    pub fn take_bytes(&self, name: &str, bytes: usize, method: &str) -> Result<(), Status> {
        let now = Instant::now();
        self.with_entry(name, |i, e| {
            e.bytes
                .take(bytes as f64, i.byte_rate, i.byte_burst, now)
                .map_err(|wait| {
                    refused(
                        "RATE_LIMITED",
                        "principal_byte_rate",
                        format!("{}", i.byte_rate),
                        format!(
                            "{name} is over {} request bytes per second (principal_byte_rate); \
                             retry after the RetryInfo delay",
                            i.byte_rate
                        ),
                        method,
                        wait,
                    )
                })
        })
    }
}

fn refused(
    reason: &str,
    limit: &str,
    value: String,
    message: String,
    method: &str,
    retry: Duration,
) -> Status {
    tracing::warn!(method, reason, limit, "call refused");
    let meta = HashMap::from([
        ("method".to_string(), method.to_string()),
        ("limit".to_string(), limit.to_string()),
        ("value".to_string(), value),
    ]);
    status::refused(Code::ResourceExhausted, reason, message, meta, Some(retry))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic_types::StatusExt as _;

    fn limits() -> Limits {
        Limits {
            max_calls_per_principal: 2,
            principal_call_rate: 3,
            principal_byte_rate: 1000,
            max_message_bytes: 100,
            ..Limits::default()
        }
    }

    fn reason(s: &Status) -> String {
        s.get_error_details()
            .error_info()
            .map(|i| i.reason.clone())
            .unwrap_or_default()
    }

    /// Invariant: calls in flight are counted per principal, across
    /// connections, and freed when a call ends; other principals are not
    /// touched.
    #[tokio::test(start_paused = true)]
    async fn calls_in_flight_follow_the_principal() {
        let p = Principals::new(&limits());
        let a = p.admit("acme", "/m").unwrap();
        let _b = p.admit("acme", "/m").unwrap();
        let refused = p.admit("acme", "/m").err().unwrap();
        assert_eq!(refused.code(), Code::ResourceExhausted);
        assert_eq!(reason(&refused), "PRINCIPAL_CALL_LIMIT");
        let _c = p.admit("beta", "/m").unwrap();
        drop(a);
        tokio::time::advance(Duration::from_secs(1)).await;
        p.admit("acme", "/m").unwrap();
    }

    /// Invariant: the call rate refuses with a RetryInfo once the burst is
    /// spent, and refills with time.
    #[tokio::test(start_paused = true)]
    async fn the_call_rate_refills_with_time() {
        let p = Principals::new(&limits());
        for _ in 0..3 {
            drop(p.admit("acme", "/m").unwrap());
        }
        let refused = p.admit("acme", "/m").err().unwrap();
        assert_eq!(reason(&refused), "RATE_LIMITED");
        let wait = refused
            .get_error_details()
            .retry_info()
            .unwrap()
            .retry_delay;
        assert!(wait.is_some_and(|w| w > Duration::ZERO && w <= Duration::from_secs(1)));
        tokio::time::advance(Duration::from_millis(400)).await;
        drop(p.admit("acme", "/m").unwrap());
    }

    /// Invariant: request bytes are limited per principal; one largest
    /// request always fits a full bucket.
    #[tokio::test(start_paused = true)]
    async fn the_byte_rate_limits_request_bytes() {
        let mut l = limits();
        l.max_message_bytes = 5000;
        let p = Principals::new(&l);
        p.take_bytes("acme", 5005, "/m").unwrap();
        let refused = p.take_bytes("acme", 500, "/m").unwrap_err();
        assert_eq!(reason(&refused), "RATE_LIMITED");
        assert!(refused.message().contains("principal_byte_rate"));
        p.take_bytes("beta", 5005, "/m").unwrap();
        tokio::time::advance(Duration::from_secs(1)).await;
        p.take_bytes("acme", 500, "/m").unwrap();
    }
}
