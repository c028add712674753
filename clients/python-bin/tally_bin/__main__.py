"""`python -m tally_bin NAME ARGS…` runs one of tally's binaries."""

from __future__ import annotations

import os
import sys

from tally_bin import BINARIES, binary


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in BINARIES:
        print(f"usage: python -m tally_bin {{{','.join(BINARIES)}}} [ARGS…]", file=sys.stderr)
        sys.exit(2)
    path = binary(sys.argv[1])
    os.execv(path, [path, *sys.argv[2:]])


if __name__ == "__main__":
    main()
