"""deploy/dev.sh, the first run: server, emulator and worker started
together, a few rows through them (webhooks delivered), and nothing left
running after Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from conftest import ROOT, workspace_binary
from test_worker_metrics_doc import free_port
from test_workers import wait_gone


def test_dev_sh_runs_rows_through_webhooks_and_stops_everything(tmp_path: Path) -> None:
    bin_dir = str(Path(workspace_binary("tally-server", "TALLY_SERVER_BIN")).parent)
    for name in ("tally-worker", "gemini-emulator", "tallyctl"):
        assert (Path(bin_dir) / name).is_file(), (
            f"dev.sh takes the binaries from one directory: {name}"
        )
    ports = [free_port() for _ in range(4)]
    grpc, http, metrics, emulator = (f"127.0.0.1:{p}" for p in ports)
    home = tmp_path / "dev"
    env = {
        **os.environ,
        "TALLY_BIN_DIR": bin_dir,
        "TALLY_DEV_GRPC_ADDR": grpc,
        "TALLY_DEV_HTTP_ADDR": http,
        "TALLY_DEV_METRICS_ADDR": metrics,
        "TALLY_DEV_EMULATOR_ADDR": emulator,
        "TALLY_DEV_DIR": str(home),
    }
    os.chmod(tmp_path, 0o755)  # the private PostgreSQL runs unprivileged
    script = subprocess.Popen(
        [str(ROOT / "deploy" / "dev.sh"), "first-run"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
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
        assert 'API key "emulator-key"' in text, text
        rows = "".join(
            json.dumps(
                {
                    "key": f"r{i}",
                    "payload": {"contents": [{"role": "user", "parts": [{"text": f"hi {i}"}]}]},
                }
            )
            + "\n"
            for i in range(5)
        )
        tallyctl = str(Path(bin_dir) / "tallyctl")
        server = ["--server", f"http://{grpc}"]
        subprocess.run(
            [tallyctl, *server, "enroll", "first-run", "-"], input=rows, text=True, check=True
        )
        deadline = time.monotonic() + 120
        while True:
            done = subprocess.run(
                [tallyctl, *server, "--json", "status", "first-run"],
                capture_output=True,
                text=True,
                check=True,
            )
            summary = json.loads(done.stdout)
            if int(summary.get("succeeded", 0)) == 5:  # int64: a JSON string
                break
            assert time.monotonic() < deadline, summary
            time.sleep(0.2)
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
    assert wait_gone(emulator) == [], "the worker and the emulator stopped"
