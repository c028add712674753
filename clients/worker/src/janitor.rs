//! What tally leaves at the provider that nobody else will delete.
//!
//! Files: a worker killed after its upload but before MarkCreating leaves a
//! file no job records; an upload repeated after a failed finalize leaves
//! the first one. Files count against the project's 20 GiB until they
//! expire (48 h), and uploads stop when it is full. Each input file is
//! named `tally/{ledger}/{job id}` ([`crate::tags`]), so a sweep can tell
//! this ledger's files and ask tally what became of their job (OpenAI files
//! carry it as their file name). A file is
//! deleted when it is older than `--orphan-age` and its job is closed or
//! records another input file. A file of an open job that records it, or
//! records none yet, is kept; so is a file whose job this tally does not
//! know (another tally in the same provider project, or a deleted ledger:
//! the provider expires it).
//!
//! Media uploads (tally's register of files uploaded for rows' media): one
//! that no open job references and that has less than `--media-min-life`
//! left (so no batch will reference it again) is deleted at the provider
//! and forgotten, so uploads stay under the project's storage limit.
//!
//! Batches: every search after a lost create reads the whole batch list
//! ([`crate::lookup`]), and tally never needs a batch again once its job is
//! reconciled (its outcomes are stored). A batch of this ledger whose job
//! was reconciled more than `--batch-retention` ago is deleted, with its
//! output file; so are this ledger's probe batches once they ended and are
//! as old.

use std::time::{Duration, SystemTime};

use tally_proto::v1 as pb;

use crate::ctx::Ctx;

/// Pages of the file list one sweep reads at most (100 files each).
const MAX_PAGES: usize = 20;

/// What to do with one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Keep,
    Delete,
}

/// What one sweep deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swept {
    pub files: usize,
    pub batches: usize,
    pub media: usize,
}

/// One sweep of files and batches.
pub async fn sweep(ctx: &Ctx) -> Swept {
    Swept {
        files: sweep_files(ctx).await,
        batches: sweep_batches(ctx).await,
        media: sweep_media(ctx).await,
    }
}

/// Deletes this ledger's orphaned input files (and, once old enough, the
/// input files of its probes); answers how many went.
async fn sweep_files(ctx: &Ctx) -> usize {
    let prefix = crate::tags::job_prefix(&ctx.ledger);
    let probes = crate::tags::probe_prefix(&ctx.ledger);
    let mut deleted = 0;
    let mut token = String::new();
    for _ in 0..MAX_PAGES {
        let page = match ctx.provider.list_files(&token).await {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "janitor: could not list files");
                return deleted;
            }
        };
        for file in &page.items {
            let Some(tag) = file.tag.as_deref() else {
                continue;
            };
            if !old_enough(file.create_time, ctx.args.orphan_age) {
                continue;
            }
            let fate = match tag.strip_prefix(prefix.as_str()) {
                Some(job_id) => fate(ctx, job_id, &file.name).await,
                // A probe's input: its batch needs it no more.
                None if tag.starts_with(probes.as_str()) => Fate::Delete,
                None => Fate::Keep,
            };
            if fate == Fate::Delete {
                match ctx.provider.delete_file(&file.name).await {
                    Ok(()) => {
                        deleted += 1;
                        tracing::info!(file = %file.name, tag, "janitor: orphaned input file deleted");
                    }
                    Err(e) => {
                        tracing::warn!(file = %file.name, error = %e, "janitor: delete failed")
                    }
                }
            }
        }
        match page.next {
            Some(t) => token = t,
            None => break,
        }
    }
    deleted
}

/// Deletes this ledger's batches whose job was reconciled more than
/// `--batch-retention` ago (and their output files), and its ended probes
/// as old; answers how many batches went. A provider that keeps every
/// batch (OpenAI) is not swept.
async fn sweep_batches(ctx: &Ctx) -> usize {
    let retention = ctx.args.batch_retention;
    if retention.is_zero() || !ctx.provider.deletes_batches() {
        return 0;
    }
    let (jobs, probes) = (
        crate::tags::job_prefix(&ctx.ledger),
        crate::tags::probe_prefix(&ctx.ledger),
    );
    let mut deleted = 0;
    let mut token = String::new();
    for _ in 0..crate::lookup::MAX_LIST_PAGES {
        let page = match ctx.provider.list_batches(&token).await {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "janitor: could not list batches");
                return deleted;
            }
        };
        for b in &page.items {
            let Some(shown) = b.tag.as_deref() else {
                continue;
            };
            let batch = b.name.as_str();
            let output = if let Some(job_id) = shown.strip_prefix(jobs.as_str()) {
                match reconciled_long_ago(ctx, job_id, batch, retention).await {
                    Some(output) => output,
                    None => continue,
                }
            } else if shown.starts_with(probes.as_str())
                && b.done
                && b.create_time
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age >= retention)
            {
                String::new()
            } else {
                continue;
            };
            match ctx.provider.delete_batch(batch).await {
                Ok(()) => {
                    deleted += 1;
                    tracing::info!(batch, name = shown, "janitor: batch deleted");
                    if !output.is_empty()
                        && let Err(e) = ctx.provider.delete_file(&output).await
                    {
                        tracing::warn!(file = %output, error = %e, "janitor: output file not deleted");
                    }
                }
                Err(e) => tracing::warn!(batch, error = %e, "janitor: batch not deleted"),
            }
        }
        match page.next {
            Some(t) => token = t,
            None => break,
        }
    }
    deleted
}

