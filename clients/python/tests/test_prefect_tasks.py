"""The reusable Prefect tasks on their own, in small flows on Prefect's
local API, against a real tally-server (workers: none, or a Python worker
of the test's)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from prefect import flow

from tally_client import Client, pb
from tally_prefect import TallyServer, WorkerPool, enroll_rows, export_ledger, wait_for_ledger
from tally_prefect.tasks import parse_deadline


def rows(n: int, text: str = "x") -> list[dict[str, Any]]:
    return [{"key": f"r{i}", "payload": {"text": text, "i": i}} for i in range(n)]


def test_enroll_rows_creates_the_ledger_is_idempotent_and_fails_on_conflict(
    prefect_api: str, address: str, tally: Client, ledger: str
) -> None:
    server = TallyServer(address=f"http://{address}")
    fresh = f"{ledger}-new"

    @flow
    def enroll_twice() -> tuple[dict[str, int], dict[str, int]]:
        first = enroll_rows(fresh, rows(5), policy={"budgets": {"provider": 2}}, server=server)
        return first, enroll_rows(fresh, rows(5), server=server)

    first, again = enroll_twice()
    assert (first["enrolled"], again["already_present"]) == (5, 5)
    assert tally.get_ledger(fresh).policy.budgets.provider == 2

    @flow
    def conflicting(fail: bool) -> dict[str, int]:
        return enroll_rows(fresh, rows(2, text="other"), server=server, fail_on_conflict=fail)

    with pytest.raises(ValueError, match="first: r0, r1"):
        conflicting(True)
    assert conflicting(False)["conflicts"] == 2


def test_wait_and_export_read_what_tally_holds(
    prefect_api: str, address: str, tally: Client, ledger: str, tmp_path: Path
) -> None:
    server = TallyServer(address=address)
    tally.enroll(ledger, rows(4))

    @flow
    def wait_briefly() -> dict[str, int]:
        return wait_for_ledger(ledger, server=server, poll_interval=0.1, timeout=0.5)

    with pytest.raises(TimeoutError, match="pending=4"):
        wait_briefly()  # nobody works the rows: never done
    with tally.claim(ledger, 4) as session:  # a worker of our own
        for row in session:
            session.succeed(row.key, {"i": row.payload["i"]})

    @flow
    def wait_then_export(path: str) -> tuple[dict[str, int], dict[str, Any]]:
        done = wait_for_ledger(ledger, server=server, poll_interval=0.1)
        return done, export_ledger(ledger, path, format="parquet", server=server)

    done, exported = wait_then_export(str(tmp_path / "out" / "rows.parquet"))
    assert (done["succeeded"], exported["rows"]) == (4, 4)
    assert pq.read_table(exported["path"]).num_rows == 4
    with pytest.raises(FileExistsError):
        wait_then_export(exported["path"])


def test_a_tally_server_block_reads_the_environment_and_keeps_the_token_secret() -> None:
    block = TallyServer.from_env(
        {"TALLY_SERVER": "https://tally.internal:443", "TALLY_TOKEN": "s3cret"}
    )
    assert block.url == "https://tally.internal:443"
    assert "s3cret" not in repr(block) and block.token is not None
    assert TallyServer.from_env({}).url == "http://127.0.0.1:50051"


def test_the_flow_says_once_which_jobs_it_waits_for() -> None:
    # Invariant: an open job held by another run's worker is named once per
    # holder, with its lease's end; this run's own jobs and closed ones are
    # not.
    from tally_client import Job, pb
    from tally_prefect.flow import waiting_lines

    def job(job_id: str, owner: str, state: Any, ended: bool = False) -> Job:
        raw = pb.job_pb2.Job(
            name=f"ledgers/l/jobs/{job_id}", job_id=job_id, owner=owner, state=state
        )
        raw.lease_expire_time.FromSeconds(1_800_000_000)
        if ended:
            raw.end_time.FromSeconds(1_700_000_000)
        return Job.from_pb(raw)

    running = pb.job_pb2.JOB_STATE_RUNNING
    jobs = [
        job("a", "old-run-0", running),
        job("b", "this-run-0", running),
        job("c", "old-run-0", running, ended=True),
    ]
    said: dict[str, str] = {}
    lines = waiting_lines(jobs, ["this-run-0"], said)
    assert len(lines) == 1 and "job a (RUNNING), held by old-run-0 until 2027-01-15" in lines[0]
    assert waiting_lines(jobs, ["this-run-0"], said) == [], "said once"
    assert len(waiting_lines([job("a", "other", running)], [], said)) == 1, "a new holder"


def test_a_media_variable_named_like_a_plan_field_is_refused(address: str, tally: Client) -> None:
    # Invariant: a prompt that would put the page image where the plan puts
    # the page number (`page`) is refused, naming the field; another name
    # is the page image's variable.
    import uuid

    from tally_prefect.flow import page_media_variable
    from tally_prefect.plan import PlanError

    server = TallyServer(address=f"http://{address}")
    name = f"ocr-{uuid.uuid4().hex[:8]}"
    for version, media, template in [
        ("v1", "page", "OCR the page of {{ school }}"),
        ("v2", "image", "OCR page {{ page }}"),
    ]:
        tally.call(
            tally.ledgers.RegisterPrompt,
            pb.ledger_pb2.RegisterPromptRequest(
                prompt_id=name, version=version, template=template, media=[media]
            ),
        )
    with pytest.raises(PlanError, match="`page`"):
        page_media_variable(f"{name}@v1", server)
    assert page_media_variable(f"{name}@v2", server) == "image"


def test_a_deadline_is_a_time_or_a_duration_and_anything_else_is_refused() -> None:
    # Invariant: the flow's deadline is read the way tallyctl reads one
    # (an RFC 3339 time with a zone, or a duration from now), never guessed.
    now = datetime(2026, 12, 6, 5, 0, tzinfo=timezone.utc)
    assert parse_deadline("10m", now) == now + timedelta(minutes=10)
    assert parse_deadline("1h30m", now) == now + timedelta(hours=1, minutes=30)
    assert parse_deadline("2026-12-07T06:00:00Z", now) == datetime(
        2026, 12, 7, 6, tzinfo=timezone.utc
    )
    for bad in ["", "soon", "10 minutes", "2026-12-07T06:00:00"]:
        with pytest.raises(ValueError, match="deadline"):
            parse_deadline(bad, now)


def test_a_pool_starts_one_more_worker_for_each_synchronous_lane(tmp_path: Path) -> None:
    # Invariant: a deadline's lanes each get a worker of their own
    # (`--lane flex`), beside the batch workers; batch or a lane named
    # twice is refused.
    binary = tmp_path / "tally-worker"
    binary.write_text("")
    pool = WorkerPool(str(binary), server="http://x:1", ledger="l", count=2, lanes=["flex"])
    argvs = [list(w["argv"] or []) for w in pool._workers]
    lanes = [a[-1] if "--lane" in a else "batch" for a in argvs]
    assert lanes == ["batch", "batch", "flex"]
    assert pool.names[2].endswith("-flex")
    for bad in (["batch"], ["flex", "flex"]):
        with pytest.raises(ValueError, match="synchronous lanes"):
            WorkerPool(str(binary), server="http://x:1", ledger="l", lanes=bad)
