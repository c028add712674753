//! EnrollRows.

use super::{BAD_LEDGER_NAMES, bad_keys};
use crate::harness::*;
use tally_proto::v1 as pb;
use tonic::{Code, Status};

/// Rows per call on this server, and the largest message it decodes.
const LIMIT: usize = 5;
const MAX_MESSAGE: usize = 3 << 19; // 1.5 MiB: room for a payload just over 1 MiB

async fn small_server() -> Env {
    Env::start_with(|a| {
        a.limits.max_rows_per_call = LIMIT;
        a.limits.max_message_bytes = MAX_MESSAGE;
    })
    .await
}

async fn enroll_rejected(env: &Env, parent: &str, rows: Vec<pb::RowInput>) -> Status {
    env.rejected(env.client().enroll_rows(pb::EnrollRowsRequest {
        parent: parent.into(),
        rows,
    }))
    .await
}

/// EnrollRows refuses, writing nothing: malformed parents, an unknown
/// ledger (NOT_FOUND), no rows, more rows than max_rows_per_call, empty,
/// 257-character, slashed, spaced and non-ASCII keys, payloads that are not
/// a JSON object or not JSON at all, payloads over 1 MiB, duplicate keys in
/// one call, malformed prompt references and models, native requests with a
/// partial media reference; one valid row in a rejected call is not written
/// either.
#[tokio::test]
async fn enroll_rows_shapes_and_limits() {
    let env = small_server().await;
    env.ledger("l").await;
    env.enroll("l", vec![row("existing")]).await;
    let l = ledger_name("l");

    for bad in BAD_LEDGER_NAMES {
        let s = enroll_rejected(&env, bad, vec![row("a")]).await;
        assert_invalid(&s, &["parent"]);
    }
    let s = enroll_rejected(&env, "ledgers/unknown", vec![row("a")]).await;
    assert_not_found(&s, "ledger", "ledgers/unknown");

    let s = enroll_rejected(&env, &l, vec![]).await;
    assert_invalid(&s, &["rows"]);
    let too_many = (0..=LIMIT).map(|i| row(&format!("k{i}"))).collect();
    let s = enroll_rejected(&env, &l, too_many).await;
    assert_invalid(&s, &["rows"]);
    assert!(s.message().contains("max_rows_per_call"), "{}", s.message());

    for key in bad_keys() {
        let s = enroll_rejected(&env, &l, vec![row("fine"), row(&key)]).await;
        assert_invalid(&s, &["rows[1].key"]);
    }
    for payload in [
        "[1]",
        r#""text""#,
        "42",
        "null",
        "",
        "   ",
        "{",
        "not json",
        "{} {}",
        r#"{"a": 1,}"#,
    ] {
        let s = enroll_rejected(&env, &l, vec![row("fine"), row_payload("p", payload)]).await;
        assert_invalid(&s, &["rows[1].payload"]);
    }
    // A native request's media part must be a whole reference (its
    // SHA-256 included, so the row's content hash covers the file).
    for media in [
        r#"{"uri": "p.png"}"#,
        r#""p.png""#,
        r#"{"uri": "ftp://h/p.png", "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}"#,
    ] {
        let payload = format!(r#"{{"contents": [{{"parts": [{{"media": {media}}}]}}]}}"#);
        let s = enroll_rejected(&env, &l, vec![row_payload("m", &payload)]).await;
        assert_invalid(&s, &["rows[0].payload"]);
        assert!(
            s.message().contains("contents[0].parts[0].media"),
            "{}",
            s.message()
        );
    }
    let huge = format!(r#"{{"x": "{}"}}"#, "a".repeat(1 << 20));
    let s = enroll_rejected(&env, &l, vec![row_payload("big", &huge)]).await;
    assert_invalid(&s, &["rows[0].payload"]);

    let s = enroll_rejected(&env, &l, vec![row("a"), row("b"), row("a")]).await;
    assert_invalid(&s, &["rows[2].key"]);

    let with_prompt = |name: &str, version: &str| pb::RowInput {
        prompt: Some(pb::PromptRef {
            name: name.into(),
            version: version.into(),
        }),
        ..row("p")
    };
    let s = enroll_rejected(&env, &l, vec![with_prompt("Bad Name", "v1")]).await;
    assert_invalid(&s, &["rows[0].prompt.name"]);
    let s = enroll_rejected(&env, &l, vec![with_prompt("ocr", "")]).await;
    assert_invalid(&s, &["rows[0].prompt.version"]);
    let s = enroll_rejected(
        &env,
        &l,
        vec![pb::RowInput {
            model: "m".repeat(129),
            ..row("m")
        }],
    )
    .await;
    assert_invalid(&s, &["rows[0].model"]);

    // Every bad field of every row is named.
    let s = enroll_rejected(
        &env,
        &l,
        vec![
            row("good"),
            row("bad key"),
            pb::RowInput {
                payload: "[]".into(),
                depends_on: vec!["x/y".into()],
                ..row("c")
            },
        ],
    )
    .await;
    assert_invalid(
        &s,
        &["rows[1].key", "rows[2].payload", "rows[2].depends_on[0]"],
    );

    // The limits are inclusive: LIMIT rows, a 256-character key.
    let mut rows: Vec<_> = (1..LIMIT).map(|i| row(&format!("ok{i}"))).collect();
    rows.push(row(&"k".repeat(256)));
    assert_eq!(env.enroll("l", rows).await.enrolled as i32, LIMIT as i32);
    env.stop().await;
}

/// A request larger than the server's message limit is refused from its
/// length prefix (RESOURCE_EXHAUSTED `MESSAGE_TOO_LARGE`, the gRPC code for
/// a message over the server's maximum) before any handler runs; nothing is
/// written.
#[tokio::test]
async fn enroll_rows_over_the_message_size_limit() {
    let env = small_server().await;
    env.ledger("l").await;
    let huge = format!(r#"{{"x": "{}"}}"#, "a".repeat(2 * MAX_MESSAGE));
    let s = enroll_rejected(&env, &ledger_name("l"), vec![row_payload("big", &huge)]).await;
    assert_eq!(s.code(), Code::ResourceExhausted, "{}", s.message());
    assert!(s.message().contains("accepts at most"), "{}", s.message());
    env.stop().await;
}

/// EnrollRows refuses dependency problems, writing nothing: an unknown
/// dependency (neither enrolled before nor in the call), a malformed
/// dependency key, a row depending on itself, cycles of two and three rows,
/// dependency names for a key the row does not depend on, names that are
/// not identifiers or are given twice, and rows naming an unregistered
/// prompt.
#[tokio::test]
async fn enroll_rows_dependencies_and_prompts() {
    let env = small_server().await;
    env.ledger("l").await;
    env.enroll("l", vec![row("parent")]).await;
    let l = ledger_name("l");

    let s = enroll_rejected(
        &env,
        &l,
        vec![row("a"), row_deps("b", &["parent", "ghost"])],
    )
    .await;
    assert_invalid(&s, &["rows[1].depends_on[1]"]);
    assert!(s.message().contains("ghost"), "{}", s.message());

    let s = enroll_rejected(&env, &l, vec![row_deps("a", &["a b"])]).await;
    assert_invalid(&s, &["rows[0].depends_on[0]"]);
    let s = enroll_rejected(&env, &l, vec![row_deps("a", &["a"])]).await;
    assert_invalid(&s, &["rows[0].depends_on[0]"]);

    let s = enroll_rejected(&env, &l, vec![row_deps("a", &["b"]), row_deps("b", &["a"])]).await;
    assert_cycle(&s);
    let s = enroll_rejected(
        &env,
        &l,
        vec![
            row("free"),
            row_deps("x", &["parent", "z"]),
            row_deps("y", &["x"]),
            row_deps("z", &["y"]),
        ],
    )
    .await;
    assert_cycle(&s);

    let named = |names: &[(&str, &str)]| pb::RowInput {
        dependency_names: names
            .iter()
            .map(|(k, n)| (k.to_string(), n.to_string()))
            .collect(),
        ..row_deps("n", &["parent", "a"])
    };
    for (names, field, says) in [
        (
            &[("ghost", "g")][..],
            "rows[1].dependency_names[\"ghost\"]",
            "not one of the row's depends_on",
        ),
        (
            &[("parent", "2nd")][..],
            "rows[1].dependency_names[\"parent\"]",
            "not a name",
        ),
        (
            &[("parent", "prev"), ("a", "prev")][..],
            "rows[1].dependency_names[\"parent\"]",
            "also given to",
        ),
    ] {
        let s = enroll_rejected(&env, &l, vec![row("a"), named(names)]).await;
        assert_invalid(&s, &[field]);
        assert!(s.message().contains(says), "{}", s.message());
    }

    let s = enroll_rejected(
        &env,
        &l,
        vec![
            row("plain"),
            pb::RowInput {
                prompt: Some(pb::PromptRef {
                    name: "never-registered".into(),
                    version: "v1".into(),
                }),
                ..row("prompted")
            },
        ],
    )
    .await;
    assert_invalid(&s, &["rows[1].prompt"]);
    env.stop().await;
}

/// One violation on some `rows[i].depends_on`, saying "dependency cycle".
#[track_caller]
fn assert_cycle(s: &Status) {
    assert_eq!(s.code(), Code::InvalidArgument, "{}", s.message());
    use tonic_types::StatusExt;
    let details = s.get_error_details();
    let v = &details
        .bad_request()
        .expect("a BadRequest")
        .field_violations;
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(
        v[0].field.starts_with("rows[") && v[0].field.ends_with("].depends_on"),
        "{}",
        v[0].field
    );
    assert!(v[0].description.contains("dependency cycle"), "{v:?}");
}
