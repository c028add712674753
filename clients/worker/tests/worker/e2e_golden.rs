//! Golden rows catch the model behind an alias changing (issue 18, item 4):
//! a ledger registers two golden requests with the answers the model gives
//! today; every job carries them (every_nth_job 1); the emulator's
//! `model_change` fault then makes the model answer otherwise from a given
//! time. The drift is declared within the policy's window of results: the
//! `model_drift` alert names the alias, the new version and the fields, and
//! the ledger pauses (pause_on_drift). Golden answers are never rows: the
//! ledger's counts, attempts and tokens hold its rows only.
//!
//! Run: `cargo test -p tally-worker --test worker e2e_golden:: -- --nocapture`.

use crate::common;

use axum::http::StatusCode;
use common::{SECRET, World, summary, until};
use gemini_emulator::faults::ModelChange;
use gemini_emulator::output::{answer_text, prompt_text};
use gemini_emulator::{FaultPlan, Timing};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tally_proto::v1 as pb;

const LEDGER: &str = "golden";
const ROWS: usize = 40;
const MODEL: &str = "gemini-2.5-flash";
const WINDOW: i32 = 4;

/// A golden request: the payload is the whole GenerateContentRequest.
fn request(text: &str) -> Value {
    json!({
        "contents": [{"role": "user", "parts": [{"text": text}]}],
        "generationConfig": {
            "responseMimeType": "application/json",
            "responseJsonSchema": {
                "type": "object",
                "properties": {
                    "label": {"type": "string", "enum": ["positive", "negative", "neutral", "mixed"]},
                    "score": {"type": "integer", "minimum": 1, "maximum": 5}
                },
                "required": ["label", "score"]
            }
        }
    })
}

/// What the model answers `request` today (the emulator's answer before
/// any change).
fn todays_answer(request: &Value) -> String {
    answer_text(request, &prompt_text(request))
}

