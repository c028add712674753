//! A claim's rows turned into the provider's requests: each row's prompt
//! (fetched once a job), its request built by the provider's wire, its
//! media attached; then, for a batch, its line packed into the input file
//! under the row, byte and token bounds. What cannot be sent is said per
//! row: invalid input (reported, PERMANENT), media that could not be read
//! (reported), or a row that waits (released, no attempt).

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::Arc;

use serde_json::Value;
use tally_proto::v1 as pb;
use tonic::Status;

use crate::attach::{self, AttachFail, JobMedia};
use crate::ctx::{Answer, Ctx, PromptResult, prompt_name};
use crate::jsonl;
use crate::prompt::{self, DependencyInput, InputError};

/// The prompts a claim's rows use, each fetched once.
pub(crate) struct Prompts(HashMap<String, PromptResult>);

impl Prompts {
    /// Fetches every prompt `rows` name. A prompt tally cannot answer for
    /// now fails the whole claim (its rows go back unworked).
    pub async fn fetch(ctx: &Ctx, rows: &[pb::ClaimedRow]) -> Result<Self, Status> {
        let mut prompts: HashMap<String, PromptResult> = HashMap::new();
        for p in rows.iter().filter_map(|r| r.prompt.as_ref()) {
            if let Entry::Vacant(slot) = prompts.entry(prompt_name(p)) {
                let found = ctx.prompt(slot.key()).await?;
                slot.insert(found);
            }
        }
        Ok(Prompts(prompts))
    }
}

impl Prompts {
    /// What `answer` must look like: its prompt's schema, and whether JSON
    /// was asked for.
    pub fn expect(&self, answer: &Answer) -> crate::output::Expect<'_> {
        let schema = answer
            .prompt
            .as_ref()
            .and_then(|p| self.0.get(p))
            .and_then(|r| r.as_ref().ok())
            .and_then(|c| c.validator.as_ref());
        crate::output::Expect {
            schema,
            json: answer.json,
        }
    }
}

/// What became of one row's request.
pub(crate) enum Prepared {
    /// Ready to send: the request, and what its answer must be.
    Ready(Value, Answer),
    /// It can never be sent as it is (reported as invalid input).
    Invalid(String),
    /// Its media could not be read: the outcome to report.
    Failed(Box<pb::RowOutcome>),
    /// Not now: it goes back unattempted.
    Waits,
    /// Not now, and no other row of the claim either: it and the rest go
    /// back unattempted, and the claim's job does what [`Halt`] says.
    Halt(Halt),
}

/// Why a claim's rows stop being prepared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Halt {
    /// The provider refused a media upload for the caller (the key, no
    /// permission, no such API here): every row would meet it.
    Refused(String),
    /// The media storage is full: nothing more can be uploaded now.
    Full(String),
}

/// `row`'s request for `model` (as the provider names it) as the wire
/// builds it, its media not attached yet, with its dependencies' results
/// rendered into its prompt; and the variables it was rendered from. The
/// error is why the row can never be sent.
fn build(
    ctx: &Ctx,
    row: &pb::ClaimedRow,
    payload: String,
    prompts: &Prompts,
    model: &str,
) -> Result<(Value, String), String> {
    let wire = ctx.provider.wire();
    let compiled = match row.prompt.as_ref().map(|p| &prompts.0[&prompt_name(p)]) {
        Some(Err(why)) => return Err(why.clone()),
        Some(Ok(c)) => Some(Arc::clone(c)),
        None => None,
    };
    let spec = compiled.as_ref().map(|c| &c.spec);
    // A template reads the row's dependency results (a request of its own
    // has nothing to render them into).
    let payload = match spec {
        Some(_) if !row.dependencies.is_empty() => {
            let deps: Vec<DependencyInput<'_>> = row
                .dependencies
                .iter()
                .map(|d| DependencyInput {
                    key: &d.key,
                    name: &d.name,
                    result: &d.result,
                })
                .collect();
            prompt::with_dependencies(&payload, &deps).map_err(|e| e.to_string())?
        }
        _ => payload,
    };
    let request = wire
        .build_request(&payload, spec, model)
        .map_err(|e| e.to_string())?;
    Ok((request, payload))
}

