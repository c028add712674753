"""The tally-bin wheel (clients/python-bin/build_wheel.py), built from the
workspace's debug binaries, installed into a clean virtual environment with
no Rust toolchain on PATH: the programs run, tallyctl drives the
tally-server it installed, the README's client snippets and its Prefect
page flow pass against that server with the client installed in the same
environment (the flow running the wheel's tallyctl and tally-worker), and
the demo runs."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, drain, start_emulator, workspace_binary
from test_prefect_flow import deployment_env
from test_readme import check_client_snippets, check_page_flow, make_pages

BUILDER = ROOT / "clients" / "python-bin" / "build_wheel.py"
#: Every program a README runs, each installed by the wheel (issue 55).
WHEEL_PROGRAMS = (
    "tally-server",
    "tally-worker",
    "tallyctl",
    "tally-demo",
    "gemini-emulator",
    "openai-emulator",
    "anthropic-emulator",
    "tally-dev",
)


def run(args: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=False, **kw)  # type: ignore[call-overload, no-any-return]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    bin_dir = Path(workspace_binary("tally-server", "TALLY_SERVER_BIN")).parent
    out = tmp_path_factory.mktemp("dist")
    built = run(
        [sys.executable, str(BUILDER), "--bin-dir", str(bin_dir), "--out", str(out), "--store"]
    )
    assert built.returncode == 0, built.stderr
    return Path(built.stdout.strip())


def test_the_wheel_is_a_platform_wheel_with_the_programs_as_scripts(wheel: Path) -> None:
    name = wheel.name
    assert name.startswith("tally_bin-0.1.0-py3-none-manylinux_2_"), name
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        scripts = {n.rsplit("/", 1)[1] for n in names if "/scripts/" in n}
        assert scripts == set(WHEEL_PROGRAMS)
        modes = {n: z.getinfo(n).external_attr >> 16 for n in names if "/scripts/" in n}
        assert all(m & 0o111 for m in modes.values()), modes
        record = z.read("tally_bin-0.1.0.dist-info/RECORD").decode().splitlines()
        assert {line.split(",")[0] for line in record} == names
        # The summary names every kind of program the wheel carries.
        summary = next(
            line
            for line in z.read("tally_bin-0.1.0.dist-info/METADATA").decode().splitlines()
            if line.startswith("Summary: ")
        )
        for kind in ("server", "worker", "tallyctl", "demo", "emulators", "dev stack"):
            assert kind in summary, summary
        wheel_file = z.read("tally_bin-0.1.0.dist-info/WHEEL").decode()
        assert "Root-Is-Purelib: false" in wheel_file


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clean virtual environment with the wheel installed (no index)."""
    venv = tmp_path_factory.mktemp("wheel-venv") / "venv"
    assert run([sys.executable, "-m", "venv", str(venv)]).returncode == 0
    pip = run([str(venv / "bin" / "pip"), "install", "--no-index", "--quiet", str(wheel)])
    assert pip.returncode == 0, pip.stderr
    return venv


@pytest.fixture(scope="module")
def client_venv(venv: Path) -> Path:
    """`venv` with the Python client added as the README installs it (its
    dependencies from the package index): the [pandas] extra for the
    DataFrame snippet, [prefect] for the flows, Prefect at the suite's
    version (that of the test's Prefect API)."""
    prefect = importlib.metadata.version("prefect")
    client = run(
        [
            str(venv / "bin" / "pip"),
            "install",
            "--quiet",
            f"{ROOT / 'clients' / 'python'}[pandas,prefect]",
            f"prefect=={prefect}",
        ]
    )
    assert client.returncode == 0, client.stderr
    return venv


def no_rust_env(venv: Path, home: Path) -> dict[str, str]:
    """An environment whose PATH has the venv's scripts and the system's
    programs, and no Rust toolchain."""
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(home)}
    assert run(["sh", "-c", "command -v cargo rustc"], env=env).stdout == "", "no Rust on PATH"
    return env


