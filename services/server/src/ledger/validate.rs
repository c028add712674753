//! Request validation for LedgerService: every check that needs no
//! database, turning a request into store inputs or INVALID_ARGUMENT with a
//! field violation for each problem. A rejected request writes nothing.

use super::convert;
use crate::config::Limits;
use crate::edge::status::{invalid, invalid_field};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::time::Duration;
use tally_core::deps::MAX_DEPENDS_ON;
use tally_core::keys::validate_key;
use tally_core::names;
use tally_core::payload::{self, Content};
use tally_core::policy::{MAX_LEASE, MIN_LEASE};
use tally_core::transition::Outcome;
use tally_core::violation::Violations;
use tally_proto::v1 as pb;
use tally_store::types::{
    ClaimRequest, NewRow, PromptRecord, RedriveTarget, ReportItem, RowFilter,
};
use tonic::Status;
use uuid::Uuid;

const MAX_TEXT: usize = 128;

fn finish(v: Violations) -> Result<(), Status> {
    v.finish().map_err(invalid)
}

/// `ledgers/{ledger}` in `field`.
pub fn ledger(field: &str, name: &str) -> Result<String, Status> {
    names::parse_ledger(name)
        .map(str::to_string)
        .map_err(|e| invalid_field(field, e.to_string()))
}

/// `ledgers/{ledger}/claims/{claim}` → (ledger, token).
pub fn claim(field: &str, name: &str) -> Result<(String, Uuid), Status> {
    let (ledger, id) = names::parse_claim(name).map_err(|e| invalid_field(field, e.to_string()))?;
    let token = Uuid::parse_str(id)
        .map_err(|_| invalid_field(field, "claim id is not one this server issued"))?;
    Ok((ledger.to_string(), token))
}

fn short_text(field: &str, text: &str, v: &mut Violations) {
    if let Some(e) = too_long(text) {
        v.add(field, e);
    }
}

fn too_long(text: &str) -> Option<String> {
    (text.len() > MAX_TEXT).then(|| format!("must be at most {MAX_TEXT} characters"))
}

/// A lease: unset takes the ledger's; set, 1s to 7 days.
pub fn lease(
    field: &str,
    d: Option<&prost_types::Duration>,
    v: &mut Violations,
) -> Option<Duration> {
    crate::edge::wire_convert::bounded_duration(field, d, MIN_LEASE, MAX_LEASE, v)
}

fn count(field: &str, n: usize, max: usize, v: &mut Violations) {
    if n == 0 {
        v.add(field, "must not be empty");
    } else if n > max {
        v.add(
            field,
            format!("has {n} entries; the limit is {max} per call (max_rows_per_call)"),
        );
    }
}

pub fn enroll(
    req: pb::EnrollRowsRequest,
    limits: &Limits,
) -> Result<(String, Vec<NewRow>), Status> {
    let ledger = ledger("parent", &req.parent)?;
    let mut v = Violations::new();
    count("rows", req.rows.len(), limits.max_rows_per_call, &mut v);
    finish(v)?;
    let hashes = check_rows(&req.rows)?;
    // Every check passed: the request's strings move into the rows as they are.
    let rows = req
        .rows
        .into_iter()
        .zip(hashes)
        .map(|(r, content_hash)| {
            let (prompt_name, prompt_version) =
                r.prompt.map(|p| (p.name, p.version)).unwrap_or_default();
            NewRow {
                key: r.key,
                payload: r.payload,
                depends_on: r.depends_on,
                dependency_names: r.dependency_names,
                prompt_name,
                prompt_version,
                model: r.model,
                content_hash,
            }
        })
        .collect();
    Ok((ledger, rows))
}

/// Whether a payload may be a request of its own (with media parts, or in
/// a provider's shape): worth parsing.
fn native_request(payload: &str) -> bool {
    ["\"media\"", "\"contents\"", "\"messages\""]
        .iter()
        .any(|k| payload.contains(k))
}