/// `row`'s request as the result cache keys it (`tally_core::cache`), for
/// `model` as the provider names it, under this worker's provider name (an
/// OpenAI-compatible server is not OpenAI, whatever its models are called);
/// `None` when it cannot be built (the row is then reported when it is
/// rendered) or is too large to cache.
pub(crate) fn cache_request(
    ctx: &Ctx,
    row: &pb::ClaimedRow,
    prompts: &Prompts,
    model: &str,
) -> Option<String> {
    let (request, vars) = build(ctx, row, row.payload.clone(), prompts, model).ok()?;
    let answer = Answer::of(ctx.provider.wire(), &vars, row.prompt.as_ref());
    let schema = answer
        .prompt
        .as_ref()
        .and_then(|p| prompts.0.get(p))
        .and_then(|r| r.as_ref().ok())
        .and_then(|c| c.spec.response_schema.as_ref());
    let expect = tally_core::cache::Expect {
        json: answer.json,
        schema,
    };
    tally_core::cache::request_of(&ctx.args.provider, model, &request, expect)
        .ok()
        .map(|r| r.text)
}

/// Builds `row`'s request for `model` (as the provider names it), with its
/// media attached, its dependencies' results rendered into its prompt. The
/// row's payload and those results are taken (let go once rendered).
pub(crate) async fn prepare(
    ctx: &Ctx,
    row: &mut pb::ClaimedRow,
    prompts: &Prompts,
    model: &str,
    media: &mut JobMedia,
) -> Prepared {
    let wire = ctx.provider.wire();
    let payload = std::mem::take(&mut row.payload);
    let built = build(ctx, row, payload, prompts, model);
    row.dependencies = Vec::new();
    let (mut request, payload) = match built {
        Ok(b) => b,
        Err(why) => return Prepared::Invalid(why),
    };
    match attach::attach(ctx, &mut request, media).await {
        Ok(()) => Prepared::Ready(request, Answer::of(wire, &payload, row.prompt.as_ref())),
        Err(AttachFail::Unreadable(why)) => Prepared::Failed(media_failure(
            &row.key,
            pb::FailureKind::MediaUnreadable,
            why,
        )),
        Err(AttachFail::Unavailable(why)) => Prepared::Failed(media_failure(
            &row.key,
            pb::FailureKind::MediaUnavailable,
            why,
        )),
        Err(AttachFail::StorageFull(why)) => {
            tracing::warn!(row = %row.key, "{why}; the claim's rows wait");
            Prepared::Halt(Halt::Full(why))
        }
        Err(AttachFail::Refused(why)) => {
            // Every row would meet the same refusal: none is burnt, and no
            // other row of the claim is tried.
            tracing::error!(row = %row.key, "{why}; the claim's rows go back");
            Prepared::Halt(Halt::Refused(why))
        }
        Err(AttachFail::NotHere(why)) => {
            // The worker's flags, not the row: it goes back unattempted,
            // and the worker stops rather than claim it again.
            ctx.stop_for_settings(why);
            Prepared::Waits
        }
    }
}

/// The rows of a claim that were not sent, by why.
#[derive(Default)]
pub(crate) struct Unsent {
    /// Reported as invalid input: key and why.
    pub invalid: Vec<(String, String)>,
    /// Reported as they are (media failures).
    pub failed: Vec<pb::RowOutcome>,
    /// Given back unattempted.
    pub waiting: Vec<String>,
    /// Why the claim's rows stopped being prepared, if they did.
    pub halt: Option<Halt>,
}

impl Unsent {
    /// Notes `prepared` for `key` unless it is ready: answers the ready
    /// request.
    pub fn sort(&mut self, key: &str, prepared: Prepared) -> Option<(Value, Answer)> {
        match prepared {
            Prepared::Ready(request, answer) => return Some((request, answer)),
            Prepared::Invalid(why) => self.invalid.push((key.to_string(), why)),
            Prepared::Failed(outcome) => self.failed.push(*outcome),
            Prepared::Waits => self.waiting.push(key.to_string()),
            Prepared::Halt(halt) => {
                self.waiting.push(key.to_string());
                self.halt.get_or_insert(halt);
            }
        }
        None
    }

    /// Whether preparing stopped; then `rest` go back unattempted, unread.
    pub fn halted(&mut self, rest: impl Iterator<Item = String>) -> bool {
        if self.halt.is_none() {
            return false;
        }
        self.waiting.extend(rest);
        true
    }

