"""deploy/README.md lists exactly the families tally-worker's /metrics
serves (the server's table is checked by the server's own tests)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
import urllib.error
import urllib.request

from conftest import API_KEY, ROOT, workspace_binary

README = ROOT / "deploy" / "README.md"


def worker_table(readme: str) -> dict[str, str]:
    """Family name to type, from the worker's table (the one after "The
    worker"), plus the build info and process metrics it says it shares."""
    section = readme.split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]
    after = section[section.index("The worker (") :]
    lines = [line for line in after.splitlines() if line.startswith("|")][2:]
    out: dict[str, str] = {}
    for line in lines:
        cells = [c.strip() for c in line.strip("|").split("|")]
        for name in re.findall(r"`([a-z0-9_]+)`", cells[0]):
            kind = cells[1]
            out[name.removesuffix("_total") if kind == "counter" else name] = kind
    assert "and `tally_build_info` and the `process_*` metrics" in after
    return out


def scrape_types(url: str) -> dict[str, str]:
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                text = r.read().decode()
            break
        except (urllib.error.URLError, ConnectionError):
            assert time.monotonic() < deadline, f"{url} never answered"
            time.sleep(0.1)
    types = re.finditer(r"^# TYPE (\S+) (\S+)$", text, flags=re.MULTILINE)
    return {m.group(1): m.group(2) for m in types}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_deploy_readme_lists_exactly_the_worker_families(address: str, ledger: str) -> None:
    documented = worker_table(README.read_text())
    port = free_port()
    worker = subprocess.Popen(
        [
            workspace_binary("tally-worker", "TALLY_WORKER_BIN"),
            "--server",
            f"http://{address}",
            "--ledger",
            ledger,
            "--metrics-addr",
            f"127.0.0.1:{port}",
        ],
        env={**os.environ, "GEMINI_API_KEY": API_KEY},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        served = scrape_types(f"http://127.0.0.1:{port}/metrics")
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    ours = {n: k for n, k in served.items() if n.startswith("tally_worker_")}
    assert ours == documented, f"served {ours}, documented {documented}"
    assert served.get("tally_build") == "info"
    assert {n for n in served if n.startswith("process_")} >= {
        "process_cpu_seconds",
        "process_resident_memory_bytes",
        "process_open_fds",
    }
    assert set(served) - set(ours) - {"tally_build"} == {
        n for n in served if n.startswith("process_")
    }, "nothing undocumented besides build info and process metrics"
