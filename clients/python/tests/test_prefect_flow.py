"""The Prefect flow against a real tally-server, the workspace's
tally-worker, tallyctl and gemini-emulator, on Prefect's local ephemeral API
(`prefect_test_harness`: no Prefect server to start)."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from conftest import API_KEY, Emulator, start_emulator, workspace_binary
from google.protobuf import duration_pb2
from prefect.artifacts import Artifact
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterFlowRunId,
    FlowFilter,
    FlowFilterName,
    FlowRunFilter,
    FlowRunFilterId,
)
from test_workers import processes_with, wait_gone

from tally_client import Client, pb
from tally_prefect import Deployment, tally_pages
from tally_prefect.deployment import NOT_PARAMETERS


def touch(path: Path, text: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def dataset(root: Path, groups: dict[tuple[str, str, str], tuple[range, list[int]]]) -> None:
    """Images `range` and first-pass JSONs `list` per (state, school, year)."""
    for (state, school, year), (images, results) in groups.items():
        for n in images:
            touch(root / "images" / state / school / year / f"{n}.jpg")
        for n in results:
            # Numbers serde_json and Python would print differently.
            content = {"page": n, "score": 1.5e20, "tiny": 1.25e-5, "big": 2**70, "text": "é\u0001"}
            touch(
                root / "first_pass" / "label_to_curricular" / state / school / year / f"{n}.json",
                json.dumps(content),
            )


def create_ledger(tally: Client, ledger: str, lease_s: int) -> None:
    policy = pb.ledger_pb2.LedgerPolicy(
        lease=duration_pb2.Duration(seconds=lease_s),
        backoff=pb.ledger_pb2.Backoff(
            initial=duration_pb2.Duration(nanos=100_000_000),
            max=duration_pb2.Duration(nanos=500_000_000),
            multiplier=2.0,
        ),
    )
    tally.create_ledger(ledger, policy)


def flow_params(root: Path, ledger: str, workers: int) -> dict[str, Any]:
    """The run's parameters: what to plan and enroll, nothing about where."""
    return {
        "ledger": ledger,
        "images_root": str(root / "images"),
        "results_root": str(root / "first_pass"),
        "plan_path": str(root / "plan.json"),
        "workers": workers,
        "poll_interval": 0.5,
    }


def deployment_env(root: Path, address: str, base_url: str, batch: int) -> dict[str, str]:
    """The deployment's environment: where the run goes."""
    args = [
        "--poll-interval",
        "200ms",
        "--heartbeat-interval",
        "1s",
        "--lease",
        "3s",
        # The emulator lists a new batch at once (no list lag): a job
        # whose create was cut short is resolved in seconds, not 5 min.
        "--create-lookup-window",
        "2s",
        "--claim-size",
        str(batch),
        "--max-rows-per-batch",
        str(batch),
        "--log-format",
        "json",
    ]
    return {
        "TALLY_SERVER": address,
        "TALLYCTL_BIN": workspace_binary("tallyctl", "TALLYCTL_BIN"),
        "TALLY_WORKER_BIN": workspace_binary("tally-worker", "TALLY_WORKER_BIN"),
        "TALLY_WORKER_ARGS": shlex.join(args),
        "GEMINI_BASE_URL": base_url,
        "TALLY_WORKER_LOG_DIR": str(root / "worker-logs"),
        "GEMINI_API_KEY": API_KEY,
    }


def test_where_the_work_goes_is_never_a_run_parameter() -> None:
    # Invariant: the flow takes no parameter that decides where the token
    # or the API key go, or which program runs (anyone allowed to start a
    # run chooses its parameters): those come from the deployment's
    # environment, and a run that passes one is refused.
    parameters = set(inspect.signature(tally_pages.fn).parameters)
    assert not parameters & set(NOT_PARAMETERS), parameters & set(NOT_PARAMETERS)
    with pytest.raises(TypeError):
        tally_pages.fn(  # type: ignore[call-arg]
            ledger="l", images_root="i", results_root="r", plan_path="p", server="evil:1"
        )
    d = Deployment.from_env(
        {
            "TALLY_SERVER": "tally:443",
            "TALLY_TLS": "true",
            "TALLY_WORKER_BIN": "/opt/tally-worker",
            "TALLY_WORKER_ARGS": "--lease '3s' --claim-size 5",
        }
    )
    assert (d.server, d.tls, d.worker_bin) == ("tally:443", True, "/opt/tally-worker")
    assert d.worker_args == ("--lease", "3s", "--claim-size", "5")
    assert Deployment.from_env({}) == Deployment()
    with pytest.raises(ValueError, match="TALLY_TLS"):
        Deployment.from_env({"TALLY_TLS": "maybe"})