    /// The outcomes to report (invalid input and media failures).
    pub fn outcomes(&mut self) -> Vec<pb::RowOutcome> {
        let invalid = std::mem::take(&mut self.invalid);
        invalid
            .iter()
            .map(|(key, why)| crate::job::settle::invalid_input(key, why))
            .chain(std::mem::take(&mut self.failed))
            .collect()
    }
}

/// A batch's input file, rendered.
pub(crate) struct Batch {
    pub body: Vec<u8>,
    /// The rows in it, in order.
    pub keys: Vec<String>,
    /// What each row's answer must be.
    pub expect: HashMap<String, Answer>,
    /// Their estimated input tokens.
    pub tokens: u64,
    pub media: JobMedia,
    /// A row did not fit: the batch is full.
    pub full: bool,
    /// Another row like those in it would have fit.
    pub room: bool,
}

/// Renders `rows` into one batch input file for `job`, row by row into one
/// buffer: the first line that does not fit ends the batch (it and the
/// rest go back unread), and each row's payload is let go once rendered,
/// so the claim and the file are not both held whole. Rows that are not
/// in it are noted in `unsent`.
pub(crate) async fn batch(
    ctx: &Ctx,
    job: &pb::Job,
    model: &str,
    mut rows: Vec<pb::ClaimedRow>,
    prompts: &Prompts,
    unsent: &mut Unsent,
) -> Batch {
    let token_limit = job.provider_token_limit.max(0) as u64;
    let wire = ctx.provider.wire();
    let at_provider = tally_core::provider::route(model).model.to_owned();
    let mut packer = jsonl::Packer::new(jsonl::Limits {
        rows: ctx.args.max_rows_per_batch,
        bytes: ctx.args.max_bytes_per_batch,
        tokens: ctx.token_bound(model, token_limit),
        hard_tokens: token_limit,
    });
    let ids = crate::tags::RequestIds::of(wire.derives_request_ids(), &job.job_id);
    let mut out = Batch {
        body: Vec::new(),
        keys: Vec::new(),
        expect: HashMap::new(),
        tokens: 0,
        media: JobMedia::default(),
        full: false,
        room: true,
    };
    let mut rows = rows.iter_mut();
    while let Some(row) = rows.next() {
        let prepared = prepare(ctx, row, prompts, &at_provider, &mut out.media).await;
        let Some((request, answer)) = unsent.sort(&row.key, prepared) else {
            if unsent.halted(rows.by_ref().map(|r| r.key.clone())) {
                break;
            }
            continue;
        };
        let start = out.body.len();
        let size = jsonl::write_line(
            &mut out.body,
            &wire.line_shape(),
            &ids.id(&row.key),
            &request,
        );
        match packer.offer(size) {
            jsonl::Fit::Batch => {
                out.expect.insert(row.key.clone(), answer);
                out.keys.push(row.key.clone());
            }
            jsonl::Fit::Overflow => {
                // The batch is full: the rest go back unread (their media
                // not fetched and encoded for nothing), and the next claim
                // asks for what fit ([`crate::bounds::ClaimFit`]).
                out.body.truncate(start);
                unsent.waiting.push(row.key.clone());
                unsent.waiting.extend(rows.by_ref().map(|r| r.key.clone()));
                out.full = true;
                break;
            }
            jsonl::Fit::Oversized => {
                out.body.truncate(start);
                let why = if size > ctx.args.max_bytes_per_batch {
                    InputError::TooLarge {
                        size,
                        limit: ctx.args.max_bytes_per_batch,
                    }
                } else {
                    InputError::TooManyTokens {
                        tokens: jsonl::tokens_of(size),
                        limit: token_limit,
                    }
                };
                unsent.invalid.push((row.key.clone(), why.to_string()));
            }
        }
    }
    out.tokens = packer.tokens();
    out.room = packer.room_for_another();
    out
}

/// A row whose media could not be read, reported as such (`kind`:
/// MEDIA_UNREADABLE is PERMANENT, MEDIA_UNAVAILABLE RETRYABLE).
fn media_failure(key: &str, kind: pb::FailureKind, why: String) -> Box<pb::RowOutcome> {
    Box::new(pb::RowOutcome {
        key: key.to_string(),
        outcome: Some(pb::row_outcome::Outcome::Failure(pb::Failure {
            kind: kind as i32,
            message: why,
            ..Default::default()
        })),
        usage: None,
        ..Default::default()
    })
}
