//! `tallyctl export <ledger>`: pages through ListRows (FULL view, in key
//! order) and streams each page into the chosen format's sink while the next
//! page is already being fetched (at most two pages ahead, so memory stays
//! bounded), with a rows/s progress bar on stderr.
//!
//! The cursor is the page token after the last page written whole: on
//! Ctrl-C or a server error the sink is finished (a Parquet file gets its
//! footer and is readable), the file fsynced, and the cursor printed;
//! `--after CURSOR` with the same filters continues from there, appending
//! to the same file (a new file for Parquet). With `-o FILE` the file is
//! fsynced (and its directory) before the export is reported done. Nothing
//! is written when the first page fails (unknown ledger, bad filter).

use crate::cli::ExportArgs;
use crate::error::{CliError, ExitCode};
use crate::export::{self, Out};
use crate::{Ctx, jsonl, ledger_name, render};
use std::fs::OpenOptions;
use std::io::{self, BufWriter};
use std::path::Path;
use std::time::Instant;
use tally_proto::v1 as pb;
use tokio::sync::mpsc;

/// Output buffer size.
const BUFFER: usize = 1 << 20;

/// Pages fetched ahead of the writer.
const PAGES_AHEAD: usize = 2;

type Page = Result<pb::ListRowsResponse, tonic::Status>;

