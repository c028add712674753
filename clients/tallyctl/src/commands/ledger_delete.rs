//! `tallyctl ledgers delete LEDGER [--force] [--wait]`: DeleteLedger, then
//! (with `--wait`) GetLedger every `--interval` until the purge has
//! finished: a progress bar on a terminal, a line per change otherwise.

use crate::error::{CliError, ExitCode};
use crate::{Ctx, ledger_name, render};
use tally_proto::v1 as pb;
use tonic::Code;

pub struct Delete {
    pub ledger: String,
    pub force: bool,
    pub wait: bool,
    pub interval: String,
    pub etag: Option<String>,
    /// The content etag read before an export: the server refuses the
    /// delete (LEDGER_CHANGED) if any row changed since.
    pub content_etag: Option<String>,
}

pub async fn run(ctx: &mut Ctx, d: Delete) -> Result<ExitCode, CliError> {
    let interval = humantime::parse_duration(&d.interval)
        .map_err(|e| CliError::usage(format!("--interval: {e}")))?;
    if interval.is_zero() {
        return Err(CliError::usage("--interval must be more than 0"));
    }
    let name = ledger_name(&d.ledger);
    let marked = ctx
        .clients
        .ledgers
        .delete_ledger(pb::DeleteLedgerRequest {
            name: name.clone(),
            force: d.force,
            etag: d.etag.unwrap_or_default(),
            content_etag: d.content_etag.unwrap_or_default(),
        })
        .await
        .map_err(|s| CliError::server(format!("delete {name}"), s))?
        .into_inner();
    if !d.wait {
        if ctx.json {
            ctx.print_json(&render::ledger_json(&marked));
        } else {
            println!(
                "{name} is being deleted ({}); `tallyctl ledgers get {}` shows the purge",
                render::purge_progress(&marked),
                d.ledger
            );
        }
        return Ok(ExitCode::Ok);
    }
    let last = wait_for_purge(ctx, &name, marked, interval).await?;
    if ctx.json {
        let mut doc = render::ledger_json(&last);
        doc["state"] = serde_json::Value::String("DELETED".into());
        ctx.print_json(&doc);
    } else {
        println!("{name} deleted");
    }
    Ok(ExitCode::Ok)
}

/// Polls until GetLedger answers NOT_FOUND (or a ledger that is not being
/// deleted: a new one took the freed name); answers the last DELETING view.
async fn wait_for_purge(
    ctx: &mut Ctx,
    name: &str,
    mut last: pb::Ledger,
    interval: std::time::Duration,
) -> Result<pb::Ledger, CliError> {
    let bar = ctx.progress(Some(0));
    bar.set_message(format!("deleting {name}"));
    let lines = !ctx.interactive && !ctx.json;
    let mut shown = None;
    let mut ticker = tokio::time::interval(interval);
    loop {
        let purged = last.purge.as_ref().map_or(0, |p| p.rows_purged);
        if let Some(total) = last.purge.as_ref().and_then(|p| p.rows_total) {
            bar.set_length(total.max(0) as u64);
        }
        bar.set_position(purged.max(0) as u64);
        if lines && shown != Some(purged) {
            println!("deleting {name}: {}", render::purge_progress(&last));
            shown = Some(purged);
        }
        ticker.tick().await;
        match ctx
            .clients
            .ledgers
            .get_ledger(pb::GetLedgerRequest {
                name: name.to_string(),
            })
            .await
        {
            Ok(l) if l.get_ref().state == pb::LedgerState::Deleting as i32 => last = l.into_inner(),
            Ok(_) => break,
            Err(s) if s.code() == Code::NotFound => break,
            Err(s) => {
                bar.abandon();
                return Err(CliError::server(format!("get {name}"), s));
            }
        }
    }
    bar.finish_and_clear();
    Ok(last)
}
