//! `tallyctl enroll <ledger> <file.jsonl> [--format tally|openai|anthropic]`:
//! streams the file line by line into the chunked enroller, with a progress
//! bar over the file's bytes. OpenAI and Anthropic batch lines are converted
//! by [`crate::formats`]; their `custom_id`s must be unique in the file (a
//! second one is a bad line naming both line numbers, not a silent merge).

use crate::cli::EnrollArgs;
use crate::enroll::{self, Item, Report};
use crate::error::{CliError, ExitCode};
use crate::formats::{self, InputFormat};
use crate::{Ctx, jsonl, ledger_name};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use tally_proto::v1 as pb;

/// Most bytes per EnrollRows call (the server's default message limit is
/// 64 MiB; payloads are at most 1 MiB each).
pub const CHUNK_BYTES: usize = 8 * 1024 * 1024;

/// Lines of a reader as enroll items; blank lines are skipped. A read error
/// (or a line that is not UTF-8) is a bad item like any other.
///
/// For `openai` and `anthropic` files it remembers each `custom_id` with its
/// line number, to report duplicates: memory grows with the number of rows
/// (the key plus about 50 bytes each), which is less than the file's size
/// (every line holds its key and more than 50 other bytes).
pub struct Source<R> {
    reader: BufReader<R>,
    format: InputFormat,
    number: u64,
    position: u64,
    done: bool,
    seen: HashMap<String, u64>,
    /// Rows whose line named a non-Gemini model (dropped for the ledger's).
    pub dropped: DroppedModels,
    /// Where the rows will run (the ledger's model's provider).
    target: formats::Target,
}

/// Which non-Gemini models the file named, to say so once at the end.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct DroppedModels {
    pub rows: u64,
    /// The first few distinct names, with the line each was first seen on.
    pub first: Vec<(String, String)>,
}

/// How many distinct dropped model names are kept for the note.
const DROPPED_NAMES: usize = 5;

impl DroppedModels {
    fn add(&mut self, origin: &str, model: String) {
        self.rows += 1;
        if self.first.len() < DROPPED_NAMES && !self.first.iter().any(|(m, _)| *m == model) {
            self.first.push((model, origin.to_string()));
        }
    }

    /// The one note said at the end, if any model was dropped.
    pub fn note(&self) -> Option<String> {
        if self.rows == 0 {
            return None;
        }
        let names: Vec<String> = self
            .first
            .iter()
            .map(|(m, o)| format!("{m:?} ({o})"))
            .collect();
        Some(format!(
            "{} rows named a model that is not a Gemini model ({}{}); they use the ledger's model",
            self.rows,
            names.join(", "),
            if self.first.len() == DROPPED_NAMES {
                ", …"
            } else {
                ""
            }
        ))
    }
}

/// A tally-format source (the format of `tallyctl enroll` without --format).
pub fn lines<R: Read>(reader: R) -> Source<R> {
    Source::new(reader, InputFormat::Tally)
}

impl<R: Read> Source<R> {
    pub fn new(reader: R, format: InputFormat) -> Self {
        Self {
            reader: BufReader::new(reader),
            format,
            number: 0,
            position: 0,
            done: false,
            seen: HashMap::new(),
            dropped: DroppedModels::default(),
            target: formats::Target::of("gemini-2.5-flash"),
        }
    }

    /// A source of rows for a ledger whose model is `ledger_model`.
    pub fn for_ledger(reader: R, format: InputFormat, ledger_model: &str) -> Self {
        Self {
            target: formats::Target::of(ledger_model),
            ..Self::new(reader, format)
        }
    }

    fn parse(&mut self, origin: &str, text: &str) -> Result<pb::RowInput, String> {
        if self.format == InputFormat::Tally {
            return jsonl::parse_line(text);
        }
        let row = formats::convert_for(self.format, text, &self.target)?;
        if let Some(first) = self.seen.get(&row.key) {
            return Err(format!(
                "duplicate custom_id {:?} (first on line {first}); each request needs its own",
                row.key
            ));
        }
        self.seen.insert(row.key.clone(), self.number);
        if let Some(model) = row.dropped_model {
            self.dropped.add(origin, model);
        }
        Ok(pb::RowInput {
            key: row.key,
            payload: row.payload,
            depends_on: Vec::new(),
            prompt: None,
            model: row.model,
            ..Default::default()
        })
    }
}

