"""The result cache from Python: a second ledger of the same rows is
answered from the cache (its summary counts the hits and what they saved),
and the dry run says so beforehand without writing anything."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import API_KEY, Emulator, start_emulator, workspace_binary

from tally_client import Client, RowStatus
from tally_prefect import cache_dry_run

ROWS = 20
POLICY = {
    "model": "gemini-2.5-flash",
    "result_cache": {"max_age": "3600s"},
    "prices": [{"model": "gemini-2.5-flash", "input_per_million": 1, "output_per_million": 2}],
}


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[Emulator]:
    yield from start_emulator(tmp_path, {}, "200ms")


def run_worker(address: str, ledger: str, emulator: Emulator, *extra: str) -> None:
    done = subprocess.run(
        [
            workspace_binary("tally-worker", "TALLY_WORKER_BIN"),
            "--server",
            f"http://{address}",
            "--ledger",
            ledger,
            "--gemini-base-url",
            emulator.base_url,
            "--poll-interval",
            "200ms",
            "--exit-when-idle",
            *extra,
        ],
        env={"GEMINI_API_KEY": API_KEY, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_second_ledger_is_answered_from_the_cache(
    tally: Client, address: str, emulator: Emulator
) -> None:
    # Invariants: the dry run writes nothing and counts every row as a
    # hit; the run then sends nothing (the emulator's batch count stays)
    # and the summary's cache stats count the hits and their savings.
    rows = [{"key": f"r{i}", "payload": {"contents": f"question {i}"}} for i in range(ROWS)]
    first, second = (f"py-cache-{uuid.uuid4().hex[:8]}-{n}" for n in ("a", "b"))
    for ledger in (first, second):
        tally.create_ledger(ledger, POLICY)
        tally.enroll(ledger, rows)
    run_worker(address, first, emulator)
    assert tally.summarize(first).succeeded == ROWS
    batches = emulator.stats()["batches_created"]

    estimate = cache_dry_run(
        workspace_binary("tally-worker", "TALLY_WORKER_BIN"),
        server=f"http://{address}",
        ledger=second,
        extra_args=["--gemini-base-url", emulator.base_url],
        env={"GEMINI_API_KEY": API_KEY, "PATH": "/usr/bin:/bin"},
    )
    assert (estimate.rows, estimate.hits, estimate.misses) == (ROWS, ROWS, 0)
    assert estimate.saved_usd > 0
    assert tally.summarize(second).pending == ROWS, "the dry run wrote nothing"

    run_worker(address, second, emulator)
    assert emulator.stats()["batches_created"] == batches, "nothing sent"
    summary = tally.summarize(second)
    assert summary.succeeded == ROWS
    assert (summary.cache.hits, summary.cache.misses) == (ROWS, 0)
    assert summary.cache.saved_usd == pytest.approx(estimate.saved_usd)
    row = tally.get_row(second, "r0")
    assert row.status is RowStatus.SUCCEEDED
