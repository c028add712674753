"""deploy/dev.sh, the first run, for each provider: server, emulator and
worker started together, the banner's row through them as the banner says
(webhooks delivered where the provider posts them), plain-text logs, and
nothing left running after Ctrl-C; and a port already taken named before
anything starts."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import urllib.request
from pathlib import Path

import pytest
from conftest import ROOT, own_database, workspace_binary
from test_worker_metrics_doc import free_port
from test_workers import wait_gone

DEV_SH = str(ROOT / "deploy" / "dev.sh")


def dev_env(tmp_path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """dev.sh's environment (the workspace's binaries, free ports, a
    directory under `tmp_path`), and its addresses by variable."""
    bin_dir = str(Path(workspace_binary("tally-server", "TALLY_SERVER_BIN")).parent)
    names = ("GRPC", "HTTP", "METRICS", "EMULATOR")
    addrs = {f"TALLY_DEV_{n}_ADDR": f"127.0.0.1:{free_port()}" for n in names}
    env = {
        **os.environ,
        "TALLY_BIN_DIR": bin_dir,
        **addrs,
        "TALLY_DEV_DIR": str(tmp_path / "dev"),
    }
    env.pop("TALLY_DEV_PROVIDER", None)
    # Each run's ledger of its own: every provider's run makes `first-run`.
    database = own_database()
    if database is not None:
        env["DATABASE_URL"] = database
    return env, addrs


@pytest.mark.parametrize("provider", ["gemini", "openai", "anthropic"])
def test_dev_sh_runs_the_banners_row_and_stops_everything(tmp_path: Path, provider: str) -> None:
    # Invariant (issue 55): `tally-dev --provider P` starts P's emulator,
    # and the row its banner shows, enrolled as the banner says, SUCCEEDS
    # (through signed webhooks for Gemini and OpenAI); its logs are plain
    # text; Ctrl-C stops every process it started.
    env, addrs = dev_env(tmp_path)
    bin_dir = env["TALLY_BIN_DIR"]
    emulator = f"{provider}-emulator"
    for name in ("tally-worker", emulator, "tallyctl"):
        assert (Path(bin_dir) / name).is_file(), (
            f"dev.sh takes the binaries from one directory: {name}"
        )
    home = Path(env["TALLY_DEV_DIR"])
    os.chmod(tmp_path, 0o755)  # the private PostgreSQL runs unprivileged
    script = subprocess.Popen(
        [DEV_SH, "--provider", provider, "first-run"], env=env, stdout=subprocess.PIPE, text=True
    )
    assert script.stdout is not None
    try:
        banner = script.stdout.readline()
        assert banner.startswith("tally is running"), banner
        text = ""
        while "tallyctl watch" not in text:  # the banner's last line
            line = script.stdout.readline()
            assert line, f"dev.sh stopped before its banner ended: {text}"
            text += line
        assert f"{emulator} " in text and f"ledger first-run ({provider})" in text, text
        # The banner's "Try:" commands as a user pastes them, with tallyctl
        # on PATH: export, enroll its row, watch until every row is final.
        commands = text.split("Try:\n", 1)[1]
        assert "| tallyctl enroll first-run -" in commands, commands
        tried = subprocess.run(
            ["sh", "-ec", commands],
            env={**env, "PATH": f"{bin_dir}:{env['PATH']}"},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert tried.returncode == 0, tried.stdout + tried.stderr
        tallyctl = str(Path(bin_dir) / "tallyctl")
        server = ["--server", f"http://{addrs['TALLY_DEV_GRPC_ADDR']}"]
        done = subprocess.run(
            [tallyctl, *server, "--json", "status", "first-run"],
            capture_output=True,
            text=True,
            check=True,
        )
        summary = json.loads(done.stdout)
        # watch ended with every row final: the one row SUCCEEDED (int64:
        # a JSON string).
        assert (int(summary.get("total", 0)), int(summary.get("succeeded", 0))) == (1, 1), summary
        if provider != "anthropic":  # Anthropic has no batch webhooks: the worker polls
            metrics = addrs["TALLY_DEV_METRICS_ADDR"]
            with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10) as r:
                scraped = r.read().decode()
            accepted = [
                line
                for line in scraped.splitlines()
                if line.startswith("tally_webhook_requests_total") and 'outcome="accepted"' in line
            ]
            assert accepted and float(accepted[0].split()[-1]) > 0, (
                "the emulator's webhooks reached tally"
            )
    finally:
        script.send_signal(signal.SIGINT)
        assert script.wait(timeout=120) == 130
    assert wait_gone(str(home)) == [], "the server and its PostgreSQL stopped"
    assert wait_gone(addrs["TALLY_DEV_EMULATOR_ADDR"]) == [], "the worker and emulator stopped"
    # Logs redirected to files carry no terminal colours (issue 55).
    for log in sorted((home / "logs").iterdir()):
        assert "\x1b[" not in log.read_text(errors="replace"), f"ANSI colours in {log.name}"


@pytest.mark.parametrize("taken", ["TALLY_DEV_GRPC_ADDR", "TALLY_DEV_EMULATOR_ADDR"])
def test_a_taken_port_is_named_with_the_variable_that_moves_it(tmp_path: Path, taken: str) -> None:
    # Invariant (issue 55): when another process holds one of dev.sh's
    # addresses, it says which address and which variable moves it, and
    # starts nothing (no banner, no data directory).
    env, addrs = dev_env(tmp_path)
    host, port = addrs[taken].rsplit(":", 1)
    with socket.socket() as holder:
        holder.bind((host, int(port)))
        holder.listen()
        done = subprocess.run(
            [DEV_SH, "--provider", "openai"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "tally is running" not in done.stdout, done.stdout
    assert f"{addrs[taken]} " in done.stderr and f"set {taken} " in done.stderr, done.stderr
    assert not Path(env["TALLY_DEV_DIR"]).exists(), "nothing started"
