//! The results log (`result_log`): every final result (a row settled
//! SUCCEEDED or PERMANENT) appended at commit, in commit order per ledger,
//! for consumers to read ([`crate::consumers`]; the rules are
//! `tally_core::delivery`).
//!
//! The settle statement answers the rows it finished with their result
//! versions; a transaction collects them in a [`Finished`] and logs them as
//! its last statements ([`Finished::log`]): the ledger's ordering lock
//! ([`crate::event_log::order_results`]), then one entry per ledger. The
//! lock is held from there to the commit, so entries are numbered in commit
//! order and a consumer's cursor never passes an entry still to commit.
//! Taken last, after every row lock and after the job log's lock, it cannot
//! be part of a deadlock.

use crate::{Result, event_log, reanswer};
use sqlx::{Postgres, Transaction};
use std::collections::BTreeMap;
use tally_core::delivery;

/// Rows a transaction finished, by ledger, in the order settled: to log
/// before it commits. Every transaction that settles rows makes one and
/// calls [`Finished::log`] last.
#[derive(Debug, Default)]
pub(crate) struct Finished {
    by_ledger: BTreeMap<i64, (Vec<i64>, Vec<i32>)>,
}

impl Finished {
    /// Adds rows `ids` of ledger `ledger_id`, finished at `versions`.
    pub fn add(&mut self, ledger_id: i64, ids: Vec<i64>, versions: Vec<i32>) {
        if ids.is_empty() {
            return;
        }
        let (all_ids, all_versions) = self.by_ledger.entry(ledger_id).or_default();
        all_ids.extend(ids);
        all_versions.extend(versions);
    }

    pub fn is_empty(&self) -> bool {
        self.by_ledger.is_empty()
    }

    /// Appends the rows to their ledgers' logs: the transaction's last
    /// statements (see the module documentation). First, rows finished
    /// at a later version than their first (answered again) have their
    /// dependants that used another answer asked again or marked
    /// ([`reanswer::dependants_changed`]).
    pub async fn log(self, tx: &mut Transaction<'static, Postgres>) -> Result<()> {
        if self.by_ledger.is_empty() {
            return Ok(());
        }
        for (ledger_id, (ids, versions)) in &self.by_ledger {
            let again: Vec<i64> = ids
                .iter()
                .zip(versions)
                .filter(|(_, v)| **v > delivery::FIRST_VERSION)
                .map(|(id, _)| *id)
                .collect();
            if !again.is_empty() {
                reanswer::dependants_changed(tx, *ledger_id, &again).await?;
            }
        }
        let ledgers: Vec<i64> = self.by_ledger.keys().copied().collect();
        event_log::order_results(tx, &ledgers).await?;
        for (ledger_id, (ids, versions)) in &self.by_ledger {
            for (ids, versions) in delivery::entries(ids).zip(delivery::entries(versions)) {
                append(tx, *ledger_id, ids, versions).await?;
            }
        }
        Ok(())
    }
}

/// One entry; `upto` continues the ledger's last entry's, read under the
/// ledger's ordering lock (this transaction holds it), so it is exact.
async fn append(
    tx: &mut Transaction<'static, Postgres>,
    ledger_id: i64,
    ids: &[i64],
    versions: &[i32],
) -> Result<()> {
    sqlx::query(
        "INSERT INTO result_log (ledger_id, row_ids, versions, n, upto)
         SELECT $1, $2, $3, cardinality($2),
                coalesce((SELECT upto FROM result_log WHERE ledger_id = $1
                          ORDER BY seq DESC LIMIT 1), 0) + cardinality($2)",
    )
    .bind(ledger_id)
    .bind(ids)
    .bind(versions)
    .execute(&mut **tx)
    .await?;
    Ok(())
}
