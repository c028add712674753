"""Parquet export (the file tallyctl writes) and archiving a ledger (export,
fsync, then delete only if nothing changed)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import workspace_binary
from test_export import settle

from tally_client import Client, LedgerState, NotFound
from tally_client import parquet as tally_parquet
from tally_client.archive import ArchiveError


def test_parquet_is_the_file_tallyctl_export_writes(
    tally: Client, ledger: str, address: str, tmp_path: Path
) -> None:
    # Invariant: the Python client and `tallyctl export --format parquet`
    # write the same schema (names, types, nullability) and the same values,
    # so either file reads the same in pyarrow, pandas or DuckDB.
    succeeded, permanent = settle(tally, ledger)
    ours = tmp_path / "ours.parquet"
    done = tally.export_parquet(ledger, ours, page_size=6)
    assert (done.rows, done.cursor) == (25, "")
    theirs = tmp_path / "theirs.parquet"
    subprocess.run(
        [
            workspace_binary("tallyctl", "TALLYCTL_BIN"),
            "--server",
            f"http://{address}",
            "export",
            ledger,
            "--format",
            "parquet",
            "-o",
            str(theirs),
        ],
        capture_output=True,
        check=True,
    )
    a, b = pq.read_table(ours), pq.read_table(theirs)
    assert a.schema.equals(b.schema), f"{a.schema}\n!=\n{b.schema}"
    assert a.to_pylist() == b.to_pylist()
    assert a.num_rows == 25
    records = {r["key"]: r for r in a.to_pylist()}
    assert set(records) == succeeded | permanent
    ok = records[next(iter(succeeded))]
    assert ok["status"] == "SUCCEEDED" and json.loads(ok["result"])["pi"] == 3.25
    assert ok["update_time"] is not None and ok["last_error"] is None
    bad = records[next(iter(permanent))]
    assert bad["status"] == "PERMANENT" and bad["result"] is None and bad["rule"]


def test_parquet_row_groups_are_bounded_and_a_file_is_never_overwritten(
    tally: Client, ledger: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Invariant: rows are written in row groups of at most ROW_GROUP_ROWS
    # (memory stays bounded), and an existing file is refused untouched.
    settle(tally, ledger)
    monkeypatch.setattr(tally_parquet, "ROW_GROUP_ROWS", 10)
    path = tmp_path / "rows.parquet"
    tally.export_parquet(ledger, path, page_size=4)
    meta = pq.ParquetFile(path).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [10, 10, 5]
    before = path.read_bytes()
    with pytest.raises(FileExistsError, match="always a new file"):
        tally.export_parquet(ledger, path)
    assert path.read_bytes() == before


@pytest.mark.parametrize("format", ["jsonl", "parquet"])
def test_archive_writes_every_row_then_deletes_the_ledger(
    tally: Client, ledger: str, tmp_path: Path, format: str
) -> None:
    # Invariant: after archive_ledger returns, the file holds every row
    # exactly once and the ledger is gone (its purge finished).
    succeeded, permanent = settle(tally, ledger)
    path = tmp_path / f"archive.{format}"
    result = tally.archive_ledger(ledger, path, format=format, poll_seconds=0.05)  # type: ignore[arg-type]
    assert (result.rows, result.purged) == (25, True)
    if format == "parquet":
        keys = [r["key"] for r in pq.read_table(path).to_pylist()]
    else:
        keys = [json.loads(line)["key"] for line in path.read_text().splitlines()]
    assert sorted(keys) == sorted(succeeded | permanent)
    with pytest.raises(NotFound):
        tally.get_ledger(ledger)


def test_archive_refuses_a_ledger_with_running_rows(
    tally: Client, ledger: str, tmp_path: Path
) -> None:
    # Invariant: rows in flight refuse the archive before anything is
    # written: no file, and the ledger keeps every row.
    tally.enroll(ledger, ({"key": f"k{i}", "payload": {}} for i in range(3)))
    session = tally.claim(ledger, 3)
    assert session is not None
    path = tmp_path / "a.jsonl"
    with session:
        with pytest.raises(ArchiveError, match="3 RUNNING rows"):
            tally.archive_ledger(ledger, path)
        for row in session.rows:
            session.succeed(row.key, {"ok": True})
    assert not path.exists()
    assert tally.summarize(ledger).succeeded == 3


def test_archive_keeps_the_ledger_when_it_changes_during_the_export(
    tally: Client, ledger: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Invariant: a row enrolled while the export runs is never deleted
    # unarchived: the archive stops before the delete, keeps its file and
    # the ledger keeps all its rows.
    settle(tally, ledger)
    export = tally.export_rows

    def export_while_enrolling(*args: object, **kwargs: object) -> object:
        tally.enroll(ledger, [{"key": "late-row", "payload": {}}])
        return export(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(tally, "export_rows", export_while_enrolling)
    path = tmp_path / "a.jsonl"
    with pytest.raises(ArchiveError, match="changed while it was exported"):
        tally.archive_ledger(ledger, path)
    assert path.exists()
    summary = tally.summarize(ledger)
    assert summary.total == 26
    assert tally.get_ledger(ledger).state == LedgerState.ACTIVE


def test_archive_keeps_the_ledger_when_a_row_lands_after_the_last_check(
    tally: Client, ledger: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Invariant: a row enrolled after the client's own last look (between
    # the comparison of the summaries and the DeleteLedger) is not deleted
    # unarchived: the server refuses the delete (the content etag read before
    # the export moved), the file is kept and the ledger keeps every row.
    settle(tally, ledger)
    delete = tally.delete_ledger

    def enroll_then_delete(*args: object, **kwargs: object) -> object:
        tally.enroll(ledger, [{"key": "late-row", "payload": {}}])
        return delete(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(tally, "delete_ledger", enroll_then_delete)
    path = tmp_path / "a.jsonl"
    with pytest.raises(ArchiveError, match="changed after it was exported"):
        tally.archive_ledger(ledger, path)
    assert path.exists()
    assert tally.summarize(ledger).total == 26
    assert tally.get_ledger(ledger).state == LedgerState.ACTIVE
