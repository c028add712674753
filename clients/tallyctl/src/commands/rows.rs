//! `tallyctl status|rows|row|redrive`: the ledger summary, rows and their
//! attempts, and putting PERMANENT/BLOCKED rows back to work.

use super::pages;
use crate::cli::{RedriveArgs, RowArgs, RowFilterArgs, RowsArgs, StatusArgs};
use crate::error::{CliError, ExitCode};
use crate::table::{Table, fields, truncate};
use crate::{Ctx, job_in_ledger, ledger_name, render};
use tally_proto::v1 as pb;

pub async fn summarize(ctx: &mut Ctx, ledger: &str) -> Result<pb::LedgerSummary, CliError> {
    summarize_with(ctx, ledger, false).await
}

/// [`summarize`], with the forecast when asked.
pub async fn summarize_with(
    ctx: &mut Ctx,
    ledger: &str,
    forecast: bool,
) -> Result<pb::LedgerSummary, CliError> {
    let name = ledger_name(ledger);
    Ok(ctx
        .clients
        .ledgers
        .summarize_ledger(pb::SummarizeLedgerRequest {
            name: name.clone(),
            forecast,
        })
        .await
        .map_err(|s| CliError::server(format!("summarize {name}"), s))?
        .into_inner())
}

/// The human form of a summary: counts, attempts by budget, tokens, cost,
/// PERMANENT by rule, then the one-line summary (`no_headers`: the tables
/// without their title lines).
pub fn summary_text(s: &pb::LedgerSummary, no_headers: bool) -> String {
    let render = |t: &Table| {
        if no_headers {
            t.render_rows()
        } else {
            t.render()
        }
    };
    let mut out = String::new();
    let mut counts = Table::new(["STATUS", "ROWS"]).right(&[1]);
    for (label, n) in [
        ("pending", s.pending),
        ("running", s.running),
        ("retryable", s.retryable),
        ("succeeded", s.succeeded),
        ("permanent", s.permanent),
        ("blocked", s.blocked),
        ("total", s.total),
    ] {
        counts.row([label.to_string(), n.to_string()]);
    }
    out.push_str(&format!("ledger {}\n", s.ledger));
    out.push_str(&format!(
        "state  {}\n\n",
        crate::render::ledger_state_text(s.state, s.pause.as_ref())
    ));
    out.push_str(&render(&counts));
    let mut attempts = Table::new(["BUDGET", "ATTEMPTS"]).right(&[1]);
    for (label, n) in [
        ("provider", s.attempts_provider),
        ("content", s.attempts_content),
        ("infra", s.attempts_infra),
        ("total", s.attempts_total),
    ] {
        attempts.row([label.to_string(), n.to_string()]);
    }
    out.push('\n');
    out.push_str(&render(&attempts));
    let u = s.usage.unwrap_or_default();
    let mut tokens = Table::new(["TOKENS", "COUNT"]).right(&[1]);
    for (label, n) in [
        ("input", u.input_tokens),
        ("output", u.output_tokens),
        ("thinking", u.thinking_tokens),
        ("cached", u.cached_tokens),
    ] {
        tokens.row([label.to_string(), n.to_string()]);
    }
    out.push('\n');
    out.push_str(&render(&tokens));
    out.push_str(&format!("\nestimated cost  ${:.4}", s.estimated_cost_usd));
    if !s.unpriced_models.is_empty() {
        out.push_str(&format!(
            " (no price for: {}; counted as 0)",
            s.unpriced_models.join(", ")
        ));
    }
    out.push_str(&format!("\nactive jobs     {}\n", s.active_jobs));
    if s.inputs_changed > 0 {
        out.push_str(&format!(
            "inputs changed  {} succeeded row(s) used a dependency answer that changed since (rows --inputs-changed)\n",
            s.inputs_changed
        ));
    }
    if let Some(c) = s.result_cache.filter(|c| c.hits + c.misses > 0) {
        out.push_str(&format!(
            "result cache    {} hits, {} misses, ${:.4} saved",
            c.hits, c.misses, c.saved_usd
        ));
        if c.stale > 0 {
            out.push_str(&format!(
                " ({} served before a drift: rows list --stale-cache)",
                c.stale
            ));
        }
        out.push('\n');
    }
    if let Some(spend) = &s.spend {
        out.push('\n');
        out.push_str(&render(&spend_table(spend)));
    }
    if !s.permanent_by_rule.is_empty() {
        let mut rules: Vec<_> = s.permanent_by_rule.iter().collect();
        rules.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let mut t = Table::new(["PERMANENT BY RULE", "ROWS"]).right(&[1]);
        for (rule, n) in rules {
            t.row([rule.clone(), n.to_string()]);
        }
        out.push('\n');
        out.push_str(&render(&t));
    }
    if let Some(f) = &s.forecast {
        out.push('\n');
        out.push_str(&forecast_text(f));
    }
    out.push_str(&format!("\n{}\n", s.summary_line));
    out
}

