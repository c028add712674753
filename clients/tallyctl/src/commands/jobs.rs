//! `tallyctl jobs list|get|hand-over|resolve-create` and `tallyctl locks` over JobService.

use super::pages;
use crate::cli::{JobArgs, JobsArgs, LocksCmd, ResolveCreateArgs};
use crate::error::{CliError, ExitCode};
use crate::table::{Table, fields, truncate};
use crate::{Ctx, job_name, ledger_name, lock_name, render};
use tally_proto::v1 as pb;

pub fn job_counts(j: &pb::Job) -> pb::JobCounts {
    j.counts.unwrap_or_default()
}

/// The jobs table; `wide` adds provider, model, unreported rows,
/// adoptions, the operation and the submit and end times.
pub fn jobs_table(jobs: &[pb::Job], wide: bool) -> Table {
    let mut header = vec![
        "JOB", "STATE", "ROWS", "DONE", "RETRY", "PERM", "MISSING", "BATCH", "OWNER", "CREATED",
    ];
    if wide {
        header.extend([
            "PROVIDER",
            "MODEL",
            "UNREPORTED",
            "ADOPTIONS",
            "OPERATION",
            "SUBMITTED",
            "ENDED",
        ]);
    }
    let mut t = Table::new(header).right(&[2, 3, 4, 5, 6, 12, 13]);
    for j in jobs {
        let c = job_counts(j);
        let mut cells = vec![
            j.job_id.clone(),
            state_cell(j),
            c.rows.to_string(),
            c.succeeded.to_string(),
            c.retryable.to_string(),
            c.permanent.to_string(),
            c.missing.to_string(),
            j.batch.clone(),
            j.owner.clone(),
            render::time(j.create_time.as_ref()),
        ];
        if wide {
            cells.extend([
                j.provider.clone(),
                j.model.clone(),
                c.unreported.to_string(),
                j.adoptions.to_string(),
                j.operation.clone(),
                render::time(j.submit_time.as_ref()),
                render::time(j.end_time.as_ref()),
            ]);
        }
        t.row(cells);
    }
    t
}

/// A job's state, marked when its lost create cannot be resolved within
/// the search's bound (an operator should look for the batch).
fn state_cell(j: &pb::Job) -> String {
    let state = render::job_state(j.state);
    if j.create_unresolved.is_empty() {
        state
    } else {
        format!("{state} (unresolved)")
    }
}

/// Every job of a ledger in the given states (all pages, or up to `limit`).
pub async fn list_jobs(
    ctx: &mut Ctx,
    parent: &str,
    states: &[i32],
    limit: usize,
) -> Result<(Vec<pb::Job>, bool), tonic::Status> {
    pages::collect(
        limit,
        |page_size, page_token| {
            let mut client = ctx.clients.jobs.clone();
            let request = pb::ListJobsRequest {
                parent: parent.to_string(),
                states: states.to_vec(),
                page_size,
                page_token,
            };
            async move { client.list_jobs(request).await }
        },
        |r| (r.jobs, r.next_page_token),
    )
    .await
}

