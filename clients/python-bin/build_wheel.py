"""Builds the `tally-bin` wheel: tally's prebuilt binaries in a Python
wheel, the way Python tools that ship a native program do (the programs go
in the wheel's `.data/scripts/`, which pip installs onto PATH). Standard
library only; the binaries are built beforehand (`.ci/release` builds them
with `cargo build --release` for each target).

    python build_wheel.py --bin-dir target/release --out dist [--store]

The platform tag is read from the binaries: the Linux architecture from the
ELF header, and the oldest glibc they run on from the highest `GLIBC_2.N`
symbol version they need (`manylinux_2_N_ARCH`); a binary needing no glibc
(static) is tagged `manylinux_2_17` and `musllinux_1_2`. The version is the
workspace's (Cargo.toml); the commit the binaries were built from is in the
wheel's metadata when TALLY_GIT_SHA is set.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import re
import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
NAME = "tally-bin"
DIST = "tally_bin"
sys.path.insert(0, str(HERE))
from tally_bin import BINARIES  # noqa: E402  (the package this script builds)

#: The compiled programs: every one the package says it carries but the
#: dev stack, which is a script.
PROGRAMS = tuple(b for b in BINARIES if b != "tally-dev")
#: deploy/dev.sh, shipped as `tally-dev`.
DEV_SCRIPT = ROOT / "deploy" / "dev.sh"
ARCHES = {0x3E: "x86_64", 0xB7: "aarch64"}
GLIBC = re.compile(rb"GLIBC_2\.([0-9]+)")


class WheelError(Exception):
    pass


def workspace_version() -> str:
    """`[workspace.package] version` of the root Cargo.toml."""
    cargo = (ROOT / "Cargo.toml").read_text()
    section = cargo.split("[workspace.package]", 1)[1].split("\n[", 1)[0]
    found = re.search(r'^version\s*=\s*"([^"]+)"', section, re.MULTILINE)
    if found is None:
        raise WheelError("no [workspace.package] version in Cargo.toml")
    return found.group(1)


def elf_facts(path: Path) -> tuple[str, int | None]:
    """(architecture, highest GLIBC_2.N minor needed or None) of an ELF
    binary; anything else is refused."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF":
        raise WheelError(f"{path} is not an ELF binary (this builder makes Linux wheels)")
    if data[4] != 2 or data[5] != 1:
        raise WheelError(f"{path} is not a 64-bit little-endian ELF binary")
    machine = int.from_bytes(data[18:20], "little")
    if machine not in ARCHES:
        raise WheelError(f"{path}: ELF machine {machine:#x} is not x86_64 or aarch64")
    minors = [int(m) for m in GLIBC.findall(data)]
    return ARCHES[machine], max(minors) if minors else None


def platform_tag(binaries: list[Path]) -> str:
    arches = set()
    glibc: int | None = None
    for b in binaries:
        arch, minor = elf_facts(b)
        arches.add(arch)
        if minor is not None:
            glibc = max(glibc or 0, minor)
    if len(arches) != 1:
        raise WheelError(f"the binaries are for several architectures: {sorted(arches)}")
    arch = arches.pop()
    if glibc is None:
        return f"manylinux_2_17_{arch}.musllinux_1_2_{arch}"
    return f"manylinux_2_{max(glibc, 17)}_{arch}"


def metadata(version: str, commit: str | None) -> str:
    readme = (HERE / "README.md").read_text()
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {NAME}",
        f"Version: {version}",
        "Summary: tally's programs (server, worker, tallyctl, demo, emulators, dev stack) "
        "for Python users, no Rust toolchain needed",
        "License: Apache-2.0",
        "Requires-Python: >=3.10",
        "Classifier: Programming Language :: Rust",
        "Classifier: Operating System :: POSIX :: Linux",
    ]
    if commit:
        lines.append(f"Project-URL: Commit, {commit}")
    lines.append("Description-Content-Type: text/markdown")
    return "\n".join(lines) + "\n\n" + readme


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build(bin_dir: Path, out: Path, *, store: bool = False) -> Path:
    binaries = [bin_dir / p for p in PROGRAMS]
    missing = [str(b) for b in binaries if not b.is_file()]
    if missing:
        raise WheelError(f"missing binaries (build them first): {', '.join(missing)}")
    version = workspace_version()
    commit = os.environ.get("TALLY_GIT_SHA") or None
    tag = f"py3-none-{platform_tag(binaries)}"
    out.mkdir(parents=True, exist_ok=True)
    wheel = out / f"{DIST}-{version}-{tag}.whl"
    dist_info = f"{DIST}-{version}.dist-info"
    data_dir = f"{DIST}-{version}.data"
    files: list[tuple[str, bytes, int]] = []  # name, bytes, mode
    for module in sorted((HERE / "tally_bin").iterdir()):
        if module.is_file() and module.suffix in (".py", ".typed"):
            files.append((f"tally_bin/{module.name}", module.read_bytes(), 0o644))
    for b in binaries:
        files.append((f"{data_dir}/scripts/{b.name}", b.read_bytes(), 0o755))
    files.append((f"{data_dir}/scripts/tally-dev", DEV_SCRIPT.read_bytes(), 0o755))
    files.append((f"{dist_info}/METADATA", metadata(version, commit).encode(), 0o644))
    wheel_file = (
        "Wheel-Version: 1.0\n"
        "Generator: tally build_wheel.py\n"
        "Root-Is-Purelib: false\n"
        + "".join(f"Tag: py3-none-{t}\n" for t in tag.removeprefix("py3-none-").split("."))
    )
    files.append((f"{dist_info}/WHEEL", wheel_file.encode(), 0o644))
    record = [record_line(name, data) for name, data, _ in files]
    record.append(f"{dist_info}/RECORD,,")
    files.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode(), 0o644))
    compression = zipfile.ZIP_STORED if store else zipfile.ZIP_DEFLATED
    tmp = wheel.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", compression=compression) as z:
        for name, data, mode in files:
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.compress_type = compression
            info.external_attr = (0o100000 | mode) << 16
            z.writestr(info, data)
    tmp.replace(wheel)
    return wheel


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin-dir", type=Path, required=True, help="where the built binaries are")
    parser.add_argument("--out", type=Path, required=True, help="directory the wheel is written to")
    parser.add_argument("--store", action="store_true", help="no compression (tests: faster)")
    args = parser.parse_args()
    try:
        wheel = build(args.bin_dir, args.out, store=args.store)
    except WheelError as e:
        print(f"build_wheel: {e}", file=sys.stderr)
        return 1
    print(wheel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