impl<R: Read> Iterator for Source<R> {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        loop {
            if self.done {
                return None;
            }
            let mut buf = Vec::new();
            self.number += 1;
            let origin = format!("line {}", self.number);
            let position = self.position;
            match self.reader.read_until(b'\n', &mut buf) {
                Ok(0) => return None,
                Ok(n) => self.position = position + n as u64,
                Err(e) => {
                    self.done = true;
                    return Some(Item::Bad {
                        origin,
                        error: format!("cannot read: {e}"),
                        position,
                    });
                }
            }
            let position = self.position;
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
            return Some(match self.parse(&origin, text) {
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
    }
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
    let mut source = if args.format == InputFormat::Tally {
        Source::new(reader, args.format)
    } else {
        // Whether lines are converted depends on where the ledger's rows run.
        let ledger = ctx
            .clients
            .ledgers
            .clone()
            .get_ledger(pb::GetLedgerRequest {
                name: parent.clone(),
            })
            .await
            .map_err(|s| CliError::server(format!("get {parent}"), s))?
            .into_inner();
        let model = ledger.policy.map(|p| p.model).unwrap_or_default();
        Source::for_ledger(reader, args.format, &model)
    };
    let mut result = enroll::run(&mut ctx.clients, &parent, source.by_ref(), &options, &bar).await;
    bar.finish_and_clear();
    if let Some(note) = source.dropped.note() {
        match &mut result {
            Ok(r) | Err((r, _)) => r.notes.push(note),
        }
    }
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
        for note in &report.notes {
            eprintln!("note: {note}");
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

    /// A custom_id seen twice in one file is a bad line naming both line
    /// numbers; the first is kept (idempotent enrollment would otherwise
    /// merge the two silently).
    #[test]
    fn duplicate_custom_ids_name_both_lines() {
        let line = |id: &str| {
            format!(
                r#"{{"custom_id":"{id}","method":"POST","url":"/v1/chat/completions","body":{{"model":"gpt-4o","messages":[{{"role":"user","content":"x"}}]}}}}"#
            )
        };
        let text = [line("a"), line("b"), String::new(), line("a")].join("\n");
        let mut source = Source::new(text.as_bytes(), InputFormat::Openai);
        let items: Vec<Item> = source.by_ref().collect();
        let summary: Vec<String> = items
            .iter()
            .map(|i| match i {
                Item::Row { origin, row, .. } => format!("{origin} row {}", row.key),
                Item::Bad { origin, error, .. } => format!("{origin} bad: {error}"),
            })
            .collect();
        assert_eq!(summary[..2], ["line 1 row a", "line 2 row b"]);
        assert!(
            summary[2].starts_with("line 4 bad: duplicate custom_id \"a\" (first on line 1)"),
            "{}",
            summary[2]
        );
        // The model was dropped twice (the duplicate is not counted), said once.
        assert_eq!(source.dropped.rows, 2);
        let note = source.dropped.note().unwrap();
        assert!(
            note.starts_with(
                "2 rows named a model that is not a Gemini model (\"gpt-4o\" (line 1))"
            ),
            "{note}"
        );
    }

    /// Converted rows carry the Gemini request and no prompt: the worker
    /// sends a payload holding `contents` as it is.
    #[test]
    fn anthropic_lines_become_request_rows() {
        let text = r#"{"custom_id":"k1","params":{"model":"gemini-2.5-flash","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}}"#;
        let items: Vec<Item> = Source::new(text.as_bytes(), InputFormat::Anthropic).collect();
        let Item::Row { row, .. } = &items[0] else {
            panic!("a row")
        };
        assert_eq!(row.key, "k1");
        assert_eq!(row.model, "gemini-2.5-flash");
        assert!(row.prompt.is_none());
        assert!(
            row.payload
                .starts_with(r#"{"contents":[{"parts":[{"text":"hi"}],"role":"user"}]"#)
        );
    }
}
