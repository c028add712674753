//! LedgerService's conversions between `tally.v1` messages and domain/store
//! types: ledgers and their policy, spend and pause, rows, claims, prompts,
//! verdicts and failures. Pure: no I/O. Input conversions validate and
//! report field violations. JobService embeds a claim and a ledger pause in
//! its messages and takes them from here; timestamps and durations are
//! [`crate::edge::wire_convert`].

use crate::edge::wire_convert::{duration, duration_to_proto, opt_timestamp, timestamp};
use std::time::Duration;
use tally_core::cache::{CacheScope, ResultCache};
use tally_core::classify::{self, Failure, FailureKind};
use tally_core::fill::BatchFill;
use tally_core::lane::{Lane, Lanes};
use tally_core::names;
use tally_core::outbound::Reach;
use tally_core::pause::PauseReason;
use tally_core::policy::{self, OverrideRule, Policy, Price};
use tally_core::route::{Turnarounds, Work};
use tally_core::spend::{Amount, SpendCap};
use tally_core::status::{Budget, PerBudget, RowStatus};
use tally_core::violation::Violations;
use tally_proto::v1 as pb;
use tally_store::types as st;

pub fn status_to_proto(s: RowStatus) -> pb::RowStatus {
    match s {
        RowStatus::Pending => pb::RowStatus::Pending,
        RowStatus::Running => pb::RowStatus::Running,
        RowStatus::Retryable => pb::RowStatus::Retryable,
        RowStatus::Succeeded => pb::RowStatus::Succeeded,
        RowStatus::Permanent => pb::RowStatus::Permanent,
        RowStatus::Blocked => pb::RowStatus::Blocked,
    }
}

pub fn status_from_proto(code: i32) -> Option<RowStatus> {
    RowStatus::from_code(i16::try_from(code).ok()?)
}

pub fn budget_to_proto(b: Option<Budget>) -> i32 {
    b.map_or(pb::Budget::Unspecified as i32, |b| i32::from(b.code()))
}

pub fn attempts(f: PerBudget, total: u32) -> pb::AttemptCounts {
    pb::AttemptCounts {
        provider: f.provider as i32,
        content: f.content as i32,
        infra: f.infra as i32,
        total: total as i32,
    }
}

pub fn usage_to_proto(u: &st::Usage) -> pb::Usage {
    pb::Usage {
        input_tokens: u.input,
        output_tokens: u.output,
        thinking_tokens: u.thinking,
        cached_tokens: u.cached,
        cache_write_tokens: u.cache_write,
    }
}

/// A reported usage; `Err` says why its counts are refused (negative, or
/// above [`tally_core::usage::MAX_TOKENS_PER_ATTEMPT`]).
pub fn usage_from_proto(u: Option<&pb::Usage>) -> Result<st::Usage, String> {
    let u = u.cloned().unwrap_or_default();
    let out = st::Usage {
        input: u.input_tokens,
        output: u.output_tokens,
        thinking: u.thinking_tokens,
        cached: u.cached_tokens,
        cache_write: u.cache_write_tokens,
    };
    for n in [
        out.input,
        out.output,
        out.thinking,
        out.cached,
        out.cache_write,
    ] {
        tally_core::usage::check_count(n)?;
    }
    Ok(out)
}

fn prompt_ref(name: &str, version: &str) -> Option<pb::PromptRef> {
    (!name.is_empty()).then(|| pb::PromptRef {
        name: name.to_string(),
        version: version.to_string(),
    })
}

// ---- ledgers and policy ----------------------------------------------------

/// A lane on the wire (unspecified: batch).
pub fn lane_from_proto(field: &str, code: i32, v: &mut Violations) -> Lane {
    if code == pb::Lane::Unspecified as i32 {
        return Lane::Batch;
    }
    match i16::try_from(code).ok().and_then(Lane::from_code) {
        Some(lane) => lane,
        None => {
            v.add(
                field.to_string(),
                format!("{code} is not a lane: batch, flex, standard or priority"),
            );
            Lane::Batch
        }
    }
}

/// A lane as the wire names it.
pub fn lane_to_proto(lane: Lane) -> i32 {
    i32::from(lane.code())
}

