#!/usr/bin/env python3
"""Every crate's map is current: each module a crate root declares
(`mod x;` in `src/lib.rs`, or in `src/main.rs` of a crate without a
library) is named in that file's `//!` header, as `x`, [`x`] or `x/`.
Prints the modules left out; the exit status is 1 when there is any.

    python3 tests/maps.py
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MOD = re.compile(r"^\s*(?:pub(?:\([\w:]+\))?\s+)?mod\s+(\w+)\s*;", re.M)


def roots() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "*Cargo.toml"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    found = []
    for line in out.splitlines():
        src = (ROOT / line).parent / "src"
        lib, main = src / "lib.rs", src / "main.rs"
        if lib.exists():
            found.append(lib)
        elif main.exists():
            found.append(main)
    return found


def missing(root: Path) -> list[str]:
    text = root.read_text(encoding="utf-8")
    header = "\n".join(
        line[3:] for line in text.splitlines() if line.startswith("//!")
    )
    named = set(re.findall(r"\w+", header))
    return [m for m in MOD.findall(text) if m not in named]


def main() -> int:
    bad = 0
    for root in roots():
        left = missing(root)
        if left:
            bad += 1
            print(f"{root.relative_to(ROOT)}: its //! map does not name {', '.join(left)}")
    if bad:
        return 1
    print(f"every crate's map names its modules ({len(roots())} crate roots)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
