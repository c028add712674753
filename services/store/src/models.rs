//! The (ledger, model) pairs this process knows are listed in
//! `ledger_models`, so an enrollment of rows whose models are already listed
//! skips that insert. A pair is remembered only after the transaction that
//! listed it committed, and pairs are never removed from the table, so a
//! remembered pair is always true.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

/// Past this many pairs the set starts over (it only saves work).
const MAX_PAIRS: usize = 100_000;

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
        let mut distinct: Vec<&str> = Vec::new();
        for m in models {
            if !distinct.contains(&m) {
                distinct.push(m);
            }
        }
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
