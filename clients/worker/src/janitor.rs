//! Input files nobody else will delete. A worker killed after its upload
//! but before MarkCreating leaves a file no job records; an upload repeated
//! after a failed finalize leaves the first one. Files count against the
//! project's 20 GB until they expire (48 h), and uploads stop when it is
//! full. Each input file is named `tally/{ledger}/{job id}`, so a sweep can
//! tell this ledger's files and ask tally what became of their job.
//!
//! A file is deleted when it is older than `--orphan-age` and its job is
//! unknown, closed, or records another input file. A file of an open job
//! that records it, or records none yet, is kept.

use std::time::{Duration, SystemTime};

use serde_json::Value;
use tally_proto::v1 as pb;
use tonic::Code;

use crate::ctx::Ctx;

/// Pages of the file list one sweep reads at most (100 files each).
const MAX_PAGES: usize = 20;

/// The display name of a job's input file.
pub fn input_display_name(ledger: &str, job_id: &str) -> String {
    format!("tally/{}/{job_id}", ledger.trim_start_matches("ledgers/"))
}

/// What to do with one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Keep,
    Delete,
}

/// Deletes this ledger's orphaned input files; answers how many went.
pub async fn sweep(ctx: &Ctx) -> usize {
    let prefix = input_display_name(&ctx.ledger, "");
    let mut deleted = 0;
    let mut token = String::new();
    for _ in 0..MAX_PAGES {
        let page = match ctx.gemini.list_files(&token).await {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "janitor: could not list files");
                return deleted;
            }
        };
        for file in page["files"].as_array().into_iter().flatten() {
            let (Some(name), Some(job_id)) = (
                file["name"].as_str(),
                file["displayName"]
                    .as_str()
                    .and_then(|d| d.strip_prefix(prefix.as_str())),
            ) else {
                continue;
            };
            if !old_enough(file, ctx.args.orphan_age) {
                continue;
            }
            if fate(ctx, job_id, name).await == Fate::Delete {
                match ctx.gemini.delete_file(name).await {
                    Ok(()) => {
                        deleted += 1;
                        tracing::info!(
                            file = name,
                            job = job_id,
                            "janitor: orphaned input file deleted"
                        );
                    }
                    Err(e) => tracing::warn!(file = name, error = %e, "janitor: delete failed"),
                }
            }
        }
        match page["nextPageToken"].as_str() {
            Some(t) if !t.is_empty() => token = t.to_string(),
            _ => break,
        }
    }
    deleted
}

fn old_enough(file: &Value, age: Duration) -> bool {
    file["createTime"]
        .as_str()
        .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
        .and_then(|created| SystemTime::now().duration_since(created).ok())
        .is_some_and(|elapsed| elapsed >= age)
}

async fn fate(ctx: &Ctx, job_id: &str, file: &str) -> Fate {
    let name = format!("{}/jobs/{job_id}", ctx.ledger);
    let mut c = ctx.clients.jobs.clone();
    match c.get_job(pb::GetJobRequest { name }).await {
        Err(s) if matches!(s.code(), Code::NotFound | Code::InvalidArgument) => Fate::Delete,
        Err(s) => {
            tracing::debug!(job = job_id, error = %s, "janitor: job unknown for now; file kept");
            Fate::Keep
        }
        Ok(job) => judge(&job.into_inner(), file),
    }
}

/// The rule, on the job tally answered.
fn judge(job: &pb::Job, file: &str) -> Fate {
    let closed = job.end_time.is_some();
    let superseded = !job.input_file.is_empty() && job.input_file != file;
    if closed || superseded {
        Fate::Delete
    } else {
        Fate::Keep
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_files_no_open_job_needs_are_deleted() {
        let open = |input: &str| pb::Job {
            input_file: input.into(),
            ..Default::default()
        };
        assert_eq!(judge(&open(""), "files/a"), Fate::Keep, "not recorded yet");
        assert_eq!(judge(&open("files/a"), "files/a"), Fate::Keep, "its input");
        assert_eq!(
            judge(&open("files/b"), "files/a"),
            Fate::Delete,
            "superseded"
        );
        let closed = pb::Job {
            input_file: "files/a".into(),
            end_time: Some(prost_types::Timestamp::default()),
            ..Default::default()
        };
        assert_eq!(judge(&closed, "files/a"), Fate::Delete);
        assert_eq!(input_display_name("ledgers/x", "j1"), "tally/x/j1");
        assert_eq!(input_display_name("x", "j1"), "tally/x/j1");
    }
}
