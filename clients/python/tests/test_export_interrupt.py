"""`tallyctl export` stopped with Ctrl-C: the file written so far is whole
(a Parquet file has its footer), the cursor it prints resumes after exactly
the rows written, and nothing is lost or written twice.

To interrupt at a known point, tallyctl reaches the server through a proxy
that forwards the server's answers up to a byte limit and then holds them:
the export is then waiting for a page, and SIGINT is sent once tallyctl
has installed its Ctrl-C handler (SIGINT appears in /proc/PID/status's
SigCgt)."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import workspace_binary

from tally_client import Client

ROWS = 300
#: Bytes of the server's answers the proxy lets through before it holds them
#: (some pages of 10 rows of about 1 kB each; the whole export is ~3 MB).
LIMIT = 100_000


class HoldingProxy:
    """A TCP proxy that forwards client bytes freely and at most `limit`
    bytes of the server's, then stops reading from the server."""

    def __init__(self, target: str, limit: int) -> None:
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.limit = limit
        self.forwarded = 0
        self.held = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            threading.Thread(target=self._pipe, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, True), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, limited: bool) -> None:
        try:
            while True:
                room = self.limit - self.forwarded if limited else 65536
                if room <= 0:
                    self.held.set()
                    return  # hold: the server's answers stop here
                data = src.recv(min(room, 65536))
                if not data:
                    return
                dst.sendall(data)
                if limited:
                    self.forwarded += len(data)
        except OSError:
            return

    def close(self) -> None:
        self.listener.close()


def catches_sigint(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status").read_text()
    mask = int(re.search(r"^SigCgt:\s*([0-9a-f]+)$", status, re.M).group(1), 16)  # type: ignore[union-attr]
    return bool(mask & (1 << (2 - 1)))


def wait_for(condition: Callable[[], bool], what: str, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.02)


@pytest.fixture
def filled(tally: Client, ledger: str) -> str:
    tally.enroll(
        ledger, ({"key": f"row-{i:04}", "payload": {"text": "x" * 1000}} for i in range(ROWS))
    )
    return ledger


@pytest.fixture
def proxy(address: str) -> Iterator[HoldingProxy]:
    p = HoldingProxy(address, LIMIT)
    yield p
    p.close()


def tallyctl(server: str, *args: str) -> list[str]:
    return [workspace_binary("tallyctl", "TALLYCTL_BIN"), "--server", f"http://{server}", *args]


def interrupt(command: list[str], proxy: HoldingProxy) -> tuple[int, str, str]:
    """Runs the export through the proxy, interrupts it while it waits for
    a held page; returns (exit code, rows written, cursor)."""
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: proxy.held.is_set(), "the proxy holds the server's answers")
        wait_for(lambda: catches_sigint(child.pid), "tallyctl has its Ctrl-C handler")
        child.send_signal(2)
        _, err = child.communicate(timeout=60)
    finally:
        child.kill()
    stopped = re.search(r"export stopped after (\d+) rows", err)
    cursor = re.search(r"resume with: --after (\S+)", err)
    assert stopped and cursor, err
    return child.returncode, stopped.group(1), cursor.group(1)


def test_ctrl_c_leaves_a_whole_jsonl_file_and_its_cursor_resumes(
    filled: str, address: str, proxy: HoldingProxy, tmp_path: Path
) -> None:
    # Invariant: after Ctrl-C the file holds exactly the rows reported
    # written (whole lines), and `--after CURSOR` appends exactly the rest.
    path = tmp_path / "rows.jsonl"
    command = tallyctl(proxy.address, "export", filled, "--page-size", "10", "-o", str(path))
    code, written, cursor = interrupt(command, proxy)
    assert code == 130
    lines = path.read_text().splitlines()
    assert 0 < len(lines) == int(written) < ROWS
    subprocess.run(
        tallyctl(address, "export", filled, "-o", str(path), "--after", cursor),
        check=True,
        capture_output=True,
    )
    keys = [json.loads(line)["key"] for line in path.read_text().splitlines()]
    assert keys == [f"row-{i:04}" for i in range(ROWS)]


def test_ctrl_c_leaves_a_readable_parquet_file_and_the_rest_goes_to_a_new_one(
    filled: str, address: str, proxy: HoldingProxy, tmp_path: Path
) -> None:
    # Invariant: an interrupted Parquet export is a valid file (footer
    # written) with the rows reported; the rest, exported after the cursor
    # to a new file, completes the set with no row twice.
    first, rest = tmp_path / "a.parquet", tmp_path / "b.parquet"
    command = tallyctl(
        proxy.address,
        "export",
        filled,
        "--format",
        "parquet",
        "--page-size",
        "10",
        "-o",
        str(first),
    )
    code, written, cursor = interrupt(command, proxy)
    assert code == 130
    head = [r["key"] for r in pq.read_table(first).to_pylist()]
    assert 0 < len(head) == int(written) < ROWS
    subprocess.run(
        tallyctl(
            address, "export", filled, "--format", "parquet", "-o", str(rest), "--after", cursor
        ),
        check=True,
        capture_output=True,
    )
    tail = [r["key"] for r in pq.read_table(rest).to_pylist()]
    assert head + tail == [f"row-{i:04}" for i in range(ROWS)]