pub async fn list(ctx: &mut Ctx, args: JobsArgs) -> Result<ExitCode, CliError> {
    let parent = ledger_name(&args.ledger);
    let states = args
        .states
        .iter()
        .map(|s| {
            render::parse_job_state(s)
                .map(|s| s as i32)
                .map_err(|e| CliError::usage(format!("--state: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let (jobs, more) = list_jobs(ctx, &parent, &states, args.limit)
        .await
        .map_err(|s| CliError::server(format!("list jobs of {parent}"), s))?;
    if ctx.json {
        ctx.print_list(
            "jobs",
            jobs.iter().map(render::job_json).collect(),
            Some(more),
        );
        if more && ctx.printer.format == crate::output::Format::Jsonl {
            eprintln!(
                "(first {} jobs; --limit N for more, --limit 0 for all)",
                jobs.len()
            );
        }
    } else {
        ctx.print_table(&jobs_table(&jobs, ctx.printer.wide()));
        if more {
            eprintln!(
                "(first {} jobs; --limit N for more, --limit 0 for all)",
                jobs.len()
            );
        }
    }
    Ok(ExitCode::Ok)
}

/// The job `name` (`ledgers/{ledger}/jobs/{job}`) as GetJob answers it.
async fn fetch(ctx: &Ctx, name: &str) -> Result<pb::Job, CliError> {
    Ok(ctx
        .clients
        .jobs
        .clone()
        .get_job(pb::GetJobRequest {
            name: name.to_owned(),
        })
        .await
        .map_err(|s| CliError::server(format!("get {name}"), s))?
        .into_inner())
}

pub async fn get(ctx: &mut Ctx, args: JobArgs) -> Result<ExitCode, CliError> {
    let name = job_name(&args.name)?;
    let j = fetch(ctx, &name).await?;
    if ctx.json {
        ctx.print_json(&render::job_json(&j));
        return Ok(ExitCode::Ok);
    }
    let c = job_counts(&j);
    print!(
        "{}",
        fields(&[
            ("name", j.name.clone()),
            ("state", state_cell(&j)),
            ("summary", j.summary.clone()),
            (
                "counts",
                format!(
                    "rows={} succeeded={} retryable={} permanent={} missing={} unreported={}",
                    c.rows, c.succeeded, c.retryable, c.permanent, c.missing, c.unreported
                )
            ),
            ("provider", j.provider.clone()),
            ("model", j.model.clone()),
            ("owner", j.owner.clone()),
            ("claim", j.claim.clone()),
            ("batch", j.batch.clone()),
            ("operation", j.operation.clone()),
            ("input file", j.input_file.clone()),
            ("output file", j.output_file.clone()),
            ("error", j.error.clone()),
            ("create unresolved", j.create_unresolved.clone()),
            (
                "unresolved since",
                render::time(j.create_unresolved_time.as_ref())
            ),
            ("adoptions", j.adoptions.to_string()),
            ("created", render::time(j.create_time.as_ref())),
            ("submitted", render::time(j.submit_time.as_ref())),
            ("ended", render::time(j.end_time.as_ref())),
            ("updated", render::time(j.update_time.as_ref())),
            ("lease expires", render::time(j.lease_expire_time.as_ref())),
        ])
    );
    Ok(ExitCode::Ok)
}

/// `jobs hand-over`: ends the job's lease with the claim GetJob shows.
pub async fn hand_over(ctx: &mut Ctx, args: JobArgs) -> Result<ExitCode, CliError> {
    let name = job_name(&args.name)?;
    let j = fetch(ctx, &name).await?;
    let handed = ctx
        .clients
        .jobs
        .hand_over_job(pb::HandOverJobRequest {
            name: name.clone(),
            claim: j.claim.clone(),
        })
        .await
        .map_err(|s| CliError::server(format!("hand over {name}"), s))?
        .into_inner();
    if ctx.json {
        ctx.print_json(&render::job_json(&handed));
        return Ok(ExitCode::Ok);
    }
    println!(
        "{name}: lease ended (owner {}, lease was until {}); the next worker's AdoptJobs takes it",
        j.owner,
        render::time(j.lease_expire_time.as_ref())
    );
    Ok(ExitCode::Ok)
}

/// `jobs resolve-create`: ends a CREATING job's search with what the
/// operator found (MarkSubmitted with the batch, or MarkNotCreated), under
/// the claim GetJob shows; the worker searching sees the job moved.
pub async fn resolve_create(ctx: &mut Ctx, args: ResolveCreateArgs) -> Result<ExitCode, CliError> {
    let name = job_name(&args.name)?;
    let j = fetch(ctx, &name).await?;
    if j.state() != pb::JobState::Creating {
        return Err(CliError::usage(format!(
            "{name} is {}: only a CREATING job's create can be resolved",
            render::job_state(j.state)
        )));
    }
    // As the provider's console shows it (`batch_abc`, `msgbatch_abc`) or
    // as tally records it (`batches/…`).
    let batch = args.batch.as_deref().map(|b| {
        if b.contains("batches/") {
            b.to_owned()
        } else {
            format!("batches/{b}")
        }
    });
    let done = match &batch {
        Some(batch) => ctx
            .clients
            .jobs
            .mark_submitted(pb::MarkSubmittedRequest {
                name: name.clone(),
                claim: j.claim.clone(),
                batch: batch.clone(),
                input_file: j.input_file.clone(),
            })
            .await
            .map_err(|s| CliError::server(format!("mark {name} submitted"), s))?,
        None => {
            let reason = if args.reason.is_empty() {
                "an operator found no batch of the job at the provider".to_owned()
            } else {
                format!(
                    "an operator found no batch of the job at the provider: {}",
                    args.reason
                )
            };
            ctx.clients
                .jobs
                .mark_not_created(pb::MarkNotCreatedRequest {
                    name: name.clone(),
                    claim: j.claim.clone(),
                    reason,
                    ..Default::default()
                })
                .await
                .map_err(|s| CliError::server(format!("mark {name} not created"), s))?
        }
    }
    .into_inner();
    if ctx.json {
        ctx.print_json(&render::job_json(&done));
        return Ok(ExitCode::Ok);
    }
    match &batch {
        Some(batch) => println!(
            "{name}: SUBMITTED as {batch}; its worker follows the batch (or the next adopts it)"
        ),
        None => println!(
            "{name}: {}; its {} rows are back without an attempt",
            render::job_state(done.state),
            job_counts(&done).rows
        ),
    }
    Ok(ExitCode::Ok)
}

fn ttl(text: &str) -> Result<prost_types::Duration, CliError> {
    render::parse_duration(text).map_err(|e| CliError::usage(format!("--ttl: {e}")))
}

pub async fn locks(ctx: &mut Ctx, cmd: LocksCmd) -> Result<ExitCode, CliError> {
    match cmd {
        LocksCmd::Acquire {
            name,
            owner,
            ttl: t,
        } => {
            let name = lock_name(&name);
            let r = ctx
                .clients
                .jobs
                .acquire_lock(pb::AcquireLockRequest {
                    name: name.clone(),
                    owner,
                    ttl: Some(ttl(&t)?),
                })
                .await
                .map_err(|s| CliError::server(format!("acquire {name}"), s))?
                .into_inner();
            let lock = r.lock.clone().unwrap_or_default();
            if ctx.json {
                ctx.print_json(&serde_json::json!({
                    "acquired": r.acquired,
                    "lock": render::lock_json(&lock),
                }));
            } else if r.acquired {
                println!(
                    "acquired {} until {}\ntoken {}",
                    lock.name,
                    render::time(lock.expire_time.as_ref()),
                    lock.token
                );
            } else {
                println!(
                    "{} is held by {} until {}",
                    lock.name,
                    lock.owner,
                    render::time(lock.expire_time.as_ref())
                );
            }
            Ok(if r.acquired {
                ExitCode::Ok
            } else {
                ExitCode::LockHeld
            })
        }
        LocksCmd::Renew {
            name,
            token,
            ttl: t,
        } => {
            let name = lock_name(&name);
            let lock = ctx
                .clients
                .jobs
                .renew_lock(pb::RenewLockRequest {
                    name: name.clone(),
                    token,
                    ttl: Some(ttl(&t)?),
                })
                .await
                .map_err(|s| CliError::server(format!("renew {name}"), s))?
                .into_inner();
            if ctx.json {
                ctx.print_json(&render::lock_json(&lock));
            } else {
                println!(
                    "renewed {} until {}",
                    lock.name,
                    render::time(lock.expire_time.as_ref())
                );
            }
            Ok(ExitCode::Ok)
        }
        LocksCmd::Release { name, token } => {
            let name = lock_name(&name);
            ctx.clients
                .jobs
                .release_lock(pb::ReleaseLockRequest {
                    name: name.clone(),
                    token,
                })
                .await
                .map_err(|s| CliError::server(format!("release {name}"), s))?;
            if ctx.json {
                ctx.print_json(&serde_json::json!({"released": name}));
            } else {
                println!("released {name}");
            }
            Ok(ExitCode::Ok)
        }
    }
}

/// One line per job for logs (watch without a terminal).
pub fn job_line(j: &pb::Job) -> String {
    let c = job_counts(j);
    truncate(
        &format!(
            "job {} {} {}/{} reported {}",
            j.job_id,
            render::job_state(j.state),
            c.rows - c.unreported,
            c.rows,
            j.summary
        ),
        200,
    )
}