pub fn policy_to_proto(p: &Policy) -> pb::LedgerPolicy {
    pb::LedgerPolicy {
        model: p.model.clone(),
        budgets: Some(pb::AttemptBudgets {
            provider: p.caps.provider as i32,
            content: p.caps.content as i32,
            infra: p.caps.infra as i32,
        }),
        lease: Some(duration_to_proto(p.lease)),
        backoff: Some(pb::Backoff {
            initial: Some(duration_to_proto(p.backoff.initial)),
            max: Some(duration_to_proto(p.backoff.max)),
            multiplier: p.backoff.multiplier,
            jitter: p.backoff.jitter,
        }),
        overrides: p
            .overrides
            .iter()
            .map(|o| pb::ClassifierOverride {
                name: o.name.clone(),
                http_code: o.http_code as i32,
                status: o.status.clone(),
                message_contains: o.message_contains.clone(),
                finish_reason: o.finish_reason.clone(),
                kind: i32::from(o.kind),
                verdict: if o.permanent {
                    pb::RowStatus::Permanent as i32
                } else {
                    pb::RowStatus::Retryable as i32
                },
                budget: i32::from(o.budget),
            })
            .collect(),
        review_threshold: p.review_threshold as i64,
        alert_url: p.alert_url.clone(),
        max_active_jobs: p.max_active_jobs as i32,
        prices: p
            .prices
            .iter()
            .map(|x| pb::ModelPrice {
                model: x.model.clone(),
                input_per_million: x.input_per_million,
                output_per_million: x.output_per_million,
                cached_input_per_million: x.cached_input_per_million,
                thinking_per_million: x.thinking_per_million,
                lane: lane_to_proto(x.lane),
            })
            .collect(),
        lanes: p.lanes.iter().map(lane_to_proto).collect(),
        deadline: p.deadline_ms.map(|ms| prost_types::Timestamp {
            seconds: ms.div_euclid(1000),
            nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
        }),
        turnarounds: Some(turnarounds_to_proto(&p.turnarounds)),
        result_cache: p.result_cache.as_ref().map(|c| pb::ResultCachePolicy {
            max_age: Some(duration_to_proto(c.max_age)),
            scope: i32::from(c.scope.code()),
        }),
        spend_cap: p.spend_cap.as_ref().map(spend_cap_to_proto),
        rerun_dependants: p.rerun_dependants,
        batch_fill: Some(pb::BatchFill {
            max_wait: Some(duration_to_proto(p.batch_fill.max_wait)),
            quiet: Some(duration_to_proto(p.batch_fill.quiet)),
            min_rows: p.batch_fill.min_rows.min(i32::MAX as u32) as i32,
        }),
    }
}

/// A batch-fill policy as given: an unset duration takes its default, a
/// zero one is zero (a zero `max_wait` turns filling off).
fn batch_fill_from_proto(f: Option<&pb::BatchFill>, v: &mut Violations) -> BatchFill {
    let d = BatchFill::default();
    let Some(f) = f else { return d };
    let mut take =
        |name: &str, given: Option<&prost_types::Duration>, default: Duration| match given {
            None => default,
            Some(x) => duration(x).unwrap_or_else(|| {
                v.add(
                    format!("policy.batch_fill.{name}"),
                    "must be a non-negative duration",
                );
                default
            }),
        };
    let max_wait = take("max_wait", f.max_wait.as_ref(), d.max_wait);
    let quiet = take("quiet", f.quiet.as_ref(), d.quiet);
    if f.min_rows < 0 {
        v.add("policy.batch_fill.min_rows", "must not be negative");
    }
    BatchFill {
        max_wait,
        quiet,
        min_rows: f.min_rows.max(0) as u32,
    }
}

/// A result-cache policy as given (unset: off); an unset `max_age` takes
/// its default.
fn result_cache_from_proto(
    c: Option<&pb::ResultCachePolicy>,
    v: &mut Violations,
) -> Option<ResultCache> {
    let c = c?;
    let d = ResultCache::default();
    let max_age = match &c.max_age {
        None => d.max_age,
        Some(x) => duration(x).unwrap_or_else(|| {
            v.add(
                "policy.result_cache.max_age",
                "must be a non-negative duration",
            );
            d.max_age
        }),
    };
    let scope = CacheScope::from_code(c.scope).unwrap_or_else(|| {
        v.add(
            "policy.result_cache.scope",
            format!("{} is not a scope: TEAM or SHARED", c.scope),
        );
        d.scope
    });
    Some(ResultCache { max_age, scope })
}

/// Where a cached answer came from, as the API shows it.
fn cached_to_proto(c: &tally_store::types::CachedFrom) -> pb::CachedAnswer {
    pb::CachedAnswer {
        row: c.row.clone(),
        attempt: c.attempt,
        cost_usd: c.cost_usd,
        answer_time: Some(prost_types::Timestamp {
            seconds: c.answer_ms.div_euclid(1000),
            nanos: (c.answer_ms.rem_euclid(1000) * 1_000_000) as i32,
        }),
        model_version: c.model_version.clone(),
    }
}

/// Turnarounds as given: an unset lane takes its default.
fn turnarounds_from_proto(t: Option<&pb::LaneTurnarounds>, v: &mut Violations) -> Turnarounds {
    let mut out = Turnarounds::default();
    let Some(t) = t else { return out };
    for (lane, given) in [
        (Lane::Batch, &t.batch),
        (Lane::Flex, &t.flex),
        (Lane::Standard, &t.standard),
        (Lane::Priority, &t.priority),
    ] {
        if let Some(x) = given {
            match duration(x) {
                Some(d) => out.set(lane, d),
                None => v.add(
                    format!("policy.turnarounds.{}", lane.name()),
                    "must be a non-negative duration",
                ),
            }
        }
    }
    out
}

