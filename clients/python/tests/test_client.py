"""The client against a real tally-server."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import grpc
import pytest

from tally_client import Client, EnrollProgress, InvalidArgument, derive_key, pb


def generated_rows(n: int) -> Iterator[dict[str, object]]:
    for i in range(n):
        yield {"key": derive_key("doc", str(i)), "payload": {"text": f"document {i}"}}


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
    assert (summary.total, summary.pending) == (250, 250)
    keys = {row.key for row in tally.rows(ledger, page_size=70)}
    assert keys == {derive_key("doc", str(i)) for i in range(250)}


def test_a_bad_request_raises_with_its_field_violations(tally: Client, ledger: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        tally.enroll(ledger, [{"key": "", "payload": "{}"}, {"key": "bad key", "payload": "{}"}])
    error = caught.value
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    fields = {v.field for v in error.field_violations}
    assert {"rows[0].key", "rows[1].key"} <= fields, error
    assert tally.summarize(ledger).total == 0, "a refused call writes nothing"


def test_a_claim_session_reports_and_releases_what_it_did_not_report(
    tally: Client, ledger: str
) -> None:
    # Invariant: rows a Python worker did not report go back (no attempt);
    # reported rows keep their outcome.
    tally.enroll(ledger, generated_rows(5))
    with pytest.raises(RuntimeError):
        session = tally.claim(ledger, 5, lease=30)
        assert session is not None
        with session:
            assert len(session.rows) == 5
            first = session.rows[0].key
            r = session.succeed(first, {"summary": "ok"})
            assert r.succeeded == 1
            raise RuntimeError("the worker crashed")
    summary = tally.summarize(ledger)
    assert (summary.succeeded, summary.pending, summary.running) == (1, 4, 0)
    assert summary.attempts_total == 1, "released rows cost no attempt"
    again = tally.claim(ledger, 10)
    assert again is not None
    with again:
        assert first not in {r.key for r in again.rows}
        for row in again.rows:
            again.fail(row.key, message="bad input", http_code=400, status="INVALID_ARGUMENT")
    summary = tally.summarize(ledger)
    assert (summary.succeeded, summary.permanent) == (1, 4)
    assert tally.claim(ledger, 10) is None


def test_watch_jobs_streams_events_from_a_sequence(tally: Client, ledger: str) -> None:
    tally.enroll(ledger, generated_rows(3))
    session = tally.claim(ledger, 3)
    assert session is not None
    job = tally.call(tally.jobs.CreateJob, pb.job_pb2.CreateJobRequest(claim=session.claim.name))
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


def test_delete_ledger_refuses_live_work_then_forces(tally: Client, ledger: str) -> None:
    # Invariant: a ledger with a live claim is not deleted without force
    # (FailedPrecondition, LEDGER_ACTIVE, nothing written); with force it is
    # DELETING at once and every work call on it answers NOT_FOUND.
    from tally_client import FailedPrecondition, NotFound

    tally.enroll(
        ledger, ({"key": derive_key("del", str(i)), "payload": {"n": i}} for i in range(5))
    )
    assert tally.claim(ledger, 2) is not None
    with pytest.raises(FailedPrecondition) as refused:
        tally.delete_ledger(ledger)
    assert refused.value.reason == "LEDGER_ACTIVE"
    assert tally.get_ledger(ledger).state == pb.ledger_pb2.LEDGER_STATE_ACTIVE
    marked = tally.delete_ledger(ledger, force=True)
    assert marked.state == pb.ledger_pb2.LEDGER_STATE_DELETING
    assert marked.purge.forced
    with pytest.raises(NotFound):
        tally.summarize(ledger)
