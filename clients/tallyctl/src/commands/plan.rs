//! `tallyctl plan`: scan the dataset, write the immutable plan file, and
//! optionally enroll it (or enroll an existing plan file with `--from`).

use crate::cli::{FirstPass, PlanArgs};
use crate::commands::enroll::{CHUNK_BYTES, finish};
use crate::enroll::{self, Item};
use crate::error::{CliError, ExitCode};
use crate::plan::{self, MissingImage, Plan, scan};
use crate::{Ctx, jsonl, ledger_name};
use serde_json::{Value, json};
use std::io::Write as _;
use std::path::Path;
use tally_core::payload::MAX_PAYLOAD_BYTES;
use tally_proto::v1 as pb;

/// The name a page's prompt reads the page before's answer by
/// (`{{ deps.previous }}`).
pub const PREVIOUS: &str = "previous";

/// What writing the plan file did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    Created,
    /// The file already held this same plan.
    Unchanged,
}

/// How an existing plan differs from a new one, for the refusal message.
pub fn describe_difference(old: &Value, new: &Value) -> String {
    let keys = |v: &Value| -> std::collections::BTreeMap<String, (Value, Value)> {
        let nodes = v.get("nodes").and_then(Value::as_object);
        let deps = v.get("deps").and_then(Value::as_object);
        nodes
            .map(|n| {
                n.iter()
                    .map(|(k, node)| {
                        let dep = deps.and_then(|d| d.get(k)).cloned().unwrap_or(Value::Null);
                        (k.clone(), (node.clone(), dep))
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let (old, new) = (keys(old), keys(new));
    let added: Vec<&String> = new.keys().filter(|k| !old.contains_key(*k)).collect();
    let removed: Vec<&String> = old.keys().filter(|k| !new.contains_key(*k)).collect();
    let changed: Vec<&String> = new
        .iter()
        .filter(|(k, v)| old.get(*k).is_some_and(|o| o != *v))
        .map(|(k, _)| k)
        .collect();
    let sample = |v: &[&String]| {
        let mut s = v
            .iter()
            .take(5)
            .map(|k| k.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        if v.len() > 5 {
            s.push_str(", …");
        }
        s
    };
    let mut parts = Vec::new();
    for (label, list) in [("new", &added), ("gone", &removed), ("changed", &changed)] {
        if !list.is_empty() {
            parts.push(format!("{} {label} ({})", list.len(), sample(list)));
        }
    }
    if parts.is_empty() {
        "the file is not a plan this planner wrote".to_string()
    } else {
        parts.join("; ")
    }
}

/// Writes the plan unless the file exists: the same plan there is fine, a
/// different one is refused (plans are immutable once written). The file
/// appears whole or not at all (written aside, then linked into place,
/// which also fails if someone else created it meanwhile).
pub fn write_plan(path: &Path, plan: &Plan) -> Result<Written, CliError> {
    let compare = || -> Result<Written, CliError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| CliError::input(format!("cannot read {}: {e}", path.display())))?;
        let old: Value = serde_json::from_str(&text).map_err(|e| {
            CliError::input(format!(
                "{} exists and is not JSON ({e}); refusing to overwrite it",
                path.display()
            ))
        })?;
        let new = plan.to_value();
        if old == new {
            Ok(Written::Unchanged)
        } else {
            Err(CliError::input(format!(
                "{} holds a different plan ({}); plans are immutable: write a new file (or remove this one if no ledger was enrolled from it)",
                path.display(),
                describe_difference(&old, &new)
            )))
        }
    };
    if path.exists() {
        return compare();
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    let file_name = path
        .file_name()
        .ok_or_else(|| CliError::usage(format!("--out {} is not a file name", path.display())))?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        file_name.to_string_lossy(),
        std::process::id()
    ));
    let io = |e: std::io::Error| CliError::input(format!("cannot write {}: {e}", path.display()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp).map_err(io)?;
        f.write_all(plan.to_json_text().as_bytes()).map_err(io)?;
        f.sync_all().map_err(io)?;
        match std::fs::hard_link(&tmp, path) {
            Ok(()) => Ok(Written::Created),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => compare(),
            Err(e) => Err(io(e)),
        }
    })();
    let _ = std::fs::remove_file(&tmp);
    result
}

/// The media reference of a page's image: its path, the SHA-256 of its
/// bytes (so a page whose image changed is a CONFLICT on re-enrollment)
/// and its MIME type. The worker reads it under its `--media-root`.
fn page_media(path: &str) -> Result<Value, String> {
    use sha2::Digest as _;
    use std::io::Read as _;
    let mut file = std::fs::File::open(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| format!("cannot read {path}: {e}"))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    let mime = tally_core::media::mime_from_name(path).unwrap_or("image/jpeg");
    Ok(json!({"uri": path, "sha256": hex::encode(hasher.finalize()), "mime_type": mime}))
}

/// The row of one node.
fn row_item(
    node: &plan::Node,
    index: usize,
    first_pass: FirstPass,
    prompt: &Option<pb::PromptRef>,
    model: &str,
    media_var: Option<&str>,
) -> Item {
    let origin = format!("node {}", node.key);
    let position = index as u64 + 1;
    let content = match first_pass {
        FirstPass::Path => None,
        FirstPass::Content => {
            let parsed = std::fs::read_to_string(&node.filter_json)
                .map_err(|e| format!("cannot read {}: {e}", node.filter_json))
                .and_then(|text| {
                    serde_json::from_str::<Value>(&text)
                        .map_err(|e| format!("{} is not JSON: {e}", node.filter_json))
                });
            match parsed {
                Ok(v) => Some(v),
                Err(error) => {
                    return Item::Bad {
                        origin,
                        error,
                        position,
                    };
                }
            }
        }
    };
    let mut payload = plan::payload(node, content);
    if let Some(var) = media_var {
        match page_media(&node.image_path) {
            Ok(reference) => {
                let mut v: Value = serde_json::from_str(&payload).expect("a payload is JSON");
                v[var] = reference;
                payload = serde_json::to_string(&v).expect("a payload always serializes");
            }
            Err(error) => {
                return Item::Bad {
                    origin,
                    error,
                    position,
                };
            }
        }
    }
    if payload.len() > MAX_PAYLOAD_BYTES {
        return Item::Bad {
            origin,
            error: format!(
                "payload is {} bytes with the first-pass content (limit {MAX_PAYLOAD_BYTES}); use --first-pass path",
                payload.len()
            ),
            position,
        };
    }
    Item::Row {
        origin,
        row: pb::RowInput {
            key: node.key.clone(),
            payload,
            depends_on: node.depends_on.iter().cloned().collect(),
            // The page before's answer, as `deps.previous` in the prompt.
            dependency_names: node
                .depends_on
                .iter()
                .map(|d| (d.clone(), PREVIOUS.to_string()))
                .collect(),
            prompt: prompt.clone(),
            model: model.to_string(),
        },
        position,
    }
}

/// The prompt's media variable the page image goes in: its one declared
/// media variable (none: the page is sent by path only, as text).
async fn page_media_variable(ctx: &mut Ctx, p: &pb::PromptRef) -> Result<Option<String>, CliError> {
    let name = format!("prompts/{}/versions/{}", p.name, p.version);
    let prompt = ctx
        .clients
        .ledgers
        .get_prompt(pb::GetPromptRequest { name: name.clone() })
        .await
        .map_err(|s| CliError::server(format!("get {name}"), s))?
        .into_inner();
    match prompt.media.as_slice() {
        [] => Ok(None),
        [one] if plan::PAYLOAD_FIELDS.contains(&one.as_str()) => Err(CliError::usage(format!(
            "{name} puts the page image in `{one}`, which is also a field of the plan's rows ({}): the image would replace it; register a version that names another media variable (e.g. --media image), so `{{{{ {one} }}}}` keeps its value",
            plan::PAYLOAD_FIELDS.join(", ")
        ))),
        [one] => Ok(Some(one.clone())),
        many => Err(CliError::usage(format!(
            "{name} declares {} media variables ({}); a plan fills one, the page image",
            many.len(),
            many.join(", ")
        ))),
    }
}

pub async fn run(ctx: &mut Ctx, args: PlanArgs) -> Result<ExitCode, CliError> {
    let mut warnings = Vec::new();
    let (plan, written, source) = if let Some(from) = &args.from {
        let text = std::fs::read_to_string(from)
            .map_err(|e| CliError::input(format!("cannot read {}: {e}", from.display())))?;
        let value: Value = serde_json::from_str(&text)
            .map_err(|e| CliError::input(format!("{} is not JSON: {e}", from.display())))?;
        let plan = Plan::from_value(&value)
            .map_err(|e| CliError::input(format!("{}: {e}", from.display())))?;
        (plan, None, from.clone())
    } else {
        let (Some(images), Some(results), Some(out)) =
            (&args.images_root, &args.results_root, &args.out)
        else {
            return Err(CliError::usage(
                "give --images-root, --results-root and --out (or --from PLAN --enroll LEDGER)",
            ));
        };
        let (groups, scan_warnings) =
            scan::scan(images, results).map_err(|e| CliError::input(e.to_string()))?;
        warnings.extend(scan_warnings);
        let missing = if args.skip_missing_images {
            MissingImage::Skip
        } else {
            MissingImage::Error
        };
        let (plan, plan_warnings) =
            plan::plan(&groups, missing).map_err(|e| CliError::input(e.to_string()))?;
        warnings.extend(plan_warnings);
        let written = write_plan(out, &plan)?;
        (plan, Some(written), out.clone())
    };
    let groups: std::collections::BTreeSet<_> = plan.nodes.iter().map(|n| &n.group).collect();
    let deps = plan.nodes.iter().filter(|n| n.depends_on.is_some()).count();
    if !ctx.json {
        for w in &warnings {
            eprintln!("warning: {w}");
        }
        let what = match written {
            Some(Written::Created) => "written to",
            Some(Written::Unchanged) => "unchanged in",
            None => "read from",
        };
        println!(
            "plan: {} pages in {} groups, {deps} dependencies; {what} {}",
            plan.nodes.len(),
            groups.len(),
            source.display()
        );
    }
    let plan_json = json!({
        "path": source.display().to_string(),
        "written": match written {
            Some(Written::Created) => "created",
            Some(Written::Unchanged) => "unchanged",
            None => "read",
        },
        "pages": plan.nodes.len(),
        "groups": groups.len(),
        "dependencies": deps,
        "warnings": warnings,
    });
    let Some(ledger) = &args.enroll else {
        if ctx.json {
            ctx.print_json(&json!({"plan": plan_json, "enroll": null}));
        }
        return Ok(ExitCode::Ok);
    };
    let mut prompt = args
        .prompt
        .as_deref()
        .map(jsonl::parse_prompt_ref)
        .transpose()
        .map_err(|e| CliError::usage(format!("--prompt: {e}")))?;
    let model = args.model.clone().unwrap_or_default();
    let parent = ledger_name(ledger);
    // Checked before anything is enrolled: a bad flag writes nothing.
    let routing = routing(&args)?;
    let options = enroll::Options {
        chunk: args.chunk,
        chunk_bytes: CHUNK_BYTES,
        skip_bad: false,
        dry_run: false,
    };
    ensure_ledger(ctx, &parent).await?;
    if prompt.is_none() && !args.text_only {
        let registered = super::prompts::register_page_prompt(ctx, ledger).await?;
        prompt = Some(plan::page_prompt::reference(crate::ledger_id(&parent)));
        if !ctx.json {
            println!("prompt: {} (the page image as `image`)", registered.name);
        }
    }
    let media_var = match &prompt {
        Some(p) => page_media_variable(ctx, p).await?,
        None => None,
    };
    let bar = ctx.progress(Some(plan.nodes.len() as u64));
    let items = plan
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| row_item(n, i, args.first_pass, &prompt, &model, media_var.as_deref()));
    let result = enroll::run(&mut ctx.clients, &parent, items, &options, &bar).await;
    bar.finish_and_clear();
    let conflicts = match &result {
        Ok(r) | Err((r, _)) => r.conflicts,
    };
    if conflicts > 0 && args.prompt.is_none() && !args.text_only {
        eprintln!(
            "hint: {conflicts} rows are in CONFLICT; a ledger enrolled before pages carried their image was enrolled text-only: enroll it with --text-only"
        );
    }
    let forecast = match (&routing, &result) {
        (Some(policy), Ok(_)) => Some(route(ctx, &parent, policy.clone()).await?),
        _ => None,
    };
    if ctx.json {
        let (report, error) = match result {
            Ok(r) => (r, None),
            Err((r, e)) => (r, Some(e)),
        };
        ctx.print_json(&json!({
            "plan": plan_json,
            "enroll": report.to_json(false),
            "forecast": forecast.as_ref().map(forecast_json),
        }));
        if let Some(e) = error {
            return Err(e);
        }
        if args.fail_on_conflict && report.conflicts > 0 {
            return Ok(ExitCode::Input);
        }
        return Ok(ExitCode::Ok);
    }
    if let Some(f) = &forecast {
        eprint!("{}", crate::commands::rows::forecast_text(f));
    }
    finish(ctx, result, false, args.fail_on_conflict)
}

/// Creates the ledger `parent` with the default policy when it does not
/// exist, as the Prefect page flow does (`tallyctl ledgers create` first to
/// choose its policy); an existing one is left as it is.
async fn ensure_ledger(ctx: &mut Ctx, parent: &str) -> Result<(), CliError> {
    let got = ctx
        .clients
        .ledgers
        .get_ledger(pb::GetLedgerRequest {
            name: parent.to_string(),
        })
        .await;
    match got {
        Ok(_) => return Ok(()),
        Err(s) if s.code() == tonic::Code::NotFound => {}
        Err(s) => return Err(CliError::server(format!("get {parent}"), s)),
    }
    let id = crate::ledger_id(parent).to_string();
    let made = ctx
        .clients
        .ledgers
        .create_ledger(pb::CreateLedgerRequest {
            ledger_id: id.clone(),
            policy: Some(pb::LedgerPolicy::default()),
        })
        .await;
    match made {
        Ok(_) => {
            if !ctx.json {
                eprintln!("ledger {id} created with the default policy");
            }
            Ok(())
        }
        // Made meanwhile by another caller: the same end.
        Err(s) if s.code() == tonic::Code::AlreadyExists => Ok(()),
        Err(s) => Err(CliError::server(format!("create ledger {id}"), s)),
    }
}

/// The policy fields `--deadline` and `--lanes` set (none without a
/// deadline).
fn routing(args: &PlanArgs) -> Result<Option<pb::LedgerPolicy>, CliError> {
    let Some(deadline) = &args.deadline else {
        return Ok(None);
    };
    let deadline = crate::commands::ledgers::parse_deadline(deadline)
        .map_err(|e| CliError::usage(format!("--deadline: {e}")))?
        .ok_or_else(|| CliError::usage("--deadline: give a time or a duration"))?;
    let names: Vec<&str> = if args.lanes.is_empty() {
        vec!["batch", "flex"]
    } else {
        args.lanes.iter().map(String::as_str).collect()
    };
    let lanes = names
        .iter()
        .map(|l| crate::commands::ledgers::parse_lane(l))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| CliError::usage(format!("--lanes: {e}")))?;
    Ok(Some(pb::LedgerPolicy {
        lanes,
        deadline: Some(deadline),
        ..Default::default()
    }))
}