/// A spend cap as given: zero for the warning fraction and the output
/// estimate take their defaults.
pub fn spend_cap_from_proto(c: &pb::SpendCap) -> SpendCap {
    let d = SpendCap::default();
    SpendCap {
        max_cost_usd: c.max_cost_usd,
        max_input_tokens: c.max_input_tokens,
        max_output_tokens: c.max_output_tokens,
        warn_fraction: if c.warn_fraction == 0.0 {
            d.warn_fraction
        } else {
            c.warn_fraction
        },
        output_tokens_per_row: if c.output_tokens_per_row == 0 {
            d.output_tokens_per_row
        } else {
            c.output_tokens_per_row
        },
    }
}

pub fn spend_cap_to_proto(c: &SpendCap) -> pb::SpendCap {
    pb::SpendCap {
        max_cost_usd: c.max_cost_usd,
        max_input_tokens: c.max_input_tokens,
        max_output_tokens: c.max_output_tokens,
        warn_fraction: c.warn_fraction,
        output_tokens_per_row: c.output_tokens_per_row,
    }
}

pub fn spend_to_proto(s: &tally_store::spend::SpendView) -> pb::LedgerSpend {
    pb::LedgerSpend {
        cap: Some(spend_cap_to_proto(&s.cap)),
        spent: Some(spend_amount_to_proto(s.spent)),
        reserved: Some(spend_amount_to_proto(s.reserved)),
    }
}

pub fn spend_amount_to_proto(a: Amount) -> pb::SpendAmount {
    pb::SpendAmount {
        cost_usd: a.cost_usd,
        input_tokens: a.input_tokens,
        output_tokens: a.output_tokens,
    }
}

/// DELETING while the ledger is being deleted, else PAUSED while paused,
/// else ACTIVE.
pub fn ledger_state(l: &st::LedgerRecord) -> pb::LedgerState {
    match (&l.deletion, &l.pause) {
        (Some(_), _) => pb::LedgerState::Deleting,
        (None, Some(_)) => pb::LedgerState::Paused,
        (None, None) => pb::LedgerState::Active,
    }
}

pub fn pause_reason_to_proto(r: PauseReason) -> pb::LedgerPauseReason {
    match r {
        PauseReason::Operator => pb::LedgerPauseReason::Operator,
        PauseReason::SpendCap => pb::LedgerPauseReason::SpendCap,
        PauseReason::Quota => pb::LedgerPauseReason::Quota,
        PauseReason::Billing => pb::LedgerPauseReason::Billing,
        PauseReason::ModelDrift => pb::LedgerPauseReason::ModelDrift,
        PauseReason::Model => pb::LedgerPauseReason::Model,
        PauseReason::Refused => pb::LedgerPauseReason::Refused,
    }
}

pub fn pause_to_proto(p: &st::Pause) -> pb::LedgerPause {
    pb::LedgerPause {
        reason: pause_reason_to_proto(p.reason) as i32,
        message: p.message.clone(),
        actor: p.actor.clone(),
        pause_time: Some(timestamp(p.time)),
    }
}

pub fn ledger_to_proto(l: &st::LedgerRecord) -> pb::Ledger {
    let state = ledger_state(l);
    pb::Ledger {
        name: names::ledger_name(&l.name),
        policy: Some(policy_to_proto(&l.policy)),
        create_time: Some(timestamp(l.create_time)),
        update_time: Some(timestamp(l.update_time)),
        etag: l.etag.to_string(),
        state: state as i32,
        delete_time: l.deletion.as_ref().map(|d| timestamp(d.delete_time)),
        purge: l.deletion.as_ref().map(|d| pb::LedgerPurge {
            rows_total: d.rows_total,
            rows_purged: d.rows_purged,
            forced: d.forced,
            claims_expired: d.claims_expired,
            jobs_abandoned: d.jobs_abandoned,
        }),
        pause: l.pause.as_ref().map(pause_to_proto),
    }
}

/// Every updatable policy path (the `update_mask` vocabulary).
pub const POLICY_PATHS: [&str; 26] = [
    "policy.model",
    "policy.budgets",
    "policy.budgets.provider",
    "policy.budgets.content",
    "policy.budgets.infra",
    "policy.lease",
    "policy.backoff",
    "policy.backoff.initial",
    "policy.backoff.max",
    "policy.backoff.multiplier",
    "policy.backoff.jitter",
    "policy.overrides",
    "policy.review_threshold",
    "policy.alert_url",
    "policy.max_active_jobs",
    "policy.prices",
    "policy.spend_cap",
    "policy.batch_fill",
    "policy.batch_fill.max_wait",
    "policy.batch_fill.quiet",
    "policy.batch_fill.min_rows",
    "policy.lanes",
    "policy.deadline",
    "policy.turnarounds",
    "policy.result_cache",
    "policy.rerun_dependants",
];

