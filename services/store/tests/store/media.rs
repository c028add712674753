//! Media references at enrollment (issue 31): a row of a prompt with media
//! variables must carry each as `{"uri", "sha256"}` (the SHA-256 of the
//! bytes); a bad reference is INVALID_ARGUMENT naming the row and writes
//! nothing; the same page with other bytes (another hash) is a CONFLICT,
//! not a silent reuse. (A native request's media parts are checked before
//! the store: tests/e2e bad_input.)

use crate::common::*;

use tally_core::payload::{Content, content_hash};
use tally_store::StoreError;
use tally_store::types::{EnrollOutcome, MediaUploadRecord, NewRow, PromptRecord};

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
            ..Default::default()
        }),
        depends_on: vec![],
        prompt_name: "ocr".into(),
        prompt_version: "v1".into(),
        model: String::new(),
        ..Default::default()
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

fn upload(account: &str, sha: &str, file: &str, expires_in_secs: i64) -> MediaUploadRecord {
    MediaUploadRecord {
        provider_account: account.into(),
        sha256: sha.into(),
        file: file.into(),
        uri: format!("https://provider/{file}"),
        mime_type: "image/png".into(),
        size_bytes: 1000,
        expire_time: chrono::Utc::now() + chrono::Duration::seconds(expires_in_secs),
        create_time: chrono::Utc::now(),
        in_use: false,
    }
}

