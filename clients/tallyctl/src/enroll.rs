//! The chunked enroller behind `tallyctl enroll` and `tallyctl plan
//! --enroll`: rows arrive one at a time from a streaming source (a file is
//! never loaded whole), go out in EnrollRows calls of at most `chunk` rows
//! and about `chunk_bytes` bytes, in source order (so a dependency listed
//! before its dependant is always enrolled before or with it), and the
//! per-row outcomes are totalled.
//!
//! A bad item stops the run: the rows before it are sent, nothing after it
//! (unless `skip_bad`, which reports it and goes on). Enrollment is
//! idempotent by key, so after fixing the input the same command can simply
//! be run again.

use crate::connect::Clients;
use crate::error::CliError;
use indicatif::ProgressBar;
use tally_proto::v1 as pb;

/// One item of a source: a row, or an input error, each with where it came
/// from (`line 17`, `node X`) and how far through the source it ends
/// (bytes, for the progress bar).
pub enum Item {
    Row {
        origin: String,
        row: pb::RowInput,
        position: u64,
    },
    Bad {
        origin: String,
        error: String,
        position: u64,
    },
}

#[derive(Debug, Clone)]
pub struct Options {
    pub chunk: usize,
    pub chunk_bytes: usize,
    pub skip_bad: bool,
    /// Parse and check everything, send nothing.
    pub dry_run: bool,
}

/// What happened, also when the run stopped early.
#[derive(Debug, Default, Clone)]
pub struct Report {
    /// Rows read and checked (sent, unless dry-run).
    pub rows: u64,
    pub enrolled: u64,
    pub already_present: u64,
    pub conflicts: u64,
    /// `(origin, key)` of each conflicting row.
    pub conflict_keys: Vec<(String, String)>,
    /// Bad items skipped (with `skip_bad`), or the one that stopped the run.
    pub bad: Vec<(String, String)>,
    pub calls: u64,
    /// Things said once at the end (e.g. models dropped for the ledger's).
    pub notes: Vec<String>,
}

impl Report {
    pub fn to_json(&self, dry_run: bool) -> serde_json::Value {
        serde_json::json!({
            "dry_run": dry_run,
            "rows": self.rows,
            "enrolled": self.enrolled,
            "already_present": self.already_present,
            "conflicts": self.conflicts,
            "conflict_keys": self.conflict_keys.iter().map(|(o, k)| serde_json::json!({"origin": o, "key": k})).collect::<Vec<_>>(),
            "bad": self.bad.iter().map(|(o, e)| serde_json::json!({"origin": o, "error": e})).collect::<Vec<_>>(),
            "calls": self.calls,
            "notes": self.notes,
        })
    }
}

struct Pending {
    rows: Vec<pb::RowInput>,
    origins: Vec<String>,
    bytes: usize,
}

/// Rough encoded size of a row (for the per-call byte bound).
fn row_bytes(r: &pb::RowInput) -> usize {
    r.key.len()
        + r.payload.len()
        + r.model.len()
        + r.depends_on.iter().map(|d| d.len() + 4).sum::<usize>()
        + r.prompt
            .as_ref()
            .map_or(0, |p| p.name.len() + p.version.len())
        + 16
}

/// `rows[3]` in a server field violation → the origin of the chunk's
/// fourth row.
fn locate(status: &tonic::Status, origins: &[String]) -> Vec<String> {
    use tonic_types::StatusExt;
    let mut out = Vec::new();
    let mut fields: Vec<String> = status
        .get_error_details()
        .bad_request()
        .map(|b| b.field_violations.iter().map(|v| v.field.clone()).collect())
        .unwrap_or_default();
    fields.push(status.message().to_string());
    for f in fields {
        for part in f.split("rows[").skip(1) {
            if let Some(Ok(i)) = part.split(']').next().map(str::parse::<usize>)
                && let Some(origin) = origins.get(i)
            {
                let note = format!("rows[{i}] is {origin}");
                if !out.contains(&note) {
                    out.push(note);
                }
            }
        }
    }
    out
}

