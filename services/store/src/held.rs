//! What the claims this process granted hold, as each claim found its rows:
//! a report of those rows can then be decided without reading them back.
//!
//! It is only ever a hint. While a row is RUNNING under a claim nothing but
//! that claim's own settlement changes its counters, so a row still RUNNING
//! under the token when the report writes is exactly as the claim found it;
//! the report's guarded statement checks that (and the claim's lease) and
//! writes nothing unless every row passes. A claim granted by another
//! replica, evicted, or reported in part is simply not found, or fails the
//! check, and the report reads the rows as before.

use crate::claims::LockedRow;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use uuid::Uuid;

/// Past this many rows, the oldest claims are forgotten first.
const MAX_ROWS: usize = 50_000;

/// The rows of one claim by key, each as the claim found it.
#[derive(Debug)]
pub(crate) struct HeldRows {
    pub ledger_id: i64,
    pub rows: HashMap<String, LockedRow>,
}

#[derive(Debug, Default)]
struct Inner {
    claims: HashMap<Uuid, Arc<HeldRows>>,
    /// Tokens in grant order (some may be gone already).
    order: VecDeque<Uuid>,
    rows: usize,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct HeldCache(Arc<Mutex<Inner>>);

impl HeldCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Remembers what claim `token` took.
    pub fn insert(&self, token: Uuid, held: HeldRows) {
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

    pub fn get(&self, token: Uuid) -> Option<Arc<HeldRows>> {
        self.lock().claims.get(&token).cloned()
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

    fn held(n: usize) -> HeldRows {
        let rows = (0..n)
            .map(|i| {
                let key = format!("k{i}");
                let row = LockedRow {
                    id: i as i64,
                    key: key.clone(),
                    status: 2,
                    provider_failures: 0,
                    content_failures: 0,
                    infra_failures: 0,
                    attempts: 0,
                    claim_id: None,
                    last_claim_id: None,
                };
                (key, row)
            })
            .collect();
        HeldRows { ledger_id: 1, rows }
    }

    #[test]
    fn holds_at_most_max_rows_forgetting_the_oldest_claims_first() {
        let cache = HeldCache::default();
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
        let cache = HeldCache::default();
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
    fn a_claim_larger_than_the_cache_is_not_kept() {
        let cache = HeldCache::default();
        let t = Uuid::new_v4();
        cache.insert(t, held(MAX_ROWS + 1));
        assert!(cache.get(t).is_none());
        assert_eq!(cache.lock().rows, 0);
    }
}
