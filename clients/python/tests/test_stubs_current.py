"""The checked-in stubs are what `generate.py` makes from today's protos."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def test_the_checked_in_stubs_are_current() -> None:
    result = subprocess.run(
        [sys.executable, str(HERE / "generate.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
