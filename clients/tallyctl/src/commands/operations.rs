//! `tallyctl operations list|get` over OperationsService.

use super::pages;
use crate::cli::{OperationArgs, OperationsArgs};
use crate::error::{CliError, ExitCode};
use crate::table::{Table, fields};
use crate::{Ctx, operation_name, render};
use tally_proto::v1 as pb;

pub async fn list(ctx: &mut Ctx, args: OperationsArgs) -> Result<ExitCode, CliError> {
    let states = args
        .states
        .iter()
        .map(|s| {
            render::parse_operation_state(s)
                .map(|s| s as i32)
                .map_err(|e| CliError::usage(format!("--state: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let (ops, more) = pages::collect(
        args.limit,
        |page_size, page_token| {
            let mut client = ctx.clients.operations.clone();
            let request = pb::ListOperationsRequest {
                states: states.clone(),
                page_size,
                page_token,
            };
            async move { client.list_operations(request).await }
        },
        |r| (r.operations, r.next_page_token),
    )
    .await
    .map_err(|s| CliError::server("list operations", s))?;
    if ctx.json {
        ctx.print_list(
            "operations",
            ops.iter().map(render::operation_json).collect(),
            Some(more),
        );
        if more && ctx.printer.format == crate::output::Format::Jsonl {
            eprintln!(
                "(first {} operations; --limit N for more, --limit 0 for all)",
                ops.len()
            );
        }
        return Ok(ExitCode::Ok);
    }
    let wide = ctx.printer.wide();
    let mut header = vec![
        "OPERATION",
        "STATE",
        "VERSION",
        "APPLIED",
        "DROPPED",
        "JOB",
        "UPDATED",
    ];
    if wide {
        header.extend(["DROPS BY REASON", "OUTPUT FILE", "ERROR", "CREATED"]);
    }
    let mut t = Table::new(header).right(&[2, 3, 4]);
    for o in &ops {
        let mut cells = vec![
            o.name.clone(),
            render::operation_state(o.state),
            o.version.to_string(),
            o.applied_events.to_string(),
            o.drops.values().sum::<i64>().to_string(),
            o.job.clone(),
            render::time(o.update_time.as_ref()),
        ];
        if wide {
            cells.extend([
                drops_text(&o.drops),
                o.output_file.clone(),
                format!("{} {}", o.error_code, o.error_message)
                    .trim()
                    .to_string(),
                render::time(o.create_time.as_ref()),
            ]);
        }
        t.row(cells);
    }
    ctx.print_table(&t);
    if more {
        eprintln!(
            "(first {} operations; --limit N for more, --limit 0 for all)",
            ops.len()
        );
    }
    Ok(ExitCode::Ok)
}

pub async fn get(ctx: &mut Ctx, args: OperationArgs) -> Result<ExitCode, CliError> {
    let name = operation_name(&args.name);
    let op = ctx
        .clients
        .operations
        .get_operation(pb::GetOperationRequest { name: name.clone() })
        .await
        .map_err(|s| CliError::server(format!("get {name}"), s))?
        .into_inner();
    let events = if args.events {
        pages::collect(
            0,
            |page_size, page_token| {
                let mut client = ctx.clients.operations.clone();
                let request = pb::ListOperationEventsRequest {
                    parent: op.name.clone(),
                    page_size,
                    page_token,
                };
                async move { client.list_operation_events(request).await }
            },
            |r| (r.events, r.next_page_token),
        )
        .await
        .map_err(|s| CliError::server(format!("list events of {}", op.name), s))?
        .0
    } else {
        Vec::new()
    };
    if ctx.json {
        let mut v = render::operation_json(&op);
        if args.events {
            v["events"] = events.iter().map(render::operation_event_json).collect();
        }
        ctx.print_json(&v);
        return Ok(ExitCode::Ok);
    }
    print!(
        "{}",
        fields(&[
            ("name", op.name.clone()),
            ("state", render::operation_state(op.state)),
            ("updated", render::time(op.update_time.as_ref())),
            ("version", op.version.to_string()),
            ("job", op.job.clone()),
            ("output file", op.output_file.clone()),
            (
                "error",
                if op.error_code.is_empty() && op.error_message.is_empty() {
                    String::new()
                } else {
                    format!("{} {}", op.error_code, op.error_message)
                }
            ),
            ("applied events", op.applied_events.to_string()),
            ("drops", drops_text(&op.drops)),
            ("created", render::time(op.create_time.as_ref())),
        ])
    );
    if args.events {
        println!();
        ctx.print_table(&events_table(&events));
    }
    Ok(ExitCode::Ok)
}

/// `reason=n reason=n`, sorted by reason.
fn drops_text(drops: &std::collections::HashMap<String, i64>) -> String {
    let mut drops: Vec<_> = drops.iter().collect();
    drops.sort();
    drops
        .iter()
        .map(|(r, n)| format!("{r}={n}"))
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn events_table(events: &[pb::OperationEventRecord]) -> Table {
    let mut t = Table::new([
        "SEQ",
        "RECEIVED",
        "SOURCE",
        "RAW STATE",
        "STATE",
        "UPDATE TIME",
        "VERDICT",
        "REASON",
        "EVENT ID",
    ])
    .right(&[0]);
    for e in events {
        t.row([
            e.sequence.to_string(),
            render::time(e.receive_time.as_ref()),
            render::event_source(e.source),
            e.raw_state.clone(),
            render::operation_state(e.state),
            render::time(e.update_time.as_ref()),
            render::event_verdict(e.verdict),
            e.reason.clone(),
            e.event_id.clone(),
        ]);
    }
    t
}