/// Gives the ledger the deadline and lanes of `policy`, and answers its
/// forecast under them.
async fn route(
    ctx: &mut Ctx,
    parent: &str,
    policy: pb::LedgerPolicy,
) -> Result<pb::LedgerForecast, CliError> {
    ctx.clients
        .ledgers
        .update_ledger(pb::UpdateLedgerRequest {
            ledger: Some(pb::Ledger {
                name: parent.to_string(),
                policy: Some(policy),
                ..Default::default()
            }),
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["policy.lanes".into(), "policy.deadline".into()],
            }),
        })
        .await
        .map_err(|s| CliError::server(format!("update {parent}"), s))?;
    let s = crate::commands::rows::summarize_with(ctx, parent, true).await?;
    s.forecast.ok_or_else(|| {
        CliError::server(
            format!("summarize {parent}"),
            tonic::Status::internal("no forecast in the answer"),
        )
    })
}

/// A forecast as `--json` prints it.
fn forecast_json(f: &pb::LedgerForecast) -> Value {
    let plan = |p: &Option<pb::ForecastPlan>| {
        p.as_ref().map(|p| {
            json!({
                "finish": crate::timefmt::time(p.finish_time.as_ref()),
                "in_time": p.in_time,
                "cost_usd": p.cost_usd,
            })
        })
    };
    json!({
        "depth": f.depth,
        "plan": plan(&f.plan),
        "all_batch": plan(&f.all_batch),
        "explanation": f.explanation,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Group, Node};

    fn sample(pages: &[u64]) -> Plan {
        let group = Group {
            state: "S".into(),
            school: "X".into(),
            year: "2020".into(),
        };
        Plan {
            nodes: pages
                .iter()
                .map(|&p| Node {
                    key: plan::node_key(&group, p),
                    group: group.clone(),
                    page: p,
                    image_path: format!("/i/{p}.jpg"),
                    filter_json: format!("/r/{p}.json"),
                    depends_on: None,
                })
                .collect(),
        }
    }

    #[test]
    fn a_plan_file_is_written_once_and_never_replaced_by_another() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plan.json");
        assert_eq!(
            write_plan(&path, &sample(&[1, 2])).unwrap(),
            Written::Created
        );
        assert_eq!(
            write_plan(&path, &sample(&[1, 2])).unwrap(),
            Written::Unchanged
        );
        let err = write_plan(&path, &sample(&[1, 3])).unwrap_err().to_string();
        assert!(err.contains("1 new (S:X:2020:3)"), "{err}");
        assert!(err.contains("1 gone (S:X:2020:2)"), "{err}");
        // Formatting does not matter, content does.
        let compact = serde_json::to_string(&sample(&[1, 2]).to_value()).unwrap();
        std::fs::write(&path, compact).unwrap();
        assert_eq!(
            write_plan(&path, &sample(&[1, 2])).unwrap(),
            Written::Unchanged
        );
        std::fs::write(&path, "garbage").unwrap();
        assert!(write_plan(&path, &sample(&[1])).is_err());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "garbage");
        // No temporary files are left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn rows_carry_paths_content_prompt_and_dependency() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = sample(&[1, 2]);
        for n in &mut p.nodes {
            n.filter_json = dir
                .path()
                .join(format!("{}.json", n.page))
                .display()
                .to_string();
        }
        p.nodes[1].depends_on = Some(p.nodes[0].key.clone());
        std::fs::write(&p.nodes[1].filter_json, r#"{"label": "curricular"}"#).unwrap();
        let prompt = Some(pb::PromptRef {
            name: "page_ocr".into(),
            version: "v2".into(),
        });
        let Item::Row { row, .. } =
            row_item(&p.nodes[1], 1, FirstPass::Content, &prompt, "m", None)
        else {
            panic!("expected a row")
        };
        assert_eq!(row.depends_on, vec!["S:X:2020:1"]);
        assert_eq!(
            row.dependency_names.get("S:X:2020:1").map(String::as_str),
            Some(PREVIOUS),
            "the page before is named for the prompt"
        );
        assert_eq!(row.model, "m");
        let v: Value = serde_json::from_str(&row.payload).unwrap();
        assert_eq!(v["first_pass"]["label"], "curricular");
        assert_eq!(v["image_path"], "/i/2.jpg");
        // Page 1's JSON does not exist: a bad item naming the node.
        let Item::Bad { origin, error, .. } =
            row_item(&p.nodes[0], 0, FirstPass::Content, &prompt, "", None)
        else {
            panic!("expected a bad item")
        };
        assert_eq!(origin, "node S:X:2020:1");
        assert!(error.contains("cannot read"));
        // Paths only: no file is read.
        assert!(matches!(
            row_item(&p.nodes[0], 0, FirstPass::Path, &None, "", None),
            Item::Row { .. }
        ));
    }

    // Invariant: with a media variable, the page's image goes in it as a
    // reference whose SHA-256 is of the file's bytes (so a changed image is
    // a CONFLICT on re-enrollment); a missing image is a bad item naming it.
    #[test]
    fn the_page_image_goes_in_the_prompts_media_variable() {
        use sha2::Digest as _;
        let dir = tempfile::tempdir().unwrap();
        let mut p = sample(&[1]);
        let image = dir.path().join("1.jpg");
        std::fs::write(&image, b"jpeg bytes").unwrap();
        p.nodes[0].image_path = image.display().to_string();
        let Item::Row { row, .. } =
            row_item(&p.nodes[0], 0, FirstPass::Path, &None, "", Some("page"))
        else {
            panic!("expected a row")
        };
        let v: Value = serde_json::from_str(&row.payload).unwrap();
        assert_eq!(v["page"]["uri"], image.display().to_string());
        assert_eq!(v["page"]["mime_type"], "image/jpeg");
        assert_eq!(
            v["page"]["sha256"],
            hex::encode(sha2::Sha256::digest(b"jpeg bytes"))
        );
        assert!(tally_core::media::parse(&v["page"]).is_ok());
        p.nodes[0].image_path = dir.path().join("gone.jpg").display().to_string();
        let Item::Bad { error, .. } =
            row_item(&p.nodes[0], 0, FirstPass::Path, &None, "", Some("page"))
        else {
            panic!("expected a bad item")
        };
        assert!(error.contains("gone.jpg"), "{error}");
    }
}
