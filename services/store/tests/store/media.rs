//! Media references at enrollment (issue 31): a row of a prompt with media
//! variables must carry each as `{"uri", "sha256"}` (the SHA-256 of the
//! bytes); a bad reference is INVALID_ARGUMENT naming the row and writes
//! nothing; the same page with other bytes (another hash) is a CONFLICT,
//! not a silent reuse. (A native request's media parts are checked before
//! the store: tests/e2e bad_input.)

use crate::common::*;

use tally_core::payload::{Content, content_hash};
use tally_store::StoreError;
use tally_store::types::{EnrollOutcome, NewRow, PromptRecord};

const H1: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
const H2: &str = "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752";

fn prompted(key: &str, payload: &str) -> NewRow {
    NewRow {
        key: key.into(),
        payload: payload.into(),
        content_hash: content_hash(&Content {
            payload,
            depends_on: &[],
            prompt_name: "ocr",
            prompt_version: "v1",
            model: "",
        }),
        depends_on: vec![],
        prompt_name: "ocr".into(),
        prompt_version: "v1".into(),
        model: String::new(),
    }
}

#[tokio::test]
async fn media_references_are_whole_and_their_bytes_are_in_the_row() {
    let env = env().await;
    let s = &env.store;
    s.create_ledger("l", &fast_policy()).await.unwrap();
    s.register_prompt(&PromptRecord {
        prompt_id: "ocr".into(),
        version: "v1".into(),
        template: "Transcribe this page of {{ book }}.".into(),
        response_schema: String::new(),
        system_instruction: String::new(),
        sha256: "x".into(),
        create_time: chrono::Utc::now(),
        media: vec!["page".into()],
    })
    .await
    .unwrap();

    let page = |hash: &str| {
        format!(r#"{{"book": "b", "page": {{"uri": "b/p1.png", "sha256": "{hash}"}}}}"#)
    };
    for (bad, says) in [
        (r#"{"book": "b"}"#.to_string(), "`page` is missing"),
        (
            r#"{"book": "b", "page": "b/p1.png"}"#.to_string(),
            "an object",
        ),
        (
            r#"{"book": "b", "page": {"uri": "b/p1.png"}}"#.to_string(),
            "sha256",
        ),
    ] {
        match s.enroll("l", &[prompted("p1", &bad)]).await {
            Err(StoreError::InvalidArgument(v)) => {
                let text = format!("{v:?}");
                assert!(
                    text.contains("rows[0].payload") && text.contains(says),
                    "{text}"
                );
            }
            other => panic!("{bad}: expected INVALID_ARGUMENT, got {other:?}"),
        }
    }
    assert!(s.get_row("l", "p1").await.is_err(), "nothing written");

    let first = s.enroll("l", &[prompted("p1", &page(H1))]).await.unwrap();
    assert_eq!(first, [EnrollOutcome::Enrolled]);
    let again = s.enroll("l", &[prompted("p1", &page(H1))]).await.unwrap();
    assert_eq!(again, [EnrollOutcome::AlreadyPresent]);
    let changed = s.enroll("l", &[prompted("p1", &page(H2))]).await.unwrap();
    assert_eq!(
        changed,
        [EnrollOutcome::Conflict],
        "the image changed on disk"
    );
}
