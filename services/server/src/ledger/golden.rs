//! Golden rows on the wire: SetGoldenRows checked into the store's set,
//! the set and its drift back out, and ReportGoldenResults' answers. The
//! rules (comparison, drift, which jobs carry the rows) are in
//! `tally_core::golden`.

use super::validate;
use crate::edge::status::{invalid, invalid_field};
use std::collections::HashSet;
use tally_core::golden::{GoldenPolicy, MAX_FIELDS, MAX_GOLDEN_ROWS};
use tally_core::keys::validate_key;
use tally_core::payload::{validate_object, validate_value};
use tally_core::violation::Violations;
use tally_proto::v1 as pb;
use tally_store::golden::{Answer, DriftView, GoldenRow, GoldenSet};
use tonic::Status;

/// Largest payload and expected answer of a golden row.
pub const MAX_GOLDEN_BYTES: usize = 8 * 1024;
/// Largest answer text recorded.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;
const MAX_WINDOW: i32 = 1000;
const MAX_EVERY: i32 = 1_000_000;

/// `ledgers/{ledger}/golden` → the ledger.
pub fn ledger_of(field: &str, name: &str) -> Result<String, Status> {
    let ledger = name.strip_suffix("/golden").ok_or_else(|| {
        invalid_field(field, format!("{name:?} is not ledgers/{{ledger}}/golden"))
    })?;
    validate::ledger(field, ledger)
}

/// SetGoldenRows checked: the ledger and the set. Every problem is named
/// by its field; nothing is written on any.
pub fn set_from_proto(req: &pb::SetGoldenRowsRequest) -> Result<(String, GoldenSet), Status> {
    let g = req
        .golden
        .as_ref()
        .ok_or_else(|| invalid_field("golden", "required"))?;
    let ledger = ledger_of("golden.name", &g.name)?;
    let mut v = Violations::new();
    if g.rows.len() > MAX_GOLDEN_ROWS {
        v.add(
            "golden.rows",
            format!("at most {MAX_GOLDEN_ROWS} golden rows"),
        );
    }
    let mut keys = HashSet::new();
    let mut rows = Vec::with_capacity(g.rows.len());
    for (i, r) in g.rows.iter().enumerate().take(MAX_GOLDEN_ROWS) {
        let at = |f: &str| format!("golden.rows[{i}].{f}");
        if let Err(e) = validate_key(&r.key) {
            v.add(at("key"), e.to_string());
        } else if !keys.insert(r.key.as_str()) {
            v.add(at("key"), format!("{:?} is in the set twice", r.key));
        }
        if r.payload.len() > MAX_GOLDEN_BYTES {
            v.add(at("payload"), format!("at most {MAX_GOLDEN_BYTES} bytes"));
        } else if let Err(e) = validate_object(&r.payload) {
            v.add(at("payload"), e.to_string());
        }
        let expected = if r.expected.len() > MAX_GOLDEN_BYTES {
            v.add(at("expected"), format!("at most {MAX_GOLDEN_BYTES} bytes"));
            None
        } else if let Err(e) = validate_value(&r.expected) {
            v.add(at("expected"), e.to_string());
            None
        } else {
            serde_json::from_str::<serde_json::Value>(&r.expected).ok()
        };
        if r.fields.len() > MAX_FIELDS {
            v.add(at("fields"), format!("at most {MAX_FIELDS} fields"));
        }
        for f in &r.fields {
            if !f.starts_with('/') {
                v.add(
                    at("fields"),
                    format!("{f:?} is not a JSON pointer (write /label, /a/b)"),
                );
            } else if let Some(e) = &expected
                && e.pointer(f).is_none()
            {
                v.add(at("fields"), format!("{f:?} is not in `expected`"));
            }
        }
        let (prompt_name, prompt_version) = match &r.prompt {
            Some(p) if p.name.is_empty() || p.version.is_empty() => {
                v.add(at("prompt"), "name and version are both required");
                (String::new(), String::new())
            }
            Some(p) => (p.name.clone(), p.version.clone()),
            None => (String::new(), String::new()),
        };
        rows.push(GoldenRow {
            key: r.key.clone(),
            payload: r.payload.clone(),
            prompt_name,
            prompt_version,
            expected: expected.unwrap_or_default(),
            fields: r.fields.clone(),
        });
    }
    let d = GoldenPolicy::default();
    let every = ranged(
        &mut v,
        "golden.every_nth_job",
        g.every_nth_job,
        d.every_nth_job,
        MAX_EVERY,
    );
    let window = ranged(&mut v, "golden.window", g.window, d.window, MAX_WINDOW);
    let fraction = g.max_mismatch_fraction;
    let fraction = if fraction == 0.0 {
        d.max_mismatch_fraction
    } else if fraction.is_finite() && (0.0..1.0).contains(&fraction) {
        fraction
    } else {
        v.add(
            "golden.max_mismatch_fraction",
            "must be above 0 and below 1 (0: 0.2)",
        );
        d.max_mismatch_fraction
    };
    v.finish().map_err(invalid)?;
    Ok((
        ledger,
        GoldenSet {
            rows,
            policy: GoldenPolicy {
                every_nth_job: every,
                window,
                max_mismatch_fraction: fraction,
                pause_on_drift: g.pause_on_drift,
            },
        },
    ))
}

