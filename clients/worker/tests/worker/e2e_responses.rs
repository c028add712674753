//! OpenAI's Responses API as a lane end to end: one ledger sent through
//! `--lane flex` over chat completions and its twin through `--lane flex
//! --openai-api responses`, at the same OpenAI emulator with the same row
//! faults.
//!
//! Invariants (each assertion names the one it checks):
//! - every call of the Responses worker goes to `/v1/responses`, none to
//!   chat completions, and each row is answered once there;
//! - a row ends the same whichever API answered it: succeeded with one
//!   attempt, or failed the same way (a truncated answer, a filtered one),
//!   with the flex tier and the provider's request id recorded.
//!
//! Run: `cargo test -p tally-worker --test worker e2e_responses:: -- --nocapture`.

use std::collections::BTreeMap;
use std::time::Duration;

use openai_emulator::FaultPlan;
use tally_proto::v1 as pb;

use crate::common::{all_rows, exits_ok};
use crate::e2e_online::{Online, attempts};

const ROWS: usize = 8;

#[tokio::test]
async fn the_responses_api_ends_each_row_as_chat_completions_do() {
    let faults: FaultPlan = serde_json::from_value(serde_json::json!({
        "rows": [
            {"match": {"prompt_contains": "document 3 "}, "fault": {"kind": "length"}},
            {"match": {"prompt_contains": "document 5 "}, "fault": {"kind": "content_filter"}},
        ]
    }))
    .unwrap();
    let w = Online::start(
        "chat",
        &[pb::Lane::Flex],
        ROWS,
        faults,
        Duration::from_millis(10),
    )
    .await;
    Online::ledger(&w.c, "resp", &[pb::Lane::Flex], ROWS).await;
    exits_ok(
        w.worker("chat", "w-chat", "flex", &["--exit-when-idle"]),
        "chat worker",
    )
    .await;
    let after_chat = w.emulator.stats().online_by_endpoint;
    exits_ok(
        w.worker(
            "resp",
            "w-resp",
            "flex",
            &["--openai-api", "responses", "--exit-when-idle"],
        ),
        "responses worker",
    )
    .await;
    let by_endpoint = w.emulator.stats().online_by_endpoint;
    println!(
        "calls answered by endpoint: after chat {after_chat:?}, after responses {by_endpoint:?}"
    );
    let n = ROWS as u64;
    assert_eq!(
        by_endpoint,
        BTreeMap::from([
            ("/v1/chat/completions".to_string(), n),
            ("/v1/responses".to_string(), n),
        ]),
        "the Responses worker called /v1/responses only, once a row"
    );
    // Both ledgers' rows carry the same prompts: each answered once per API.
    assert_eq!(
        w.answers_per_row(),
        vec![2; ROWS],
        "each row answered once per API"
    );
    let chat: BTreeMap<String, pb::Row> = all_rows(&w.c, "chat")
        .await
        .into_iter()
        .map(|r| (r.key.clone(), r))
        .collect();
    let resp = all_rows(&w.c, "resp").await;
    assert_eq!(resp.len(), ROWS);
    for r in &resp {
        let twin = &chat[&r.key];
        let end = |r: &pb::Row| {
            (
                r.status(),
                r.last_error.clone(),
                attempts(r),
                r.history[0].rule.clone(),
            )
        };
        println!("{}: {:?}", r.key, end(r));
        assert_eq!(
            end(r),
            end(twin),
            "{}: ends as over chat completions",
            r.key
        );
        let expected = match r.key.as_str() {
            "row-03" | "row-05" => pb::RowStatus::Permanent,
            _ => pb::RowStatus::Succeeded,
        };
        assert_eq!(r.status(), expected, "{}: {}", r.key, r.last_error);
        let a = &r.history[0];
        assert_eq!(
            (a.lane(), a.tier.as_str()),
            (pb::Lane::Flex, "flex"),
            "{}",
            r.key
        );
        assert!(
            a.request_id.starts_with("req_"),
            "{}: {:?}",
            r.key,
            a.request_id
        );
    }
    let truncated = &chat["row-03"];
    assert!(
        truncated.last_error.contains("length"),
        "a truncated answer: {}",
        truncated.last_error
    );
    assert!(
        chat["row-05"].last_error.contains("content_filter"),
        "a filtered answer: {}",
        chat["row-05"].last_error
    );
}