/// Every per-row check of an enrollment, and the rows' content hashes.
/// Field names are formatted only for a violation: a thousand valid rows
/// cost no strings.
fn check_rows(rows: &[pb::RowInput]) -> Result<Vec<[u8; 16]>, Status> {
    let mut v = Violations::new();
    let mut first_seen: HashMap<&str, usize> = HashMap::with_capacity(rows.len());
    let mut hashes = Vec::with_capacity(rows.len());
    for (i, r) in rows.iter().enumerate() {
        let at = |f: &str| format!("rows[{i}].{f}");
        if let Err(e) = validate_key(&r.key) {
            v.add(at("key"), e.to_string());
        }
        if let Some(j) = first_seen.insert(r.key.as_str(), i) {
            v.add(at("key"), format!("repeats rows[{j}].key {:?}", r.key));
        }
        if let Err(e) = payload::validate_object(&r.payload) {
            v.add(at("payload"), e.to_string());
        } else if r.prompt.is_none() && native_request(&r.payload) {
            // A native request's media parts (a prompt's media variables
            // are checked by the store, which knows the prompt), and its
            // shape for the row's model (the ledger's model, for a row
            // naming none, is checked by the worker that runs it).
            let request: serde_json::Value = serde_json::from_str(&r.payload).unwrap_or_default();
            if let Err(e) = tally_core::media::native_parts(&request) {
                v.add(at("payload"), e);
            }
            let api = tally_core::provider::route(&r.model).api();
            if let Some(e) = api
                .filter(|_| !r.model.is_empty())
                .and_then(|api| tally_core::provider::foreign_request(api, &request))
            {
                v.add(at("payload"), e);
            }
        }
        if r.depends_on.len() > MAX_DEPENDS_ON {
            v.add(
                at("depends_on"),
                format!(
                    "has {} entries; the limit is {MAX_DEPENDS_ON}",
                    r.depends_on.len()
                ),
            );
        }
        for (j, d) in r.depends_on.iter().enumerate().take(MAX_DEPENDS_ON) {
            if v.is_full() {
                break;
            }
            if let Err(e) = validate_key(d) {
                v.add(format!("rows[{i}].depends_on[{j}]"), e.to_string());
            }
            if *d == r.key {
                v.add(
                    format!("rows[{i}].depends_on[{j}]"),
                    "a row cannot depend on itself",
                );
            }
        }
        check_dependency_names(r, i, &mut v);
        let (prompt_name, prompt_version) = match &r.prompt {
            Some(p) => {
                v.check(at("prompt.name"), names::validate_prompt_id(&p.name));
                v.check(
                    at("prompt.version"),
                    names::validate_prompt_version(&p.version),
                );
                (p.name.as_str(), p.version.as_str())
            }
            None => ("", ""),
        };
        if let Some(e) = too_long(&r.model) {
            v.add(at("model"), e);
        }
        let deps: Vec<&str> = r.depends_on.iter().map(String::as_str).collect();
        let names: Vec<(&str, &str)> = r
            .dependency_names
            .iter()
            .map(|(k, n)| (k.as_str(), n.as_str()))
            .collect();
        hashes.push(payload::content_hash(&Content {
            payload: &r.payload,
            depends_on: &deps,
            prompt_name,
            prompt_version,
            model: &r.model,
            dependency_names: &names,
        }));
        if v.is_full() {
            break;
        }
    }
    finish(v)?;
    if rows.iter().any(|r| !r.depends_on.is_empty()) {
        let edges: Vec<(&str, Vec<&str>)> = rows
            .iter()
            .map(|r| {
                (
                    r.key.as_str(),
                    r.depends_on.iter().map(String::as_str).collect(),
                )
            })
            .collect();
        let edges: Vec<(&str, &[&str])> = edges.iter().map(|(k, d)| (*k, d.as_slice())).collect();
        if let Some(cycle) = tally_core::deps::find_cycle(&edges) {
            let first = first_seen.get(cycle[0]).copied().unwrap_or(0);
            return Err(invalid_field(
                format!("rows[{first}].depends_on"),
                format!("dependency cycle: {}", cycle.join(" -> ")),
            ));
        }
    }
    Ok(hashes)
}

/// Row `i`'s dependency names: each for a key it depends on, each a valid
/// name, none used twice.
fn check_dependency_names(r: &pb::RowInput, i: usize, v: &mut Violations) {
    let mut used: HashMap<&str, &str> = HashMap::new();
    let mut names: Vec<(&String, &String)> = r.dependency_names.iter().collect();
    names.sort_unstable();
    for (key, name) in names {
        let at = format!("rows[{i}].dependency_names[{key:?}]");
        if !r.depends_on.contains(key) {
            v.add(at, format!("{key:?} is not one of the row's depends_on"));
        } else if let Err(e) = tally_core::deps::validate_name(name) {
            v.add(at, e);
        } else if let Some(other) = used.insert(name.as_str(), key.as_str()) {
            v.add(at, format!("the name {name:?} is also given to {other:?}"));
        }
        if v.is_full() {
            return;
        }
    }
}

