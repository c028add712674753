//! What the claims this process granted hold, as each claim found its rows:
//! one way a report loads the rows it names (module `report`), without
//! reading them back.
//!
//! It is only ever a hint. While a claim holds a row nothing but that
//! claim's own settlements changes it, and every settlement lowers the
//! claim's `held` count; so while `held` is what this process last saw, the
//! rows remembered here are exactly the rows the claim holds, as it found
//! them. The report's guarded statement checks that (and the claim's lease)
//! and writes nothing unless it holds. A claim granted by another replica,
//! evicted, or settled elsewhere is simply not found, or fails the check, and
//! the report reads the rows under the claim's lock instead.

use crate::fence::RowSnapshot;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use uuid::Uuid;

/// Past this many rows, the oldest claims are forgotten first.
const MAX_ROWS: usize = 50_000;

/// The rows of one claim not yet reported through this process, by key,
/// each as the claim found it, and the claim's `held` count as this process
/// last saw it.
#[derive(Debug)]
pub(crate) struct CachedClaim {
    pub ledger_id: i64,
    pub rows: HashMap<String, RowSnapshot>,
    pub held: i32,
    /// The claim's model.
    pub model: String,
    /// The claim's lane.
    pub lane: tally_core::lane::Lane,
}

#[derive(Debug, Default)]
struct Inner {
    claims: HashMap<Uuid, Arc<CachedClaim>>,
    /// Tokens in grant order (some may be gone already).
    order: VecDeque<Uuid>,
    rows: usize,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct ClaimCache {
    inner: Arc<Mutex<Inner>>,
    /// Reports whose cached claim had moved on (nothing written; read again
    /// under the claim's lock).
    misses: Arc<AtomicU64>,
}

impl ClaimCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a report that found its cached claim moved on.
    pub fn missed(&self) {
        self.misses.fetch_add(1, Ordering::Relaxed);
    }

    /// Reports that found their cached claim moved on, since start.
    pub fn misses(&self) -> u64 {
        self.misses.load(Ordering::Relaxed)
    }

    /// Remembers what claim `token` took.
    pub fn insert(&self, token: Uuid, held: CachedClaim) {
        let n = held.rows.len();
        if n == 0 || n > MAX_ROWS {
            return;
        }
        let mut inner = self.lock();
        while inner.rows + n > MAX_ROWS {
            let Some(oldest) = inner.order.pop_front() else {
                break;
            };
            if let Some(gone) = inner.claims.remove(&oldest) {
                inner.rows -= gone.rows.len();
            }
        }
        if inner.order.len() > 2 * inner.claims.len() + 1024 {
            // Mostly tokens forgotten since: drop them.
            let Inner { claims, order, .. } = &mut *inner;
            order.retain(|t| claims.contains_key(t));
        }
        inner.rows += n;
        inner.order.push_back(token);
        inner.claims.insert(token, Arc::new(held));
    }

    pub fn get(&self, token: Uuid) -> Option<Arc<CachedClaim>> {
        self.lock().claims.get(&token).cloned()
    }

    /// Notes that a report through this process settled `keys` of claim
    /// `token`, after which the claim holds `held` rows. Forgets the claim
    /// when it holds none, or when another report of it is in flight here
    /// (that one then finds the claim changed and reads it back).
    pub fn settled<'k>(&self, token: Uuid, keys: impl Iterator<Item = &'k str>, held: i32) {
        let mut inner = self.lock();
        let Some(entry) = inner.claims.remove(&token) else {
            return;
        };
        let before = entry.rows.len();
        let kept = match Arc::try_unwrap(entry) {
            Ok(mut h) if held > 0 => {
                for k in keys {
                    h.rows.remove(k);
                }
                h.held = held;
                Some(h)
            }
            _ => None,
        };
        inner.rows -= before;
        if let Some(h) = kept {
            inner.rows += h.rows.len();
            inner.claims.insert(token, Arc::new(h));
        }
    }

    /// Forgets claim `token` (its rows were reported, or the hint failed).
    pub fn forget(&self, token: Uuid) {
        let mut inner = self.lock();
        if let Some(gone) = inner.claims.remove(&token) {
            inner.rows -= gone.rows.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(n: usize) -> CachedClaim {
        let rows = (0..n)
            .map(|i| {
                let key = format!("k{i}");
                let row = RowSnapshot {
                    id: i as i64,
                    key: key.clone(),
                    provider_failures: 0,
                    content_failures: 0,
                    infra_failures: 0,
                    attempts: 0,
                    last_claim_id: None,
                };
                (key, row)
            })
            .collect();
        CachedClaim {
            ledger_id: 1,
            rows,
            held: n as i32,
            model: "m".into(),
            lane: tally_core::lane::Lane::Batch,
        }
    }

    #[test]
    fn holds_at_most_max_rows_forgetting_the_oldest_claims_first() {
        let cache = ClaimCache::default();
        let tokens: Vec<Uuid> = (0..5).map(|_| Uuid::new_v4()).collect();
        for t in &tokens {
            cache.insert(*t, held(MAX_ROWS / 4));
        }
        assert!(cache.get(tokens[0]).is_none());
        assert!(cache.get(tokens[1]).is_some());
        assert!(cache.get(tokens[4]).is_some());
        assert!(cache.lock().rows <= MAX_ROWS);
        cache.forget(tokens[4]);
        assert!(cache.get(tokens[4]).is_none());
        assert_eq!(cache.lock().rows, 3 * (MAX_ROWS / 4));
    }

    #[test]
    fn forgotten_claims_do_not_pile_up_in_the_grant_order() {
        let cache = ClaimCache::default();
        for _ in 0..10_000 {
            let t = Uuid::new_v4();
            cache.insert(t, held(1));
            cache.forget(t);
        }
        let inner = cache.lock();
        assert!(inner.order.len() <= 1025, "{}", inner.order.len());
        assert_eq!((inner.claims.len(), inner.rows), (0, 0));
    }

    #[test]
    fn a_settlement_keeps_the_rest_and_forgets_a_claim_that_holds_nothing() {
        let cache = ClaimCache::default();
        let t = Uuid::new_v4();
        cache.insert(t, held(4));
        cache.settled(t, ["k0", "k1"].into_iter(), 2);
        let h = cache.get(t).expect("two rows left");
        assert_eq!((h.held, h.rows.len()), (2, 2));
        assert!(h.rows.contains_key("k2") && !h.rows.contains_key("k0"));
        drop(h);
        assert_eq!(cache.lock().rows, 2);
        cache.settled(t, ["k2", "k3"].into_iter(), 0);
        assert!(cache.get(t).is_none());
        assert_eq!(cache.lock().rows, 0);
    }

    #[test]
    fn a_settlement_while_another_report_reads_the_claim_forgets_it() {
        let cache = ClaimCache::default();
        let t = Uuid::new_v4();
        cache.insert(t, held(4));
        let in_flight = cache.get(t);
        cache.settled(t, ["k0"].into_iter(), 3);
        assert!(cache.get(t).is_none());
        assert_eq!(cache.lock().rows, 0);
        drop(in_flight);
    }

    #[test]
    fn a_claim_larger_than_the_cache_is_not_kept() {
        let cache = ClaimCache::default();
        let t = Uuid::new_v4();
        cache.insert(t, held(MAX_ROWS + 1));
        assert!(cache.get(t).is_none());
        assert_eq!(cache.lock().rows, 0);
    }
}
