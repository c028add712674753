//! Taking over a gone holder's jobs without waiting out its lease
//! (AdoptJobs' `process`, `starting` and `gone`; HandOverJob). Every test
//! uses a lease of an hour, so nothing here passes by a lease running out.

use crate::jobs::{
    Jobs, clients, create_job, create_ledger, enroll, fast_policy, get_row, mark_submitted, ok,
    reason, report, secs, serve,
};
use tally_pg::TestDb;
use tally_proto::v1 as pb;
use tonic::Code;

fn process(host: &str, pid: i64, start: i64) -> pb::WorkerProcess {
    pb::WorkerProcess {
        host: host.into(),
        boot_id: "boot-1/pid:[1]".into(),
        pid,
        start_ticks: start,
    }
}

async fn adopt(
    j: &mut Jobs,
    ledger: &str,
    worker: &str,
    me: Option<pb::WorkerProcess>,
    starting: bool,
    gone: Vec<pb::WorkerProcess>,
) -> pb::AdoptJobsResponse {
    j.adopt_jobs(pb::AdoptJobsRequest {
        parent: format!("ledgers/{ledger}"),
        worker: worker.into(),
        lease: Some(secs(3600)),
        process: me,
        starting,
        gone,
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
}

/// A submitted job held by `worker` under an hour's lease, its process
/// recorded; returns (job, claim).
async fn submitted_job(
    l: &mut crate::jobs::Ledgers,
    j: &mut Jobs,
    ledger: &str,
    worker: &str,
    me: &pb::WorkerProcess,
    keys: &[&str],
) -> (pb::Job, String) {
    create_ledger(
        l,
        ledger,
        pb::LedgerPolicy {
            lease: Some(secs(3600)),
            ..fast_policy()
        },
    )
    .await;
    enroll(l, ledger, keys).await;
    adopt(j, ledger, worker, Some(me.clone()), true, vec![]).await;
    let claim = l
        .claim_rows(pb::ClaimRowsRequest {
            parent: format!("ledgers/{ledger}"),
            max_rows: 10,
            worker: worker.into(),
            lease: Some(secs(3600)),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .claim
        .unwrap()
        .name;
    let job = create_job(j, &claim).await.unwrap();
    let job = mark_submitted(j, &job, &claim, &format!("batches/{ledger}"))
        .await
        .unwrap();
    (job, claim)
}

/// A worker started again under the same name takes over at once what its
/// earlier process held; the earlier process, if it still runs, is fenced
/// (its reports are STALE, its lease cannot be extended) and each row is
/// settled once.
#[tokio::test]
async fn a_restart_under_the_same_name_takes_over_at_once() {
    let db = TestDb::new().await;
    let r = serve(&db).await;
    let (mut l, mut j) = clients(r.grpc_addr).await;
    let first = process("host-a", 100, 5000);
    let (job, old) = submitted_job(&mut l, &mut j, "same", "w", &first, &["a", "b"]).await;

    // Not starting: the same name's live claims are left alone.
    let again = adopt(&mut j, "same", "w", Some(first.clone()), false, vec![]).await;
    assert!(again.jobs.is_empty());

    let second = process("host-a", 200, 9000);
    let took = adopt(&mut j, "same", "w", Some(second), true, vec![]).await;
    assert_eq!(took.taken_over, 1);
    assert_eq!(took.jobs.len(), 1, "adopted without waiting out the lease");
    let new = took.jobs[0].claim.as_ref().unwrap().name.clone();
    assert_eq!(took.jobs[0].job.as_ref().unwrap().name, job.name);

    let late = report(&mut l, &old, vec![ok("a")]).await;
    assert_eq!(late.stale, 1, "the earlier process is fenced");
    let extend = l
        .extend_claim(pb::ExtendClaimRequest {
            name: old.clone(),
            lease: None,
        })
        .await
        .unwrap_err();
    assert_eq!(extend.code(), Code::FailedPrecondition);
    let done = report(&mut l, &new, vec![ok("a"), ok("b")]).await;
    assert_eq!(done.succeeded, 2);
    for key in ["a", "b"] {
        let row = get_row(&mut l, "same", key).await;
        assert_eq!(row.history.len(), 1, "{key} settled once");
        assert_eq!(row.history[0].claim, new);
    }
    r.stop().await.unwrap();
}

/// A holder shown gone (its process, exactly as recorded) loses its claims
/// at once to the worker that showed it; a process that does not match the
/// recorded one changes nothing; `held` lists what the caller waits for.
#[tokio::test]
async fn a_holder_shown_gone_is_taken_over_and_a_mismatch_is_not() {
    let db = TestDb::new().await;
    let r = serve(&db).await;
    let (mut l, mut j) = clients(r.grpc_addr).await;
    let dead = process("host-a", 100, 5000);
    let (job, old) = submitted_job(&mut l, &mut j, "gone", "w-100", &dead, &["a"]).await;
    let me = process("host-a", 300, 7000);

    let looked = adopt(&mut j, "gone", "w-300", Some(me.clone()), true, vec![]).await;
    assert!(looked.jobs.is_empty());
    assert_eq!(looked.held.len(), 1);
    let held = &looked.held[0];
    assert_eq!(
        (held.job.as_str(), held.owner.as_str()),
        (job.name.as_str(), "w-100")
    );
    assert_eq!(held.process.as_ref(), Some(&dead));
    assert!(held.lease_expire_time.is_some());

    // Another start time: another process; nothing is taken.
    let wrong = process("host-a", 100, 5001);
    let missed = adopt(
        &mut j,
        "gone",
        "w-300",
        Some(me.clone()),
        false,
        vec![wrong],
    )
    .await;
    assert_eq!((missed.jobs.len(), missed.taken_over), (0, 0));

    let took = adopt(&mut j, "gone", "w-300", Some(me), false, vec![dead]).await;
    assert_eq!((took.jobs.len(), took.taken_over), (1, 1));
    assert!(took.held.is_empty());
    assert_eq!(report(&mut l, &old, vec![ok("a")]).await.stale, 1);
    r.stop().await.unwrap();
}

/// HandOverJob ends the lease now when given the job's claim, so any worker
/// adopts the job on its next call; another claim is refused and changes
/// nothing.
#[tokio::test]
async fn a_job_handed_over_is_adopted_at_once() {
    let db = TestDb::new().await;
    let r = serve(&db).await;
    let (mut l, mut j) = clients(r.grpc_addr).await;
    let me = process("host-a", 100, 5000);
    let (job, claim) = submitted_job(&mut l, &mut j, "hand", "w", &me, &["a"]).await;
    let (_, other) = submitted_job(&mut l, &mut j, "hand-2", "w", &me, &["x"]).await;

    let refused = j
        .hand_over_job(pb::HandOverJobRequest {
            name: job.name.clone(),
            claim: other.replace("hand-2", "hand"),
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::NotFound, "{refused:?}");
    let nothing = adopt(&mut j, "hand", "v", None, false, vec![]).await;
    assert!(nothing.jobs.is_empty());

    let handed = j
        .hand_over_job(pb::HandOverJobRequest {
            name: job.name.clone(),
            claim: claim.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(handed.name, job.name);
    let took = adopt(&mut j, "hand", "v", None, false, vec![]).await;
    assert_eq!(took.jobs.len(), 1);
    let again = j
        .hand_over_job(pb::HandOverJobRequest {
            name: job.name.clone(),
            claim,
        })
        .await
        .unwrap_err();
    assert_eq!(again.code(), Code::FailedPrecondition);
    assert_eq!(reason(&again), "NOT_JOB_CLAIM");
    r.stop().await.unwrap();
}
