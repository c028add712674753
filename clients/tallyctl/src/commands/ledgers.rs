//! `tallyctl ledgers list|get|create|update|pause|resume` (`delete` is in
//! [`super::ledger_delete`], `archive` in [`super::ledger_archive`]).

use super::pages;
use crate::cli::{LedgersCmd, PolicyArgs};
use crate::error::{CliError, ExitCode};
use crate::table::{Table, fields};
use crate::{Ctx, ledger_name, render};
use tally_proto::v1 as pb;

pub async fn run(ctx: &mut Ctx, cmd: LedgersCmd) -> Result<ExitCode, CliError> {
    match cmd {
        LedgersCmd::List { .. } => list(ctx).await,
        LedgersCmd::CacheDryRun(args) => super::cache::dry_run(ctx, args).await,
        LedgersCmd::Delete {
            ledger,
            force,
            wait,
            interval,
            etag,
        } => {
            let d = super::ledger_delete::Delete {
                ledger,
                force,
                wait,
                interval,
                etag,
                content_etag: None,
            };
            super::ledger_delete::run(ctx, d).await
        }
        LedgersCmd::Archive {
            ledger,
            output,
            format,
            wait,
        } => {
            let a = super::ledger_archive::Archive {
                ledger,
                output,
                format,
                wait,
            };
            super::ledger_archive::run(ctx, a).await
        }
        LedgersCmd::Pause {
            ledger,
            reason,
            etag,
            ..
        } => {
            let name = ledger_name(&ledger);
            let l = ctx
                .clients
                .ledgers
                .pause_ledger(pb::PauseLedgerRequest {
                    name: name.clone(),
                    message: reason,
                    etag: etag.unwrap_or_default(),
                })
                .await
                .map_err(|s| CliError::server(format!("pause {name}"), s))?
                .into_inner();
            state_changed(ctx, &l);
            Ok(ExitCode::Ok)
        }
        LedgersCmd::Resume { ledger, etag, .. } => {
            let name = ledger_name(&ledger);
            let l = ctx
                .clients
                .ledgers
                .resume_ledger(pb::ResumeLedgerRequest {
                    name: name.clone(),
                    etag: etag.unwrap_or_default(),
                })
                .await
                .map_err(|s| CliError::server(format!("resume {name}"), s))?
                .into_inner();
            state_changed(ctx, &l);
            Ok(ExitCode::Ok)
        }
        LedgersCmd::Get { ledger, .. } => {
            let name = ledger_name(&ledger);
            let l = ctx
                .clients
                .ledgers
                .get_ledger(pb::GetLedgerRequest { name: name.clone() })
                .await
                .map_err(|s| CliError::server(format!("get {name}"), s))?
                .into_inner();
            show(ctx, &l);
            Ok(ExitCode::Ok)
        }
        LedgersCmd::Create { ledger, policy, .. } => {
            let id = crate::ledger_id(&ledger).to_string();
            let (policy, _) = policy_from(&policy)?;
            let l = ctx
                .clients
                .ledgers
                .create_ledger(pb::CreateLedgerRequest {
                    ledger_id: id.clone(),
                    policy: Some(policy),
                })
                .await
                .map_err(|s| CliError::server(format!("create ledger {id}"), s))?
                .into_inner();
            show(ctx, &l);
            Ok(ExitCode::Ok)
        }
        LedgersCmd::Update {
            ledger,
            policy,
            etag,
            ..
        } => {
            let name = ledger_name(&ledger);
            let (policy, paths) = policy_from(&policy)?;
            if paths.is_empty() {
                return Err(CliError::usage(
                    "nothing to update: give at least one policy flag (see --help)",
                ));
            }
            let l = ctx
                .clients
                .ledgers
                .update_ledger(pb::UpdateLedgerRequest {
                    ledger: Some(pb::Ledger {
                        name: name.clone(),
                        policy: Some(policy),
                        etag: etag.unwrap_or_default(),
                        ..Default::default()
                    }),
                    update_mask: Some(prost_types::FieldMask { paths }),
                })
                .await
                .map_err(|s| CliError::server(format!("update {name}"), s))?
                .into_inner();
            show(ctx, &l);
            Ok(ExitCode::Ok)
        }
    }
}