/// Invariants of the media uploads register: a lookup finds an account's
/// live uploads only (not another account's, not an expired one) and
/// counts the team's stored bytes at the account; a newer upload of the same bytes
/// replaces the record; an upload an open job's batch references is in
/// use and cannot be forgotten until the job closes; forgetting names the
/// file, so a newer upload of the same hash is kept.
#[tokio::test]
async fn uploads_are_reused_while_alive_and_kept_while_an_open_job_needs_them() {
    use tally_store::types::CreateAttempt;
    let env = env().await;
    let s = &env.store;
    s.record_media_upload("t", &upload("a", H1, "files/1", 3600))
        .await
        .unwrap();
    s.record_media_upload("t", &upload("a", H2, "files/2", -1))
        .await
        .unwrap();
    s.record_media_upload("t", &upload("b", H1, "files/b1", 3600))
        .await
        .unwrap();
    let hashes = vec![H1.to_string(), H2.to_string()];
    let (found, stored) = s.lookup_media_uploads("t", "a", &hashes).await.unwrap();
    assert_eq!(found.len(), 1, "the expired one is not offered");
    assert_eq!((found[0].file.as_str(), stored), ("files/1", 1000));
    let newer = s
        .record_media_upload("t", &upload("a", H1, "files/1b", 7200))
        .await
        .unwrap();
    assert_eq!(newer.file, "files/1b");

    // A job references it at MarkCreating.
    s.create_ledger("l", &fast_policy()).await.unwrap();
    s.enroll("l", &[row("k", &[])]).await.unwrap();
    let g = claim(s, "l", 1).await.unwrap();
    let job = s
        .create_job_in(
            "l",
            g.claim.token,
            "w",
            &tally_store::types::JobOrigin {
                account: "a",
                team: "t",
            },
        )
        .await
        .unwrap();
    let media = vec![H1.to_string()];
    s.mark_creating(
        "l",
        &job.public_id,
        g.claim.token,
        "files/in",
        &CreateAttempt {
            estimated_tokens: None,
            media: &media,
        },
        "w",
    )
    .await
    .unwrap();
    let listed = s.list_media_uploads("t", "a", None, 10).await.unwrap();
    let h1 = listed.iter().find(|u| u.sha256 == H1).unwrap();
    assert!(h1.in_use);
    match s.forget_media_upload("t", "a", H1, "files/1b").await {
        Err(StoreError::FailedPrecondition { reason, .. }) => assert_eq!(reason, "MEDIA_IN_USE"),
        other => panic!("expected MEDIA_IN_USE, got {other:?}"),
    }
    // Forgetting an older file of the hash keeps the newer record.
    s.forget_media_upload("t", "a", H2, "files/2")
        .await
        .unwrap();
    s.mark_not_created(
        "l",
        &job.public_id,
        g.claim.token,
        &tally_store::types::NotCreated {
            reason: "test",
            ..Default::default()
        },
        "w",
    )
    .await
    .unwrap();
    s.forget_media_upload("t", "a", H1, "files/1")
        .await
        .unwrap();
    assert_eq!(
        s.list_media_uploads("t", "a", None, 10)
            .await
            .unwrap()
            .len(),
        1,
        "files/1b kept"
    );
    s.forget_media_upload("t", "a", H1, "files/1b")
        .await
        .unwrap();
    assert!(
        s.list_media_uploads("t", "a", None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        s.list_media_uploads("t", "b", None, 10)
            .await
            .unwrap()
            .len(),
        1
    );
}

/// Invariants (issue 51): the register is the caller's team's. Two teams
/// naming the same provider account (they share a key) neither see, use,
/// overwrite nor forget each other's uploads, an open job of one team
/// keeps only its own team's upload in use, and each team's stored bytes
/// are its own (another team's records, true or forged, hold none back).
#[tokio::test]
async fn one_teams_uploads_are_out_of_another_teams_reach() {
    use tally_store::types::{CreateAttempt, JobOrigin};
    let env = env().await;
    let s = &env.store;
    s.record_media_upload("acme", &upload("shared", H1, "files/acme1", 3600))
        .await
        .unwrap();
    let hashes = vec![H1.to_string()];
    let (found, stored) = s
        .lookup_media_uploads("beta", "shared", &hashes)
        .await
        .unwrap();
    assert!(found.is_empty(), "beta does not see acme's upload");
    assert_eq!(stored, 0, "acme's records never count against beta");
    assert!(
        s.list_media_uploads("beta", "shared", None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    // beta records the same bytes: its own entry, acme's stays as it was.
    s.record_media_upload("beta", &upload("shared", H1, "files/beta1", 3600))
        .await
        .unwrap();
    let (acme, _) = s
        .lookup_media_uploads("acme", "shared", &hashes)
        .await
        .unwrap();
    assert_eq!(acme[0].file, "files/acme1", "not overwritten by beta");
    // beta forgetting acme's file forgets nothing of acme's.
    s.forget_media_upload("beta", "shared", H1, "files/acme1")
        .await
        .unwrap();
    assert_eq!(
        s.list_media_uploads("acme", "shared", None, 10)
            .await
            .unwrap()
            .len(),
        1
    );
    // A job of beta's referencing H1 holds beta's upload, not acme's.
    s.create_ledger("l", &fast_policy()).await.unwrap();
    s.enroll("l", &[row("k", &[])]).await.unwrap();
    let g = claim(s, "l", 1).await.unwrap();
    let origin = JobOrigin {
        account: "shared",
        team: "beta",
    };
    let job = s
        .create_job_in("l", g.claim.token, "w", &origin)
        .await
        .unwrap();
    s.mark_creating(
        "l",
        &job.public_id,
        g.claim.token,
        "files/in",
        &CreateAttempt {
            estimated_tokens: None,
            media: &hashes,
        },
        "w",
    )
    .await
    .unwrap();
    let in_use = |team: &'static str| async move {
        s.list_media_uploads(team, "shared", None, 10)
            .await
            .unwrap()[0]
            .in_use
    };
    assert!(in_use("beta").await);
    assert!(
        !in_use("acme").await,
        "acme's upload is not held by beta's job"
    );
    s.forget_media_upload("acme", "shared", H1, "files/acme1")
        .await
        .unwrap();
    assert!(
        s.list_media_uploads("acme", "shared", None, 10)
            .await
            .unwrap()
            .is_empty()
    );
}