/// A forecast: the deadline, the deepest chain, each plan's finish, cost
/// and rows by lane, and why the plan is what it is.
pub(crate) fn forecast_text(f: &pb::LedgerForecast) -> String {
    let mut out = format!(
        "forecast: deadline {}, deepest chain {} link(s)\n",
        f.deadline
            .as_ref()
            .map_or("none".to_string(), |t| crate::timefmt::time(Some(t))),
        f.depth
    );
    let mut t = Table::new(["PLAN", "FINISH", "IN TIME", "COST", "ROWS BY LANE"]).right(&[3]);
    for (label, p) in [("routed", &f.plan), ("all batch", &f.all_batch)] {
        let Some(p) = p else { continue };
        let lanes: Vec<String> = p
            .rows_by_lane
            .iter()
            .map(|l| {
                let lane = pb::Lane::try_from(l.lane).map_or("?", |x| x.as_str_name());
                format!(
                    "{}={}",
                    lane.trim_start_matches("LANE_").to_ascii_lowercase(),
                    l.rows
                )
            })
            .collect();
        t.row([
            label.to_string(),
            crate::timefmt::time(p.finish_time.as_ref()),
            if p.in_time { "yes" } else { "NO" }.to_string(),
            format!("${:.4}", p.cost_usd),
            lanes.join(" "),
        ]);
    }
    out.push_str(&t.render());
    if !f.explanation.is_empty() {
        out.push_str(&format!("{}\n", f.explanation));
    }
    out
}

/// A capped ledger's spend: spent, reserved and the limit, per measure the
/// cap limits.
fn spend_table(s: &pb::LedgerSpend) -> Table {
    let cap = s.cap.unwrap_or_default();
    let spent = s.spent.unwrap_or_default();
    let reserved = s.reserved.unwrap_or_default();
    let mut t = Table::new(["SPEND CAP", "SPENT", "RESERVED", "LIMIT"]).right(&[1, 2, 3]);
    if cap.max_cost_usd > 0.0 {
        t.row([
            "cost (USD)".to_string(),
            format!("{:.4}", spent.cost_usd),
            format!("{:.4}", reserved.cost_usd),
            format!("{:.4}", cap.max_cost_usd),
        ]);
    }
    for (label, limit, spent, reserved) in [
        (
            "input tokens",
            cap.max_input_tokens,
            spent.input_tokens,
            reserved.input_tokens,
        ),
        (
            "output tokens",
            cap.max_output_tokens,
            spent.output_tokens,
            reserved.output_tokens,
        ),
    ] {
        if limit > 0 {
            t.row([
                label.to_string(),
                spent.to_string(),
                reserved.to_string(),
                limit.to_string(),
            ]);
        }
    }
    t
}

pub async fn status(ctx: &mut Ctx, args: StatusArgs) -> Result<ExitCode, CliError> {
    let s = summarize_with(ctx, &args.ledger, args.forecast).await?;
    if ctx.json {
        ctx.print_json(&render::summary_json(&s));
    } else {
        print!("{}", summary_text(&s, ctx.printer.no_headers));
    }
    Ok(permanent_exit(&s, args.fail_on_permanent))
}