pub fn claim_rows(
    req: &pb::ClaimRowsRequest,
    limits: &Limits,
) -> Result<(String, ClaimRequest), Status> {
    let ledger = ledger("parent", &req.parent)?;
    Ok((ledger, claim_request(req, "", limits)?))
}

/// A ReportOutcomes' `claim_next`, for a claim of `ledger` reporting
/// `outcomes`: a ClaimRows request whose `parent` is empty or that ledger,
/// its rows' bytes less what the verdicts may take of the same answer.
pub fn claim_next(
    req: &pb::ClaimRowsRequest,
    ledger_name: &str,
    outcomes: &[ReportItem],
    limits: &Limits,
) -> Result<ClaimRequest, Status> {
    const FIELD: &str = "claim_next.parent";
    if !req.parent.is_empty() && ledger(FIELD, &req.parent)? != ledger_name {
        return Err(invalid_field(
            FIELD,
            format!("must be empty or the claim's ledger (ledgers/{ledger_name})"),
        ));
    }
    let mut claim = claim_request(req, "claim_next.", limits)?;
    if let Some(bytes) = claim.bytes {
        let keys = outcomes.iter().map(|o| o.key.len());
        let left = crate::edge::responses::claim_next_budget(bytes, keys)
            .map_err(|why| invalid_field("claim_next.max_response_bytes", why))?;
        claim.bytes = Some(left);
    }
    Ok(claim)
}

/// The fields of a ClaimRows request but its parent, named with `prefix`.
fn claim_request(
    req: &pb::ClaimRowsRequest,
    prefix: &str,
    limits: &Limits,
) -> Result<ClaimRequest, Status> {
    let f = |name: &str| format!("{prefix}{name}");
    let mut v = Violations::new();
    if req.max_rows < 1 || req.max_rows > limits.max_claim_rows {
        v.add(
            f("max_rows"),
            format!(
                "must be between 1 and {} (max_claim_rows)",
                limits.max_claim_rows
            ),
        );
    }
    let lease = lease(&f("lease"), req.lease.as_ref(), &mut v);
    short_text(&f("worker"), &req.worker, &mut v);
    short_text(&f("request_id"), &req.request_id, &mut v);
    short_text(&f("model"), &req.model, &mut v);
    if !req.provider.is_empty() && !tally_core::provider::is_provider_name(&req.provider) {
        v.add(
            f("provider"),
            format!(
                "must be a provider name (lowercase letters, digits and `-`, at most {} characters), like `gemini` or `openai`",
                tally_core::provider::MAX_PROVIDER
            ),
        );
    }
    let bytes = crate::edge::responses::claim_budget(req.max_response_bytes, limits)
        .map_err(|e| v.add(f("max_response_bytes"), e))
        .ok();
    let lane = convert::lane_from_proto(&f("lane"), req.lane, &mut v);
    if lane.is_sync() && req.fill_batch {
        v.add(
            f("fill_batch"),
            "is for the batch lane: a synchronous lane sends each row as it is claimed",
        );
    }
    finish(v)?;
    Ok(ClaimRequest {
        bytes,
        max_rows: i64::from(req.max_rows),
        lease,
        worker: req.worker.clone(),
        request_id: (!req.request_id.is_empty()).then(|| req.request_id.clone()),
        model: (!req.model.is_empty()).then(|| req.model.clone()),
        provider: (!req.provider.is_empty()).then(|| req.provider.clone()),
        // A claim of a whole batch is made into a job at once.
        for_job: req.fill_batch && !lane.is_sync(),
        lane,
        // The store routes: the depths the lane takes now.
        depths: None,
    })
}

/// An optional provider-given text of at most `max` printable bytes (empty:
/// none).
fn short_field(field: &str, text: String, max: usize, v: &mut Violations) -> Option<String> {
    if text.len() > max || text.chars().any(char::is_control) {
        v.add(
            field.to_string(),
            format!("must be at most {max} bytes without control characters"),
        );
        return None;
    }
    (!text.is_empty()).then_some(text)
}