/// Copies `path` from `src` into `dst`. With `skip_zero` (create), zero and
/// empty values keep `dst`'s default.
fn apply_path(
    dst: &mut Policy,
    src: &pb::LedgerPolicy,
    path: &str,
    skip_zero: bool,
    v: &mut Violations,
) {
    let field = |name: &str| format!("policy.{name}");
    let budgets = src.budgets.unwrap_or_default();
    let cap = |x: i32, name: &str, v: &mut Violations| -> Option<u32> {
        if skip_zero && x == 0 {
            return None;
        }
        if x < 0 {
            v.add(field(name), "must not be negative");
            return None;
        }
        Some(x as u32)
    };
    match path {
        "policy.model" => {
            if !(skip_zero && src.model.is_empty()) {
                dst.model = src.model.clone();
            }
        }
        "policy.budgets" => {
            for p in [
                "policy.budgets.provider",
                "policy.budgets.content",
                "policy.budgets.infra",
            ] {
                apply_path(dst, src, p, skip_zero, v);
            }
        }
        "policy.budgets.provider" => {
            if let Some(x) = cap(budgets.provider, "budgets.provider", v) {
                dst.caps.provider = x;
            }
        }
        "policy.budgets.content" => {
            if let Some(x) = cap(budgets.content, "budgets.content", v) {
                dst.caps.content = x;
            }
        }
        "policy.budgets.infra" => {
            if let Some(x) = cap(budgets.infra, "budgets.infra", v) {
                dst.caps.infra = x;
            }
        }
        "policy.lease" => match src.lease.as_ref() {
            None if skip_zero => {}
            None => v.add(field("lease"), "must be set"),
            Some(d) => match duration(d) {
                Some(x) if skip_zero && x.is_zero() => {}
                Some(x) => dst.lease = x,
                None => v.add(field("lease"), "must be a non-negative duration"),
            },
        },
        "policy.backoff" => {
            for p in [
                "policy.backoff.initial",
                "policy.backoff.max",
                "policy.backoff.multiplier",
                "policy.backoff.jitter",
            ] {
                apply_path(dst, src, p, skip_zero, v);
            }
        }
        "policy.backoff.initial" | "policy.backoff.max" => {
            let b = src.backoff.unwrap_or_default();
            let (name, d, target) = if path.ends_with("initial") {
                ("backoff.initial", b.initial, &mut dst.backoff.initial)
            } else {
                ("backoff.max", b.max, &mut dst.backoff.max)
            };
            match d.as_ref().map(duration) {
                None => {}
                Some(Some(x)) if skip_zero && x.is_zero() => {}
                Some(Some(x)) => *target = x,
                Some(None) => v.add(field(name), "must be a non-negative duration"),
            }
        }
        "policy.backoff.multiplier" => {
            let b = src.backoff.unwrap_or_default();
            if !(skip_zero && b.multiplier == 0.0) {
                dst.backoff.multiplier = b.multiplier;
            }
        }
        "policy.backoff.jitter" => {
            let b = src.backoff.unwrap_or_default();
            if !(skip_zero && b.jitter == 0.0) {
                dst.backoff.jitter = b.jitter;
            }
        }
        "policy.overrides" => {
            dst.overrides = src
                .overrides
                .iter()
                .enumerate()
                .filter_map(|(i, o)| override_from_proto(i, o, v))
                .collect();
        }
        "policy.review_threshold" => {
            if src.review_threshold < 0 {
                v.add(field("review_threshold"), "must not be negative");
            } else {
                dst.review_threshold = src.review_threshold as u64;
            }
        }
        "policy.alert_url" => dst.alert_url = src.alert_url.clone(),
        "policy.max_active_jobs" => {
            if let Some(x) = cap(src.max_active_jobs, "max_active_jobs", v) {
                dst.max_active_jobs = x;
            }
        }
        "policy.batch_fill" => {
            // Unset takes the defaults, on create and on update alike.
            dst.batch_fill = batch_fill_from_proto(src.batch_fill.as_ref(), v);
        }
        "policy.batch_fill.max_wait" | "policy.batch_fill.quiet" | "policy.batch_fill.min_rows" => {
            let given = batch_fill_from_proto(src.batch_fill.as_ref(), v);
            match path.rsplit('.').next() {
                Some("max_wait") => dst.batch_fill.max_wait = given.max_wait,
                Some("quiet") => dst.batch_fill.quiet = given.quiet,
                _ => dst.batch_fill.min_rows = given.min_rows,
            }
        }
        "policy.rerun_dependants" => {
            if !skip_zero || src.rerun_dependants {
                dst.rerun_dependants = src.rerun_dependants;
            }
        }
        "policy.result_cache" => {
            // Unset turns the cache off (on create: off, the default).
            dst.result_cache = result_cache_from_proto(src.result_cache.as_ref(), v);
        }
        "policy.spend_cap" => {
            // Unset (or all zero) on update removes the cap; on create it
            // leaves the default (none).
            dst.spend_cap = src.spend_cap.as_ref().map(spend_cap_from_proto);
        }
        "policy.prices" => {
            dst.prices = src
                .prices
                .iter()
                .enumerate()
                .map(|(i, p)| Price {
                    model: p.model.clone(),
                    input_per_million: p.input_per_million,
                    output_per_million: p.output_per_million,
                    cached_input_per_million: p.cached_input_per_million,
                    thinking_per_million: p.thinking_per_million,
                    lane: lane_from_proto(&format!("policy.prices[{i}].lane"), p.lane, v),
                })
                .collect();
        }
        "policy.deadline" => {
            // Unset on update removes the deadline; on create, none.
            dst.deadline_ms = match &src.deadline {
                None => None,
                Some(t)
                    if (0..=253_402_300_799).contains(&t.seconds)
                        && (0..1_000_000_000).contains(&t.nanos) =>
                {
                    Some(t.seconds * 1000 + i64::from(t.nanos / 1_000_000))
                }
                Some(_) => {
                    v.add(field("deadline"), "must be a time between 1970 and 9999");
                    None
                }
            };
        }
        "policy.turnarounds" => {
            // Unset takes the defaults, on create and on update alike.
            dst.turnarounds = turnarounds_from_proto(src.turnarounds.as_ref(), v);
        }
        "policy.lanes" => {
            if src.lanes.len() > Lane::ALL.len() {
                v.add(
                    field("lanes"),
                    format!(
                        "must name each lane at most once ({} at most)",
                        Lane::ALL.len()
                    ),
                );
                return;
            }
            let lanes: Vec<Lane> = src
                .lanes
                .iter()
                .enumerate()
                .map(|(i, l)| lane_from_proto(&format!("policy.lanes[{i}]"), *l, v))
                .collect();
            // Empty: the default (batch alone), on create and on update.
            dst.lanes = Lanes::of(lanes).unwrap_or_default();
        }
        other => v.add(
            "update_mask",
            format!(
                "unknown path {other:?}; updatable paths: {}",
                POLICY_PATHS.join(", ")
            ),
        ),
    }
}