async fn flush(
    clients: &mut Clients,
    parent: &str,
    pending: &mut Pending,
    report: &mut Report,
    dry_run: bool,
) -> Result<(), CliError> {
    if pending.rows.is_empty() {
        return Ok(());
    }
    let rows = std::mem::take(&mut pending.rows);
    let origins = std::mem::take(&mut pending.origins);
    pending.bytes = 0;
    if dry_run {
        return Ok(());
    }
    report.calls += 1;
    let resp = clients
        .ledgers
        .enroll_rows(pb::EnrollRowsRequest {
            parent: parent.to_string(),
            rows,
        })
        .await
        .map_err(|status| {
            let mut context = format!(
                "enrolling {} to {}",
                origins.first().map(String::as_str).unwrap_or("?"),
                origins.last().map(String::as_str).unwrap_or("?")
            );
            let located = locate(&status, &origins);
            if !located.is_empty() {
                context.push_str(&format!(" ({})", located.join(", ")));
            }
            CliError::server(context, status)
        })?
        .into_inner();
    report.enrolled += resp.enrolled.max(0) as u64;
    report.already_present += resp.already_present.max(0) as u64;
    report.conflicts += resp.conflicts.max(0) as u64;
    for (result, origin) in resp.results.iter().zip(&origins) {
        if result.outcome == pb::EnrollOutcome::Conflict as i32 {
            report
                .conflict_keys
                .push((origin.clone(), result.key.clone()));
        }
    }
    Ok(())
}

/// Runs a source to the end (or the first bad item / server error). On an
/// error the report so far comes back with it.
pub async fn run(
    clients: &mut Clients,
    parent: &str,
    items: impl Iterator<Item = Item>,
    options: &Options,
    progress: &ProgressBar,
) -> Result<Report, (Report, CliError)> {
    let mut report = Report::default();
    let mut pending = Pending {
        rows: Vec::new(),
        origins: Vec::new(),
        bytes: 0,
    };
    let chunk = options.chunk.max(1);
    for item in items {
        match item {
            Item::Row {
                origin,
                row,
                position,
            } => {
                let size = row_bytes(&row);
                if !pending.rows.is_empty()
                    && pending.bytes + size > options.chunk_bytes
                    && let Err(e) =
                        flush(clients, parent, &mut pending, &mut report, options.dry_run).await
                {
                    return Err((report, e));
                }
                report.rows += 1;
                pending.bytes += size;
                pending.rows.push(row);
                pending.origins.push(origin);
                if pending.rows.len() >= chunk
                    && let Err(e) =
                        flush(clients, parent, &mut pending, &mut report, options.dry_run).await
                {
                    return Err((report, e));
                }
                progress.set_position(position);
                progress.set_message(format!(
                    "{} rows: {} enrolled, {} present, {} conflicts",
                    report.rows, report.enrolled, report.already_present, report.conflicts
                ));
            }
            Item::Bad {
                origin,
                error,
                position,
            } => {
                report.bad.push((origin.clone(), error.clone()));
                progress.set_position(position);
                if options.skip_bad {
                    progress.suspend(|| eprintln!("skipped {origin}: {error}"));
                    continue;
                }
                // Everything before the bad item goes out; nothing after it.
                let sent_before =
                    flush(clients, parent, &mut pending, &mut report, options.dry_run).await;
                if let Err(e) = sent_before {
                    return Err((report, e));
                }
                let what = if options.dry_run {
                    "nothing was sent (dry run)".to_string()
                } else if report.rows > 0 {
                    format!(
                        "the {} rows before it were sent, nothing after it; fix it and run again (enrolling is idempotent), or pass --skip-bad-lines",
                        report.rows
                    )
                } else {
                    "nothing was sent; fix it and run again, or pass --skip-bad-lines".to_string()
                };
                return Err((
                    report,
                    CliError::input(format!("{origin}: {error}\n  {what}")),
                ));
            }
        }
    }
    if let Err(e) = flush(clients, parent, &mut pending, &mut report, options.dry_run).await {
        return Err((report, e));
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic_types::{ErrorDetails, StatusExt};

    #[test]
    fn server_violations_point_at_source_lines() {
        let mut d = ErrorDetails::new();
        d.add_bad_request_violation("rows[1].depends_on[0]", "unknown dependency key");
        d.add_bad_request_violation("rows[1].key", "dup");
        let s = tonic::Status::with_error_details(tonic::Code::InvalidArgument, "bad", d);
        let origins = vec!["line 10".to_string(), "line 12".to_string()];
        assert_eq!(locate(&s, &origins), vec!["rows[1] is line 12"]);
        let plain = tonic::Status::invalid_argument("invalid rows[0].payload: not an object");
        assert_eq!(locate(&plain, &origins), vec!["rows[0] is line 10"]);
    }
}
