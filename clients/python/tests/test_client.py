"""The client against a real tally-server."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import grpc
import pytest
from conftest import workspace_binary

from tally_client import (
    AlreadyExists,
    Client,
    EnrollProgress,
    FailedPrecondition,
    InvalidArgument,
    JobState,
    LedgerState,
    NotFound,
    PauseReason,
    RowError,
    RowStatus,
    Usage,
    Verdict,
    derive_key,
    pb,
)
from tally_client.export import CSV_COLUMNS


def generated_rows(n: int) -> Iterator[dict[str, object]]:
    for i in range(n):
        yield {"key": derive_key("doc", str(i)), "payload": {"text": f"document {i}", "n": i}}


def test_enroll_a_generator_in_chunks_with_progress_and_again_adds_nothing(
    tally: Client, ledger: str
) -> None:
    # Invariant: re-running an enrolment (a crashed flow started again)
    # enrolls nothing twice.
    seen: list[EnrollProgress] = []
    first = tally.enroll(ledger, generated_rows(250), chunk_size=100, on_progress=seen.append)
    assert first == EnrollProgress(sent=250, enrolled=250, already_present=0)
    assert [p.sent for p in seen] == [100, 200, 250]
    again = tally.enroll(ledger, generated_rows(250), chunk_size=100)
    assert (again.enrolled, again.already_present) == (0, 250)
    summary = tally.summarize(ledger)
    assert (summary.total, summary.pending, summary.state) == (250, 250, LedgerState.ACTIVE)
    keys = {row.key for row in tally.rows(ledger, page_size=70)}
    assert keys == {derive_key("doc", str(i)) for i in range(250)}


def test_rows_are_dataclasses_with_enum_statuses_and_decoded_json(
    tally: Client, ledger: str
) -> None:
    tally.enroll(ledger, [{"key": "r1", "payload": {"text": "great app", "stars": 5}}])
    with tally.claim(ledger, 1) as session:
        session.succeed("r1", {"label": "praise"}, usage={"input_tokens": 120, "output_tokens": 8})
    row = tally.get_row(ledger, "r1")
    assert row.status is RowStatus.SUCCEEDED and row.status == "SUCCEEDED"
    assert row.payload == {"stars": 5, "text": "great app"}
    assert row.result == {"label": "praise"}
    assert row.usage == Usage(input_tokens=120, output_tokens=8)
    assert row.attempts.total == 1 and len(row.history) == 1
    assert row.history[0].outcome is RowStatus.SUCCEEDED and row.update_time is not None
    basic = next(tally.rows(ledger, statuses=["succeeded"]))
    assert (basic.key, basic.payload, basic.result) == ("r1", None, None), "basic view"
    assert list(tally.rows(ledger, statuses=RowStatus.PENDING)) == []


def test_the_same_object_in_any_key_order_is_already_present_also_for_tallyctl(
    tally: Client, ledger: str, address: str, tmp_path: Path
) -> None:
    # Invariant (issue 34): enroll canonicalizes the payload as tallyctl
    # does, so neither a re-ordered object nor tallyctl enrolling the same
    # rows is a CONFLICT.
    first = tally.enroll(ledger, [{"key": "k1", "payload": {"b": 1, "a": [1.5e20, "é"]}}])
    assert first.enrolled == 1
    again = tally.enroll(ledger, [{"key": "k1", "payload": {"a": [1.5e20, "é"], "b": 1}}])
    assert (again.already_present, again.conflicts) == (1, 0)
    lines = tmp_path / "rows.jsonl"
    lines.write_text(
        '{"key": "k1", "payload": {"a": [150000000000000000000.0, "\\u00e9"], "b": 1}}\n'
    )
    done = subprocess.run(
        [
            workspace_binary("tallyctl", "TALLYCTL_BIN"),
            "--server",
            f"http://{address}",
            "--json",
            "enroll",
            ledger,
            str(lines),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads(done.stdout)
    assert (report["already_present"], report["conflicts"]) == (1, 0), report
    changed = tally.enroll(ledger, [{"key": "k1", "payload": {"a": [1.5e20, "é"], "b": 2}}])
    assert (changed.conflicts, changed.conflict_keys) == (1, ("k1",))


def test_an_unknown_row_field_is_refused_before_anything_is_sent(
    tally: Client, ledger: str
) -> None:
    rows = [{"key": "a", "payload": {}}, {"key": "b", "payload": {}, "depends": ["a"]}]
    with pytest.raises(RowError, match=r"row 1: unknown field 'depends'") as caught:
        tally.enroll(ledger, rows)
    assert caught.value.index == 1
    assert tally.summarize(ledger).total == 0, "the chunk holding it was not sent"


def test_a_request_the_server_refuses_raises_with_its_field_violations(
    tally: Client, ledger: str
) -> None:
    with pytest.raises(InvalidArgument) as caught:
        tally.enroll(ledger, [{"key": "a", "payload": {}, "depends_on": ["never-enrolled"]}])
    error = caught.value
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert any("depends_on" in v.field for v in error.field_violations), error
    assert tally.summarize(ledger).total == 0, "a refused call writes nothing"


def test_get_or_create_creates_once_and_refuses_another_policy(tally: Client) -> None:
    ledger_id = f"py-goc-{time.monotonic_ns() % 10**9}"
    created, was_created = tally.get_or_create_ledger(ledger_id, {"budgets": {"provider": 3}})
    assert was_created and created.policy.budgets.provider == 3
    found, was_created = tally.get_or_create_ledger(ledger_id, {"budgets": {"provider": 3}})
    assert not was_created and found.id == ledger_id and found.etag == created.etag
    assert tally.get_or_create_ledger(ledger_id)[1] is False, "no policy: any policy will do"
    with pytest.raises(AlreadyExists, match="budgets.provider is 3, asked 5") as caught:
        tally.get_or_create_ledger(ledger_id, {"budgets": {"provider": 5}})
    assert caught.value.reason == "LEDGER_POLICY_DIFFERS"
    with pytest.raises(AlreadyExists):
        tally.create_ledger(ledger_id)


def test_claim_always_returns_a_session_empty_when_nothing_is_runnable(
    tally: Client, ledger: str
) -> None:
    # Invariant (issue 34): `with tally.claim(...)` works whether or not
    # anything is runnable; a paused ledger says why.
    with tally.claim(ledger, 10) as session:
        assert not session and len(session) == 0 and session.name == ""
        for _ in session.rows:
            raise AssertionError("no rows")
    tally.enroll(ledger, generated_rows(2))
    tally.pause_ledger(ledger, "maintenance")
    with tally.claim(ledger, 10) as paused:
        assert not paused
        assert paused.pause is not None and paused.pause.reason is PauseReason.OPERATOR
        assert paused.pause.message == "maintenance"
    tally.resume_ledger(ledger)
    with tally.claim(ledger, 10) as session:
        assert len(session) == 2 and session.name.startswith(f"ledgers/{ledger}/claims/")


def test_reports_go_in_batches_with_usage_and_unreported_rows_go_back(
    tally: Client, ledger: str
) -> None:
    # Invariant: queued reports are sent report_batch at a time and when
    # the block ends, even when it ends with an error; rows not reported go
    # back without an attempt.
    tally.enroll(ledger, generated_rows(7))
    with pytest.raises(RuntimeError, match="the worker crashed"):
        with tally.claim(ledger, 7, report_batch=3) as session:
            rows = session.rows
            for row in rows[:4]:
                session.succeed(row.key, {"n": row.payload["n"]}, usage=Usage(10, 2))
            assert session.results.succeeded == 3, "the first batch of 3 went out"
            session.fail(rows[4].key, message="bad input", http_code=400, usage={"input_tokens": 5})
            raise RuntimeError("the worker crashed")
    assert session.results.succeeded == 4 and session.results.permanent == 1
    assert {v.verdict for v in session.results.verdicts} == {Verdict.SUCCEEDED, Verdict.PERMANENT}
    summary = tally.summarize(ledger)
    assert (summary.succeeded, summary.permanent, summary.pending, summary.running) == (4, 1, 2, 0)
    assert summary.attempts_total == 5, "released rows cost no attempt"
    assert (summary.usage.input_tokens, summary.usage.output_tokens) == (45, 8)
    with tally.claim(ledger, 10) as again:
        done = again.report([])
        assert done.succeeded == 0 and len(again) == 2
        with pytest.raises(KeyError, match="not a row of claim"):
            again.succeed(rows[0].key, {})


def test_claim_next_reports_and_claims_in_one_call_until_nothing_is_left(
    tally: Client, ledger: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Invariant: a worker looping on `session.claim_next()` sees every row
    # exactly once, each reported once (one attempt a row), and ends with
    # an empty session, with one ClaimRows in all (every later claim rides
    # on the report of the outcomes still queued); rows it did not report
    # go back without an attempt.
    tally.enroll(ledger, generated_rows(10))
    claim_rows = tally.ledgers.ClaimRows
    claims: list[object] = []

    def counted(*args: object, **kwargs: object) -> object:
        claims.append(args)
        return claim_rows(*args, **kwargs)

    monkeypatch.setattr(tally.ledgers, "ClaimRows", counted)
    seen: list[str] = []
    session = tally.claim(ledger, 3, report_batch=10)
    while session:
        for row in session.rows:
            seen.append(row.key)
            session.succeed(row.key, {"n": row.payload["n"]})
        session = session.claim_next(4 if len(seen) == 3 else None)
    assert len(seen) == 10 and len(set(seen)) == 10
    assert len(claims) == 1
    summary = tally.summarize(ledger)
    assert (summary.succeeded, summary.running, summary.attempts_total) == (10, 0, 10)

    tally.enroll(ledger, ({"key": f"more-{i}", "payload": {"n": i}} for i in range(2)))
    first = tally.claim(ledger, 2)
    first.succeed(first.rows[0].key, {})
    nothing_left = first.claim_next()
    assert not nothing_left, "the unreported row is given back after the next claim"
    again = nothing_left.claim_next()
    assert [r.key for r in again.rows] == [first.rows[1].key]
    again.close()
    assert tally.summarize(ledger).attempts_total == 11


def test_a_failed_heartbeat_is_raised_by_the_sessions_next_call(tally: Client, ledger: str) -> None:
    # Invariant (issue 34): the heartbeat never stops silently: once the
    # claim is lost, the worker is told at its next report and at the end
    # of the block.
    tally.enroll(ledger, generated_rows(2))
    session = tally.claim(ledger, 2, lease=3)
    with pytest.raises(NotFound, match="heartbeat failed"):
        with session:
            tally.delete_ledger(ledger, force=True)
            deadline = time.monotonic() + 30
            while session.lost is None:  # the next extension (every 1 s) fails
                assert time.monotonic() < deadline, "the heartbeat never ran"
                time.sleep(0.05)
            session.succeed(session.rows[0].key, {"late": True})
    with pytest.raises(NotFound):
        session.heartbeat()


def test_a_page_becomes_an_arrow_table_and_a_data_frame(tally: Client, ledger: str) -> None:
    tally.enroll(ledger, generated_rows(5))
    with tally.claim(ledger, 5) as session:
        for row in session:
            session.succeed(row.key, {"n": row.payload["n"], "x": [1, 2]})
    page = next(tally.pages(ledger, full=True))
    assert len(page) == 5 and page.cursor == ""
    table = page.to_arrow()
    assert tuple(table.column_names) == CSV_COLUMNS and table.num_rows == 5
    assert set(table.column("status").to_pylist()) == {"SUCCEEDED"}
    frame = page.to_pandas(decode_json=True)
    assert sorted(r["n"] for r in frame["result"]) == [0, 1, 2, 3, 4]
    assert str(frame["update_time"].dtype) == "datetime64[us, UTC]"


def test_an_http_address_like_tallyctls_reaches_the_same_server(address: str) -> None:
    with Client(f"http://{address}") as tally:
        assert tally.address.target == address
        with pytest.raises(NotFound):
            tally.get_ledger("no-such-ledger")


def test_watch_jobs_streams_events_from_a_sequence(tally: Client, ledger: str) -> None:
    tally.enroll(ledger, generated_rows(3))
    session = tally.claim(ledger, 3)
    job = tally.call(tally.jobs_stub.CreateJob, pb.job_pb2.CreateJobRequest(claim=session.name))
    events: list[pb.job_pb2.JobEvent] = []
    done = threading.Event()

    def follow() -> None:
        for event in tally.watch_jobs(ledger, after_sequence=-1):
            events.append(event)
            done.set()
            return

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    assert done.wait(timeout=30), "the job's CREATED event arrives"
    assert events[0].job.name == job.name
    assert events[0].type == pb.job_pb2.JOB_EVENT_TYPE_CREATED


def test_jobs_list_each_job_with_its_provider_and_state(tally: Client, ledger: str) -> None:
    # Invariant: jobs() lists the ledger's jobs as dataclasses naming the
    # provider their model routes to (the ledger's Gemini model here), and
    # a state filter keeps only jobs in those states.
    tally.enroll(ledger, generated_rows(2))
    session = tally.claim(ledger, 2)
    made = tally.call(tally.jobs_stub.CreateJob, pb.job_pb2.CreateJobRequest(claim=session.name))
    (job,) = list(tally.jobs(ledger))
    assert job.name == made.name
    assert (job.provider, job.state, job.rows) == ("gemini", JobState.PREPARING, 2)
    assert job.model == tally.get_ledger(ledger).policy.model
    assert list(tally.jobs(ledger, states=["succeeded"])) == []


def test_delete_ledger_refuses_live_work_then_forces(tally: Client, ledger: str) -> None:
    # Invariant: a ledger with a live claim is not deleted without force
    # (FailedPrecondition, LEDGER_ACTIVE, nothing written); with force it is
    # DELETING at once and every work call on it answers NOT_FOUND.
    tally.enroll(
        ledger, ({"key": derive_key("del", str(i)), "payload": {"n": i}} for i in range(5))
    )
    assert tally.claim(ledger, 2)
    with pytest.raises(FailedPrecondition) as refused:
        tally.delete_ledger(ledger)
    assert refused.value.reason == "LEDGER_ACTIVE"
    assert tally.get_ledger(ledger).state is LedgerState.ACTIVE
    marked = tally.delete_ledger(ledger, force=True)
    assert marked.state is LedgerState.DELETING
    assert marked.purge is not None and marked.purge.forced
    with pytest.raises(NotFound):
        tally.summarize(ledger)


def test_a_chain_under_a_deadline_is_forecast_with_flex_and_its_rows_name_the_page_before(
    tally: Client, ledger: str
) -> None:
    # Invariant: with a deadline batch alone cannot meet, the forecast
    # routes the deep links by flex at the all-batch cost and says so; a
    # row's dependency names go in as given and come back as its inputs.
    rows = [
        {
            "key": f"p{i:02}",
            "payload": {"page": i},
            "depends_on": [f"p{i - 1:02}"] if i else [],
            "dependency_names": {f"p{i - 1:02}": "previous"} if i else {},
        }
        for i in range(20)
    ]
    assert tally.enroll(ledger, rows).enrolled == 20
    tally.update_ledger(
        ledger,
        {
            "lanes": ["LANE_BATCH", "LANE_FLEX"],
            "deadline": "2099-01-01T00:00:00Z",
            "turnarounds": {"batch": "3600s", "flex": "1s"},
        },
    )
    far = tally.forecast(ledger)
    assert far.depth == 20 and far.plan.in_time and far.all_batch.in_time
    assert far.plan.rows_by_lane == {"batch": 20}
    assert far.explanation.startswith("batch alone is in time")
    soon = (datetime.now(timezone.utc) + timedelta(minutes=10)).isoformat()
    tally.update_ledger(ledger, {"deadline": soon.replace("+00:00", "Z")})
    f = tally.forecast(ledger)
    assert f.plan.in_time and not f.all_batch.in_time
    assert f.plan.rows_by_lane.get("flex", 0) > 0
    assert abs(f.plan.cost_usd - f.all_batch.cost_usd) < 1e-9
    assert f.deadline is not None and f.plan.finish_time is not None
    assert f.plan.finish_time <= f.deadline < f.all_batch.finish_time  # type: ignore[operator]
    assert "by flex" in f.explanation
    row = tally.get_row(ledger, "p01")
    assert [(i.key, i.name, i.used_hash) for i in row.inputs] == [("p00", "previous", "")]


def test_a_succeeded_row_asked_again_keeps_its_old_result_and_marks_its_dependant(
    tally: Client, ledger: str
) -> None:
    # Invariant (issue 49): `redrive(include_succeeded=True)` asks a
    # SUCCEEDED row again: the dry run names the dependant that used its
    # answer and changes nothing; the real one keeps the old result as
    # superseded; a different new answer marks the dependant's input
    # changed (the ledger does not re-run dependants by default).
    rows = [
        {"key": "a", "payload": {"n": 0}},
        {"key": "b", "payload": {"n": 1}, "depends_on": ["a"], "dependency_names": {"a": "prev"}},
    ]
    tally.enroll(ledger, rows)
    for key, answer in [("a", {"v": 1}), ("b", {"v": "b"})]:
        with tally.claim(ledger, 10) as session:
            assert [r.key for r in session.rows] == [key]
            session.succeed(key, answer)
    dry = tally.redrive(ledger, ["a"], include_succeeded=True, dry_run=True)
    assert (dry.reanswered, dry.dependants_at_risk, dry.at_risk_keys) == (1, 1, ("b",))
    assert tally.get_row(ledger, "a").status == RowStatus.SUCCEEDED
    done = tally.redrive(ledger, ["a"], include_succeeded=True, reason="new model")
    assert (done.reanswered, done.sample_keys) == (1, ("a",))
    a = tally.get_row(ledger, "a")
    assert a.status == RowStatus.PENDING and a.result is None
    assert [(s.result_version, s.result, s.rule, s.reason) for s in a.superseded] == [
        (1, {"v": 1}, "reanswer", "new model")
    ]
    with tally.claim(ledger, 10) as session:
        assert [r.key for r in session.rows] == ["a"]
        session.succeed("a", {"v": 2})
    b = tally.get_row(ledger, "b")
    assert b.status == RowStatus.SUCCEEDED and b.inputs[0].changed
    assert tally.summarize(ledger).inputs_changed == 1