/// Collects the alerts POSTed to it.
async fn alert_receiver() -> (String, Arc<Mutex<Vec<Value>>>) {
    let got = Arc::new(Mutex::new(Vec::new()));
    let shared = got.clone();
    let app = axum::Router::new().route(
        "/alerts",
        axum::routing::post(move |body: axum::body::Bytes| {
            let shared = shared.clone();
            async move {
                if let Ok(v) = serde_json::from_slice::<Value>(&body) {
                    shared.lock().unwrap().push(v);
                }
                StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/alerts"), got)
}

async fn golden(w: &World) -> pb::GoldenSet {
    w.c.ledgers
        .clone()
        .get_golden_rows(pb::GetGoldenRowsRequest {
            name: format!("ledgers/{LEDGER}/golden"),
        })
        .await
        .expect("golden rows")
        .into_inner()
}

/// Invariants: before the change every golden answer matches and nothing
/// drifts; after it, drift is declared by the report whose window of the
/// latest WINDOW results holds more than half mismatches (so at most
/// WINDOW results after the change), with one alert naming the alias, the
/// new version and the fields, and a pause with reason MODEL_DRIFT; the
/// ledger's rows are never mixed with golden answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_alias_changing_model_raises_model_drift_within_the_window() {
    let (alerts_url, alerts) = alert_receiver().await;
    let timing = Timing {
        pending: Duration::from_millis(200),
        running: Duration::from_millis(300),
    };
    let w = World::start_configured(
        LEDGER,
        ROWS,
        FaultPlan::default(),
        pb::AttemptBudgets::default(),
        timing,
        |args| {
            args.alert_secret = Some(tally_server::config::parse_alert_secret(SECRET).unwrap());
            args.alerts_allow_private_hosts = true;
            args.alert_interval = Duration::from_millis(100);
        },
    )
    .await;
    let mut ledgers = w.c.ledgers.clone();
    let mut ledger = ledgers
        .get_ledger(pb::GetLedgerRequest {
            name: format!("ledgers/{LEDGER}"),
        })
        .await
        .unwrap()
        .into_inner();
    ledger.policy.as_mut().unwrap().alert_url = alerts_url;
    ledgers
        .update_ledger(pb::UpdateLedgerRequest {
            ledger: Some(ledger),
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["policy.alert_url".into()],
            }),
        })
        .await
        .expect("alert url set");

    let (a, b) = (
        request("Classify the review: the service was slow"),
        request("Classify the review: lovely staff"),
    );
    let set = ledgers
        .set_golden_rows(pb::SetGoldenRowsRequest {
            golden: Some(pb::GoldenSet {
                name: format!("ledgers/{LEDGER}/golden"),
                rows: vec![
                    pb::GoldenRow {
                        key: "slow".into(),
                        payload: a.to_string(),
                        expected: todays_answer(&a),
                        ..Default::default()
                    },
                    pb::GoldenRow {
                        key: "lovely".into(),
                        payload: b.to_string(),
                        expected: todays_answer(&b),
                        fields: vec!["/label".into()],
                        ..Default::default()
                    },
                ],
                every_nth_job: 1,
                window: WINDOW,
                max_mismatch_fraction: 0.5,
                pause_on_drift: true,
                drift: None,
            }),
        })
        .await
        .expect("golden rows set")
        .into_inner();
    assert_eq!(set.rows.len(), 2);

    let worker = w.worker_in_process(
        LEDGER,
        "golden",
        &["--claim-size", "4", "--max-rows-per-batch", "4"],
    );

    // Today: two jobs' golden answers recorded, all matching.
    until(
        Duration::from_secs(60),
        "golden answers recorded",
        || async { golden(&w).await.drift.unwrap_or_default().results >= WINDOW },
    )
    .await;
    let before = golden(&w).await.drift.unwrap();
    println!("before the change: {before:?}");
    assert_eq!(before.mismatches, 0, "today's answers match");
    assert!(!before.drifted);
    assert_eq!(before.model, MODEL);
    assert_eq!(before.model_version, MODEL);

    // The alias now points at another model.
    w.emulator
        .set_faults(FaultPlan {
            model_change: Some(ModelChange {
                model: MODEL.into(),
                from_unix_ms: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_millis() as i64,
                model_version: "gemini-2.5-flash-002".into(),
            }),
            ..Default::default()
        })
        .unwrap();
    until(
        Duration::from_secs(60),
        "the ledger pauses for drift",
        || async { summary(&w.c, LEDGER).await.state == pb::LedgerState::Paused as i32 },
    )
    .await;
    let s = summary(&w.c, LEDGER).await;
    let pause = s.pause.clone().expect("a pause");
    println!("paused: {} ({})", pause.message, pause.actor);
    assert_eq!(pause.reason, pb::LedgerPauseReason::ModelDrift as i32);
    assert!(
        pause.message.contains("gemini-2.5-flash-002") && pause.message.contains(MODEL),
        "{}",
        pause.message
    );
    let after = golden(&w).await.drift.unwrap();
    assert!(after.drifted);
    assert_eq!(after.model_version, "gemini-2.5-flash-002");

    until(Duration::from_secs(30), "the drift alert", || async {
        !alerts.lock().unwrap().is_empty()
    })
    .await;
    let sent = alerts.lock().unwrap().clone();
    println!("alert: {}", sent[0]);
    assert_eq!(sent.len(), 1, "one alert per model version");
    let alert = &sent[0];
    assert_eq!(alert["reason"], "model_drift");
    assert_eq!(alert["model"], MODEL);
    assert_eq!(alert["model_version"], "gemini-2.5-flash-002");
    let mismatches = alert["mismatches"].as_i64().unwrap();
    assert!(
        mismatches > i64::from(WINDOW) / 2 && mismatches <= i64::from(WINDOW),
        "declared within the window: {mismatches} of {WINDOW}"
    );
    let fields: Vec<&str> = alert["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["field"].as_str().unwrap())
        .collect();
    assert!(
        fields.contains(&""),
        "the whole answer of `slow` differs: {fields:?}"
    );

    // Golden answers are neither rows nor attempts: the ledger counts the
    // rows enrolled, and its attempts are the rows' own (a row may have
    // been tried more than once, and may be running again, when the pause
    // came), read once the worker has stopped.
    let rows_seen = s.pending + s.succeeded + s.retryable + s.permanent + s.blocked + s.running;
    assert_eq!(rows_seen, ROWS as i64);
    worker.stop().await;
    let s = summary(&w.c, LEDGER).await;
    let rows = common::all_rows(&w.c, LEDGER).await;
    assert_eq!(rows.len(), ROWS);
    let attempts: i64 = rows
        .iter()
        .map(|r| i64::from(r.attempts.as_ref().map_or(0, |a| a.total)))
        .sum();
    assert_eq!(
        s.attempts_total, attempts,
        "golden answers are not attempts"
    );
    w.stop().await;
}