fn override_from_proto(
    i: usize,
    o: &pb::ClassifierOverride,
    v: &mut Violations,
) -> Option<OverrideRule> {
    let at = |name: &str| format!("policy.overrides[{i}].{name}");
    let permanent = match pb::RowStatus::try_from(o.verdict) {
        Ok(pb::RowStatus::Permanent) => true,
        Ok(pb::RowStatus::Retryable) => false,
        _ => {
            v.add(
                at("verdict"),
                "must be ROW_STATUS_RETRYABLE or ROW_STATUS_PERMANENT",
            );
            return None;
        }
    };
    if o.http_code < 0 {
        v.add(at("http_code"), "must not be negative");
        return None;
    }
    let kind = match o.kind {
        0 => 0,
        k if policy::failure_kind_from_code(k as i16).is_some() => k as i16,
        _ => {
            v.add(at("kind"), "unknown failure kind");
            return None;
        }
    };
    let budget = match o.budget {
        0 => 0,
        b if Budget::from_code(b as i16).is_some() => b as i16,
        _ => {
            v.add(at("budget"), "unknown budget");
            return None;
        }
    };
    Some(OverrideRule {
        name: o.name.clone(),
        http_code: o.http_code as u32,
        status: o.status.clone(),
        message_contains: o.message_contains.clone(),
        finish_reason: o.finish_reason.clone(),
        kind,
        permanent,
        budget,
    })
}

/// The policy of a new ledger: documented defaults, overridden by every
/// non-zero field of `src`; then validated.
pub fn policy_for_create(
    src: Option<&pb::LedgerPolicy>,
    reach: Reach,
) -> Result<Policy, Violations> {
    let mut p = Policy::default();
    let mut v = Violations::new();
    if let Some(src) = src {
        for path in POLICY_PATHS.iter().filter(|p| p.matches('.').count() == 1) {
            apply_path(&mut p, src, path, true, &mut v);
        }
    }
    p.validate("policy", reach, &mut v);
    if v.is_empty() { Ok(p) } else { Err(v) }
}

/// `current` with the masked paths copied from `src`; then validated.
pub fn policy_for_update(
    current: &Policy,
    src: &pb::LedgerPolicy,
    paths: &[String],
    reach: Reach,
) -> Result<Policy, Violations> {
    let mut p = current.clone();
    let mut v = Violations::new();
    if paths.is_empty() {
        v.add("update_mask", "must name at least one path");
    }
    for path in paths {
        apply_path(&mut p, src, path, false, &mut v);
    }
    if v.is_empty() {
        p.validate("policy", reach, &mut v);
    }
    if v.is_empty() { Ok(p) } else { Err(v) }
}

