"""Starts the openai-emulator binary for the SDK suite, with a webhook receiver.

The SDK is pointed at the emulator only through `OPENAI_BASE_URL` and
`OPENAI_API_KEY`: every other setting (retries, timeouts) is its default. The
binary comes from `OPENAI_EMULATOR_BIN`, else `debug/openai-emulator` of
cargo's target directory (`CARGO_TARGET_DIR`, else the workspace's `target/`).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import openai
import pytest

KEY = "sk-sdk-suite"
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Hooks:
    """Webhook deliveries received: (headers, body)."""

    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def snapshot(self) -> list[tuple[dict[str, str], bytes]]:
        with self.lock:
            return list(self.received)


@dataclass
class Emulator:
    base_url: str
    process: subprocess.Popen[str]
    hooks: Hooks

    def set_faults(self, plan: dict[str, Any]) -> None:
        request = urllib.request.Request(
            f"{self.base_url}/_emulator/faults",
            data=json.dumps(plan).encode(),
            headers={"content-type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200

    def stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.base_url}/_emulator/stats", timeout=10) as r:
            result: dict[str, Any] = json.load(r)
            return result


def _binary() -> str:
    target = Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target")
    path = os.environ.get("OPENAI_EMULATOR_BIN") or str(target / "debug" / "openai-emulator")
    if not Path(path).is_file():
        pytest.exit(f"no emulator binary at {path}: run `cargo build -p openai-emulator`", 2)
    return path


def _receiver(hooks: Hooks) -> HTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            with hooks.lock:
                hooks.received.append(({k.lower(): v for k, v in self.headers.items()}, body))
            self.send_response(200)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def emulator(monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    hooks = Hooks()
    server = _receiver(hooks)
    hook_url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    process = subprocess.Popen(
        [
            _binary(),
            "--listen",
            "127.0.0.1:0",
            "--api-key",
            KEY,
            "--validating",
            "20ms",
            "--in-progress",
            "50ms",
            "--finalizing",
            "20ms",
            "--cancelling",
            "20ms",
            "--webhook-url",
            hook_url,
            "--webhook-secret",
            SECRET,
            "--log-json",
        ],
        env={**os.environ, "RUST_LOG": "info"},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    base_url = None
    for line in process.stdout:
        fields = json.loads(line).get("fields", {})
        if fields.get("message") == "ready":
            base_url = fields["base_url"]
            break
    if base_url is None:
        process.kill()
        server.shutdown()
        pytest.fail(f"the emulator exited before it was ready ({process.wait()})")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", f"{base_url}/v1")
    for name in ("OPENAI_ORG_ID", "OPENAI_PROJECT_ID", "OPENAI_WEBHOOK_SECRET"):
        monkeypatch.delenv(name, raising=False)
    try:
        yield Emulator(base_url=base_url, process=process, hooks=hooks)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
        server.shutdown()


@pytest.fixture
def client(emulator: Emulator) -> openai.OpenAI:
    """The SDK with every default."""
    return openai.OpenAI()
