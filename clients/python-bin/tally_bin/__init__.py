"""tally's binaries for Python users: the tally-bin wheel (no package index
serves it: `.ci/release` builds it into dist/, then
`pip install dist/tally_bin-*.whl`) puts `tally-server`, `tally-worker`,
`tallyctl`, `tally-demo`, the three provider emulators (`gemini-emulator`,
`openai-emulator`, `anthropic-emulator`) and `tally-dev` (server + emulator
+ worker for a first run) in the environment's scripts directory, which is
on PATH in an active virtual environment. No Rust toolchain is needed.

    from tally_bin import binary
    subprocess.run([binary("tallyctl"), "--version"])
"""

from __future__ import annotations

import os
import sysconfig
from pathlib import Path

#: The programs this package carries.
BINARIES = (
    "tally-server",
    "tally-worker",
    "tallyctl",
    "tally-demo",
    "gemini-emulator",
    "openai-emulator",
    "anthropic-emulator",
    "tally-dev",
)


def binary(name: str) -> str:
    """The path of one of `BINARIES` as this package installed it."""
    if name not in BINARIES:
        raise ValueError(f"tally-bin carries {', '.join(BINARIES)}, not {name!r}")
    candidates = [Path(sysconfig.get_path("scripts")) / name]
    user = sysconfig.get_path("scripts", f"{os.name}_user")
    if user:
        candidates.append(Path(user) / name)
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    raise FileNotFoundError(
        f"{name} is not installed where tally-bin puts it ({candidates[0]}): reinstall tally-bin"
    )
