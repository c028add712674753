//! `tallyctl ledgers archive LEDGER -o FILE`: export, then delete.
//!
//! Nothing is deleted unless the archive is whole: the export must end
//! complete (every page written, the file and its directory fsynced), and
//! the ledger must be as it was when the export began. The delete carries
//! the content etag and the etag read before the export, and the server
//! checks them in the delete's own transaction, holding enrollments and
//! redrives off meanwhile (FAILED_PRECONDITION LEDGER_CHANGED, ABORTED), so
//! rows enrolled, answered or redriven during the export are never deleted
//! unarchived, however late they come. (The counts are also compared
//! before the delete is sent, for a clearer message.) A ledger with RUNNING
//! rows or open jobs is refused before anything is written: their answers
//! would miss the archive.

use crate::cli::ExportArgs;
use crate::commands::{export, ledger_delete, rows};
use crate::error::{CliError, ExitCode};
use crate::{Ctx, ledger_name};
use std::path::PathBuf;
use tally_proto::v1 as pb;

pub struct Archive {
    pub ledger: String,
    pub output: PathBuf,
    pub format: crate::export::ExportFormat,
    pub wait: bool,
}

/// What must not change between the start of the export and the delete.
#[derive(Debug, PartialEq, Eq)]
struct Fingerprint {
    counts: [i64; 7],
    attempts: i64,
    active_jobs: i64,
}

impl From<&pb::LedgerSummary> for Fingerprint {
    fn from(s: &pb::LedgerSummary) -> Self {
        Fingerprint {
            counts: [
                s.total,
                s.pending,
                s.running,
                s.retryable,
                s.succeeded,
                s.permanent,
                s.blocked,
            ],
            attempts: s.attempts_total,
            active_jobs: s.active_jobs,
        }
    }
}

/// Why a ledger cannot be archived now, if it cannot.
fn busy(s: &pb::LedgerSummary) -> Option<String> {
    (s.running > 0 || s.active_jobs > 0).then(|| {
        format!(
            "{} has {} RUNNING rows and {} open jobs: their answers would miss the archive; \
             stop the workers or let the jobs finish, then archive",
            s.ledger, s.running, s.active_jobs
        )
    })
}

pub async fn run(ctx: &mut Ctx, a: Archive) -> Result<ExitCode, CliError> {
    if a.output.exists() {
        return Err(CliError::usage(format!(
            "{} exists: an archive is always a new file",
            a.output.display()
        )));
    }
    let name = ledger_name(&a.ledger);
    let etag = ctx
        .clients
        .ledgers
        .get_ledger(pb::GetLedgerRequest { name: name.clone() })
        .await
        .map_err(|s| CliError::server(format!("get {name}"), s))?
        .into_inner()
        .etag;
    let before = rows::summarize(ctx, &a.ledger).await?;
    if let Some(why) = busy(&before) {
        return Err(CliError::usage(why));
    }
    if before.content_etag.is_empty() {
        return Err(CliError::usage(format!(
            "the server gives {name} no content etag, so it cannot refuse a delete that \
             would lose rows written during the export; upgrade the server, or export and \
             delete by hand"
        )));
    }
    let exported = export::run(
        ctx,
        ExportArgs {
            ledger: a.ledger.clone(),
            format: a.format,
            output: Some(a.output.clone()),
            statuses: vec![],
            rule: None,
            model: None,
            prompt: None,
            after: None,
            page_size: 1000,
        },
    )
    .await?;
    if exported != ExitCode::Ok {
        eprintln!("the export did not complete: {name} was not deleted");
        return Ok(exported);
    }
    let after = rows::summarize(ctx, &a.ledger).await?;
    if Fingerprint::from(&before) != Fingerprint::from(&after) {
        return Err(CliError::usage(format!(
            "{name} changed while it was exported ({} → {}): it was not deleted; \
             {} is kept; stop the enrollers and workers and archive again to a new file",
            before.summary_line,
            after.summary_line,
            a.output.display()
        )));
    }
    eprintln!(
        "archived {} rows of {name} to {}; deleting the ledger",
        after.total,
        a.output.display()
    );
    ledger_delete::run(
        ctx,
        ledger_delete::Delete {
            ledger: a.ledger,
            force: false,
            wait: a.wait,
            interval: "1s".into(),
            etag: Some(etag),
            content_etag: Some(before.content_etag),
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(running: i64, active_jobs: i64) -> pb::LedgerSummary {
        pb::LedgerSummary {
            ledger: "ledgers/l".into(),
            total: 10,
            succeeded: 10 - running,
            running,
            active_jobs,
            ..Default::default()
        }
    }

    /// Invariant: a ledger with work in flight is never archived (its
    /// answers would arrive after the export and be deleted unread).
    #[test]
    fn work_in_flight_refuses_the_archive() {
        assert!(busy(&summary(0, 0)).is_none());
        assert!(busy(&summary(2, 0)).unwrap().contains("2 RUNNING rows"));
        assert!(busy(&summary(0, 1)).unwrap().contains("1 open jobs"));
    }

    /// Invariant: any change of counts, attempts or jobs during the export
    /// shows in the fingerprint (so the delete is not sent).
    #[test]
    fn a_change_during_the_export_is_seen() {
        let a = summary(0, 0);
        assert_eq!(Fingerprint::from(&a), Fingerprint::from(&a.clone()));
        let mut b = a.clone();
        b.total += 1;
        assert_ne!(Fingerprint::from(&a), Fingerprint::from(&b));
        let mut c = a.clone();
        c.attempts_total += 1;
        assert_ne!(Fingerprint::from(&a), Fingerprint::from(&c));
    }
}
