//! `ledgers cache-dry-run`: what the result cache would answer of a
//! ledger's unclaimed rows. Only a tally-worker renders rows as they are
//! sent (prompts, media by hash, its provider's request shape), so tallyctl
//! runs one with `--cache-dry-run` against the same server, with the same
//! token and TLS, and shows the JSON line it prints last.

use crate::cli::CacheDryRunArgs;
use crate::error::{CliError, ExitCode};
use crate::table::Table;
use crate::{Ctx, ledger_id};
use serde_json::Value;
use std::path::PathBuf;
use std::process::Stdio;

/// The fields of the worker's answer, in the order shown.
const FIELDS: [(&str, &str); 6] = [
    ("rows", "rows looked at (PENDING, RETRYABLE)"),
    ("hits", "answered from the cache"),
    ("misses", "sent when claimed"),
    ("later", "with dependencies (known later)"),
    ("elsewhere", "another provider's"),
    ("saved_usd", "what the hits cost first"),
];

pub async fn dry_run(ctx: &mut Ctx, args: CacheDryRunArgs) -> Result<ExitCode, CliError> {
    let bin = worker_bin(args.worker_bin)?;
    let mut cmd = tokio::process::Command::new(&bin);
    cmd.args(["--server", &ctx.target.server])
        .args(["--ledger", ledger_id(&args.ledger)])
        .args(&args.worker_args)
        .arg("--cache-dry-run")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(token) = &ctx.target.token {
        cmd.env("TALLY_TOKEN", token);
    }
    let tls = &ctx.target.tls;
    for (flag, value) in [
        ("--tls-ca", &tls.ca),
        ("--tls-cert", &tls.cert),
        ("--tls-key", &tls.key),
    ] {
        if let Some(path) = value {
            cmd.arg(flag).arg(path);
        }
    }
    if let Some(domain) = &tls.domain {
        cmd.args(["--tls-domain", domain]);
    }
    let out = cmd
        .output()
        .await
        .map_err(|e| CliError::usage(format!("cannot run {}: {e}", bin.display())))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let answer = stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("hits").is_some());
    let Some(answer) = answer.filter(|_| out.status.success()) else {
        let said = String::from_utf8_lossy(&out.stderr);
        let said = said.trim();
        let tail = &said[said.len().saturating_sub(2000)..];
        return Err(CliError::input(format!(
            "{} --cache-dry-run failed ({}): {tail}",
            bin.display(),
            out.status
        )));
    };
    if ctx.json {
        ctx.print_json(&answer);
    } else {
        let mut t = Table::new(["", "ROWS"]).right(&[1]);
        for (field, label) in FIELDS {
            let value = match &answer[field] {
                Value::Number(n) if field == "saved_usd" => {
                    format!("${:.4}", n.as_f64().unwrap_or(0.0))
                }
                v => v.to_string(),
            };
            t.row([label.to_string(), value]);
        }
        print!(
            "{}",
            if ctx.printer.no_headers {
                t.render_rows()
            } else {
                t.render()
            }
        );
    }
    Ok(ExitCode::Ok)
}

/// `given`, else `tally-worker` beside this tallyctl, else on PATH.
fn worker_bin(given: Option<PathBuf>) -> Result<PathBuf, CliError> {
    if let Some(bin) = given {
        return Ok(bin);
    }
    let beside = std::env::current_exe()
        .ok()
        .map(|me| me.with_file_name("tally-worker"))
        .filter(|b| b.is_file());
    let on_path = || {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join("tally-worker"))
                .find(|b| b.is_file())
        })
    };
    beside.or_else(on_path).ok_or_else(|| {
        CliError::usage(
            "no tally-worker beside tallyctl or on PATH: give --worker-bin (or TALLY_WORKER_BIN)",
        )
    })
}
