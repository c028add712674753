"""A real tally-server for the tests: the workspace's binary
(`TALLY_SERVER_BIN`, else `target/debug/tally-server`), on free ports, with
a private PostgreSQL under a temporary directory, or, when `DATABASE_URL`
is set, a fresh database on its server made for this session (and dropped
after it): no session sees another's rows. Each test uses its own ledger."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import tempfile
import threading
import urllib.parse
import urllib.request
import uuid
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest

from tally_client import Client

ROOT = Path(__file__).resolve().parents[3]


def own_database() -> str | None:
    """A database of its own for one test's server, on the server of
    `DATABASE_URL` (dropped at exit), for a test whose data must not meet
    another's; None when `DATABASE_URL` is unset (the server then runs its
    own private PostgreSQL)."""
    admin = os.environ.get("DATABASE_URL")
    psql = shutil.which("psql")
    if not admin or psql is None:
        return None
    name = f"tally_py_{uuid.uuid4().hex[:12]}"
    subprocess.run(
        [psql, admin, "-qc", f'CREATE DATABASE "{name}"'], check=True, capture_output=True
    )
    atexit.register(
        subprocess.run,
        [psql, admin, "-qc", f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'],
        capture_output=True,
    )
    parts = urllib.parse.urlsplit(admin)
    return urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))


def _session_database() -> None:
    """Points `DATABASE_URL` (inherited by every server the tests start,
    tally-dev's included) at a database of this session's own on the same
    server, dropped at exit; without `psql` to make one, unsets it, so each
    server runs its own private PostgreSQL."""
    if not os.environ.get("DATABASE_URL"):
        return
    database = own_database()
    if database is None:
        del os.environ["DATABASE_URL"]
    else:
        os.environ["DATABASE_URL"] = database


_session_database()


def workspace_binary(name: str, variable: str) -> str:
    """A binary of the workspace: `$variable`, else `{name}` in cargo's
    debug directory (`$CARGO_TARGET_DIR/debug`, or `target/debug`)."""
    target = Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target")
    path = os.environ.get(variable) or str(target / "debug" / name)
    if not Path(path).is_file():
        pytest.exit(
            f"no {name} at {path}: run `cargo build -p {name}` or set {variable}",
            returncode=2,
        )
    return path


def drain(stream: IO[str]) -> None:
    """Reads a child's remaining output so that it never blocks on a full pipe."""
    threading.Thread(target=lambda: [None for _ in stream], daemon=True).start()


@pytest.fixture(scope="session")
def address() -> Iterator[str]:
    data = tempfile.mkdtemp(prefix="tally-python-")
    os.chmod(data, 0o755)  # the private PostgreSQL runs unprivileged
    args = [
        workspace_binary("tally-server", "TALLY_SERVER_BIN"),
        "--auth",
        "disabled",
        "--grpc-addr",
        "127.0.0.1:0",
        "--metrics-addr",
        "127.0.0.1:0",
        "--log-format",
        "json",
    ]
    if not os.environ.get("DATABASE_URL"):
        args += ["--data-dir", str(Path(data) / "db")]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    grpc_addr = None
    seen: list[str] = []
    # The server logs `tally serving` with its gRPC address once it listens.
    for line in process.stdout:
        seen.append(line)
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        fields = event.get("fields", {})
        if fields.get("message") == "tally serving":
            grpc_addr = fields["grpc"]
            break
    if grpc_addr is None:
        process.kill()
        pytest.fail("tally-server exited before serving:\n" + "".join(seen[-20:]))
    drain(process.stdout)
    try:
        yield grpc_addr
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
        shutil.rmtree(data, ignore_errors=True)


@pytest.fixture
def tally(address: str) -> Iterator[Client]:
    with Client(address) as client:
        yield client


@pytest.fixture
def ledger(tally: Client) -> str:
    """A fresh ledger for one test."""
    ledger_id = f"py-{uuid.uuid4().hex[:12]}"
    tally.create_ledger(ledger_id)
    return ledger_id


#: The API key the emulator is started with (the workers read GEMINI_API_KEY).
API_KEY = "python-suite-key"


@dataclass
class Emulator:
    base_url: str

    def stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.base_url}/_emulator/stats", timeout=10) as r:
            result: dict[str, Any] = json.load(r)
            return result


def start_emulator(
    tmp: Path, faults: dict[str, Any], running: str, binary: str | None = None
) -> Generator[Emulator, None, None]:
    """The Gemini emulator (`binary`, else the workspace's) on a free port."""
    plan = tmp / "faults.json"
    plan.write_text(json.dumps(faults))
    process = subprocess.Popen(
        [
            binary or workspace_binary("gemini-emulator", "GEMINI_EMULATOR_BIN"),
            "--addr",
            "127.0.0.1:0",
            "--pending",
            "50ms",
            "--running",
            running,
            "--faults",
            str(plan),
            "--log-json",
        ],
        env={**os.environ, "GEMINI_API_KEY": API_KEY, "RUST_LOG": "info"},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    base_url = None
    for line in process.stdout:  # `ready` with its address once it listens
        fields = json.loads(line).get("fields", {})
        if fields.get("message") == "ready":
            base_url = fields["base_url"]
            break
    if base_url is None:
        process.kill()
        pytest.fail(f"the emulator exited before it was ready ({process.wait()})")
    drain(process.stdout)
    try:
        yield Emulator(base_url)
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture(scope="session")
def prefect_api() -> Iterator[str]:
    """Prefect's local ephemeral API for the session (no Prefect server to
    run): its URL."""
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with pytest.MonkeyPatch.context() as env:
        env.setenv("PREFECT_SERVER_ANALYTICS_ENABLED", "false")  # no network in CI
        with prefect_test_harness(server_startup_timeout=120):
            yield str(PREFECT_API_URL.value())
