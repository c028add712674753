//! Golden rows: a handful of requests with known answers sent along with a
//! ledger's batches, to see whether the model behind an alias (a `-latest`
//! name) changed its answers. The rules: which jobs carry them, how an
//! answer is compared with what was expected, and when the mismatches over
//! a window of recent golden results mean drift.
//!
//! Pure: the store keeps the golden rows and their results apart from the
//! ledger's rows (never counted as rows, attempts or cost); the worker adds
//! them to the batches this module picks and reports their answers.

use std::collections::BTreeMap;

use serde_json::Value;

/// Most golden rows a ledger may register.
pub const MAX_GOLDEN_ROWS: usize = 50;
/// Most fields one golden row compares.
pub const MAX_FIELDS: usize = 32;

/// Golden results a ledger keeps: twice its drift window (the newest), so
/// a window doubled later still reads full windows at once, and a ledger
/// reporting for years keeps a bounded table. Older results are deleted as
/// new ones are recorded.
pub fn results_kept(window: u32) -> i64 {
    2 * i64::from(window.max(1))
}

/// What a golden row's answer must be.
#[derive(Debug, Clone, PartialEq)]
pub enum Expect {
    /// The whole answer, as JSON (key order and spacing do not matter).
    Exact(Value),
    /// These fields of the answer (JSON pointers, `/label`), each equal to
    /// its value; other fields are free.
    Fields(Vec<(String, Value)>),
}

/// One way an answer differs from what was expected.
#[derive(Debug, Clone, PartialEq)]
pub struct Mismatch {
    /// The JSON pointer compared (`""`: the whole answer).
    pub field: String,
    pub expected: Value,
    /// What the answer had there (`None`: nothing).
    pub got: Option<Value>,
}

/// Compares an answer's text with `expect`: the mismatches (none: it
/// matched). An answer that is not JSON mismatches at the root.
pub fn compare(expect: &Expect, answer: &str) -> Vec<Mismatch> {
    let parsed: Option<Value> = serde_json::from_str(answer).ok();
    match expect {
        Expect::Exact(want) => match &parsed {
            Some(got) if got == want => Vec::new(),
            got => vec![Mismatch {
                field: String::new(),
                expected: want.clone(),
                got: got.clone(),
            }],
        },
        Expect::Fields(fields) => fields
            .iter()
            .filter_map(|(pointer, want)| {
                let got = parsed.as_ref().and_then(|v| v.pointer(pointer)).cloned();
                (got.as_ref() != Some(want)).then(|| Mismatch {
                    field: pointer.clone(),
                    expected: want.clone(),
                    got,
                })
            })
            .collect(),
    }
}

/// Field errors of an expectation as registered (paths under `prefix`).
pub fn problems(expect: &Expect) -> Vec<String> {
    match expect {
        Expect::Exact(_) => Vec::new(),
        Expect::Fields(fields) => {
            let mut out = Vec::new();
            if fields.is_empty() {
                out.push("name at least one field to compare".to_owned());
            }
            if fields.len() > MAX_FIELDS {
                out.push(format!("at most {MAX_FIELDS} fields"));
            }
            for (pointer, _) in fields {
                if !pointer.starts_with('/') {
                    out.push(format!(
                        "{pointer:?} is not a JSON pointer (write /label, /a/b)"
                    ));
                }
            }
            out
        }
    }
}

/// How a ledger uses its golden rows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GoldenPolicy {
    /// Every Nth job of the ledger carries the golden rows (its first job
    /// always does).
    pub every_nth_job: u32,
    /// The latest golden results the mismatch rate is computed over.
    pub window: u32,
    /// Drift: a mismatch rate above this over a full window.
    pub max_mismatch_fraction: f64,
    /// Whether drift pauses the ledger (reason `model_drift`), beside the
    /// alert.
    pub pause_on_drift: bool,
}

impl Default for GoldenPolicy {
    fn default() -> Self {
        Self {
            every_nth_job: 10,
            window: 20,
            max_mismatch_fraction: 0.2,
            pause_on_drift: false,
        }
    }
}

impl GoldenPolicy {
    /// Whether the ledger's `job_number`th job (1-based) carries them.
    pub fn carries(&self, job_number: u64) -> bool {
        job_number == 1
            || (self.every_nth_job > 0 && job_number.is_multiple_of(u64::from(self.every_nth_job)))
    }
}

/// One golden result, as drift reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct Result {
    /// The fields that mismatched (empty: it matched).
    pub mismatched: Vec<String>,
}

/// What the latest results say.
#[derive(Debug, Clone, PartialEq)]
pub struct Drift {
    pub results: usize,
    pub mismatches: usize,
    /// How often each field mismatched, most first.
    pub fields: Vec<(String, usize)>,
    /// Above the policy's fraction over a full window.
    pub drifted: bool,
}

/// Reads the latest results (newest first; only the first `window` count).
pub fn drift(policy: &GoldenPolicy, latest: &[Result]) -> Drift {
    let window = &latest[..latest.len().min(policy.window as usize)];
    let mismatches = window.iter().filter(|r| !r.mismatched.is_empty()).count();
    let mut by_field: BTreeMap<&str, usize> = BTreeMap::new();
    for r in window {
        for f in &r.mismatched {
            *by_field.entry(f.as_str()).or_default() += 1;
        }
    }
    let mut fields: Vec<(String, usize)> = by_field
        .into_iter()
        .map(|(f, n)| (f.to_owned(), n))
        .collect();
    fields.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let full = !window.is_empty() && window.len() == policy.window as usize;
    Drift {
        results: window.len(),
        mismatches,
        drifted: full && (mismatches as f64) > policy.max_mismatch_fraction * window.len() as f64,
        fields,
    }
}

