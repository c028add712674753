"""tally-workers started from Python never outlive the process that
started them (the guard of tally_prefect.workers), without Prefect."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import workspace_binary

from tally_prefect import WorkerError, WorkerPool


def processes_with(text: str) -> list[int]:
    """Live processes whose command line contains `text` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if text.encode() in cmdline and ") Z " not in stat:  # zombies are gone already
            found.append(int(entry.name))
    return found


def wait_gone(text: str, seconds: float = 60) -> list[int]:
    """Waits (up to `seconds`) for every process naming `text` to exit;
    returns those still alive then."""
    deadline = time.monotonic() + seconds
    while (left := processes_with(text)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def test_workers_stop_when_the_pool_ends_and_die_when_its_process_is_killed(
    address: str, ledger: str
) -> None:
    # Invariant (issue 34): a SIGKILL of the process that started the
    # workers (no finally runs) leaves no worker behind.
    binary = workspace_binary("tally-worker", "TALLY_WORKER_BIN")
    with WorkerPool(binary, server=f"http://{address}", ledger=ledger, count=2) as pool:
        assert pool.alive() == 2 and len(processes_with(ledger)) == 3, "2 workers + the guard"
    assert wait_gone(ledger) == [], "stopped with the pool"

    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from tally_prefect import WorkerPool\n"
            "pool = WorkerPool(sys.argv[1], server=sys.argv[2], ledger=sys.argv[3], count=2)\n"
            "pool.__enter__()\n"
            "print(' '.join(map(str, pool.pids)), flush=True)\n"
            "time.sleep(600)\n",
            binary,
            f"http://{address}",
            ledger,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    pids = [int(p) for p in holder.stdout.readline().split()]
    assert len(pids) == 2 and all(p in processes_with(ledger) for p in pids)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    assert wait_gone(ledger) == [], "the workers died with the process that started them"


def test_workers_that_exit_on_their_own_are_reported(
    address: str, ledger: str, tmp_path: Path
) -> None:
    binary = workspace_binary("tally-worker", "TALLY_WORKER_BIN")
    with WorkerPool(
        binary, server=f"http://{address}", ledger=ledger, extra_args=["--no-such-flag"]
    ) as pool:
        deadline = time.monotonic() + 30
        while pool.alive():
            assert time.monotonic() < deadline, "the worker did not exit"
            time.sleep(0.05)
        assert pool.failed() == [f"tally-worker pid {pool.pids[0]} exited with 2"]
    not_executable = tmp_path / "tally-worker"
    not_executable.write_text("")
    with pytest.raises(WorkerError, match="cannot start"):
        WorkerPool(str(not_executable), server=f"http://{address}", ledger=ledger).__enter__()