/// Keys to act on: each valid, at most the per-call limit.
pub fn keys(
    field: &str,
    keys: &[String],
    limits: &Limits,
    allow_empty: bool,
) -> Result<(), Status> {
    let mut v = Violations::new();
    if !(allow_empty && keys.is_empty()) {
        count(field, keys.len(), limits.max_rows_per_call, &mut v);
    }
    for (i, k) in keys.iter().enumerate().take(1000) {
        v.check(format!("{field}[{i}]"), validate_key(k));
    }
    finish(v)
}

/// Takes the request by value: keys and results move into the items.
pub fn report(
    req: pb::ReportOutcomesRequest,
    limits: &Limits,
) -> Result<(String, Uuid, Vec<ReportItem>), Status> {
    let (ledger, token) = claim("claim", &req.claim)?;
    let mut v = Violations::new();
    count(
        "outcomes",
        req.outcomes.len(),
        limits.max_rows_per_call,
        &mut v,
    );
    finish(v)?;
    let mut v = Violations::new();
    let mut items = Vec::with_capacity(req.outcomes.len());
    for (i, o) in req.outcomes.into_iter().enumerate() {
        let at = |f: &str| format!("outcomes[{i}].{f}");
        v.check(at("key"), validate_key(&o.key));
        let usage = convert::usage_from_proto(o.usage.as_ref()).unwrap_or_else(|why| {
            v.add(at("usage"), why);
            Default::default()
        });
        let (outcome, result) = match o.outcome {
            Some(pb::row_outcome::Outcome::Result(r)) => {
                v.check(at("result"), payload::validate_value(&r));
                (Outcome::Success, Some(r))
            }
            Some(pb::row_outcome::Outcome::Failure(f)) => (
                Outcome::Failure(convert::failure_from_proto(&f, &at("failure"), &mut v)),
                None,
            ),
            None => {
                v.add(at("outcome"), "set either result or failure");
                (Outcome::Success, None)
            }
        };
        let response = (!o.response.is_empty()).then_some(o.response);
        if let Some(r) = &response {
            if result.is_none() {
                v.add(at("response"), "a response is kept with a result only");
            } else {
                v.check(at("response"), payload::validate_object(r));
            }
        }
        let request_id = short_field(&at("request_id"), o.request_id, 256, &mut v);
        let tier = short_field(&at("tier"), o.tier, 64, &mut v);
        let model_version = short_field(&at("model_version"), o.model_version, 256, &mut v);
        items.push(ReportItem {
            key: o.key,
            outcome,
            result,
            response,
            usage,
            request_id,
            tier,
            model_version,
            cached: None,
        });
        if v.is_full() {
            break;
        }
    }
    finish(v)?;
    Ok((ledger, token, items))
}

pub fn row_filter(field: &str, f: Option<&pb::RowFilter>) -> Result<RowFilter, Status> {
    let Some(f) = f else {
        return Ok(RowFilter::default());
    };
    let mut v = Violations::new();
    let mut statuses = Vec::new();
    for (i, s) in f.statuses.iter().enumerate() {
        match convert::status_from_proto(*s) {
            Some(st) => statuses.push(st),
            None => v.add(
                format!("{field}.statuses[{i}]"),
                "unknown or unspecified status",
            ),
        }
    }
    let opt = |s: &str| (!s.is_empty()).then(|| s.to_string());
    let mut job_id = |name: &str, which: &str| match name {
        "" => None,
        name => match names::parse_job(name) {
            Ok((_, job)) => Some(job.to_string()),
            Err(e) => {
                v.add(format!("{field}.{which}"), e.to_string());
                None
            }
        },
    };
    let job = job_id(&f.job, "job");
    let in_job = job_id(&f.in_job, "in_job");
    for (name, value) in [
        ("rule", &f.rule),
        ("model", &f.model),
        ("prompt_name", &f.prompt_name),
        ("prompt_version", &f.prompt_version),
    ] {
        short_text(&format!("{field}.{name}"), value, &mut v);
    }
    finish(v)?;
    Ok(RowFilter {
        statuses,
        rule: opt(&f.rule),
        model: opt(&f.model),
        prompt_name: opt(&f.prompt_name),
        prompt_version: opt(&f.prompt_version),
        job,
        in_job,
        stale_cache: f.stale_cache,
        inputs_changed: f.inputs_changed,
    })
}