/// A summary's attempts, usage and cost split by lane (lanes with attempts
/// only, in lane order).
pub fn cost_by_lane(policy: &Policy, by_model: &[st::ModelUsage]) -> Vec<pb::LaneCost> {
    Lane::ALL
        .into_iter()
        .filter_map(|lane| {
            let of_lane: Vec<&st::ModelUsage> =
                by_model.iter().filter(|m| m.lane == lane).collect();
            if of_lane.is_empty() {
                return None;
            }
            let mut usage = st::Usage::default();
            for m in &of_lane {
                usage.add(&m.usage);
            }
            let cost =
                policy.estimate_cost(of_lane.iter().map(|m| (m.model.as_str(), lane, &m.usage)));
            Some(pb::LaneCost {
                lane: lane_to_proto(lane),
                attempts: of_lane.iter().map(|m| m.attempts).sum(),
                usage: Some(usage_to_proto(&usage)),
                cost_usd: cost.cost_usd,
            })
        })
        .collect()
}

/// The forecast of `work` under `policy` (see `tally_core::route::plan`),
/// from now; each row's output priced at `output` tokens
/// (`tally_core::spend::forecast_output_per_row`); `spent` what the
/// ledger has cost so far (against its spend cap).
pub fn forecast(
    policy: &Policy,
    work: &[Work],
    t: &Turnarounds,
    output: i64,
    spent: f64,
) -> pb::LedgerForecast {
    let now = chrono::Utc::now();
    let left = policy.deadline_ms.map(|ms| {
        std::time::Duration::from_millis(ms.saturating_sub(now.timestamp_millis()).max(0) as u64)
    });
    let price = |model: &str, lane: Lane| policy.price_in(model, lane);
    // The lanes the ledger's provider offers (Anthropic has no flex).
    let api = tally_core::provider::route(&policy.model).api();
    let offered = move |l: Lane| api.is_none_or(|a| l.offered_by(a));
    let to_proto = |p: &tally_core::route::Plan| pb::ForecastPlan {
        finish_time: Some(timestamp(
            now + chrono::TimeDelta::from_std(p.finish.duration).unwrap_or(chrono::TimeDelta::MAX),
        )),
        in_time: p.finish.in_time,
        cost_usd: p.cost_usd,
        rows_by_lane: p
            .rows_by_lane
            .iter()
            .map(|(lane, n)| pb::LaneRows {
                lane: lane_to_proto(*lane),
                rows: i64::try_from(*n).unwrap_or(i64::MAX),
            })
            .collect(),
    };
    let batch_only = Lanes::default();
    let depth = work.iter().map(|w| w.depth).max().unwrap_or(0);
    let plan = tally_core::route::plan(work, left, &policy.lanes, offered, t, price, output);
    let all_batch = tally_core::route::plan(work, left, &batch_only, offered, t, price, output);
    let explanation = tally_core::explain::explain(&tally_core::explain::Explained {
        plan: &plan,
        all_batch: &all_batch,
        depth,
        left,
        batch_turnaround: t.batch,
        allowed: &policy.lanes,
        budget: policy
            .spend_cap
            .as_ref()
            .filter(|c| c.max_cost_usd > 0.0)
            .map(|c| c.max_cost_usd - spent),
    });
    pb::LedgerForecast {
        deadline: policy.deadline_ms.map(|ms| prost_types::Timestamp {
            seconds: ms.div_euclid(1000),
            nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
        }),
        depth: i32::try_from(depth).unwrap_or(i32::MAX),
        turnarounds: Some(turnarounds_to_proto(t)),
        plan: Some(to_proto(&plan)),
        all_batch: Some(to_proto(&all_batch)),
        explanation,
    }
}

fn turnarounds_to_proto(t: &Turnarounds) -> pb::LaneTurnarounds {
    pb::LaneTurnarounds {
        batch: Some(duration_to_proto(t.batch)),
        flex: Some(duration_to_proto(t.flex)),
        standard: Some(duration_to_proto(t.standard)),
        priority: Some(duration_to_proto(t.priority)),
    }
}

// ---- rows and claims -------------------------------------------------------

pub fn claim_to_proto(c: &st::ClaimRecord) -> pb::Claim {
    pb::Claim {
        name: names::claim_name(&c.ledger, &c.token.to_string()),
        worker: c.worker.clone(),
        model: c.model.clone(),
        create_time: Some(timestamp(c.create_time)),
        expire_time: Some(timestamp(c.expire_time)),
        state: match c.state {
            st::ClaimState::Active => pb::ClaimState::Active,
            st::ClaimState::Done => pb::ClaimState::Done,
            st::ClaimState::Expired => pb::ClaimState::Expired,
        } as i32,
        row_count: c.row_count,
        held_count: c.held,
        job: c
            .job
            .as_ref()
            .map(|j| names::job_name(&c.ledger, j))
            .unwrap_or_default(),
        lane: lane_to_proto(c.lane),
        // Said by ClaimRows only (the ledger's policy, not the claim's).
        result_cache: false,
    }
}