/// The kind of the alert drift sends.
pub const ALERT_DRIFT: &str = "model_drift";

/// What drift says, in one line (the alert's and the pause's message).
pub fn drift_message(model: &str, model_version: &str, d: &Drift) -> String {
    let fields: Vec<String> = d
        .fields
        .iter()
        .take(8)
        .map(|(f, n)| {
            let f = if f.is_empty() { "(whole answer)" } else { f };
            format!("{f} ×{n}")
        })
        .collect();
    format!(
        "golden rows: {} of the latest {} answers of model {model:?} (now answered by {model_version:?}) differ from the expected; fields: {}",
        d.mismatches,
        d.results,
        fields.join(", ")
    )
}

/// The JSON the `model_drift` alert carries (POSTed to the policy's
/// `alert_url`, like the other ledger alerts).
pub fn alert_body(
    ledger: &str,
    model: &str,
    model_version: &str,
    d: &Drift,
    time: chrono::DateTime<chrono::Utc>,
) -> Value {
    serde_json::json!({
        "type": "tally.ledger.model_drift",
        "reason": ALERT_DRIFT,
        "ledger": crate::names::ledger_name(ledger),
        "model": model,
        "model_version": model_version,
        "results": d.results,
        "mismatches": d.mismatches,
        "fields": d.fields.iter().map(|(f, n)| serde_json::json!({"field": f, "mismatches": n})).collect::<Vec<_>>(),
        "message": drift_message(model, model_version, d),
        "time": time.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // Invariant: an exact expectation ignores spacing and key order, and
    // anything else (other values, not JSON) is one root mismatch.
    #[test]
    fn exact_answers() {
        let e = Expect::Exact(json!({"label": "pos", "score": 4}));
        assert!(compare(&e, r#"{ "score": 4, "label": "pos" }"#).is_empty());
        let m = compare(&e, r#"{"label": "neg", "score": 4}"#);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].field, "");
        assert_eq!(compare(&e, "not json")[0].got, None);
    }

    // Invariant: field expectations compare only the named fields, and
    // name each one that differs or is missing.
    #[test]
    fn field_answers() {
        let e = Expect::Fields(vec![
            ("/label".into(), json!("pos")),
            ("/meta/lang".into(), json!("en")),
        ]);
        assert!(compare(&e, r#"{"label": "pos", "meta": {"lang": "en"}, "free": 1}"#).is_empty());
        let m = compare(&e, r#"{"label": "neg"}"#);
        let fields: Vec<_> = m.iter().map(|m| m.field.as_str()).collect();
        assert_eq!(fields, ["/label", "/meta/lang"]);
        assert_eq!(m[0].got, Some(json!("neg")));
        assert_eq!(m[1].got, None);
        assert!(problems(&e).is_empty());
        assert_eq!(
            problems(&Expect::Fields(vec![("label".into(), json!(1))])).len(),
            1
        );
        assert_eq!(problems(&Expect::Fields(Vec::new())).len(), 1);
    }

    // Invariant: the first job and every Nth carry the golden rows.
    #[test]
    fn which_jobs_carry_them() {
        let p = GoldenPolicy {
            every_nth_job: 3,
            ..Default::default()
        };
        let carried: Vec<u64> = (1..=10).filter(|n| p.carries(*n)).collect();
        assert_eq!(carried, [1, 3, 6, 9]);
        let only_first = GoldenPolicy {
            every_nth_job: 0,
            ..Default::default()
        };
        assert!(only_first.carries(1) && !only_first.carries(2));
    }

    // Invariant: drift is a mismatch rate above the fraction over a full
    // window of the latest results; fields are counted, most first.
    #[test]
    fn drift_over_the_window() {
        let p = GoldenPolicy {
            window: 4,
            max_mismatch_fraction: 0.25,
            ..Default::default()
        };
        let ok = || Result { mismatched: vec![] };
        let bad = |f: &[&str]| Result {
            mismatched: f.iter().map(|s| s.to_string()).collect(),
        };
        // Not a full window yet: never drift.
        assert!(!drift(&p, &[bad(&["/label"]), bad(&["/label"])]).drifted);
        // One in four: at the fraction, not above it.
        assert!(!drift(&p, &[bad(&["/label"]), ok(), ok(), ok()]).drifted);
        let d = drift(
            &p,
            &[
                bad(&["/score"]),
                bad(&["/label", "/score"]),
                ok(),
                ok(),
                bad(&["/x"]),
            ],
        );
        assert!(d.drifted);
        assert_eq!((d.results, d.mismatches), (4, 2));
        assert_eq!(
            d.fields,
            [("/score".to_string(), 2), ("/label".to_string(), 1)]
        );
        let m = drift_message("flash-latest", "flash-2", &d);
        assert!(
            m.contains("2 of the latest 4") && m.contains("/score ×2"),
            "{m}"
        );
        let body = alert_body("l", "flash-latest", "flash-2", &d, chrono::Utc::now());
        assert_eq!(body["reason"], ALERT_DRIFT);
        assert_eq!(body["fields"][0]["field"], "/score");
    }
}