/// The RowFilter of the command's flags.
pub fn row_filter(args: &ExportArgs) -> Result<pb::RowFilter, CliError> {
    let statuses = args
        .statuses
        .iter()
        .map(|s| {
            render::parse_row_status(s)
                .map(|s| s as i32)
                .map_err(|e| CliError::usage(format!("--status: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let (prompt_name, prompt_version) = match args.prompt.as_deref() {
        None => (String::new(), String::new()),
        Some(p) if p.contains('@') => {
            let r = jsonl::parse_prompt_ref(p)
                .map_err(|e| CliError::usage(format!("--prompt: {e}")))?;
            (r.name, r.version)
        }
        Some(p) => (p.to_string(), String::new()),
    };
    Ok(pb::RowFilter {
        statuses,
        rule: args.rule.clone().unwrap_or_default(),
        model: args.model.clone().unwrap_or_default(),
        prompt_name,
        prompt_version,
        ..Default::default()
    })
}

/// Fetches pages in order into `tx` until the last one, an error, or the
/// receiver is gone.
fn spawn_pages(
    ctx: &Ctx,
    parent: String,
    filter: pb::RowFilter,
    page_size: i32,
    after: String,
) -> (mpsc::Receiver<Page>, tokio::task::JoinHandle<()>) {
    let (tx, rx) = mpsc::channel(PAGES_AHEAD);
    let mut client = ctx.clients.ledgers.clone();
    let task = tokio::spawn(async move {
        let mut token = after;
        loop {
            let page = client
                .list_rows(pb::ListRowsRequest {
                    parent: parent.clone(),
                    filter: Some(filter.clone()),
                    page_size,
                    page_token: token,
                    view: pb::RowView::Full as i32,
                })
                .await
                .map(tonic::Response::into_inner);
            let next = match &page {
                Ok(p) if !p.next_page_token.is_empty() => Some(p.next_page_token.clone()),
                _ => None,
            };
            if tx.send(page).await.is_err() {
                return;
            }
            match next {
                Some(n) => token = n,
                None => return,
            }
        }
    });
    (rx, task)
}

/// Opens the output. Returns it and whether a CSV header is due.
fn open_output(args: &ExportArgs) -> Result<(Out, bool), CliError> {
    let continuing = args.after.is_some();
    let Some(path) = &args.output else {
        return Ok((
            Out::Stdout(BufWriter::with_capacity(BUFFER, io::stdout())),
            !continuing,
        ));
    };
    let cannot = |e: io::Error| CliError::input(format!("cannot write {}: {e}", path.display()));
    let mut options = OpenOptions::new();
    options.create(true);
    if continuing {
        options.append(true);
    } else {
        options.write(true).truncate(true);
    }
    let file = options.open(path).map_err(cannot)?;
    let header = file.metadata().map_err(cannot)?.len() == 0;
    Ok((Out::File(BufWriter::with_capacity(BUFFER, file)), header))
}

/// Refuses, before anything is written, a Parquet export that would
/// continue an existing file.
fn check_output(args: &ExportArgs) -> Result<(), CliError> {
    if let (Some(path), Some(_)) = (&args.output, &args.after)
        && !args.format.appendable()
        && std::fs::metadata(path).is_ok_and(|m| m.len() > 0)
    {
        return Err(CliError::usage(format!(
            "{} exists and a Parquet file cannot be continued: write the rest (--after) to a new file",
            path.display()
        )));
    }
    Ok(())
}

/// Rows the export will write, when the summary tells (no filter but
/// statuses, from the start).
async fn expected_rows(ctx: &mut Ctx, args: &ExportArgs, filter: &pb::RowFilter) -> Option<u64> {
    let status_only = pb::RowFilter {
        statuses: filter.statuses.clone(),
        ..Default::default()
    };
    if args.after.is_some() || *filter != status_only {
        return None;
    }
    let s = crate::commands::rows::summarize(ctx, &args.ledger)
        .await
        .ok()?;
    let by_status = [
        (pb::RowStatus::Pending, s.pending),
        (pb::RowStatus::Running, s.running),
        (pb::RowStatus::Retryable, s.retryable),
        (pb::RowStatus::Succeeded, s.succeeded),
        (pb::RowStatus::Permanent, s.permanent),
        (pb::RowStatus::Blocked, s.blocked),
    ];
    let n = if filter.statuses.is_empty() {
        s.total
    } else {
        by_status
            .iter()
            .filter(|(st, _)| filter.statuses.contains(&(*st as i32)))
            .map(|(_, n)| n)
            .sum()
    };
    u64::try_from(n).ok()
}

/// Why the page loop ended early.
enum Stop {
    Interrupted,
    Server(tonic::Status),
    Io(io::Error),
}

/// fsyncs a file's directory, so a new file's entry is durable too.
fn sync_dir(path: &Path) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::File::open(dir)?.sync_all()
}

pub async fn run(ctx: &mut Ctx, args: ExportArgs) -> Result<ExitCode, CliError> {
    let parent = ledger_name(&args.ledger);
    let filter = row_filter(&args)?;
    check_output(&args)?;
    let total = expected_rows(ctx, &args, &filter).await;
    let after = args.after.clone().unwrap_or_default();
    let (mut pages, fetcher) =
        spawn_pages(ctx, parent.clone(), filter, args.page_size, after.clone());
    // The first page decides whether there is anything to write.
    let first = match pages.recv().await {
        Some(Ok(page)) => page,
        Some(Err(status)) => {
            return Err(CliError::server(
                format!("listing rows of {parent}"),
                status,
            ));
        }
        None => return Err(CliError::input("the page fetcher stopped")),
    };
    let (out, header) = open_output(&args)?;
    let mut sink = export::sink(args.format, out, render::last_segment(&parent), header)
        .map_err(|e| CliError::input(format!("cannot start the {:?} output: {e}", args.format)))?;
    let bar = ctx.progress(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template(if total.is_some() {
            "{bar:30} {human_pos}/{human_len} rows {per_sec} eta {eta} {wide_msg}"
        } else {
            "{spinner} {human_pos} rows {per_sec} {elapsed} {wide_msg}"
        })
        .expect("a valid template"),
    );
    let started = Instant::now();
    let mut cursor = after;
    let mut rows = 0u64;
    let mut next_page = Some(first);
    let interrupt = tokio::signal::ctrl_c();
    tokio::pin!(interrupt);
    let stop = loop {
        let page = match next_page.take() {
            Some(p) => p,
            None => {
                let got = tokio::select! {
                    p = pages.recv() => p,
                    _ = &mut interrupt => break Some(Stop::Interrupted),
                };
                match got {
                    Some(Ok(p)) => p,
                    Some(Err(status)) => break Some(Stop::Server(status)),
                    None => break Some(Stop::Io(io::Error::other("the page fetcher stopped"))),
                }
            }
        };
        if let Err(e) = sink.write_page(&page.rows) {
            break Some(Stop::Io(e));
        }
        rows += page.rows.len() as u64;
        bar.inc(page.rows.len() as u64);
        cursor = page.next_page_token;
        if cursor.is_empty() {
            break None;
        }
    };
    fetcher.abort();
    bar.finish_and_clear();
    let seconds = started.elapsed().as_secs_f64();
    // Finish what was written (Parquet footer), then make it durable.
    let finished = sink
        .finish()
        .and_then(Out::sync)
        .and_then(|()| match &args.output {
            Some(path) => sync_dir(path),
            None => Ok(()),
        });
    let complete = stop.is_none() && finished.is_ok();
    let where_to = args
        .output
        .as_ref()
        .map_or("stdout".to_string(), |p| p.display().to_string());
    let rate = if seconds > 0.0 {
        rows as f64 / seconds
    } else {
        0.0
    };
    if ctx.json {
        eprintln!(
            "{}",
            serde_json::json!({
                "rows": rows,
                "format": format!("{:?}", args.format).to_lowercase(),
                "output": where_to,
                "complete": complete,
                "cursor": cursor,
                "seconds": seconds,
                "rows_per_second": rate,
            })
        );
    } else if complete {
        eprintln!(
            "exported {rows} rows to {where_to} in {seconds:.1}s ({rate:.0} rows/s); complete"
        );
    } else {
        eprintln!("export stopped after {rows} rows written to {where_to}");
        eprintln!("resume with: --after {cursor}");
    }
    if let Err(e) = finished {
        return Err(CliError::input(format!(
            "cannot finish {where_to}: {e} (the rows after the cursor may be missing or partly written)"
        )));
    }
    match stop {
        None => Ok(ExitCode::Ok),
        Some(Stop::Interrupted) => Ok(ExitCode::Interrupted),
        Some(Stop::Server(status)) => Err(CliError::server(
            format!("listing rows of {parent} after {rows} rows"),
            status,
        )),
        Some(Stop::Io(e)) => Err(CliError::input(format!(
            "cannot write {where_to}: {e} (the last page may be partly written; the cursor is before it)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser as _;

    fn args(extra: &[&str]) -> ExportArgs {
        let mut argv = vec!["tallyctl", "export", "l"];
        argv.extend_from_slice(extra);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Export(a) => a,
            _ => panic!("export"),
        }
    }

    /// Flags map to RowFilter fields; a prompt with a version sets both.
    #[test]
    fn flags_become_the_row_filter() {
        let f = row_filter(&args(&[
            "--status",
            "succeeded",
            "--status",
            "permanent",
            "--rule",
            "success",
            "--model",
            "m",
            "--prompt",
            "ocr@v2",
        ]))
        .unwrap();
        assert_eq!(
            f.statuses,
            vec![
                pb::RowStatus::Succeeded as i32,
                pb::RowStatus::Permanent as i32
            ]
        );
        assert_eq!((f.rule.as_str(), f.model.as_str()), ("success", "m"));
        assert_eq!(
            (f.prompt_name.as_str(), f.prompt_version.as_str()),
            ("ocr", "v2")
        );
        let f = row_filter(&args(&["--prompt", "ocr"])).unwrap();
        assert_eq!(
            (f.prompt_name.as_str(), f.prompt_version.as_str()),
            ("ocr", "")
        );
        assert!(row_filter(&args(&["--status", "nope"])).is_err());
        assert!(Cli::try_parse_from(["tallyctl", "export", "l", "--page-size", "1001"]).is_err());
    }

    /// A Parquet file cannot be continued: refused before anything is
    /// written; line formats may continue a file.
    #[test]
    fn parquet_is_never_appended_to() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rows.parquet");
        std::fs::write(&path, b"PAR1").unwrap();
        let p = path.to_str().unwrap();
        let err =
            check_output(&args(&["--format", "parquet", "-o", p, "--after", "c"])).unwrap_err();
        assert!(err.to_string().contains("cannot be continued"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), b"PAR1");
        assert!(check_output(&args(&["--format", "csv", "-o", p, "--after", "c"])).is_ok());
        assert!(check_output(&args(&["--format", "parquet", "-o", p])).is_ok());
    }
}
