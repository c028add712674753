//! Shared provider cool-downs against a real PostgreSQL: a batch create the
//! provider refused for quota (MarkNotCreated with a cool-down) makes every
//! ledger's CreateJob for that model wait, and spends no row's attempt.

use crate::common;

use tally_store::types::NotCreated;

use common::*;
use std::time::Duration;
use tally_store::{Store, StoreError};

async fn ledger(store: &Store, name: &str, model: &str, keys: &[&str]) {
    let mut p = fast_policy();
    p.model = model.into();
    store.create_ledger(name, &p).await.unwrap();
    let rows: Vec<_> = keys.iter().map(|k| row(k, &[])).collect();
    store.enroll(name, &rows).await.unwrap();
}

/// Invariants: after a 429 at create for model m, CreateJob for m on any
/// ledger answers RESOURCE_EXHAUSTED with the time left until the cool-down
/// ends, while other models go on; the refused job's rows are back with no
/// attempt; a later cool-down never shortens a running one; once it ended,
/// jobs are made again.
#[tokio::test]
async fn a_quota_refusal_cools_the_model_down_for_every_ledger() {
    let env = env().await;
    let s = &env.store;
    ledger(s, "a", "m", &["a1", "a2"]).await;
    ledger(s, "b", "m", &["b1"]).await;
    ledger(s, "c", "other", &["c1"]).await;

    // Two jobs of model m are being created when the provider refuses both:
    // first with a 30 s RetryInfo, then with 5 s.
    let mut refused = Vec::new();
    for ledger in ["a", "b"] {
        let g = claim(s, ledger, 10).await.unwrap();
        let job = s.create_job(ledger, g.claim.token, "w").await.unwrap();
        s.mark_creating(
            ledger,
            &job.public_id,
            g.claim.token,
            "files/x",
            &Default::default(),
            "w",
        )
        .await
        .unwrap();
        refused.push((ledger, job.public_id, g.claim.token));
    }
    for ((ledger, job, token), secs) in refused.iter().zip([30, 5]) {
        s.mark_not_created(
            ledger,
            job,
            *token,
            &NotCreated {
                reason: "429",
                cooldown: Some(Duration::from_secs(secs)),
                pause: None,
                ..Default::default()
            },
            "w",
        )
        .await
        .unwrap();
    }
    for (ledger, key) in [("a", "a1"), ("a", "a2"), ("b", "b1")] {
        let r = s.get_row(ledger, key).await.unwrap();
        assert_eq!(r.total, 0, "{key}: no attempt spent on the 429");
    }

    // /metrics shows the cool-down of m, and nothing of m in flight.
    let b = s.backlog().await.unwrap();
    let m = b.models.iter().find(|m| m.model == "m").expect("model m");
    assert!((25.0..=30.0).contains(&m.cooldown_secs), "{m:?}");
    assert_eq!(m.batches, 0);

    // Every ledger's CreateJob for m waits out the longer cool-down.
    let gb = claim(s, "b", 10).await.unwrap();
    match s.create_job("b", gb.claim.token, "w").await.unwrap_err() {
        StoreError::ResourceExhausted {
            reason,
            message,
            retry_after_secs,
        } => {
            assert_eq!(reason, "PROVIDER_COOLDOWN");
            assert!((29..=30).contains(&retry_after_secs), "{retry_after_secs}");
            assert!(message.contains("\"m\""), "{message}");
        }
        other => panic!("expected RESOURCE_EXHAUSTED, got {other:?}"),
    }
    let gc = claim(s, "c", 10).await.unwrap();
    s.create_job("c", gc.claim.token, "w")
        .await
        .expect("another model is not cooling down");

    // Over: jobs are made again.
    sqlx::query("UPDATE model_cooldowns SET until = now() - interval '1 second'")
        .execute(s.pool())
        .await
        .unwrap();
    s.create_job("b", gb.claim.token, "w")
        .await
        .expect("the cool-down is over");
    assert_queue_consistent(s).await;
}

/// Makes a job of `ledger` for `origin` and reports its create refused for
/// quota with a cool-down of `secs`.
async fn refused_for_quota(
    s: &Store,
    ledger: &str,
    origin: &tally_store::types::JobOrigin<'_>,
    secs: u64,
) {
    let g = claim(s, ledger, 1).await.unwrap();
    let job = s
        .create_job_in(ledger, g.claim.token, "w", origin)
        .await
        .unwrap();
    s.mark_creating(
        ledger,
        &job.public_id,
        g.claim.token,
        "files/x",
        &Default::default(),
        "w",
    )
    .await
    .unwrap();
    s.mark_not_created(
        ledger,
        &job.public_id,
        g.claim.token,
        &NotCreated {
            reason: "429",
            cooldown: Some(Duration::from_secs(secs)),
            pause: None,
            ..Default::default()
        },
        "w",
    )
    .await
    .unwrap();
}