/// Deletes this account's media uploads no open job references and no
/// batch will reference again (less than `--media-min-life` left); answers
/// how many went.
async fn sweep_media(ctx: &Ctx) -> usize {
    let mut deleted = 0;
    let mut token = String::new();
    for _ in 0..MAX_PAGES {
        let req = pb::ListMediaUploadsRequest {
            parent: ctx.ledger.clone(),
            provider_account: ctx.account.clone(),
            page_size: 1000,
            page_token: token.clone(),
        };
        let page = match ctx.clients.jobs.clone().list_media_uploads(req).await {
            Ok(p) => p.into_inner(),
            Err(s) => {
                tracing::warn!(error = %s, "janitor: could not list media uploads");
                return deleted;
            }
        };
        let soon = SystemTime::now() + ctx.args.media_min_life;
        for u in &page.uploads {
            let expires = u
                .expire_time
                .and_then(|t| SystemTime::try_from(t).ok())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            if u.in_use || expires > soon {
                continue;
            }
            // Never delete what is not an uploaded file (a batch, a path):
            // the register's word is checked, not trusted.
            if !tally_core::media::valid_file_name(&u.file) {
                tracing::warn!(file = %u.file, sha256 = %u.sha256, "janitor: a media upload entry names no uploaded file; not deleted");
                continue;
            }
            if let Err(e) = ctx.provider.delete_file(&u.file).await {
                tracing::warn!(file = %u.file, error = %e, "janitor: media upload not deleted");
                continue;
            }
            let forget = pb::ForgetMediaUploadRequest {
                parent: ctx.ledger.clone(),
                provider_account: ctx.account.clone(),
                sha256: u.sha256.clone(),
                file: u.file.clone(),
            };
            match ctx.clients.jobs.clone().forget_media_upload(forget).await {
                Ok(_) => {
                    deleted += 1;
                    tracing::info!(file = %u.file, sha256 = %u.sha256, "janitor: media upload deleted");
                }
                Err(s) => {
                    tracing::warn!(file = %u.file, error = %s, "janitor: media upload not forgotten")
                }
            }
        }
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    deleted
}

/// When the job `job_id` recorded `batch` and was reconciled at least
/// `retention` ago: its output file (maybe empty). `None` otherwise (open,
/// recent, another batch, or a job this tally does not know).
async fn reconciled_long_ago(
    ctx: &Ctx,
    job_id: &str,
    batch: &str,
    retention: Duration,
) -> Option<String> {
    let name = format!("{}/jobs/{job_id}", ctx.ledger);
    let mut c = ctx.clients.jobs.clone();
    let job = c
        .get_job(pb::GetJobRequest { name })
        .await
        .ok()?
        .into_inner();
    let ended = job.end_time.and_then(|t| SystemTime::try_from(t).ok())?;
    let old = SystemTime::now()
        .duration_since(ended)
        .is_ok_and(|age| age >= retention);
    (job.state() == pb::JobState::Reconciled && job.batch == batch && old)
        .then_some(job.output_file)
}

fn old_enough(created: Option<SystemTime>, age: Duration) -> bool {
    created
        .and_then(|created| SystemTime::now().duration_since(created).ok())
        .is_some_and(|elapsed| elapsed >= age)
}

async fn fate(ctx: &Ctx, job_id: &str, file: &str) -> Fate {
    let name = format!("{}/jobs/{job_id}", ctx.ledger);
    let mut c = ctx.clients.jobs.clone();
    match c.get_job(pb::GetJobRequest { name }).await {
        Err(s) => {
            // NOT_FOUND too: the file may be another tally's (the same
            // provider project, a ledger of the same name).
            tracing::debug!(job = job_id, error = %s, "janitor: job unknown here; file kept");
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
    }
}