def artifacts_of(flow_run: UUID) -> list[Artifact]:
    async def read() -> list[Any]:
        async with get_client() as client:
            return await client.read_artifacts(
                artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run]))
            )

    return asyncio.run(read())


def task_run_names(flow_run: UUID) -> list[str]:
    async def read() -> list[str]:
        async with get_client() as client:
            runs = await client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run]))
            )
            return [r.name for r in runs]

    return asyncio.run(read())


def jobs_of(tally: Client, ledger: str) -> list[pb.job_pb2.Job]:
    r = tally.call(
        tally.jobs_stub.ListJobs,
        pb.job_pb2.ListJobsRequest(parent=f"ledgers/{ledger}", page_size=1000),
    )
    return list(r.jobs)


CA = ("California", "Lincoln High", "2023")
NY = ("New York", "O'Neil Prep", "2024")
CA_KEY = "California:Lincoln~20High:2023:{}"
NY_KEY = "New~20York:O~27Neil~20Prep:2024:{}"


@pytest.fixture
def small_run(tmp_path: Path) -> Iterator[Emulator]:
    dataset(tmp_path, {CA: (range(1, 21), [3, 4, 5, 12]), NY: (range(1, 7), [1, 2, 6])})
    faults = {
        "rows": [
            {"match": {"key": CA_KEY.format(4)}, "fault": {"kind": "permanent_error", "code": 400}},
            {
                "match": {"key": NY_KEY.format(1)},
                "fault": {"kind": "transient", "code": 503, "times": 1},
            },
        ]
    }
    yield from start_emulator(tmp_path, faults, "200ms")