pub fn claimed_row_to_proto(r: st::ClaimedRow) -> pb::ClaimedRow {
    pb::ClaimedRow {
        prompt: prompt_ref(&r.prompt_name, &r.prompt_version),
        attempts: Some(attempts(r.failures, r.total)),
        key: r.key,
        payload: r.payload,
        model: r.model,
        dependencies: r
            .dependencies
            .into_iter()
            .map(|d| pb::DependencyResult {
                key: d.key,
                name: d.name,
                result: d.result,
                result_hash: d.result_hash,
            })
            .collect(),
    }
}

/// Blanks the claim names of a row and its attempts: for callers whose
/// roles never use claims (enrollers), since a live claim name is what
/// authorizes reports on the row.
pub fn hide_claims(row: &mut pb::Row) {
    row.claim.clear();
    for a in &mut row.history {
        a.claim.clear();
    }
}

pub fn row_to_proto(r: &st::RowRecord) -> pb::Row {
    pb::Row {
        name: names::row_name(&r.ledger, &r.key),
        key: r.key.clone(),
        payload: r.payload.clone().unwrap_or_default(),
        depends_on: r.depends_on.clone(),
        prompt: prompt_ref(&r.prompt_name, &r.prompt_version),
        model: r.model.clone(),
        status: status_to_proto(r.status) as i32,
        attempts: Some(attempts(r.failures, r.total)),
        rule: r.rule.clone(),
        last_error: r.last_error.clone(),
        result: r.result.clone().unwrap_or_default(),
        response: r.response.clone().unwrap_or_default(),
        usage: Some(usage_to_proto(&r.usage)),
        claim: r
            .claim
            .map(|c| names::claim_name(&r.ledger, &c.to_string()))
            .unwrap_or_default(),
        job: r
            .job
            .as_ref()
            .map(|j| names::job_name(&r.ledger, j))
            .unwrap_or_default(),
        next_attempt_time: opt_timestamp(r.next_attempt_time),
        create_time: Some(timestamp(r.create_time)),
        update_time: Some(timestamp(r.update_time)),
        result_version: if tally_core::delivery::is_finished(r.status) {
            r.result_version
        } else {
            0
        },
        history: r
            .history
            .iter()
            .map(|a| pb::Attempt {
                number: a.number,
                claim: a
                    .claim
                    .map(|c| names::claim_name(&r.ledger, &c.to_string()))
                    .unwrap_or_default(),
                job: a
                    .job
                    .as_ref()
                    .map(|j| names::job_name(&r.ledger, j))
                    .unwrap_or_default(),
                batch: a.batch.clone().unwrap_or_default(),
                model: a.model.clone(),
                prompt: prompt_ref(&a.prompt_name, &a.prompt_version),
                vars_hash: r
                    .payload
                    .as_deref()
                    .map(tally_core::payload::vars_hash)
                    .unwrap_or_default(),
                outcome: status_to_proto(a.outcome) as i32,
                rule: a.rule.clone(),
                budget: budget_to_proto(a.budget),
                usage: Some(usage_to_proto(&a.usage)),
                error: a.error.clone(),
                actor: a.actor.clone(),
                time: Some(timestamp(a.time)),
                lane: lane_to_proto(a.lane),
                request_id: a.request_id.clone(),
                tier: a.tier.clone(),
                cost_usd: a.cost_usd,
                cached: a.cached.as_ref().map(cached_to_proto),
            })
            .collect(),
        unmet_dependencies: r.unmet_deps,
        history_omitted: i32::try_from(r.history_omitted).unwrap_or(i32::MAX),
        superseded: r
            .superseded
            .iter()
            .map(|s| pb::SupersededResult {
                result_version: s.result_version,
                result: s.result.clone().unwrap_or_default(),
                rule: s.rule.clone(),
                reason: s.reason.clone(),
                actor: s.actor.clone(),
                supersede_time: Some(timestamp(s.supersede_time)),
            })
            .collect(),
        superseded_omitted: i32::try_from(r.superseded_omitted).unwrap_or(i32::MAX),
        inputs: r
            .inputs
            .iter()
            .map(|d| pb::DependencyInput {
                key: d.key.clone(),
                name: d.name.clone(),
                used_hash: d.used_hash.clone(),
                changed: d.changed,
            })
            .collect(),
    }
}

/// A report's answer: each verdict in request order, the counts, and the
/// next claim when the report asked for one.
pub fn report_to_proto(
    summary: st::ReportSummary,
    next_claim: Option<pb::ClaimRowsResponse>,
) -> pb::ReportOutcomesResponse {
    let mut resp = pb::ReportOutcomesResponse {
        held: summary.held,
        next_claim,
        ..Default::default()
    };
    for v in summary.verdicts {
        let verdict = verdict_to_proto(v.verdict);
        match verdict {
            pb::Verdict::Succeeded => resp.succeeded += 1,
            pb::Verdict::Retryable => resp.retryable += 1,
            pb::Verdict::Permanent => resp.permanent += 1,
            pb::Verdict::Stale => resp.stale += 1,
            pb::Verdict::Duplicate => resp.duplicate += 1,
            pb::Verdict::Unspecified => {}
        }
        resp.verdicts.push(pb::RowVerdict {
            key: v.key,
            verdict: verdict as i32,
            rule: v.rule,
            budget: budget_to_proto(v.budget),
            next_attempt_time: opt_timestamp(v.next_attempt_time),
            attempts: Some(attempts(v.failures, v.total)),
        });
    }
    resp
}

