//! `tallyctl enroll <ledger> <file.jsonl>`: streams the file line by line
//! into the chunked enroller, with a progress bar over the file's bytes.

use crate::cli::EnrollArgs;
use crate::enroll::{self, Item, Report};
use crate::error::{CliError, ExitCode};
use crate::{Ctx, jsonl, ledger_name};
use std::io::{BufRead, BufReader, Read};

/// Most bytes per EnrollRows call (the server's default message limit is
/// 64 MiB; payloads are at most 1 MiB each).
pub const CHUNK_BYTES: usize = 8 * 1024 * 1024;

/// Lines of a reader as enroll items; blank lines are skipped. A read error
/// (or a line that is not UTF-8) is a bad item like any other.
pub fn lines(reader: impl Read) -> impl Iterator<Item = Item> {
    let mut reader = BufReader::new(reader);
    let mut number = 0u64;
    let mut position = 0u64;
    let mut done = false;
    std::iter::from_fn(move || {
        loop {
            if done {
                return None;
            }
            let mut buf = Vec::new();
            number += 1;
            let origin = format!("line {number}");
            match reader.read_until(b'\n', &mut buf) {
                Ok(0) => return None,
                Ok(n) => position += n as u64,
                Err(e) => {
                    done = true;
                    return Some(Item::Bad {
                        origin,
                        error: format!("cannot read: {e}"),
                        position,
                    });
                }
            }
            let Ok(text) = std::str::from_utf8(&buf) else {
                return Some(Item::Bad {
                    origin,
                    error: "not UTF-8".into(),
                    position,
                });
            };
            let text = text.trim();
            if text.is_empty() {
                continue;
            }
            return Some(match jsonl::parse_line(text) {
                Ok(row) => Item::Row {
                    origin,
                    row,
                    position,
                },
                Err(error) => Item::Bad {
                    origin,
                    error,
                    position,
                },
            });
        }
    })
}

pub async fn run(ctx: &mut Ctx, args: EnrollArgs) -> Result<ExitCode, CliError> {
    let parent = ledger_name(&args.ledger);
    let (reader, size): (Box<dyn Read>, Option<u64>) = if args.file.as_os_str() == "-" {
        (Box::new(std::io::stdin()), None)
    } else {
        let f = std::fs::File::open(&args.file)
            .map_err(|e| CliError::input(format!("cannot open {}: {e}", args.file.display())))?;
        let size = f.metadata().ok().map(|m| m.len());
        (Box::new(f), size)
    };
    let options = enroll::Options {
        chunk: args.chunk,
        chunk_bytes: CHUNK_BYTES,
        skip_bad: args.skip_bad_lines,
        dry_run: args.dry_run,
    };
    let bar = ctx.progress(size);
    if size.is_some() {
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:30} {bytes}/{total_bytes} {elapsed} {wide_msg}",
            )
            .expect("a valid template"),
        );
    }
    let result = enroll::run(&mut ctx.clients, &parent, lines(reader), &options, &bar).await;
    bar.finish_and_clear();
    finish(ctx, result, args.dry_run, args.fail_on_conflict)
}

/// Prints the totals (also after an error) and picks the exit code.
pub fn finish(
    ctx: &Ctx,
    result: Result<Report, (Report, CliError)>,
    dry_run: bool,
    fail_on_conflict: bool,
) -> Result<ExitCode, CliError> {
    let (report, error) = match result {
        Ok(r) => (r, None),
        Err((r, e)) => (r, Some(e)),
    };
    if ctx.json {
        ctx.print_json(&report.to_json(dry_run));
    } else {
        if dry_run {
            println!("dry run: {} rows checked, nothing sent", report.rows);
        } else {
            println!(
                "enrolled {}, already present {}, conflicts {} ({} rows in {} calls)",
                report.enrolled,
                report.already_present,
                report.conflicts,
                report.rows,
                report.calls
            );
        }
        for (origin, key) in report.conflict_keys.iter().take(20) {
            eprintln!("conflict: {origin}: key {key} exists with other content (left unchanged)");
        }
        if report.conflict_keys.len() > 20 {
            eprintln!(
                "conflict: … and {} more (see --json)",
                report.conflict_keys.len() - 20
            );
        }
        if !report.bad.is_empty() && error.is_none() {
            eprintln!("{} bad lines skipped", report.bad.len());
        }
    }
    if let Some(e) = error {
        return Err(e);
    }
    if fail_on_conflict && report.conflicts > 0 {
        if !ctx.json {
            eprintln!(
                "tallyctl: {} conflicts (--fail-on-conflict)",
                report.conflicts
            );
        }
        return Ok(ExitCode::Input);
    }
    Ok(ExitCode::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_numbered_blank_lines_skipped_and_bad_ones_kept() {
        let text = "{\"key\":\"a\",\"payload\":{}}\n\n  \nnot json\n{\"key\":\"b\",\"payload\":{}}";
        let items: Vec<Item> = lines(text.as_bytes()).collect();
        let summary: Vec<String> = items
            .iter()
            .map(|i| match i {
                Item::Row { origin, row, .. } => format!("{origin} row {}", row.key),
                Item::Bad { origin, .. } => format!("{origin} bad"),
            })
            .collect();
        assert_eq!(summary, ["line 1 row a", "line 4 bad", "line 5 row b"]);
        let Item::Row { position, .. } = &items[2] else {
            panic!()
        };
        assert_eq!(*position as usize, text.len());
    }
}
