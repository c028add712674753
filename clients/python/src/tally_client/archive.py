"""Archive a ledger: export it to a new file, make the file durable, then
delete the ledger — `tallyctl ledgers archive` in Python.

Nothing is deleted unless the archive is whole:
- a ledger with RUNNING rows or open jobs is refused before anything is
  written (their answers would arrive after the export);
- the export must complete (every page written; the file and its directory
  fsynced);
- the ledger must be as it was when the export began: the delete carries
  the content etag and the etag read before the export, and the server
  checks them in the delete's own transaction, holding enrollments and
  redrives off meanwhile, so rows enrolled, answered or redriven during the
  export are never deleted unarchived, however late they come (the counts
  are also compared before the delete is sent, for a clearer message). On
  a change the file is kept and `ArchiveError` says why."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, TextIO

from tally_client._calls import ledger_name
from tally_client.errors import FailedPrecondition, NotFound
from tally_client.export import ExportFormat
from tally_client.types import Ledger, Summary

ArchiveFormat = Literal["jsonl", "openai", "csv", "parquet"]


class _Written(Protocol):
    @property
    def rows(self) -> int: ...


class ArchiveClient(Protocol):
    """The calls an archive makes (`Client` has them): declared here so
    this module does not import the client that calls it."""

    def get_ledger(self, ledger: str) -> Ledger: ...

    def summarize(self, ledger: str) -> Summary: ...

    def export_rows(self, ledger: str, out: TextIO, *, format: ExportFormat) -> _Written: ...

    def export_parquet(self, ledger: str, path: str | Path) -> _Written: ...

    def delete_ledger(self, ledger: str, *, etag: str, content_etag: str) -> Ledger: ...


class ArchiveError(Exception):
    """The ledger was not archived (and not deleted); the message says why
    and what to do."""


@dataclass(frozen=True)
class ArchiveResult:
    ledger: str
    path: Path
    rows: int
    #: True once the purge has finished (only waited for with `wait`).
    purged: bool


def _fingerprint(s: Summary) -> tuple[int, ...]:
    """What must not change between the start of the export and the delete."""
    return (
        s.total,
        s.pending,
        s.running,
        s.retryable,
        s.succeeded,
        s.permanent,
        s.blocked,
        s.attempts_total,
        s.active_jobs,
    )


def busy(s: Summary) -> str | None:
    """Why the ledger cannot be archived now, if it cannot."""
    if s.running > 0 or s.active_jobs > 0:
        return (
            f"{s.ledger} has {s.running} RUNNING rows and {s.active_jobs} open jobs: their "
            "answers would miss the archive; stop the workers or let the jobs finish, then archive"
        )
    return None


def _fsync(path: Path) -> None:
    """The file's contents, then its directory entry, on disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def _export(client: ArchiveClient, ledger: str, path: Path, format: ArchiveFormat) -> int:
    if format == "parquet":
        return client.export_parquet(ledger, path).rows
    with open(path, "x", encoding="utf-8", newline="") as out:
        return client.export_rows(ledger, out, format=format).rows


def archive_ledger(
    client: ArchiveClient,
    ledger: str,
    path: str | Path,
    *,
    format: ArchiveFormat = "jsonl",
    wait: bool = True,
    poll_seconds: float = 1.0,
) -> ArchiveResult:
    """Exports `ledger` to the new file `path` in `format`, fsyncs it, and
    deletes the ledger if nothing changed meanwhile. With `wait`, returns
    once the purge has finished. Raises `FileExistsError` if `path` exists,
    `ArchiveError` when the ledger is busy or changed (nothing deleted), and
    `TallyError`s from the calls."""
    target = Path(path)
    if target.exists():
        raise FileExistsError(f"{target} exists: an archive is always a new file")
    name = ledger_name(ledger)
    etag = client.get_ledger(name).etag
    before = client.summarize(name)
    why = busy(before)
    if why:
        raise ArchiveError(why)
    if not before.content_etag:
        raise ArchiveError(
            f"the server gives {name} no content etag, so it cannot refuse a delete that would "
            "lose rows written during the export; upgrade the server"
        )
    rows = _export(client, name, target, format)
    _fsync(target)
    after = client.summarize(name)
    if _fingerprint(before) != _fingerprint(after):
        raise ArchiveError(
            f"{name} changed while it was exported ({before.summary_line} -> "
            f"{after.summary_line}): it was not deleted; {target} is kept; stop the enrollers "
            "and workers and archive again to a new file"
        )
    try:
        client.delete_ledger(name, etag=etag, content_etag=before.content_etag)
    except FailedPrecondition as e:
        raise ArchiveError(
            f"{name} changed after it was exported: it was not deleted; {target} is kept; "
            f"stop the enrollers and workers and archive again to a new file ({e})"
        ) from e
    purged = False
    while wait and not purged:
        try:
            client.get_ledger(name)
        except NotFound:
            purged = True
        else:
            time.sleep(poll_seconds)
    return ArchiveResult(name, target, rows, purged)