pub fn verdict_to_proto(v: st::Verdict) -> pb::Verdict {
    match v {
        st::Verdict::Succeeded => pb::Verdict::Succeeded,
        st::Verdict::Retryable => pb::Verdict::Retryable,
        st::Verdict::Permanent => pb::Verdict::Permanent,
        st::Verdict::Stale => pb::Verdict::Stale,
        st::Verdict::Duplicate => pb::Verdict::Duplicate,
    }
}

/// A reported failure as classifier facts.
pub fn failure_from_proto(f: &pb::Failure, field: &str, v: &mut Violations) -> Failure {
    let kind = match pb::FailureKind::try_from(f.kind) {
        Ok(pb::FailureKind::Unspecified) => None,
        Ok(k) => policy::failure_kind_from_code(k as i16),
        Err(_) => {
            v.add(format!("{field}.kind"), "unknown failure kind");
            None
        }
    };
    let kind: Option<FailureKind> = kind;
    if f.http_code < 0 || f.http_code > 999 {
        v.add(
            format!("{field}.http_code"),
            "must be 0 or an HTTP status code",
        );
    }
    let retry_delay = match f.retry_delay.as_ref().map(duration) {
        None => None,
        Some(Some(d)) if d <= policy::MAX_BACKOFF => Some(d),
        Some(_) => {
            v.add(
                format!("{field}.retry_delay"),
                "must be between 0 and 7 days",
            );
            None
        }
    };
    // A google.rpc.Status without a name: the classifier judges it by the
    // canonical name of its code.
    let grpc_name = match u32::try_from(f.grpc_code) {
        Ok(0) => None,
        Ok(code) => classify::grpc_status_name(code),
        Err(_) => None,
    };
    if f.grpc_code != 0 && grpc_name.is_none() {
        v.add(
            format!("{field}.grpc_code"),
            "must be 0 or a gRPC canonical code (1..16)",
        );
    }
    let status = match grpc_name {
        Some(name) if f.status.trim().is_empty() => name.to_owned(),
        _ => f.status.clone(),
    };
    Failure {
        kind,
        http_code: f.http_code.max(0) as u32,
        status,
        message: f.message.chars().take(2048).collect(),
        finish_reason: f.finish_reason.clone(),
        block_reason: f.block_reason.clone(),
        retry_delay,
    }
}

pub fn prompt_to_proto(p: &st::PromptRecord) -> pb::Prompt {
    pb::Prompt {
        name: names::prompt_name(&p.prompt_id, &p.version),
        prompt_id: p.prompt_id.clone(),
        version: p.version.clone(),
        template: p.template.clone(),
        response_schema: p.response_schema.clone(),
        system_instruction: p.system_instruction.clone(),
        sha256: p.sha256.clone(),
        create_time: Some(timestamp(p.create_time)),
        media: p.media.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_takes_defaults_for_zero_fields() {
        let p = policy_for_create(
            Some(&pb::LedgerPolicy {
                model: "gemini-2.5-flash".into(),
                budgets: Some(pb::AttemptBudgets {
                    provider: 6,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            Reach::PublicOnly,
        )
        .unwrap();
        assert_eq!(p.model, "gemini-2.5-flash");
        assert_eq!((p.caps.provider, p.caps.content, p.caps.infra), (6, 1, 4));
        assert_eq!(p.lease, Policy::default().lease);
    }

    #[test]
    fn update_copies_only_masked_paths_and_validates() {
        let current = Policy::default();
        let src = pb::LedgerPolicy {
            model: "other".into(),
            max_active_jobs: 9,
            ..Default::default()
        };
        let p = policy_for_update(
            &current,
            &src,
            &["policy.max_active_jobs".into()],
            Reach::PublicOnly,
        )
        .unwrap();
        assert_eq!(
            (p.model.as_str(), p.max_active_jobs),
            (current.model.as_str(), 9)
        );
        let err = policy_for_update(
            &current,
            &src,
            &["policy.budgets.content".into()],
            Reach::PublicOnly,
        )
        .unwrap_err();
        assert_eq!(err.finish().unwrap_err()[0].field, "policy.budgets.content");
        let err = policy_for_update(&current, &src, &["policy.nope".into()], Reach::PublicOnly)
            .unwrap_err();
        assert_eq!(err.finish().unwrap_err()[0].field, "update_mask");
    }
}
