"""Starts the gemini-emulator binary for the SDK suite.

The SDK is configured only through its documented environment variables
(`GEMINI_API_KEY`, `GOOGLE_GEMINI_BASE_URL`): no argument or setting of the
SDK is changed from its default. The emulator binary comes from
`GEMINI_EMULATOR_BIN`, else `debug/gemini-emulator` of cargo's target
directory (`CARGO_TARGET_DIR`, else the workspace's `target/`).
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from google import genai

KEY = "sdk-suite-key"
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Emulator:
    base_url: str
    process: subprocess.Popen[str]

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
    # Cargo's target directory: CARGO_TARGET_DIR when set, else target/.
    target = Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target")
    path = os.environ.get("GEMINI_EMULATOR_BIN") or str(target / "debug" / "gemini-emulator")
    if not Path(path).is_file():
        pytest.exit(
            f"no emulator binary at {path}: run `cargo build -p gemini-emulator` "
            "or set GEMINI_EMULATOR_BIN",
            returncode=2,
        )
    return path


@pytest.fixture
def emulator(monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    process = subprocess.Popen(
        [
            _binary(),
            "--addr",
            "127.0.0.1:0",
            "--pending",
            "50ms",
            "--running",
            "100ms",
            "--log-json",
        ],
        env={**os.environ, "GEMINI_API_KEY": KEY, "RUST_LOG": "info"},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    base_url = None
    # The emulator logs `ready` with its address once it listens.
    for line in process.stdout:
        fields = json.loads(line).get("fields", {})
        if fields.get("message") == "ready":
            base_url = fields["base_url"]
            break
    if base_url is None:
        process.kill()
        pytest.fail(f"the emulator exited before it was ready ({process.wait()})")
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", base_url)
    for name in ("GOOGLE_GENAI_API_VERSION", "GOOGLE_GENAI_USE_VERTEXAI"):
        monkeypatch.delenv(name, raising=False)
    try:
        yield Emulator(base_url=base_url, process=process)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture
def client(emulator: Emulator) -> genai.Client:
    """The SDK with every default: API version, retries, upload chunking."""
    return genai.Client()