/// `value` when 1..=max, `default` when 0; otherwise a violation of `field`.
fn ranged(v: &mut Violations, field: &str, value: i32, default: u32, max: i32) -> u32 {
    match value {
        0 => default,
        n if (1..=max).contains(&n) => n as u32,
        _ => {
            v.add(field, format!("must be 1 to {max} (0: {default})"));
            default
        }
    }
}

pub fn row_to_proto(r: &GoldenRow) -> pb::GoldenRow {
    pb::GoldenRow {
        key: r.key.clone(),
        payload: r.payload.clone(),
        prompt: (!r.prompt_name.is_empty()).then(|| pb::PromptRef {
            name: r.prompt_name.clone(),
            version: r.prompt_version.clone(),
        }),
        expected: r.expected.to_string(),
        fields: r.fields.clone(),
    }
}

pub fn drift_to_proto(d: &DriftView) -> pb::GoldenDrift {
    pb::GoldenDrift {
        results: d.drift.results as i32,
        mismatches: d.drift.mismatches as i32,
        fields: d
            .drift
            .fields
            .iter()
            .map(|(field, n)| pb::GoldenFieldCount {
                field: field.clone(),
                mismatches: *n as i32,
            })
            .collect(),
        drifted: d.drift.drifted,
        model: d.model.clone(),
        model_version: d.model_version.clone(),
    }
}

pub fn set_to_proto(ledger: &str, set: &GoldenSet, drift: &DriftView) -> pb::GoldenSet {
    pb::GoldenSet {
        name: format!("{}/golden", tally_core::names::ledger_name(ledger)),
        rows: set.rows.iter().map(row_to_proto).collect(),
        every_nth_job: set.policy.every_nth_job as i32,
        window: set.policy.window as i32,
        max_mismatch_fraction: set.policy.max_mismatch_fraction,
        pause_on_drift: set.policy.pause_on_drift,
        drift: Some(drift_to_proto(drift)),
    }
}

/// ReportGoldenResults' answers, checked.
pub fn answers(req: &pb::ReportGoldenResultsRequest) -> Result<Vec<Answer>, Status> {
    let mut v = Violations::new();
    if req.answers.len() > MAX_GOLDEN_ROWS {
        v.add("answers", format!("at most {MAX_GOLDEN_ROWS}"));
    }
    for (i, a) in req.answers.iter().enumerate().take(MAX_GOLDEN_ROWS) {
        if validate_key(&a.key).is_err() {
            v.add(format!("answers[{i}].key"), "not a golden row's key");
        }
        for (f, text, max) in [
            ("text", &a.text, MAX_ANSWER_BYTES),
            ("model_version", &a.model_version, 256),
            ("error", &a.error, 2048),
        ] {
            if text.len() > max {
                v.add(format!("answers[{i}].{f}"), format!("at most {max} bytes"));
            }
        }
    }
    v.finish().map_err(invalid)?;
    Ok(req
        .answers
        .iter()
        .map(|a| Answer {
            key: a.key.clone(),
            text: a.text.clone(),
            model_version: a.model_version.clone(),
            error: a.error.clone(),
        })
        .collect())
}