/// Exit 3 when asked to and rows are PERMANENT.
pub fn permanent_exit(s: &pb::LedgerSummary, fail_on_permanent: bool) -> ExitCode {
    if fail_on_permanent && s.permanent > 0 {
        ExitCode::Permanent
    } else {
        ExitCode::Ok
    }
}

pub fn row_filter(ledger: &str, f: &RowFilterArgs) -> Result<pb::RowFilter, CliError> {
    let statuses = f
        .statuses
        .iter()
        .map(|s| {
            render::parse_row_status(s)
                .map(|s| s as i32)
                .map_err(|e| CliError::usage(format!("--status: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(pb::RowFilter {
        statuses,
        rule: f.rule.clone().unwrap_or_default(),
        model: f.model.clone().unwrap_or_default(),
        prompt_name: f.prompt.clone().unwrap_or_default(),
        prompt_version: f.prompt_version.clone().unwrap_or_default(),
        job: f
            .job
            .as_deref()
            .map(|j| job_in_ledger(ledger, j))
            .unwrap_or_default(),
        in_job: f
            .in_job
            .as_deref()
            .map(|j| job_in_ledger(ledger, j))
            .unwrap_or_default(),
        stale_cache: f.stale_cache,
        inputs_changed: f.inputs_changed,
    })
}

fn is_empty(f: &pb::RowFilter) -> bool {
    f == &pb::RowFilter::default()
}

pub async fn list(ctx: &mut Ctx, args: RowsArgs) -> Result<ExitCode, CliError> {
    let parent = ledger_name(&args.ledger);
    let filter = row_filter(&args.ledger, &args.filter)?;
    let view = if args.full {
        pb::RowView::Full
    } else {
        pb::RowView::Basic
    };
    let (rows, more) = pages::collect(
        args.limit,
        |page_size, page_token| {
            let mut client = ctx.clients.ledgers.clone();
            let request = pb::ListRowsRequest {
                parent: parent.clone(),
                filter: Some(filter.clone()),
                page_size,
                page_token,
                view: view as i32,
            };
            async move { client.list_rows(request).await }
        },
        |r| (r.rows, r.next_page_token),
    )
    .await
    .map_err(|s| CliError::server(format!("list rows of {parent}"), s))?;
    if ctx.json {
        ctx.print_list(
            "rows",
            rows.iter().map(render::row_json).collect(),
            Some(more),
        );
        if more && ctx.printer.format == crate::output::Format::Jsonl {
            eprintln!(
                "(first {} rows; --limit N for more, --limit 0 for all)",
                rows.len()
            );
        }
        return Ok(ExitCode::Ok);
    }
    let wide = ctx.printer.wide();
    let mut header = vec![
        "KEY",
        "STATUS",
        "ATT p/c/i",
        "RULE",
        "MODEL",
        "PROMPT",
        "JOB",
        "ERROR",
    ];
    if wide {
        header.extend(["TOKENS in/out", "DEPENDS ON", "NEXT ATTEMPT", "UPDATED"]);
    }
    if args.full {
        header.extend(["PAYLOAD", "RESULT"]);
    }
    let mut t = Table::new(header);
    for r in &rows {
        let error = if args.full || wide {
            r.last_error.clone()
        } else {
            truncate(&r.last_error, 60)
        };
        let mut cells = vec![
            r.key.clone(),
            render::row_status(r.status),
            render::attempts(r.attempts.as_ref()),
            r.rule.clone(),
            r.model.clone(),
            render::prompt_ref(r.prompt.as_ref()),
            render::last_segment(&r.job).to_string(),
            error,
        ];
        if wide {
            let u = r.usage.unwrap_or_default();
            cells.extend([
                format!("{}/{}", u.input_tokens, u.output_tokens),
                r.depends_on.join(","),
                render::time(r.next_attempt_time.as_ref()),
                render::time(r.update_time.as_ref()),
            ]);
        }
        if args.full {
            cells.push(r.payload.clone());
            cells.push(r.result.clone());
        }
        t.row(cells);
    }
    ctx.print_table(&t);
    if more {
        eprintln!(
            "(first {} rows; --limit N for more, --limit 0 for all)",
            rows.len()
        );
    }
    Ok(ExitCode::Ok)
}

pub async fn get(ctx: &mut Ctx, args: RowArgs) -> Result<ExitCode, CliError> {
    let name = format!("{}/rows/{}", ledger_name(&args.ledger), args.key);
    let r = ctx
        .clients
        .ledgers
        .get_row(pb::GetRowRequest { name: name.clone() })
        .await
        .map_err(|s| CliError::server(format!("get {name}"), s))?
        .into_inner();
    if ctx.json {
        ctx.print_json(&render::row_json(&r));
        return Ok(ExitCode::Ok);
    }
    let u = r.usage.unwrap_or_default();
    print!(
        "{}",
        fields(&[
            ("name", r.name.clone()),
            ("status", render::row_status(r.status)),
            ("rule", r.rule.clone()),
            ("attempts p/c/i", render::attempts(r.attempts.as_ref())),
            ("last error", r.last_error.clone()),
            ("depends on", r.depends_on.join(", ")),
            ("unmet deps", r.unmet_dependencies.to_string()),
            ("prompt", render::prompt_ref(r.prompt.as_ref())),
            ("model", r.model.clone()),
            ("job", r.job.clone()),
            ("claim", r.claim.clone()),
            (
                "tokens",
                format!(
                    "input={} output={} thinking={} cached={}",
                    u.input_tokens, u.output_tokens, u.thinking_tokens, u.cached_tokens
                )
            ),
            ("next attempt", render::time(r.next_attempt_time.as_ref())),
            ("created", render::time(r.create_time.as_ref())),
            ("updated", render::time(r.update_time.as_ref())),
            ("payload", r.payload.clone()),
            ("result", r.result.clone()),
        ])
    );
    println!();
    ctx.print_table(&attempts_table(&r.history));
    if !r.superseded.is_empty() {
        println!("\nresults it had before it was asked again (newest first):");
        let mut t = Table::new(["VERSION", "TIME", "RULE", "ACTOR", "REASON", "RESULT"]);
        for s in &r.superseded {
            t.row([
                s.result_version.to_string(),
                render::time(s.supersede_time.as_ref()),
                s.rule.clone(),
                s.actor.clone(),
                truncate(&s.reason, 60),
                truncate(&s.result, 80),
            ]);
        }
        ctx.print_table(&t);
        if r.superseded_omitted > 0 {
            println!("({} older ones not shown)", r.superseded_omitted);
        }
    }
    Ok(ExitCode::Ok)
}

pub fn attempts_table(history: &[pb::Attempt]) -> Table {
    let mut t = Table::new([
        "#",
        "TIME",
        "OUTCOME",
        "RULE",
        "BUDGET",
        "JOB",
        "BATCH",
        "MODEL",
        "PROMPT",
        "TOKENS in/out",
        "ACTOR",
        "ERROR",
    ])
    .right(&[0]);
    for a in history {
        let u = a.usage.unwrap_or_default();
        t.row([
            a.number.to_string(),
            render::time(a.time.as_ref()),
            render::row_status(a.outcome),
            a.rule.clone(),
            render::budget(a.budget),
            render::last_segment(&a.job).to_string(),
            a.batch.clone(),
            a.model.clone(),
            render::prompt_ref(a.prompt.as_ref()),
            format!("{}/{}", u.input_tokens, u.output_tokens),
            a.actor.clone(),
            truncate(&a.error, 80),
        ]);
    }
    t
}

pub async fn redrive(ctx: &mut Ctx, args: RedriveArgs) -> Result<ExitCode, CliError> {
    let parent = ledger_name(&args.ledger);
    let target = if args.keys.is_empty() {
        let filter = row_filter(&args.ledger, &args.filter)?;
        if is_empty(&filter) {
            return Err(CliError::usage(
                "say which rows: --keys a,b or a filter such as --status permanent --rule …",
            ));
        }
        pb::redrive_rows_request::Target::Filter(filter)
    } else {
        pb::redrive_rows_request::Target::Keys(pb::RowKeys {
            keys: args.keys.clone(),
        })
    };
    let r = ctx
        .clients
        .ledgers
        .redrive_rows(pb::RedriveRowsRequest {
            parent: parent.clone(),
            target: Some(target),
            validate_only: args.dry_run,
            include_succeeded: args.include_succeeded,
            reason: args.reason.clone(),
        })
        .await
        .map_err(|s| CliError::server(format!("redrive rows of {parent}"), s))?
        .into_inner();
    if ctx.json {
        ctx.print_json(&render::redrive_json(&r, args.dry_run));
        return Ok(ExitCode::Ok);
    }
    let verb = if args.dry_run {
        "would redrive"
    } else {
        "redriven"
    };
    println!(
        "{verb} {}, unblocked {}, skipped {} (not PERMANENT or BLOCKED, or BLOCKED by a dependency still PERMANENT: redrive that one){}",
        r.redriven,
        r.unblocked,
        r.skipped,
        if args.dry_run {
            " — dry run, nothing changed"
        } else {
            ""
        }
    );
    if args.include_succeeded {
        println!(
            "{} {} succeeded row(s); {} succeeded dependant(s) used their answers{}; estimated cost ${:.4}",
            if args.dry_run {
                "would ask again"
            } else {
                "asked again"
            },
            r.reanswered,
            r.dependants_at_risk,
            if r.dependants_at_risk > 0 {
                " (asked again if their inputs change and the ledger's policy says rerun_dependants, marked changed otherwise)"
            } else {
                ""
            },
            r.estimated_cost_usd,
        );
    }
    if !r.sample_keys.is_empty() {
        println!("keys: {}", r.sample_keys.join(", "));
    }
    if !r.at_risk_keys.is_empty() {
        println!("dependants at risk: {}", r.at_risk_keys.join(", "));
    }
    Ok(ExitCode::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_reads_top_to_bottom() {
        let s = pb::LedgerSummary {
            ledger: "ledgers/x".into(),
            total: 5,
            succeeded: 3,
            permanent: 1,
            blocked: 1,
            attempts_provider: 6,
            attempts_total: 6,
            estimated_cost_usd: 0.01234,
            unpriced_models: vec!["m2".into()],
            permanent_by_rule: [("finish_reason_blocked".to_string(), 1)].into(),
            summary_line: "succeeded=3 retryable=0 permanent=1 blocked=1 pending=0".into(),
            ..Default::default()
        };
        let text = summary_text(&s, false);
        assert!(!summary_text(&s, true).contains("STATUS"));
        assert!(text.contains("succeeded     3\n"), "{text}");
        assert!(text.contains("provider         6\n"), "{text}");
        assert!(text.contains("$0.0123 (no price for: m2"));
        assert!(text.contains("finish_reason_blocked     1"), "{text}");
        assert!(text.ends_with("permanent=1 blocked=1 pending=0\n"));
        assert_eq!(permanent_exit(&s, true), ExitCode::Permanent);
        assert_eq!(permanent_exit(&s, false), ExitCode::Ok);
    }

    #[test]
    fn filters_from_flags() {
        let f = row_filter(
            "l",
            &RowFilterArgs {
                statuses: vec!["permanent".into(), "blocked".into()],
                job: Some("j1".into()),
                in_job: Some("ledgers/l/jobs/j2".into()),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(
            f.statuses,
            [
                pb::RowStatus::Permanent as i32,
                pb::RowStatus::Blocked as i32
            ]
        );
        assert_eq!(f.job, "ledgers/l/jobs/j1");
        assert_eq!(f.in_job, "ledgers/l/jobs/j2");
        assert!(is_empty(
            &row_filter("l", &RowFilterArgs::default()).unwrap()
        ));
        assert!(
            row_filter(
                "l",
                &RowFilterArgs {
                    statuses: vec!["gone".into()],
                    ..Default::default()
                }
            )
            .is_err()
        );
    }
}