/// A fingerprint of a filter, binding page tokens to it.
pub fn filter_fingerprint(f: &RowFilter, extra: &str) -> String {
    let statuses: Vec<&str> = f.statuses.iter().map(|s| s.as_str()).collect();
    let statuses = statuses.join(",");
    crate::edge::paging::fingerprint(&[
        &statuses,
        f.rule.as_deref().unwrap_or(""),
        f.model.as_deref().unwrap_or(""),
        f.prompt_name.as_deref().unwrap_or(""),
        f.prompt_version.as_deref().unwrap_or(""),
        f.job.as_deref().unwrap_or(""),
        f.in_job.as_deref().unwrap_or(""),
        if f.stale_cache { "stale_cache" } else { "" },
        if f.inputs_changed {
            "inputs_changed"
        } else {
            ""
        },
        extra,
    ])
}

pub fn redrive(
    req: &pb::RedriveRowsRequest,
    limits: &Limits,
) -> Result<(String, RedriveTarget), Status> {
    let ledger = ledger("parent", &req.parent)?;
    let target = match &req.target {
        Some(pb::redrive_rows_request::Target::Keys(k)) => {
            keys("keys.keys", &k.keys, limits, false)?;
            RedriveTarget::Keys(k.keys.clone())
        }
        Some(pb::redrive_rows_request::Target::Filter(f)) => {
            RedriveTarget::Filter(row_filter("filter", Some(f))?)
        }
        None => return Err(invalid_field("target", "set either keys or filter")),
    };
    let mut v = Violations::new();
    if req.reason.len() > 1024 {
        v.add("reason", "must be at most 1024 characters");
    }
    finish(v)?;
    Ok((ledger, target))
}

/// An optional etag: empty is `None`; anything else must be one this
/// server issued.
pub fn etag(field: &str, etag: &str) -> Result<Option<i64>, Status> {
    parse_etag(etag).map_err(|e| invalid_field(field, e))
}

/// A content etag as SummarizeLedger issues it (`c1-` and 24 hex digits),
/// or none.
pub fn content_etag<'a>(field: &str, etag: &'a str) -> Result<Option<&'a str>, Status> {
    match etag {
        "" => Ok(None),
        e if e.len() == 27
            && e.starts_with("c1-")
            && e[3..]
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()) =>
        {
            Ok(Some(e))
        }
        _ => Err(invalid_field(
            field,
            "is not a content etag this server issued (LedgerSummary.content_etag)",
        )),
    }
}

fn parse_etag(etag: &str) -> Result<Option<i64>, &'static str> {
    match etag {
        "" => Ok(None),
        e => e
            .parse()
            .map(Some)
            .map_err(|_| "is not an etag this server issued"),
    }
}

/// The longest pause message.
pub const MAX_PAUSE_MESSAGE: usize = 1024;

/// PauseLedger → (ledger, message, etag).
pub fn pause(req: &pb::PauseLedgerRequest) -> Result<(String, String, Option<i64>), Status> {
    let mut v = Violations::new();
    let ledger = names::parse_ledger(&req.name).map_err(|e| e.to_string());
    if let Err(e) = &ledger {
        v.add("name", e.clone());
    }
    let message = req.message.trim();
    if message.is_empty() {
        v.add("message", "must say why the ledger is paused");
    } else if message.chars().count() > MAX_PAUSE_MESSAGE {
        v.add(
            "message",
            format!("must be at most {MAX_PAUSE_MESSAGE} characters"),
        );
    }
    let etag = parse_etag(&req.etag);
    if let Err(e) = etag {
        v.add("etag", e);
    }
    finish(v)?;
    Ok((
        ledger.expect("checked").to_string(),
        message.to_string(),
        etag.expect("checked"),
    ))
}