/// Invariant (issue 51): the account a worker names is its word, so a
/// cool-down is its team's. Team B naming team A's account (a shared key,
/// or a forged name) and reporting a refusal of its own job holds back
/// only team B; team A's CreateJob in that account is made.
#[tokio::test]
async fn another_teams_refusal_never_cools_down_this_team() {
    use tally_store::types::JobOrigin;
    let env = env().await;
    let s = &env.store;
    ledger(s, "team-a", "m", &["a1"]).await;
    ledger(s, "team-b", "m", &["b1", "b2"]).await;
    let shared = |team| JobOrigin {
        account: "acct-a",
        team,
    };
    refused_for_quota(s, "team-b", &shared("team-b"), 600).await;
    let ga = claim(s, "team-a", 1).await.unwrap();
    s.create_job_in("team-a", ga.claim.token, "w", &shared("team-a"))
        .await
        .expect("team B's refusal does not hold team A back");
    let gb = claim(s, "team-b", 1).await.unwrap();
    match s
        .create_job_in("team-b", gb.claim.token, "w", &shared("team-b"))
        .await
    {
        Err(StoreError::ResourceExhausted { reason, .. }) => {
            assert_eq!(reason, "PROVIDER_COOLDOWN")
        }
        other => panic!("team B's own cool-down holds it, got {other:?}"),
    }
}

/// Invariant (issue 30): teams in different provider accounts cannot touch
/// each other's admission: team A's worker refusing its own job with an
/// hour's cool-down (clamped to 10 minutes) holds back A's account only;
/// team B's CreateJob for the same model, in its own account, is made.
#[tokio::test]
async fn a_cool_down_holds_back_its_own_provider_account_only() {
    use tally_store::types::JobOrigin;
    let env = env().await;
    let s = &env.store;
    ledger(s, "team-a", "m", &["a1", "a2"]).await;
    ledger(s, "team-b", "m", &["b1"]).await;
    let a = JobOrigin {
        account: "acct-a",
        team: "team-a",
    };
    let b = JobOrigin {
        account: "acct-b",
        team: "team-b",
    };
    refused_for_quota(s, "team-a", &a, 3600).await;
    let gb = claim(s, "team-b", 1).await.unwrap();
    s.create_job_in("team-b", gb.claim.token, "w", &b)
        .await
        .expect("another account's model is not cooling down");
    let ga = claim(s, "team-a", 1).await.unwrap();
    match s.create_job_in("team-a", ga.claim.token, "w", &a).await {
        Err(StoreError::ResourceExhausted {
            reason,
            retry_after_secs,
            ..
        }) => {
            assert_eq!(reason, "PROVIDER_COOLDOWN");
            assert!(
                (590..=600).contains(&retry_after_secs),
                "an hour asked, at most 10 minutes kept: {retry_after_secs}"
            );
        }
        other => panic!("team A's own account cools down, got {other:?}"),
    }
}

/// Invariant (issue 51): in one provider account, a team is admitted up to
/// its share of the account's limits (50% of 4 batches), and only its own
/// jobs count: another team naming the same account (a shared key, or a
/// forged name) can neither fill the team's quota nor block its creates,
/// whatever it holds or leaves stalled.
#[tokio::test]
async fn a_team_share_is_the_teams_own_whatever_other_teams_hold() {
    use tally_core::quota::ProviderQuotas;
    use tally_store::types::JobOrigin;
    let env = env().await;
    let mut quotas = ProviderQuotas::unlimited();
    quotas.max_batches = 4;
    quotas.team_share = 50;
    let s = &env.store.clone().with_provider_quotas(quotas);
    let keys: Vec<String> = (0..6).map(|i| format!("k{i}")).collect();
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    for team in ["a", "b", "c"] {
        ledger(s, team, "m", &refs).await;
    }
    let origin = |team| JobOrigin {
        account: "shared",
        team,
    };
    let create = |team: &'static str| async move {
        let g = claim(s, team, 1).await.unwrap();
        let got = s
            .create_job_in(team, g.claim.token, "w", &origin(team))
            .await;
        (g.claim.token, got)
    };
    let refused = |got: Result<_, StoreError>, what: &str| match got {
        Err(StoreError::ResourceExhausted {
            reason, message, ..
        }) => {
            assert_eq!(reason, "PROVIDER_QUOTA");
            message
        }
        other => panic!("{what}: expected PROVIDER_QUOTA, got {other:?}"),
    };
    for _ in 0..2 {
        create("a").await.1.expect("within team a's share");
    }
    let message = refused(create("a").await.1, "team a at its share");
    assert!(message.contains("--provider-team-share"), "{message}");
    // Team b makes jobs it never sends, naming the same account: team c's
    // share is still all its own.
    for _ in 0..2 {
        create("b").await.1.expect("within team b's share");
    }
    refused(create("b").await.1, "team b at its share");
    sqlx::query("UPDATE jobs SET state = $1 WHERE team = 'b'")
        .bind(tally_core::job::JobState::Creating.code())
        .execute(s.pool())
        .await
        .unwrap();
    for _ in 0..2 {
        create("c")
            .await
            .1
            .expect("team c's share, whatever a and b hold");
    }
    let message = refused(create("c").await.1, "team c at its share");
    assert!(message.contains("this team has 2 batches"), "{message}");
}
