"""The README's snippets, run as written: each ```python block of
README.md, in order, in a fresh interpreter, in a directory holding the
files they read, against the test server (`TALLY_SERVER`)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

from conftest import Emulator, start_emulator
from test_prefect_flow import deployment_env

from tally_client import Client, RowStatus

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def snippets(text: str) -> list[str]:
    return [m.group(1) for m in BLOCK.finditer(text)]


def client_snippets() -> list[str]:
    """The client's snippets (those before the Prefect section)."""
    text = README.read_text()
    return snippets(text[: text.index("## Prefect")])


def prefect_snippets() -> list[str]:
    text = README.read_text()
    return snippets(text[text.index("## Prefect") :])


def run(
    code: str,
    cwd: Path,
    address: str,
    env: dict[str, str] | None = None,
    python: str = sys.executable,
    inherit: bool = True,
) -> str:
    """Runs a snippet with `python` in `cwd`, with this process's
    environment (only `env` when `inherit` is false) and `TALLY_SERVER`."""
    done = subprocess.run(
        [python, "-c", code],
        cwd=cwd,
        env={**(os.environ if inherit else {}), "TALLY_SERVER": address, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"snippet failed:\n{code}\n{done.stderr}"
    return done.stdout


#: The README's input files (clients/python/examples), as a user gets them.
EXAMPLES = README.parent / "examples"


def client_files(directory: Path) -> None:
    """The files the client snippets read: the README's examples."""
    for name in ("reviews.txt", "batch_input.jsonl"):
        shutil.copy(EXAMPLES / name, directory / name)


def check_client_snippets(tmp_path: Path, address: str, python: str = sys.executable) -> None:
    """Runs every client snippet in order (the enrolment twice) in a fresh
    directory, with `python`, and checks what they did."""
    client_files(tmp_path)
    blocks = client_snippets()
    assert len(blocks) >= 6, "the README shows enrol, worker, read, errors, asyncio, files"
    outputs = [run(code, tmp_path, address, python=python) for code in blocks]
    assert "30 enrolled, 0 already there" in outputs[0], outputs[0]
    assert "30 summaries" in "".join(outputs), "the consumer wrote each result once"
    again = run(blocks[0], tmp_path, address, python=python)
    assert "0 enrolled, 30 already there" in again, again
    with Client(address) as tally:
        summary = tally.summarize("reviews")
        assert (summary.total, summary.succeeded) == (30, 30), summary.summary_line
        row = next(tally.rows("reviews", statuses=[RowStatus.SUCCEEDED], full=True))
        assert row.result == {"summary": row.payload["text"][:40]}
    exported = (tmp_path / "reviews.jsonl").read_text().splitlines()
    assert len(exported) == 30 and (tmp_path / "reviews.cursor").read_text() == ""


#: The pages make_pages.py allow-lists, by row key: page 2 (PNG) depends
#: on page 1 (JPEG); page 4 (PNG) stands alone.
PAGE_ROWS = {
    "Ohio:Akron:2021:1": "1.jpg",
    "Ohio:Akron:2021:2": "2.png",
    "Ohio:Akron:2021:4": "4.png",
}


def make_pages(directory: Path, python: str = sys.executable) -> Path:
    """The README's page dataset in `directory`: PNG and JPEG pages of their
    own bytes, written by examples/make_pages.py run where it is copied (as
    a user runs it). Returns the book's image directory."""
    shutil.copy(EXAMPLES / "make_pages.py", directory / "make_pages.py")
    made = subprocess.run([python, "make_pages.py"], cwd=directory, capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    return directory / "images_root" / "Ohio" / "Akron" / "2021"


def check_page_flow(
    directory: Path,
    address: str,
    env: dict[str, str],
    emulator: Emulator,
    python: str = sys.executable,
    inherit: bool = True,
) -> None:
    """Runs the README's page-flow snippet as written, with `python`, in
    `directory` (where `make_pages` wrote the pages), and checks it sent
    every page: each page's own bytes (SHA-256) reached the emulator
    exactly once and no other page did, each row was attempted once, and
    none is BLOCKED."""
    pages = directory / "images_root" / "Ohio" / "Akron" / "2021"
    blocks = prefect_snippets()
    assert len(blocks) == 3, "the tasks flow, the morning delivery and the page flow"
    out = run(blocks[2], directory, address, env, python=python, inherit=inherit)
    assert "'succeeded': 3" in out and "'total': 3" in out, out
    assert (directory / "plans" / "curricular-2024.json").is_file()
    # Rows that carried media (other flows' rows on the same emulator are
    # listed with none).
    media = {key: hashes for key, hashes in emulator.stats()["media"].items() if hashes}
    expected = {
        key: [hashlib.sha256((pages / image).read_bytes()).hexdigest()]
        for key, image in PAGE_ROWS.items()
    }
    assert media == expected, media
    with Client(address) as tally:
        summary = tally.summarize("curricular-ocr")
        assert (summary.total, summary.succeeded) == (3, 3), summary.summary_line
        assert (summary.attempts_total, summary.blocked) == (3, 0), summary.summary_line


def test_every_client_snippet_runs_as_written_and_the_enrolment_twice(
    address: str, tmp_path: Path
) -> None:
    # Invariant (issue 34): a user pasting the README gets working code, and
    # pasting the enrolment again enrolls nothing.
    check_client_snippets(tmp_path, address)


def test_every_prefect_snippet_runs_as_written(
    prefect_api: str, address: str, tmp_path: Path
) -> None:
    # Invariant (issue 34): the Prefect snippets run as pasted, in a fresh
    # directory (the plan's directory does not exist yet), with only the
    # deployment's environment set.
    (tmp_path / "reviews.txt").write_text("".join(f"review {n}\n" for n in range(12)))
    make_pages(tmp_path)  # PNG and JPEG pages (issue 55)
    emulator_run = start_emulator(tmp_path, {}, "200ms")
    emulator = next(emulator_run)
    base_url = emulator.base_url
    try:
        env = {
            **deployment_env(tmp_path, address, base_url, batch=5),
            "PREFECT_API_URL": prefect_api,
            "PREFECT_HOME": str(tmp_path / "prefect-home"),
        }
        blocks = prefect_snippets()
        assert len(blocks) == 3, "the tasks flow, the morning delivery and the page flow"
        tasks_out = run(blocks[0], tmp_path, address, env)
        assert "'rows': 12" in tasks_out, tasks_out
        exported = (tmp_path / "out" / "reviews-nightly.jsonl").read_text().splitlines()
        assert sorted(json.loads(line)["status"] for line in exported) == ["SUCCEEDED"] * 12
        # The morning after: each answer into the database once, and a second
        # run delivers nothing new.
        morning = run(blocks[1], tmp_path, address, env)
        assert "'delivered': 12" in morning, morning
        assert "'delivered': 0" in run(blocks[1], tmp_path, address, env)
        with sqlite3.connect(tmp_path / "nightly.db") as db:
            assert db.execute("SELECT count(*) FROM answers").fetchone() == (12,)
        # The snippet as written sends every page (issue 55).
        check_page_flow(tmp_path, address, env, emulator)
    finally:
        emulator_run.close()
