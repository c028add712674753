//! `tallyctl golden set|get`: a ledger's golden rows
//! (services/server/README.md, "Golden rows"). `set` reads a JSONL file, one golden row a line, and replaces
//! the set; `get` shows the set and what its latest results say.

use crate::cli::GoldenCmd;
use crate::error::{CliError, ExitCode};
use crate::table::{Table, fields};
use crate::{Ctx, jsonl, ledger_name, output};
use serde::Deserialize;
use std::io::Read as _;
use std::path::Path;
use tally_proto::v1 as pb;

/// Most bytes of a golden rows file (50 rows of at most 16 KiB, and room).
const MAX_FILE_BYTES: u64 = 2 * 1024 * 1024;

/// One line of the file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    key: String,
    payload: serde_json::Value,
    #[serde(default)]
    prompt: Option<String>,
    expected: serde_json::Value,
    #[serde(default)]
    fields: Vec<String>,
}

fn read(file: &Path) -> Result<String, CliError> {
    let mut text = String::new();
    let what = file.display().to_string();
    let got = if what == "-" {
        std::io::stdin()
            .take(MAX_FILE_BYTES + 1)
            .read_to_string(&mut text)
    } else {
        std::fs::File::open(file).and_then(|f| f.take(MAX_FILE_BYTES + 1).read_to_string(&mut text))
    };
    got.map_err(|e| CliError::input(format!("{what}: {e}")))?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(CliError::input(format!(
            "{what}: larger than {MAX_FILE_BYTES} bytes; a golden set is a handful of rows"
        )));
    }
    Ok(text)
}

/// The file's rows; a bad line is named by its number.
fn rows(file: &Path, text: &str) -> Result<Vec<pb::GoldenRow>, CliError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = |m: String| CliError::input(format!("{}:{}: {m}", file.display(), i + 1));
        let l: Line = serde_json::from_str(line).map_err(|e| at(e.to_string()))?;
        let payload = match l.payload {
            serde_json::Value::String(s) => s,
            other => other.to_string(),
        };
        let prompt = match l.prompt.as_deref() {
            None | Some("") => None,
            Some(p) => Some(jsonl::parse_prompt_ref(p).map_err(at)?),
        };
        out.push(pb::GoldenRow {
            key: l.key,
            payload,
            prompt,
            expected: l.expected.to_string(),
            fields: l.fields,
        });
    }
    Ok(out)
}

pub async fn run(ctx: &mut Ctx, cmd: GoldenCmd) -> Result<ExitCode, CliError> {
    let set = match cmd {
        GoldenCmd::Set {
            ledger,
            file,
            every_nth_job,
            window,
            max_mismatch_fraction,
            pause_on_drift,
            ..
        } => {
            let rows = rows(&file, &read(&file)?)?;
            let name = format!("{}/golden", ledger_name(&ledger));
            ctx.clients
                .ledgers
                .set_golden_rows(pb::SetGoldenRowsRequest {
                    golden: Some(pb::GoldenSet {
                        name: name.clone(),
                        rows,
                        every_nth_job,
                        window,
                        max_mismatch_fraction,
                        pause_on_drift,
                        drift: None,
                    }),
                })
                .await
                .map_err(|s| CliError::server(format!("set {name}"), s))?
                .into_inner()
        }
        GoldenCmd::Get { ledger, .. } => {
            let name = format!("{}/golden", ledger_name(&ledger));
            ctx.clients
                .ledgers
                .get_golden_rows(pb::GetGoldenRowsRequest { name: name.clone() })
                .await
                .map_err(|s| CliError::server(format!("get {name}"), s))?
                .into_inner()
        }
    };
    if ctx.json {
        ctx.print_json(&output::to_json(&set));
        return Ok(ExitCode::Ok);
    }
    let drift = set.drift.clone().unwrap_or_default();
    let state = if drift.drifted { "DRIFTED" } else { "ok" };
    print!(
        "{}",
        fields(&[
            ("name", set.name.clone()),
            ("rows", set.rows.len().to_string()),
            (
                "carried by",
                format!("the first job and every {}th", set.every_nth_job)
            ),
            (
                "drift",
                format!(
                    "{state}: {} of the latest {} results mismatch (window {}, above {} is drift{})",
                    drift.mismatches,
                    drift.results,
                    set.window,
                    set.max_mismatch_fraction,
                    if set.pause_on_drift { "; pauses" } else { "" }
                )
            ),
            (
                "answered by",
                if drift.model.is_empty() {
                    "-".into()
                } else {
                    format!("{} ({})", drift.model, drift.model_version)
                }
            ),
        ])
    );
    if !drift.fields.is_empty() {
        let mut t = Table::new(["FIELD", "MISMATCHES"]).right(&[1]);
        for f in &drift.fields {
            let field = if f.field.is_empty() {
                "(whole answer)"
            } else {
                &f.field
            };
            t.row([field.to_string(), f.mismatches.to_string()]);
        }
        ctx.print_table(&t);
    }
    Ok(ExitCode::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Invariant: each line becomes a golden row (payload objects as JSON
    // text, prompts parsed); a bad line is named by file and line number.
    #[test]
    fn lines_become_golden_rows() {
        let f = Path::new("g.jsonl");
        let text = concat!(
            r#"{"key": "a", "payload": {"text": "x"}, "prompt": "classify@v1", "expected": {"label": "pos"}, "fields": ["/label"]}"#,
            "\n\n",
            r#"{"key": "b", "payload": "{\"contents\": []}", "expected": 3}"#,
            "\n",
        );
        let rows = rows(f, text).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].payload, r#"{"text":"x"}"#);
        assert_eq!(rows[0].prompt.as_ref().unwrap().name, "classify");
        assert_eq!(rows[0].expected, r#"{"label":"pos"}"#);
        assert_eq!(rows[1].payload, r#"{"contents": []}"#);
        assert!(rows[1].prompt.is_none() && rows[1].fields.is_empty());
        let e = super::rows(f, "{\"key\": \"a\"}\n{oops")
            .unwrap_err()
            .to_string();
        assert!(e.contains("g.jsonl:1:"), "{e}");
        let e = super::rows(
            f,
            r#"{"key": "a", "payload": {}, "expected": 1, "prompt": "nover"}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("g.jsonl:1:"), "{e}");
    }
}
