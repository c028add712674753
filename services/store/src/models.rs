//! The (ledger, model) pairs this process knows are listed in
//! `ledger_models`, so an enrollment of rows whose models are already listed
//! skips that insert. A pair is remembered only after the transaction that
//! listed it committed, and pairs are never removed from the table, so a
//! remembered pair is always true.

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use sqlx::PgPool;

use crate::Result;

/// Records the provider of every listed model that has none (listed before
/// providers were recorded: migration 0005), by the rule
/// `tally_core::provider::route`. A few distinct models; run at startup.
pub(crate) async fn route_listed(pool: &PgPool) -> Result<()> {
    let models: Vec<String> =
        sqlx::query_scalar("SELECT DISTINCT model FROM ledger_models WHERE provider IS NULL")
            .fetch_all(pool)
            .await?;
    if models.is_empty() {
        return Ok(());
    }
    let providers: Vec<String> = models
        .iter()
        .map(|m| tally_core::provider::provider_of(m).to_owned())
        .collect();
    sqlx::query(
        "UPDATE ledger_models m SET provider = t.provider \
         FROM unnest($1::text[], $2::text[]) AS t(model, provider) \
         WHERE m.model = t.model AND m.provider IS NULL",
    )
    .bind(&models)
    .bind(&providers)
    .execute(pool)
    .await?;
    tracing::info!(
        models = models.len(),
        "providers recorded for models listed before them"
    );
    Ok(())
}

/// Past this many pairs the set starts over (it only saves work).
const MAX_PAIRS: usize = 100_000;

/// The distinct items in first-seen order, in one pass (an enrollment of
/// 10,000 rows with 10,000 models once took 50 million comparisons).
fn distinct<T: Eq + Hash + Copy>(items: impl IntoIterator<Item = T>) -> Vec<T> {
    let mut seen = HashSet::new();
    items.into_iter().filter(|x| seen.insert(*x)).collect()
}

#[derive(Clone, Debug, Default)]
pub(crate) struct KnownModels(Arc<Mutex<HashSet<(i64, String)>>>);

impl KnownModels {
    /// The distinct models among `models` not known to be listed for the
    /// ledger, in first-seen order.
    pub(crate) fn unknown<'a>(
        &self,
        ledger_id: i64,
        models: impl IntoIterator<Item = &'a str>,
    ) -> Vec<&'a str> {
        let mut distinct = distinct(models);
        let known = self.0.lock().unwrap_or_else(|p| p.into_inner());
        distinct.retain(|m| !known.contains(&(ledger_id, m.to_string())));
        distinct
    }

    /// Remembers pairs whose listing has committed.
    pub(crate) fn remember(&self, ledger_id: i64, models: &[&str]) {
        let mut known = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if known.len() + models.len() > MAX_PAIRS {
            known.clear();
        }
        known.extend(models.iter().map(|m| (ledger_id, m.to_string())));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    thread_local! {
        static COMPARED: Cell<usize> = const { Cell::new(0) };
    }

    /// An id that counts how often it is compared.
    #[derive(Clone, Copy)]
    struct Counted(u32);

    impl Hash for Counted {
        fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
            self.0.hash(h);
        }
    }

    impl PartialEq for Counted {
        fn eq(&self, other: &Self) -> bool {
            COMPARED.with(|c| c.set(c.get() + 1));
            self.0 == other.0
        }
    }

    impl Eq for Counted {}

    /// Invariant: de-duplicating n models takes O(n) comparisons, not
    /// O(n^2), and keeps first-seen order.
    #[test]
    fn distinct_is_linear_and_keeps_order() {
        let n = 10_000;
        let items = (0..n).chain(0..n).map(Counted);
        COMPARED.with(|c| c.set(0));
        let out = distinct(items);
        let compared = COMPARED.with(Cell::get);
        assert_eq!(out.len(), n as usize);
        assert!(out.iter().enumerate().all(|(i, c)| c.0 as usize == i));
        assert!(
            compared < 4 * n as usize,
            "{compared} comparisons for {n} distinct items"
        );
    }

    #[test]
    fn only_unremembered_models_of_that_ledger_are_unknown_once_each() {
        let k = KnownModels::default();
        assert_eq!(k.unknown(1, ["a", "b", "a"]), vec!["a", "b"]);
        k.remember(1, &["a"]);
        assert_eq!(k.unknown(1, ["a", "b", "a"]), vec!["b"]);
        assert_eq!(
            k.unknown(2, ["a"]),
            vec!["a"],
            "another ledger's pair is not ours"
        );
    }
}
