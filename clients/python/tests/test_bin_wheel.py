"""The tally-bin wheel (clients/python-bin/build_wheel.py), built from the
workspace's debug binaries, installed into a clean virtual environment with
no Rust toolchain on PATH: the programs run, tallyctl drives the
tally-server it installed, and the README's client snippets pass against
that server with the client installed in the same environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT, workspace_binary
from test_readme import check_client_snippets

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


def test_installed_without_rust_the_programs_run_and_work_together(
    wheel: Path, tmp_path: Path
) -> None:
    # Invariant (issue 34): a Python user with no Rust toolchain gets the
    # three programs from pip, and they work.
    venv = tmp_path / "venv"
    assert run([sys.executable, "-m", "venv", str(venv)]).returncode == 0
    pip = run([str(venv / "bin" / "pip"), "install", "--no-index", "--quiet", str(wheel)])
    assert pip.returncode == 0, pip.stderr
    path = f"{venv / 'bin'}:/usr/bin:/bin"
    env = {"PATH": path, "HOME": str(tmp_path)}
    assert run(["sh", "-c", "command -v cargo rustc"], env=env).stdout == "", "no Rust on PATH"
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

    # tally-server from the wheel, on a private PostgreSQL; tallyctl from
    # the wheel makes a ledger on it.
    data = tmp_path / "db"
    os.chmod(tmp_path, 0o755)  # the private PostgreSQL runs unprivileged
    server = subprocess.Popen(
        [
            "tally-server",
            "--auth",
            "disabled",
            "--data-dir",
            str(data),
            "--grpc-addr",
            "127.0.0.1:0",
            "--metrics-addr",
            "127.0.0.1:0",
            "--log-format",
            "json",
        ],
        env={**env, "PATH": f"{path}:{os.environ.get('PATH', '')}"},  # PostgreSQL's own programs
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
        made = run(
            ["tallyctl", "--server", f"http://{grpc}", "--json", "ledgers", "create", "from-pip"],
            env=env,
        )
        assert made.returncode == 0, made.stderr
        listed = run(["tallyctl", "--server", f"http://{grpc}", "ledgers", "list"], env=env)
        assert "from-pip" in listed.stdout
        # The Python client in the same environment (its dependencies from
        # the package index), and the README's snippets against this server.
        install = [str(venv / "bin" / "pip"), "install", "--quiet"]
        # As the README installs it: the [pandas] extra for its DataFrame snippet.
        client = run([*install, f"{ROOT / 'clients' / 'python'}[pandas]"])
        assert client.returncode == 0, client.stderr
        snippets = tmp_path / "snippets"
        snippets.mkdir()
        check_client_snippets(snippets, grpc, python=str(venv / "bin" / "python"))
    finally:
        server.terminate()
        server.wait(timeout=60)


def test_the_demo_runs_from_the_wheel_alone_at_anthropic(wheel: Path, tmp_path: Path) -> None:
    # Invariant (issue 55): with the wheel and no Rust toolchain, the demo
    # runs on its own private PostgreSQL at the Anthropic emulator and ends
    # where the README says (180 SUCCEEDED, 19 PERMANENT, 3 BLOCKED).
    venv = tmp_path / "venv"
    assert run([sys.executable, "-m", "venv", str(venv)]).returncode == 0
    pip = run([str(venv / "bin" / "pip"), "install", "--no-index", "--quiet", str(wheel)])
    assert pip.returncode == 0, pip.stderr
    bin_dir = str(venv / "bin")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)}
    assert run(["sh", "-c", "command -v cargo rustc"], env=env).stdout == "", "no Rust on PATH"
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