def test_the_flow_runs_the_plan_and_publishes_a_table_per_job_and_the_summary(
    prefect_api: str,
    small_run: Emulator,
    tally: Client,
    address: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Invariants: the flow enrolls exactly tallyctl's plan (tallyctl finds
    # every row ALREADY_PRESENT, none in CONFLICT), each provider job is a
    # task run with its rows as a table artifact, the ledger summary is a
    # markdown artifact, and a PERMANENT row fails the run when asked.
    ledger = f"pf-small-{uuid.uuid4().hex[:8]}"
    create_ledger(tally, ledger, lease_s=30)
    params = flow_params(tmp_path, ledger, workers=1)
    for name, value in deployment_env(tmp_path, address, small_run.base_url, batch=3).items():
        monkeypatch.setenv(name, value)
    state = tally_pages(**params, fail_on_permanent=True, return_state=True)
    assert state.is_failed(), state
    assert "1 rows are PERMANENT" in (state.message or "")

    summary = tally.summarize(ledger)
    assert (summary.total, summary.succeeded, summary.permanent, summary.blocked) == (7, 5, 1, 1)
    row = tally.call(
        tally.ledgers.GetRow,
        pb.ledger_pb2.GetRowRequest(name=f"ledgers/{ledger}/rows/{NY_KEY.format(2)}"),
    )
    assert list(row.depends_on) == [NY_KEY.format(1)], "the plan's dependency was enrolled"

    # tallyctl enrolls the same plan file into the same ledger: no new row, no conflict.
    again = subprocess.run(
        [
            workspace_binary("tallyctl", "TALLYCTL_BIN"),
            "--server",
            f"http://{address}",
            "--json",
            "plan",
            "--from",
            str(tmp_path / "plan.json"),
            "--enroll",
            ledger,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads(again.stdout)["enroll"]
    assert (report["enrolled"], report["already_present"], report["conflicts"]) == (0, 7, 0)

    flow_run = state.state_details.flow_run_id
    assert flow_run is not None
    jobs = jobs_of(tally, ledger)
    assert len(jobs) >= 3, "7 rows in batches of at most 3, and a retry"
    names = task_run_names(flow_run)
    for job in jobs:
        assert names.count(f"job-{job.job_id}") == 1, (job.job_id, names)
    found = {a.key: a for a in artifacts_of(flow_run)}
    for job in jobs:
        assert f"{ledger}-job-{job.job_id}" in found
    tables = [json.loads(str(found[f"{ledger}-job-{job.job_id}"].data)) for job in jobs]
    lines = [line for t in tables for line in t]
    assert all(set(line) == {"key", "status", "rule", "attempts", "error"} for line in lines)
    by_key: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        by_key.setdefault(line["key"], []).append(line)
    permanent = by_key[CA_KEY.format(4)]
    assert [(p["status"], p["attempts"]) for p in permanent] == [("PERMANENT", 1)]
    assert permanent[0]["rule"] and permanent[0]["error"]
    # Each job's table lists exactly the rows the job was made with
    # (RowFilter.in_job), so the retried row is in both of its jobs' tables:
    # SUCCEEDED after 2 attempts in the second, and in the first with its
    # state when that table was published (RETRYABLE or RUNNING after 1
    # attempt, or already SUCCEEDED after 2: all three orders happen).
    for job, table in zip(jobs, tables, strict=True):
        assert len(table) == job.counts.rows, (job.job_id, table)
    retried = sorted((r["attempts"], r["status"]) for r in by_key[NY_KEY.format(1)])
    assert len(retried) == 2 and retried[-1] == (2, "SUCCEEDED"), retried
    assert retried[0] in [(1, "RETRYABLE"), (1, "RUNNING"), (2, "SUCCEEDED")], retried
    # BLOCKED rows never ran, so no job shows them; every other row is in a table.
    assert set(by_key) == {CA_KEY.format(n) for n in (3, 4, 12)} | {
        NY_KEY.format(n) for n in (1, 2, 6)
    }
    summary_md = found[f"{ledger}-summary"]
    assert summary_md.type == "markdown"
    text = str(summary_md.data)
    for expected in ["| SUCCEEDED | 5 |", "| PERMANENT | 1 |", "| BLOCKED | 1 |", "by rule"]:
        assert expected in text, text


@pytest.fixture
def page_images(tmp_path: Path) -> Iterator[Emulator]:
    # 3 pages with real bytes (distinct per page) and their first pass.
    dataset(tmp_path, {("Ohio", "Dayton", "2021"): (range(1, 4), [1, 2, 3])})
    for n in range(1, 4):
        path = tmp_path / "images" / "Ohio" / "Dayton" / "2021" / f"{n}.jpg"
        path.write_bytes(b"\xff\xd8\xff\xe0page-%d" % n + bytes(range(256)) * n)
    yield from start_emulator(tmp_path, {}, "200ms")


def test_the_page_image_reaches_the_model(
    prefect_api: str,
    page_images: Emulator,
    tally: Client,
    address: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Invariants: with a prompt declaring a media variable, the flow enrolls
    # each page's image in it (its path and the SHA-256 of its bytes, as
    # `tallyctl plan --enroll --prompt` does: tallyctl finds every row
    # ALREADY_PRESENT), and the provider receives each page's own bytes.
    import hashlib

    ledger = f"pf-media-{uuid.uuid4().hex[:8]}"
    create_ledger(tally, ledger, lease_s=30)
    tally.call(
        tally.ledgers.RegisterPrompt,
        pb.ledger_pb2.RegisterPromptRequest(
            prompt_id="pf_media_page",
            version="v1",
            template="Transcribe page {{ page }} of {{ school }}.",
            media=["image"],
        ),
    )
    params = flow_params(tmp_path, ledger, workers=1)
    env = deployment_env(tmp_path, address, page_images.base_url, batch=3)
    env["TALLY_WORKER_ARGS"] += f" --media-root {shlex.quote(str(tmp_path / 'images'))}"
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = tally_pages(**params, prompt="pf_media_page@v1")
    assert isinstance(result, dict) and result["succeeded"] == 3, result

    media = page_images.stats()["media"]
    for n in range(1, 4):
        key = f"Ohio:Dayton:2021:{n}"
        path = tmp_path / "images" / "Ohio" / "Dayton" / "2021" / f"{n}.jpg"
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        row = tally.call(
            tally.ledgers.GetRow,
            pb.ledger_pb2.GetRowRequest(name=f"ledgers/{ledger}/rows/{key}"),
        )
        reference = json.loads(row.payload)["image"]
        assert reference == {"uri": str(path), "sha256": digest, "mime_type": "image/jpeg"}
        assert media[key] == [digest], (key, media.get(key))

    again = subprocess.run(
        [
            workspace_binary("tallyctl", "TALLYCTL_BIN"),
            "--server",
            f"http://{address}",
            "--json",
            "plan",
            "--from",
            str(tmp_path / "plan.json"),
            "--enroll",
            ledger,
            "--prompt",
            "pf_media_page@v1",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads(again.stdout)["enroll"]
    assert (report["enrolled"], report["already_present"], report["conflicts"]) == (0, 3, 0)


@pytest.fixture
def long_run(tmp_path: Path) -> Iterator[Emulator]:
    # 40 independent pages (every other page is allow-listed: no dependencies).
    dataset(tmp_path, {("Texas", "Austin", "2022"): (range(1, 81), list(range(2, 81, 2)))})
    yield from start_emulator(tmp_path, {}, "1500ms")


def flow_run_of(ledger: str) -> Any:
    """The tally-pages flow run whose `ledger` parameter is `ledger`."""

    async def read() -> list[Any]:
        async with get_client() as client:
            return await client.read_flow_runs(
                flow_filter=FlowFilter(name=FlowFilterName(any_=["tally-pages"]))
            )

    runs = [r for r in asyncio.run(read()) if r.parameters.get("ledger") == ledger]
    assert len(runs) == 1, runs
    return runs[0]


def test_a_killed_flow_leaves_no_process_ends_crashed_and_its_rerun_sends_nothing_twice(
    prefect_api: str,
    long_run: Emulator,
    tally: Client,
    address: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Invariants (issue 34): SIGKILL of the flow process alone (no finally
    # runs: the out-of-memory killer) while batches are at the provider
    # leaves no tally-worker behind and ends its run Crashed; running the
    # flow again enrolls nothing twice and submits every row to the
    # provider exactly once.
    ledger = f"pf-killed-{uuid.uuid4().hex[:8]}"
    create_ledger(tally, ledger, lease_s=3)
    params = flow_params(tmp_path, ledger, workers=2)
    deployment = deployment_env(tmp_path, address, long_run.base_url, batch=5)
    script = (
        "import json, sys\n"
        "from tally_prefect import tally_pages\n"
        "tally_pages(**json.loads(sys.argv[1]))\n"
    )
    first = subprocess.Popen(
        [sys.executable, "-c", script, json.dumps(params)],
        env={
            **os.environ,
            **deployment,
            "PREFECT_API_URL": prefect_api,
            "PREFECT_HOME": str(tmp_path / "prefect-home"),
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while long_run.stats()["batches_created"] < 1:
        assert first.poll() is None, "the flow ended before any batch was created"
        assert time.monotonic() < deadline, "no batch was created in 120 s"
        time.sleep(0.1)
    running = [pid for pid in processes_with(ledger) if pid != first.pid]
    assert len(running) == 3, "2 workers and their guard run"
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    assert wait_gone(ledger) == [], "no worker (nor guard) outlives the killed flow"
    crashed = flow_run_of(ledger)
    assert crashed.state is not None and crashed.state.is_crashed(), crashed.state
    assert "run the flow again" in (crashed.state.message or "").lower()
    at_kill = tally.summarize(ledger)
    assert at_kill.total == 40
    assert at_kill.succeeded < 40, "the kill landed mid-run"

    for name, value in deployment.items():
        monkeypatch.setenv(name, value)
    result = tally_pages(**params)
    assert isinstance(result, dict)
    assert (result["enrolled"], result["already_present"]) == (0, 40), result
    assert (result["succeeded"], result["total"]) == (40, 40), result
    assert wait_gone(ledger) == [], "the re-run's workers stopped with it"

    # A search for a batch whose create was cut short may make a one-request
    # probe batch (key `tally-probe`) as its witness: not a row.
    submissions = {k: v for k, v in long_run.stats()["submissions"].items() if k != "tally-probe"}
    assert len(submissions) == 40
    twice = {k: v for k, v in submissions.items() if len(v) != 1}
    assert not twice, f"rows sent more than once: {twice}"
    assert sum(j.adoptions for j in jobs_of(tally, ledger)) >= 1, (
        "the killed run's batch was adopted, not resent"
    )

    # Issue 55: a re-run of the finished flow enrolls nothing, makes no job
    # (its result says 0, while it follows the ledger's earlier jobs) and
    # sends nothing.
    before = long_run.stats()["submissions"]
    again = tally_pages(**params)
    assert isinstance(again, dict)
    assert (again["enrolled"], again["jobs"]) == (0, 0), again
    assert again["jobs_followed"] >= 1, again
    assert long_run.stats()["submissions"] == before
