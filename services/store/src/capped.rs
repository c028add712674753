//! The claim of a ledger with a spend cap (rules in `tally_core::spend`):
//! under the ledger's `ledger_spend` lock, the claim takes rows as any
//! claim does, estimates each, keeps the ones that fit under the cap
//! (counting spent and reserved), gives the rest back unworked in the same
//! transaction, and reserves the estimate of what it kept. A claim for
//! which nothing fits takes nothing and pauses the ledger (reason
//! `spend_cap`); claims granted before still become jobs (see
//! `tally_core::pause::allowed_while_paused`). Alerts go out at the warning
//! fraction and when the cap is reached.

use crate::claims::{self, Taken};
use crate::pause::PauseLedger;
use crate::spend::{self, Locked};
use crate::types::{ClaimGrant, ClaimRequest, LedgerRecord};
use crate::{Result, Store, fence, settle};
use tally_core::pause::PauseReason;
use tally_core::spend::{self as rules, Amount, Level, RowSize, SpendCap};
use tally_core::transition::Event;
use uuid::Uuid;

/// Who pauses a ledger at its cap.
const ACTOR: &str = "tally (spend cap)";

impl Store {
    /// [`Store::claim_rows`] for a ledger with a spend cap.
    pub(crate) async fn claim_capped(
        &self,
        record: &LedgerRecord,
        cap: SpendCap,
        req: &ClaimRequest,
    ) -> Result<Option<ClaimGrant>> {
        if let Some(grant) = self.replay_claim(record.id, req).await? {
            return Ok(Some(grant));
        }
        self.rescue_if_due(record.id).await?;
        let mut tx = self.begin().await?;
        // Capped claims of a ledger take turns (and so do retries of one
        // request id): each decides against the spend the previous left.
        let account = spend::lock(&mut tx, record.id).await?;
        if let Some(grant) = self.replay_claim(record.id, req).await? {
            return Ok(Some(grant));
        }
        let used = account.used();
        if cap.level(used) == Level::Reached {
            let message = rules::pause_message(&cap, used, None);
            self.reached(&mut tx, record, &cap, &account, &message)
                .await?;
            tx.commit().await?;
            return Err(self.pause_at_cap(record, &message).await);
        }
        let token = Uuid::new_v4();
        let mut taken = claims::take_rows(&mut *tx, record, req, token, false).await?;
        if taken.paused() {
            drop(tx);
            return Err(self.paused(&record.name).await);
        }
        let estimates = estimates(&mut tx, record, &cap, &taken, req.lane).await?;
        let (fit, reserved) = cap.take_fitting(used, &estimates);
        let n = estimates.len();
        if n == 0 {
            tx.commit().await?;
            return self.granted(record, req, token, taken);
        }
        if fit == 0 {
            let unpriced = estimates[0].is_none().then(|| taken.model_at(0)).flatten();
            // Nothing fits: nothing is taken.
            tx.rollback().await?;
            let message = rules::pause_message(&cap, used, unpriced.as_deref());
            let mut tx = self.begin().await?;
            let account = spend::lock(&mut tx, record.id).await?;
            self.reached(&mut tx, record, &cap, &account, &message)
                .await?;
            tx.commit().await?;
            return Err(self.pause_at_cap(record, &message).await);
        }
        if fit < n {
            // The claim stands with the rows that fit; the next one finds
            // nothing fits and pauses the ledger.
            let keys = taken.keys_from(fit);
            let rows = fence::lock_held_rows(&mut tx, token, Some(&keys)).await?;
            let writes = settle::transitions(&rows, &Event::Release, &record.policy)?;
            settle::settle(&mut tx, record.id, token, &writes, settle::Settler::SYSTEM).await?;
            taken.truncate(fit);
        }
        self.warn_if_due(&mut tx, record, &cap, &account, reserved)
            .await?;
        spend::reserve(&mut tx, record.id, token, per_row(reserved, fit)).await?;
        tx.commit().await?;
        self.granted(record, req, token, taken)
    }

    /// Pauses the ledger at its cap; answers the LEDGER_PAUSED error a
    /// claim that got nothing returns.
    async fn pause_at_cap(&self, record: &LedgerRecord, message: &str) -> crate::StoreError {
        let paused = self
            .pause_ledger(&PauseLedger {
                ledger: &record.name,
                reason: PauseReason::SpendCap,
                message,
                actor: ACTOR,
                etag: None,
            })
            .await;
        match paused {
            Ok(_) => self.paused(&record.name).await,
            Err(e) => e,
        }
    }

    /// The cap-reached alert, once per crossing.
    async fn reached(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
        record: &LedgerRecord,
        cap: &SpendCap,
        account: &Locked,
        message: &str,
    ) -> Result<()> {
        if account.alerted >= 2 {
            return Ok(());
        }
        tracing::warn!(ledger = %record.name, message, "spend cap reached");
        let body = rules::alert_body(
            &record.name,
            rules::ALERT_REACHED,
            cap,
            account.spent,
            account.reserved,
            message,
            chrono::Utc::now(),
        );
        spend::alert(tx, record, 2, rules::ALERT_REACHED, &body).await
    }

    /// The warning alert when this claim takes the ledger past the warning
    /// fraction; re-arms the alerts when the spend is below it again.
    async fn warn_if_due(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
        record: &LedgerRecord,
        cap: &SpendCap,
        account: &Locked,
        reserved: Amount,
    ) -> Result<()> {
        let after = account.used().plus(reserved);
        match cap.level(after) {
            Level::Below if account.alerted > 0 => spend::rearm(tx, record.id).await,
            Level::Warning | Level::Reached if account.alerted == 0 => {
                let message = format!(
                    "spend passed {:.0}% of a limit: {}",
                    cap.warn_fraction * 100.0,
                    rules::pause_message(cap, after, None)
                );
                let body = rules::alert_body(
                    &record.name,
                    rules::ALERT_WARNING,
                    cap,
                    account.spent,
                    account.reserved.plus(reserved),
                    &message,
                    chrono::Utc::now(),
                );
                spend::alert(tx, record, 1, rules::ALERT_WARNING, &body).await
            }
            _ => Ok(()),
        }
    }
}

/// Each taken row's estimate (`None`: it cannot be estimated).
async fn estimates(
    tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
    record: &LedgerRecord,
    cap: &SpendCap,
    taken: &Taken,
    lane: tally_core::lane::Lane,
) -> Result<Vec<Option<Amount>>> {
    let rows = taken.sizes();
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let (names, versions): (Vec<String>, Vec<String>) = rows
        .iter()
        .map(|r| (r.prompt_name.to_string(), r.prompt_version.to_string()))
        .unzip();
    let prompts = spend::prompt_bytes(tx, &names, &versions).await?;
    Ok(rows
        .iter()
        .map(|r| {
            let prompt_bytes = prompts
                .get(&(r.prompt_name.to_string(), r.prompt_version.to_string()))
                .copied()
                .unwrap_or(0);
            cap.estimate(
                RowSize {
                    payload_bytes: r.payload_bytes,
                    prompt_bytes,
                },
                record.policy.price_in(r.model, lane).as_ref(),
            )
        })
        .collect())
}

/// A claim's reservation per row: the average of its rows' estimates.
fn per_row(total: Amount, rows: usize) -> Amount {
    let n = rows.max(1) as i64;
    Amount {
        cost_usd: total.cost_usd / n as f64,
        input_tokens: (total.input_tokens + n - 1) / n,
        output_tokens: (total.output_tokens + n - 1) / n,
    }
}
