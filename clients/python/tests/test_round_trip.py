"""An OpenAI batch file of 10,000 lines through tally and back out in the
OpenAI batch output format: enrolled from Python, run by the workspace's
tally-worker against the gemini-emulator, exported from Python."""

from __future__ import annotations

import io
import json
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import API_KEY, Emulator, start_emulator, workspace_binary

from tally_client import Client
from tally_client.export import CSV_COLUMNS

LINES = 10_000


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[Emulator]:
    yield from start_emulator(tmp_path, {}, "200ms")


def test_ten_thousand_openai_lines_come_back_once_each_in_the_openai_output_format(
    tally: Client, ledger: str, address: str, emulator: Emulator, tmp_path: Path
) -> None:
    # Invariant: every custom_id of the input file is in the output file
    # exactly once, answered (status 200 with a body).
    batch = tmp_path / "batch_input.jsonl"
    with batch.open("w") as f:
        for i in range(LINES):
            body = {
                "model": "gpt-4o-mini",
                "messages": [{"role": "user", "content": f"Summarise review {i}"}],
                "max_tokens": 64,
            }
            line = {"custom_id": f"review-{i}", "method": "POST", "url": "/v1/chat/completions"}
            f.write(json.dumps({**line, "body": body}) + "\n")
    assert tally.enroll_file(ledger, batch, format="openai").enrolled == LINES

    worker = subprocess.run(
        [
            workspace_binary("tally-worker", "TALLY_WORKER_BIN"),
            "--server",
            f"http://{address}",
            "--ledger",
            ledger,
            "--gemini-base-url",
            emulator.base_url,
            "--poll-interval",
            "200ms",
            "--exit-when-idle",
            "--log-format",
            "json",
        ],
        env={"GEMINI_API_KEY": API_KEY, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        timeout=600,
        check=False,
    )
    assert worker.returncode == 0, worker.stderr[-2000:]
    assert tally.summarize(ledger).succeeded == LINES

    out = io.StringIO()
    done = tally.export_rows(ledger, out, format="openai")
    assert (done.rows, done.cursor) == (LINES, "")
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    counts = Counter(r["custom_id"] for r in records)
    assert set(counts) == {f"review-{i}" for i in range(LINES)}
    assert set(counts.values()) == {1}
    assert all(r["response"]["status_code"] == 200 and r["error"] is None for r in records)
    assert all(r["response"]["body"] is not None for r in records)

    # The same rows as Parquet: readable by pyarrow, one row per custom_id,
    # the columns tallyctl's Parquet file has.
    path = tmp_path / "results.parquet"
    assert tally.export_parquet(ledger, path).rows == LINES
    table = pq.read_table(path)
    assert table.num_rows == LINES
    assert tuple(table.column_names) == CSV_COLUMNS
    assert Counter(table.column("key").to_pylist()) == counts
    assert set(table.column("status").to_pylist()) == {"SUCCEEDED"}
