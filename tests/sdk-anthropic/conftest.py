"""Starts the anthropic-emulator binary for the SDK suite.

The SDK is pointed at the emulator only through `base_url` and `api_key`:
every other setting (retries, timeouts, the `anthropic-version` header) is
its default. The binary comes from `ANTHROPIC_EMULATOR_BIN`, else
`debug/anthropic-emulator` of cargo's target directory (`CARGO_TARGET_DIR`,
else the workspace's `target/`).
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import pytest

KEY = "sk-ant-sdk-suite"
ROOT = Path(__file__).resolve().parents[2]
# Environment the SDK reads besides its arguments: none of it may reach the suite.
SDK_ENV = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_CUSTOM_HEADERS",
    "ANTHROPIC_PROFILE",
    "ANTHROPIC_CONFIG_DIR",
    "ANTHROPIC_IDENTITY_TOKEN",
    "ANTHROPIC_IDENTITY_TOKEN_FILE",
    "ANTHROPIC_FEDERATION_RULE_ID",
    "ANTHROPIC_ORGANIZATION_ID",
)


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
    target = Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target")
    path = os.environ.get("ANTHROPIC_EMULATOR_BIN") or str(target / "debug" / "anthropic-emulator")
    if not Path(path).is_file():
        pytest.exit(f"no emulator binary at {path}: run `cargo build -p anthropic-emulator`", 2)
    return path


@contextmanager
def running(*extra: str) -> Iterator[Emulator]:
    """The emulator binary with the suite's key and short dwell times, and `extra` flags."""
    process = subprocess.Popen(
        [
            _binary(),
            "--listen",
            "127.0.0.1:0",
            "--api-key",
            KEY,
            "--in-progress",
            "50ms",
            "--canceling",
            "20ms",
            "--log-json",
            *extra,
        ],
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")},
            "RUST_LOG": "info",
        },
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
        pytest.fail(f"the emulator exited before it was ready ({process.wait()})")
    try:
        yield Emulator(base_url=base_url, process=process)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """None of the environment the SDK reads reaches the suite."""
    for name in SDK_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def emulator(clean_env: None) -> Iterator[Emulator]:
    with running() as emulator:
        yield emulator


@pytest.fixture
def client(emulator: Emulator) -> anthropic.Anthropic:
    """The SDK with every default but where it sends, and with which key."""
    return anthropic.Anthropic(api_key=KEY, base_url=emulator.base_url)