@pytest.fixture(scope="module")
def wheel_server(venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The wheel's tally-server on a private PostgreSQL: its gRPC address."""
    home = tmp_path_factory.mktemp("wheel-server")
    os.chmod(home, 0o755)  # the private PostgreSQL runs unprivileged
    env = no_rust_env(venv, home)
    server = subprocess.Popen(
        [
            "tally-server",
            "--auth",
            "disabled",
            "--data-dir",
            str(home / "db"),
            "--grpc-addr",
            "127.0.0.1:0",
            "--metrics-addr",
            "127.0.0.1:0",
            "--log-format",
            "json",
        ],
        # PostgreSQL's own programs, wherever the machine has them.
        env={**env, "PATH": f"{env['PATH']}:{os.environ.get('PATH', '')}"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert server.stdout is not None
    try:
        grpc = None
        for line in server.stdout:
            fields = json.loads(line).get("fields", {}) if line.startswith("{") else {}
            if fields.get("message") == "tally serving":
                grpc = fields["grpc"]
                break
        assert grpc is not None, "the wheel's tally-server never served"
        drain(server.stdout)
        yield grpc
    finally:
        server.terminate()
        server.wait(timeout=60)


def test_installed_without_rust_the_programs_run_and_work_together(
    venv: Path, client_venv: Path, wheel_server: str, tmp_path: Path
) -> None:
    # Invariant (issue 34): a Python user with no Rust toolchain gets the
    # programs from pip, and they work.
    env = no_rust_env(venv, tmp_path)
    programs = ("tally-server", "tally-worker", "tallyctl", "tally-demo")
    python = str(venv / "bin" / "python")
    for program in programs + ("gemini-emulator", "openai-emulator", "anthropic-emulator"):
        version = run([program, "--version"], env=env)
        assert version.returncode == 0, version.stderr
        assert version.stdout.startswith(f"{program} 0.1.0 (commit "), version.stdout
        # And through `python -m tally_bin` (issue 55: tally-demo and the
        # OpenAI and Anthropic emulators were missing from its list).
        found = run([python, "-m", "tally_bin", program, "--version"], env=env)
        assert found.stdout.startswith(f"{program} 0.1.0 (commit "), found.stderr
    # `tally_bin.BINARIES` is every program the wheel installs, and
    # `binary()` finds each one (tally-dev included).
    listed = run(
        [python, "-c", "import tally_bin as t; print(*(t.binary(n) for n in t.BINARIES))"],
        env=env,
    )
    assert listed.returncode == 0, listed.stderr
    assert sorted(Path(p).name for p in listed.stdout.split()) == sorted(WHEEL_PROGRAMS)

    # tallyctl from the wheel makes a ledger on the wheel's tally-server.
    server = ["tallyctl", "--server", f"http://{wheel_server}"]
    made = run([*server, "--json", "ledgers", "create", "from-pip"], env=env)
    assert made.returncode == 0, made.stderr
    listed = run([*server, "ledgers", "list"], env=env)
    assert "from-pip" in listed.stdout
    # The README's snippets against this server, with the client installed
    # in the same environment.
    snippets = tmp_path / "snippets"
    snippets.mkdir()
    check_client_snippets(snippets, wheel_server, python=str(client_venv / "bin" / "python"))


def test_the_readme_page_flow_runs_from_the_wheel_on_png_and_jpeg_pages(
    client_venv: Path, wheel_server: str, prefect_api: str, tmp_path: Path
) -> None:
    # Invariant (issue 55): the README's page-flow snippet, pasted into a
    # fresh environment holding only the wheel and the client, with the
    # wheel's tallyctl and tally-worker found on PATH (TALLYCTL_BIN and
    # TALLY_WORKER_BIN unset), sends every page: each PNG and JPEG page's
    # bytes reach the emulator exactly once, each row is attempted once,
    # none is BLOCKED.
    bin_dir = client_venv / "bin"
    env = no_rust_env(client_venv, tmp_path)
    which = "for p in tallyctl tally-worker; do command -v $p; done"
    found = run(["sh", "-c", which], env=env).stdout.split()
    assert found == [str(bin_dir / "tallyctl"), str(bin_dir / "tally-worker")], found
    python = str(bin_dir / "python")
    make_pages(tmp_path, python=python)
    emulator_run = start_emulator(tmp_path, {}, "200ms", binary=str(bin_dir / "gemini-emulator"))
    emulator = next(emulator_run)
    try:
        deployment = deployment_env(tmp_path, wheel_server, emulator.base_url, batch=5)
        del deployment["TALLYCTL_BIN"], deployment["TALLY_WORKER_BIN"]
        snippet_env = {
            **env,
            **deployment,
            "PREFECT_API_URL": prefect_api,
            "PREFECT_HOME": str(tmp_path / "prefect-home"),
        }
        # Only this environment: none of the suite's (TALLYCTL_BIN, cargo's PATH).
        check_page_flow(tmp_path, wheel_server, snippet_env, emulator, python, inherit=False)
    finally:
        emulator_run.close()


def test_the_demo_runs_from_the_wheel_alone_at_anthropic(venv: Path, tmp_path: Path) -> None:
    # Invariant (issue 55): with the wheel and no Rust toolchain, the demo
    # runs on its own private PostgreSQL at the Anthropic emulator and ends
    # where the README says (180 SUCCEEDED, 19 PERMANENT, 3 BLOCKED).
    bin_dir = str(venv / "bin")
    env = no_rust_env(venv, tmp_path)
    os.chmod(tmp_path, 0o755)  # the private PostgreSQL runs unprivileged
    demo = run(
        ["tally-demo", "--provider", "anthropic"],
        cwd=tmp_path,
        # PostgreSQL's own programs, wherever the machine has them.
        env={**env, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}"},
        timeout=600,
    )
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]
    assert "succeeded=180 retryable=0 permanent=19 blocked=3" in demo.stdout, demo.stdout[-2000:]
    assert "tally-server --auth disabled" in demo.stdout, "the hint names the installed program"