pub fn register_prompt(req: &pb::RegisterPromptRequest) -> Result<PromptRecord, Status> {
    let mut v = Violations::new();
    v.check("prompt_id", names::validate_prompt_id(&req.prompt_id));
    v.check("version", names::validate_prompt_version(&req.version));
    if req.template.trim().is_empty() {
        v.add("template", "must not be empty");
    }
    if req.template.len() > payload::MAX_PAYLOAD_BYTES {
        v.add("template", "must be at most 1 MiB");
    }
    if !req.response_schema.is_empty() {
        v.check(
            "response_schema",
            payload::validate_object(&req.response_schema),
        );
    }
    if req.system_instruction.len() > payload::MAX_PAYLOAD_BYTES {
        v.add("system_instruction", "must be at most 1 MiB");
    }
    v.check("media", tally_core::media::check_declared(&req.media));
    v.check(
        "media",
        tally_core::media::check_media_unused_in_text(&req.template, &req.media),
    );
    finish(v)?;
    let mut h = Sha256::new();
    for part in [&req.template, &req.response_schema, &req.system_instruction] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    // Prompts without media hash as they always did.
    for m in &req.media {
        h.update((m.len() as u64).to_le_bytes());
        h.update(m.as_bytes());
    }
    Ok(PromptRecord {
        prompt_id: req.prompt_id.clone(),
        version: req.version.clone(),
        template: req.template.clone(),
        response_schema: req.response_schema.clone(),
        system_instruction: req.system_instruction.clone(),
        sha256: hex::encode(h.finalize()),
        create_time: chrono::Utc::now(),
        media: req.media.clone(),
    })
}