async fn list(ctx: &mut Ctx) -> Result<ExitCode, CliError> {
    let (all, _) = pages::collect(
        0,
        |page_size, page_token| {
            let mut client = ctx.clients.ledgers.clone();
            let request = pb::ListLedgersRequest {
                page_size,
                page_token,
                show_deleted: false,
            };
            async move { client.list_ledgers(request).await }
        },
        |r| (r.ledgers, r.next_page_token),
    )
    .await
    .map_err(|s| CliError::server("list ledgers", s))?;
    if ctx.json {
        ctx.print_list(
            "ledgers",
            all.iter().map(render::ledger_json).collect(),
            None,
        );
        return Ok(ExitCode::Ok);
    }
    let wide = ctx.printer.wide();
    let mut header = vec![
        "LEDGER",
        "STATE",
        "MODEL",
        "BUDGETS p/c/i",
        "LEASE",
        "MAX JOBS",
        "CREATED",
    ];
    if wide {
        header.extend(["REVIEW AT", "PRICED MODELS", "ALERT URL", "UPDATED", "ETAG"]);
    }
    let mut t = Table::new(header);
    for l in &all {
        let p = l.policy.clone().unwrap_or_default();
        let b = p.budgets.unwrap_or_default();
        let mut cells = vec![
            render::last_segment(&l.name).to_string(),
            match &l.pause {
                Some(pause) if l.state == pb::LedgerState::Paused as i32 => {
                    format!("PAUSED ({})", render::pause_reason(pause.reason))
                }
                _ => render::ledger_state(l.state),
            },
            p.model.clone(),
            format!("{}/{}/{}", b.provider, b.content, b.infra),
            render::duration(p.lease.as_ref()),
            p.max_active_jobs.to_string(),
            render::time(l.create_time.as_ref()),
        ];
        if wide {
            cells.extend([
                p.review_threshold.to_string(),
                p.prices
                    .iter()
                    .map(|m| m.model.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
                p.alert_url.clone(),
                render::time(l.update_time.as_ref()),
                l.etag.clone(),
            ]);
        }
        t.row(cells);
    }
    ctx.print_table(&t);
    Ok(ExitCode::Ok)
}

/// After a pause or resume: the ledger's state in one line (or the ledger
/// as JSON).
fn state_changed(ctx: &Ctx, l: &pb::Ledger) {
    if ctx.json {
        ctx.print_json(&render::ledger_json(l));
    } else {
        println!(
            "{} {}",
            l.name,
            render::ledger_state_text(l.state, l.pause.as_ref())
        );
    }
}

fn show(ctx: &Ctx, l: &pb::Ledger) {
    if ctx.json {
        ctx.print_json(&render::ledger_json(l));
        return;
    }
    if l.state == pb::LedgerState::Deleting as i32 {
        println!(
            "{} is being deleted since {}: {}",
            l.name,
            render::time(l.delete_time.as_ref()),
            render::purge_progress(l)
        );
    }
    let p = l.policy.clone().unwrap_or_default();
    let b = p.budgets.unwrap_or_default();
    let backoff = p.backoff.unwrap_or_default();
    let prices = p
        .prices
        .iter()
        .map(|m| {
            let lane = if m.lane == pb::Lane::Batch as i32 || m.lane == 0 {
                String::new()
            } else {
                format!("@{}", lane_name(m.lane))
            };
            format!(
                "{}{lane}={},{},{},{}",
                m.model,
                m.input_per_million,
                m.output_per_million,
                m.cached_input_per_million,
                m.thinking_per_million
            )
        })
        .collect::<Vec<_>>()
        .join(" ");
    let overrides = p
        .overrides
        .iter()
        .map(|o| o.name.clone())
        .collect::<Vec<_>>()
        .join(", ");
    print!(
        "{}",
        fields(&[
            ("name", l.name.clone()),
            ("model", p.model.clone()),
            (
                "budgets",
                format!(
                    "provider={} content={} infra={}",
                    b.provider, b.content, b.infra
                )
            ),
            ("lease", render::duration(p.lease.as_ref())),
            (
                "backoff",
                format!(
                    "{} doubling x{} to {}, jitter {}",
                    render::duration(backoff.initial.as_ref()),
                    backoff.multiplier,
                    render::duration(backoff.max.as_ref()),
                    backoff.jitter
                )
            ),
            ("max active jobs", p.max_active_jobs.to_string()),
            ("review threshold", p.review_threshold.to_string()),
            ("alert url", p.alert_url.clone()),
            ("lanes", lanes_text(&p)),
            (
                "deadline",
                p.deadline
                    .as_ref()
                    .map_or("none".into(), |d| render::time(Some(d)))
            ),
            ("prices (USD/M)", prices),
            ("spend cap", spend_cap_text(p.spend_cap.as_ref())),
            (
                "result cache",
                p.result_cache.as_ref().map_or("off".into(), |c| format!(
                    "answers up to {} old, {}",
                    render::duration(c.max_age.as_ref()),
                    if c.scope == pb::CacheScope::Shared as i32 {
                        "shared"
                    } else {
                        "team"
                    }
                ))
            ),
            (
                "rerun dependants",
                if p.rerun_dependants { "on" } else { "off" }.into()
            ),
            ("overrides", overrides),
            ("created", render::time(l.create_time.as_ref())),
            ("updated", render::time(l.update_time.as_ref())),
            ("etag", l.etag.clone()),
            (
                "state",
                render::ledger_state_text(l.state, l.pause.as_ref())
            ),
        ])
    );
}

/// A lane's name as the flags write it (`flex`).
fn lane_name(lane: i32) -> String {
    pb::Lane::try_from(lane)
        .map_or("?", |l| l.as_str_name())
        .trim_start_matches("LANE_")
        .to_ascii_lowercase()
}

/// `batch (1h), flex (1m)`: the lanes a ledger's rows may take, each with
/// the turnaround it is planned with before there is history.
fn lanes_text(p: &pb::LedgerPolicy) -> String {
    let t = p.turnarounds.unwrap_or_default();
    let lanes = if p.lanes.is_empty() {
        vec![pb::Lane::Batch as i32]
    } else {
        p.lanes.clone()
    };
    lanes
        .iter()
        .map(|l| {
            let prior = match pb::Lane::try_from(*l) {
                Ok(pb::Lane::Flex) => t.flex.as_ref(),
                Ok(pb::Lane::Standard) => t.standard.as_ref(),
                Ok(pb::Lane::Priority) => t.priority.as_ref(),
                _ => t.batch.as_ref(),
            };
            format!("{} ({})", lane_name(*l), render::duration(prior))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `$50 (warn at 80%, 1024 output tokens a row)`; `none` without a cap.
fn spend_cap_text(c: Option<&pb::SpendCap>) -> String {
    let Some(c) = c else {
        return "none".into();
    };
    let mut limits = Vec::new();
    if c.max_cost_usd > 0.0 {
        limits.push(format!("${}", c.max_cost_usd));
    }
    if c.max_input_tokens > 0 {
        limits.push(format!("{} input tokens", c.max_input_tokens));
    }
    if c.max_output_tokens > 0 {
        limits.push(format!("{} output tokens", c.max_output_tokens));
    }
    format!(
        "{} (warn at {:.0}%, {} output tokens a row)",
        limits.join(", "),
        c.warn_fraction * 100.0,
        c.output_tokens_per_row
    )
}

/// A deadline: an RFC 3339 time, a duration from now, or `none`.
pub fn parse_deadline(text: &str) -> Result<Option<prost_types::Timestamp>, String> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    let at = match chrono::DateTime::parse_from_rfc3339(text) {
        Ok(t) => t.with_timezone(&chrono::Utc),
        Err(_) => {
            let d = humantime::parse_duration(text)
                .map_err(|_| format!("{text:?} is neither an RFC 3339 time nor a duration (2h)"))?;
            chrono::Utc::now()
                + chrono::TimeDelta::from_std(d).map_err(|_| format!("{text:?} is too far"))?
        }
    };
    Ok(Some(prost_types::Timestamp {
        seconds: at.timestamp(),
        nanos: at.timestamp_subsec_nanos() as i32,
    }))
}

/// A lane by name (`flex`) as the wire numbers it.
pub fn parse_lane(text: &str) -> Result<i32, String> {
    tally_core::lane::Lane::parse(text)
        .map(|l| i32::from(l.code()))
        .ok_or_else(|| format!("lane {text:?}: one of batch, flex, standard, priority"))
}

/// `MODEL[@LANE]=IN,OUT[,CACHED[,THINKING]]` → a price (an omitted cached
/// price is the input's, an omitted thinking price the output's; no lane:
/// batch).
pub fn parse_price(text: &str) -> Result<pb::ModelPrice, String> {
    let bad = || {
        format!(
            "price {text:?} must look like MODEL=INPUT,OUTPUT[,CACHED_INPUT[,THINKING]] (USD per million tokens)"
        )
    };
    let (named, rest) = text.split_once('=').ok_or_else(bad)?;
    let (model, lane) = match named.rsplit_once('@') {
        Some((model, lane)) => (model, parse_lane(lane)?),
        None => (named, 0),
    };
    let number = |s: &str| {
        s.trim()
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite() && *x >= 0.0)
            .ok_or_else(bad)
    };
    let parts: Vec<&str> = rest.split(',').collect();
    if model.is_empty() || !(2..=4).contains(&parts.len()) {
        return Err(bad());
    }
    let optional = |i: usize| parts.get(i).map_or(Ok(0.0), |s| number(s));
    Ok(pb::ModelPrice {
        model: model.to_string(),
        input_per_million: number(parts[0])?,
        output_per_million: number(parts[1])?,
        cached_input_per_million: optional(2)?,
        thinking_per_million: optional(3)?,
        lane,
    })
}

/// The policy the flags describe and the update-mask paths they name.
pub fn policy_from(a: &PolicyArgs) -> Result<(pb::LedgerPolicy, Vec<String>), CliError> {
    let mut p = pb::LedgerPolicy::default();
    let mut paths = Vec::new();
    if let Some(m) = &a.model {
        p.model = m.clone();
        paths.push("policy.model".to_string());
    }
    let mut budgets = pb::AttemptBudgets::default();
    for (value, field, path) in [
        (
            a.provider_budget,
            &mut budgets.provider,
            "policy.budgets.provider",
        ),
        (
            a.content_budget,
            &mut budgets.content,
            "policy.budgets.content",
        ),
        (a.infra_budget, &mut budgets.infra, "policy.budgets.infra"),
    ] {
        if let Some(v) = value {
            *field = v;
            paths.push(path.to_string());
        }
    }
    if a.provider_budget.is_some() || a.content_budget.is_some() || a.infra_budget.is_some() {
        p.budgets = Some(budgets);
    }
    if let Some(l) = &a.lease {
        p.lease =
            Some(render::parse_duration(l).map_err(|e| CliError::usage(format!("--lease: {e}")))?);
        paths.push("policy.lease".to_string());
    }
    let duration = |flag: &str, text: &str| {
        render::parse_duration(text).map_err(|e| CliError::usage(format!("--{flag}: {e}")))
    };
    let mut backoff = pb::Backoff::default();
    if let Some(t) = &a.backoff_initial {
        backoff.initial = Some(duration("backoff-initial", t)?);
        paths.push("policy.backoff.initial".to_string());
    }
    if let Some(t) = &a.backoff_max {
        backoff.max = Some(duration("backoff-max", t)?);
        paths.push("policy.backoff.max".to_string());
    }
    if let Some(x) = a.backoff_multiplier {
        backoff.multiplier = x;
        paths.push("policy.backoff.multiplier".to_string());
    }
    if let Some(x) = a.backoff_jitter {
        backoff.jitter = x;
        paths.push("policy.backoff.jitter".to_string());
    }
    if backoff != pb::Backoff::default() || paths.iter().any(|p| p.starts_with("policy.backoff")) {
        p.backoff = Some(backoff);
    }
    let mut fill = pb::BatchFill::default();
    if let Some(t) = &a.batch_fill_wait {
        fill.max_wait = Some(duration("batch-fill-wait", t)?);
        paths.push("policy.batch_fill.max_wait".to_string());
    }
    if let Some(t) = &a.batch_fill_quiet {
        fill.quiet = Some(duration("batch-fill-quiet", t)?);
        paths.push("policy.batch_fill.quiet".to_string());
    }
    if a.batch_fill_wait.is_some() || a.batch_fill_quiet.is_some() {
        p.batch_fill = Some(fill);
    }
    if let Some(n) = a.max_active_jobs {
        p.max_active_jobs = n;
        paths.push("policy.max_active_jobs".to_string());
    }
    if let Some(n) = a.review_threshold {
        p.review_threshold = n;
        paths.push("policy.review_threshold".to_string());
    }
    if let Some(u) = &a.alert_url {
        p.alert_url = u.clone();
        paths.push("policy.alert_url".to_string());
    }
    if !a.prices.is_empty() {
        p.prices = a
            .prices
            .iter()
            .map(|t| parse_price(t))
            .collect::<Result<_, _>>()
            .map_err(CliError::usage)?;
        paths.push("policy.prices".to_string());
    }
    if let Some(d) = &a.deadline {
        p.deadline = parse_deadline(d).map_err(|e| CliError::usage(format!("--deadline: {e}")))?;
        paths.push("policy.deadline".to_string());
    }
    if let Some(age) = &a.result_cache {
        p.result_cache = if age == "off" {
            None
        } else {
            let scope = match a.result_cache_scope.as_deref() {
                None | Some("team") => pb::CacheScope::Team,
                Some("shared") => pb::CacheScope::Shared,
                Some(other) => {
                    return Err(CliError::usage(format!(
                        "--result-cache-scope {other:?}: team or shared"
                    )));
                }
            };
            Some(pb::ResultCachePolicy {
                max_age: Some(duration("result-cache", age)?),
                scope: scope as i32,
            })
        };
        paths.push("policy.result_cache".to_string());
    }
    if let Some(on) = &a.rerun_dependants {
        p.rerun_dependants = match on.as_str() {
            "on" => true,
            "off" => false,
            other => {
                return Err(CliError::usage(format!(
                    "--rerun-dependants {other:?}: on or off"
                )));
            }
        };
        paths.push("policy.rerun_dependants".to_string());
    }
    if !a.turnarounds.is_empty() {
        let mut t = pb::LaneTurnarounds::default();
        for spec in &a.turnarounds {
            let bad = || {
                CliError::usage(format!(
                    "--turnaround {spec:?}: LANE=DURATION, e.g. batch=20m"
                ))
            };
            let (lane, d) = spec.split_once('=').ok_or_else(bad)?;
            let d = Some(duration("turnaround", d)?);
            match tally_core::lane::Lane::parse(lane).ok_or_else(bad)? {
                tally_core::lane::Lane::Batch => t.batch = d,
                tally_core::lane::Lane::Flex => t.flex = d,
                tally_core::lane::Lane::Standard => t.standard = d,
                tally_core::lane::Lane::Priority => t.priority = d,
            }
        }
        p.turnarounds = Some(t);
        paths.push("policy.turnarounds".to_string());
    }
    if !a.lanes.is_empty() {
        p.lanes = a
            .lanes
            .iter()
            .map(|l| parse_lane(l))
            .collect::<Result<_, _>>()
            .map_err(CliError::usage)?;
        paths.push("policy.lanes".to_string());
    }
    let cap_given = a.max_cost_usd.is_some()
        || a.max_input_tokens.is_some()
        || a.max_output_tokens.is_some()
        || a.spend_warn_fraction.is_some()
        || a.output_tokens_per_row.is_some();
    if cap_given {
        p.spend_cap = Some(pb::SpendCap {
            max_cost_usd: a.max_cost_usd.unwrap_or(0.0),
            max_input_tokens: a.max_input_tokens.unwrap_or(0),
            max_output_tokens: a.max_output_tokens.unwrap_or(0),
            warn_fraction: a.spend_warn_fraction.unwrap_or(0.0),
            output_tokens_per_row: a.output_tokens_per_row.unwrap_or(0),
        });
    }
    if cap_given || a.no_spend_cap {
        paths.push("policy.spend_cap".to_string());
    }
    Ok((p, paths))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Any spend-cap flag replaces the whole cap (one mask path);
    /// --no-spend-cap sends the path with no cap, which removes it.
    #[test]
    fn spend_cap_flags_set_or_remove_the_whole_cap() {
        let (p, paths) = policy_from(&PolicyArgs {
            max_cost_usd: Some(50.0),
            output_tokens_per_row: Some(256),
            ..Default::default()
        })
        .unwrap();
        let cap = p.spend_cap.unwrap();
        assert_eq!(cap.max_cost_usd, 50.0);
        assert_eq!(cap.output_tokens_per_row, 256);
        assert_eq!(cap.max_input_tokens, 0);
        assert_eq!(paths, ["policy.spend_cap"]);
        let (p, paths) = policy_from(&PolicyArgs {
            no_spend_cap: true,
            ..Default::default()
        })
        .unwrap();
        assert!(p.spend_cap.is_none());
        assert_eq!(paths, ["policy.spend_cap"]);
    }

    #[test]
    fn flags_become_a_policy_and_a_mask() {
        let (p, paths) = policy_from(&PolicyArgs {
            model: Some("m".into()),
            content_budget: Some(2),
            lease: Some("45m".into()),
            prices: vec!["gemini-x=0.3,2.5".into()],
            ..Default::default()
        })
        .unwrap();
        assert_eq!(p.model, "m");
        assert_eq!(p.budgets.unwrap().content, 2);
        assert_eq!(p.lease.unwrap().seconds, 2700);
        assert_eq!(p.prices[0].output_per_million, 2.5);
        assert_eq!(
            paths,
            [
                "policy.model",
                "policy.budgets.content",
                "policy.lease",
                "policy.prices"
            ]
        );
        let (_, none) = policy_from(&PolicyArgs::default()).unwrap();
        assert!(none.is_empty());
        assert!(
            policy_from(&PolicyArgs {
                lease: Some("a while".into()),
                ..Default::default()
            })
            .is_err()
        );
    }

    #[test]
    fn prices_parse_strictly() {
        assert!(parse_price("m=1,2").is_ok());
        let full = parse_price("m=1,2,0.25,3").unwrap();
        assert_eq!(
            (full.cached_input_per_million, full.thinking_per_million),
            (0.25, 3.0)
        );
        for bad in [
            "m",
            "m=1",
            "=1,2",
            "m=x,2",
            "m=-1,2",
            "m=1,2,3,4,5",
            "m=1,2,-3",
            "m@fast=1,2",
        ] {
            assert!(parse_price(bad).is_err(), "{bad}");
        }
        // Invariant: `@LANE` prices a lane; none is batch (0 on the wire).
        assert_eq!(
            parse_price("m@flex=1,2").unwrap().lane,
            pb::Lane::Flex as i32
        );
        assert_eq!(parse_price("m=1,2").unwrap().lane, 0);
        assert_eq!(parse_lane("STANDARD"), Ok(pb::Lane::Standard as i32));
    }
}