/// A lookup's requests: at most [`tally_core::cache::MAX_LOOKUPS`], each
/// key valid and named once, each request 1 byte to
/// [`tally_core::cache::MAX_REQUEST_BYTES`]. Takes them by value.
pub fn cache_lookups(
    requests: Vec<pb::CacheRequest>,
) -> Result<Vec<tally_store::cache::Lookup>, Status> {
    use tally_core::cache::{MAX_LOOKUPS, MAX_REQUEST_BYTES};
    let mut v = Violations::new();
    count("requests", requests.len(), MAX_LOOKUPS, &mut v);
    finish(v)?;
    let mut v = Violations::new();
    let mut seen = std::collections::HashSet::new();
    for (i, r) in requests.iter().enumerate() {
        v.check(format!("requests[{i}].key"), validate_key(&r.key));
        if !seen.insert(r.key.as_str()) {
            v.add(format!("requests[{i}].key"), "names a row named before");
        }
        if r.request.is_empty() || r.request.len() > MAX_REQUEST_BYTES {
            v.add(
                format!("requests[{i}].request"),
                format!("must be 1 to {MAX_REQUEST_BYTES} bytes"),
            );
        }
        if v.is_full() {
            break;
        }
    }
    finish(v)?;
    Ok(requests
        .into_iter()
        .map(|r| tally_store::cache::Lookup {
            key: r.key,
            request: r.request,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    fn input(key: &str, payload: &str, deps: &[&str]) -> pb::RowInput {
        pb::RowInput {
            key: key.into(),
            payload: payload.into(),
            depends_on: deps.iter().map(|d| d.to_string()).collect(),
            ..Default::default()
        }
    }

    fn fields(s: &Status) -> Vec<String> {
        use tonic_types::StatusExt;
        s.get_error_details()
            .bad_request()
            .map(|b| b.field_violations.iter().map(|f| f.field.clone()).collect())
            .unwrap_or_default()
    }

    #[test]
    fn enroll_names_every_bad_field() {
        let req = pb::EnrollRowsRequest {
            parent: "ledgers/l".into(),
            rows: vec![
                input("", "{}", &[]),
                input("ok", "[1]", &[]),
                input("ok", "{}", &["ok"]),
                input(&"x".repeat(300), "{", &[]),
            ],
        };
        let s = enroll(req.clone(), &Limits::default()).unwrap_err();
        assert_eq!(s.code(), Code::InvalidArgument);
        assert_eq!(
            fields(&s),
            [
                "rows[0].key",
                "rows[1].payload",
                "rows[2].key",
                "rows[2].depends_on[0]",
                "rows[3].key",
                "rows[3].payload"
            ]
        );
    }

    #[test]
    fn enroll_rejects_cycles_and_oversized_calls() {
        let req = pb::EnrollRowsRequest {
            parent: "ledgers/l".into(),
            rows: vec![input("a", "{}", &["b"]), input("b", "{}", &["a"])],
        };
        let s = enroll(req.clone(), &Limits::default()).unwrap_err();
        assert!(s.message().contains("dependency cycle"), "{}", s.message());
        let limits = Limits {
            max_rows_per_call: 1,
            ..Limits::default()
        };
        let s = enroll(req.clone(), &limits).unwrap_err();
        assert!(s.message().contains("max_rows_per_call"), "{}", s.message());
        let empty = pb::EnrollRowsRequest {
            parent: "ledgers/l".into(),
            rows: vec![],
        };
        assert_eq!(fields(&enroll(empty, &limits).unwrap_err()), ["rows"]);
    }

    #[test]
    fn claims_need_sane_sizes_and_leases() {
        let mut req = pb::ClaimRowsRequest {
            parent: "ledgers/l".into(),
            max_rows: 0,
            lease: Some(prost_types::Duration {
                seconds: 0,
                nanos: 0,
            }),
            ..Default::default()
        };
        assert_eq!(
            fields(&claim_rows(&req, &Limits::default()).unwrap_err()),
            ["max_rows", "lease"]
        );
        req.max_rows = 10;
        req.lease = Some(prost_types::Duration {
            seconds: 365 * 86400,
            nanos: 0,
        });
        assert_eq!(
            fields(&claim_rows(&req, &Limits::default()).unwrap_err()),
            ["lease"]
        );
        req.lease = None;
        let (l, c) = claim_rows(&req, &Limits::default()).unwrap();
        assert_eq!((l.as_str(), c.max_rows, c.lease), ("l", 10, None));
    }

    #[test]
    fn claim_names_must_carry_a_server_token() {
        assert!(claim("claim", "ledgers/l/claims/abc").is_err());
        let t = Uuid::new_v4();
        assert_eq!(
            claim("claim", &format!("ledgers/l/claims/{t}")).unwrap(),
            ("l".to_string(), t)
        );
    }

    #[test]
    fn reports_need_an_outcome_and_valid_json() {
        let req = pb::ReportOutcomesRequest {
            claim: format!("ledgers/l/claims/{}", Uuid::new_v4()),
            outcomes: vec![
                pb::RowOutcome {
                    key: "a".into(),
                    outcome: None,
                    usage: None,
                    response: String::new(),
                    ..Default::default()
                },
                pb::RowOutcome {
                    key: "b".into(),
                    outcome: Some(pb::row_outcome::Outcome::Result("{nope".into())),
                    usage: Some(pb::Usage {
                        input_tokens: -1,
                        ..Default::default()
                    }),
                    response: String::new(),
                    ..Default::default()
                },
            ],
            claim_next: None,
        };
        assert_eq!(
            fields(&report(req, &Limits::default()).unwrap_err()),
            [
                "outcomes[0].outcome",
                "outcomes[1].usage",
                "outcomes[1].result"
            ]
        );
    }

    // Invariant: a provider response is kept with a result only, and only
    // a JSON object of at most 1 MiB; an empty one is none.
    #[test]
    fn a_response_goes_with_a_result_and_is_a_bounded_object() {
        let outcome = |result: Option<&str>, response: String| pb::RowOutcome {
            key: "k".into(),
            outcome: Some(match result {
                Some(r) => pb::row_outcome::Outcome::Result(r.into()),
                None => pb::row_outcome::Outcome::Failure(pb::Failure {
                    kind: pb::FailureKind::ProviderError as i32,
                    ..Default::default()
                }),
            }),
            usage: None,
            response,
            ..Default::default()
        };
        let req = |outcomes| pb::ReportOutcomesRequest {
            claim: format!("ledgers/l/claims/{}", Uuid::new_v4()),
            outcomes,
            claim_next: None,
        };
        let big = format!(r#"{{"body": "{}"}}"#, "x".repeat(1 << 20));
        let bad = req(vec![
            outcome(None, r#"{"status_code": 500}"#.into()),
            outcome(Some("1"), "[1]".into()),
            outcome(Some("1"), big),
        ]);
        assert_eq!(
            fields(&report(bad, &Limits::default()).unwrap_err()),
            [
                "outcomes[0].response",
                "outcomes[1].response",
                "outcomes[2].response"
            ]
        );
        let good = req(vec![
            outcome(Some("1"), r#"{"status_code": 200, "body": {}}"#.into()),
            outcome(Some("2"), String::new()),
        ]);
        let (_, _, items) = report(good, &Limits::default()).unwrap();
        assert_eq!(
            items[0].response.as_deref(),
            Some(r#"{"status_code": 200, "body": {}}"#)
        );
        assert_eq!(items[1].response, None);
    }
}
