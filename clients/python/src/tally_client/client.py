"""A typed client for tally over gRPC: ledgers, enrolment in chunks, rows,
summaries, a claim session for Python workers, and a resumable job watch.
Every refused call raises a `TallyError` (see `tally_client.errors`)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TextIO

import grpc
from google.protobuf import duration_pb2

from tally_client._proto.tally.v1 import (
    common_pb2,
    job_pb2,
    job_pb2_grpc,
    ledger_pb2,
    ledger_pb2_grpc,
)
from tally_client.errors import TallyError, from_rpc_error
from tally_client.export import CSV_COLUMNS, FORMATS, ExportFormat, csv_line, line
from tally_client.formats import BatchFormat, batch_rows, check_batch_file

if TYPE_CHECKING:
    from tally_client.archive import ArchiveFormat, ArchiveResult

#: The server's default rows-per-call limit (`--max-rows-per-call`).
DEFAULT_CHUNK = 1000
#: The largest message this client receives: grpc's default, set on the
# channel explicitly and sent with every ClaimRows so the server answers
# with fewer rows rather than a message the channel would refuse.
MAX_RECEIVE_BYTES = 4 * 1024 * 1024

RowLike = ledger_pb2.RowInput | Mapping[str, Any]


def ledger_name(ledger: str) -> str:
    """`ledgers/{id}` whichever way it was given."""
    return ledger if ledger.startswith("ledgers/") else f"ledgers/{ledger}"


def row_input(row: RowLike) -> ledger_pb2.RowInput:
    """A `RowInput` from a message or a mapping with `key`, `payload` (a
    string, or anything JSON-serialisable), and optionally `depends_on`,
    `prompt` (`"name@version"` or `{"name", "version"}`) and `model`."""
    if isinstance(row, ledger_pb2.RowInput):
        return row
    payload = row.get("payload", "")
    if not isinstance(payload, str):
        payload = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    prompt = row.get("prompt")
    ref: common_pb2.PromptRef | None = None
    if isinstance(prompt, str):
        name, _, version = prompt.partition("@")
        ref = common_pb2.PromptRef(name=name, version=version)
    elif isinstance(prompt, Mapping):
        ref = common_pb2.PromptRef(name=prompt["name"], version=prompt["version"])
    return ledger_pb2.RowInput(
        key=row["key"],
        payload=payload,
        depends_on=list(row.get("depends_on", ())),
        prompt=ref,
        model=row.get("model", ""),
    )


@dataclass(frozen=True)
class EnrollProgress:
    """Where an enrolment is: rows sent so far, and what became of them."""

    sent: int
    enrolled: int
    already_present: int
    #: Rows whose key is enrolled with other content (left unchanged).
    conflicts: int = 0


@dataclass(frozen=True)
class ExportProgress:
    """Rows written so far, and the cursor that resumes after them (`""`
    once the export is complete)."""

    rows: int
    cursor: str


def _duration(seconds: float) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromNanoseconds(int(seconds * 1e9))
    return d


def _chunks(rows: Iterable[RowLike], size: int) -> Iterator[list[ledger_pb2.RowInput]]:
    chunk: list[ledger_pb2.RowInput] = []
    for row in rows:
        chunk.append(row_input(row))
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


_CHANNEL_OPTIONS = [("grpc.max_receive_message_length", MAX_RECEIVE_BYTES)]


class Client:
    """One connection to tally. Use it as a context manager, or `close()`."""

    def __init__(
        self,
        address: str = "127.0.0.1:50051",
        *,
        token: str | None = None,
        tls: bool = False,
        root_certificates: bytes | None = None,
        timeout: float = 30.0,
    ) -> None:
        if tls or root_certificates is not None:
            creds = grpc.ssl_channel_credentials(root_certificates=root_certificates)
            self._channel = grpc.secure_channel(address, creds, options=_CHANNEL_OPTIONS)
        else:
            self._channel = grpc.insecure_channel(address, options=_CHANNEL_OPTIONS)
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self._timeout = timeout
        # The generated stubs carry no annotations.
        self.ledgers = ledger_pb2_grpc.LedgerServiceStub(self._channel)  # type: ignore[no-untyped-call]
        self.jobs = job_pb2_grpc.JobServiceStub(self._channel)  # type: ignore[no-untyped-call]

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def call(self, method: Callable[..., Any], request: Any) -> Any:
        """Calls a unary RPC of `ledgers` or `jobs`, raising `TallyError`."""
        try:
            return method(request, timeout=self._timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    # ----- ledgers -----

    def create_ledger(
        self, ledger_id: str, policy: ledger_pb2.LedgerPolicy | None = None
    ) -> ledger_pb2.Ledger:
        req = ledger_pb2.CreateLedgerRequest(ledger_id=ledger_id, policy=policy)
        created: ledger_pb2.Ledger = self.call(self.ledgers.CreateLedger, req)
        return created

    def get_ledger(self, ledger: str) -> ledger_pb2.Ledger:
        req = ledger_pb2.GetLedgerRequest(name=ledger_name(ledger))
        found: ledger_pb2.Ledger = self.call(self.ledgers.GetLedger, req)
        return found

    def delete_ledger(
        self, ledger: str, *, force: bool = False, etag: str = "", content_etag: str = ""
    ) -> ledger_pb2.Ledger:
        """DeleteLedger (operator role): the ledger is DELETING at once (every
        work call on it answers NOT_FOUND) and is purged in the background;
        `get_ledger` shows the purge until it answers NOT_FOUND. Refused
        (`FailedPrecondition`, reason LEDGER_ACTIVE) while claims are live or
        jobs open, unless `force`, which expires the claims and abandons the
        jobs: batches still running at the provider are not cancelled and may
        still be billed (see the README's "Deleting a ledger"). With
        `content_etag` (a `LedgerSummary.content_etag` read earlier) it is
        refused (`FailedPrecondition`, reason LEDGER_CHANGED) if any row was
        enrolled, reported, rescued or redriven since."""
        req = ledger_pb2.DeleteLedgerRequest(
            name=ledger_name(ledger), force=force, etag=etag, content_etag=content_etag
        )
        marked: ledger_pb2.Ledger = self.call(self.ledgers.DeleteLedger, req)
        return marked

    def summarize(self, ledger: str) -> ledger_pb2.LedgerSummary:
        req = ledger_pb2.SummarizeLedgerRequest(name=ledger_name(ledger))
        summary: ledger_pb2.LedgerSummary = self.call(self.ledgers.SummarizeLedger, req)
        return summary

    # ----- rows -----

    def enroll(
        self,
        ledger: str,
        rows: Iterable[RowLike],
        *,
        chunk_size: int = DEFAULT_CHUNK,
        on_progress: Callable[[EnrollProgress], None] | None = None,
    ) -> EnrollProgress:
        """Enrolls rows from any iterable (a generator is read once, a chunk
        at a time). Rows already present with the same content are not
        enrolled again, so a re-run after a crash adds only what is missing."""
        if not 1 <= chunk_size <= 10_000:
            raise ValueError("chunk_size must be between 1 and 10000")
        sent = enrolled = present = conflicts = 0
        for chunk in _chunks(rows, chunk_size):
            req = ledger_pb2.EnrollRowsRequest(parent=ledger_name(ledger), rows=chunk)
            r = self.call(self.ledgers.EnrollRows, req)
            sent += len(chunk)
            enrolled += r.enrolled
            present += r.already_present
            conflicts += r.conflicts
            if on_progress is not None:
                on_progress(EnrollProgress(sent, enrolled, present, conflicts))
        return EnrollProgress(sent, enrolled, present, conflicts)

    def enroll_file(
        self,
        ledger: str,
        path: str | Path,
        *,
        format: BatchFormat,
        chunk_size: int = DEFAULT_CHUNK,
        on_progress: Callable[[EnrollProgress], None] | None = None,
    ) -> EnrollProgress:
        """Enrolls an OpenAI batch input file or Anthropic Message Batches
        file (`format` `openai` or `anthropic`), converted to Gemini requests
        as `tallyctl enroll --format` does. The whole file is checked first:
        a bad line or a repeated `custom_id` raises `BatchFileError` and
        nothing is enrolled."""
        check_batch_file(path, format)
        return self.enroll(
            ledger, batch_rows(path, format), chunk_size=chunk_size, on_progress=on_progress
        )

    def pages(
        self,
        ledger: str,
        *,
        statuses: Sequence[common_pb2.RowStatus] = (),
        rule: str = "",
        job: str = "",
        in_job: str = "",
        model: str = "",
        prompt: str = "",
        full: bool = False,
        page_size: int = 1000,
        after: str = "",
    ) -> Iterator[tuple[list[ledger_pb2.Row], str]]:
        """Pages of rows with the cursor after each (`""` after the last).
        `job` selects the rows whose latest job it is, `in_job` the rows the
        job was made with; `prompt` is `name` or `name@version`; `after` is
        a cursor from an earlier listing with the same filters."""
        if not 1 <= page_size <= 1000:
            raise ValueError("page_size must be between 1 and 1000")
        prompt_name, _, prompt_version = prompt.partition("@")
        row_filter = ledger_pb2.RowFilter(
            statuses=list(statuses),
            rule=rule,
            job=job,
            in_job=in_job,
            model=model,
            prompt_name=prompt_name,
            prompt_version=prompt_version,
        )
        token = after
        while True:
            req = ledger_pb2.ListRowsRequest(
                parent=ledger_name(ledger),
                filter=row_filter,
                page_size=page_size,
                page_token=token,
                view=ledger_pb2.ROW_VIEW_FULL if full else ledger_pb2.ROW_VIEW_BASIC,
            )
            page = self.call(self.ledgers.ListRows, req)
            yield list(page.rows), page.next_page_token
            if not page.next_page_token:
                return
            token = page.next_page_token

    def rows(
        self,
        ledger: str,
        *,
        statuses: Sequence[common_pb2.RowStatus] = (),
        rule: str = "",
        job: str = "",
        in_job: str = "",
        full: bool = False,
        page_size: int = 1000,
    ) -> Iterator[ledger_pb2.Row]:
        """Every row (or those with these statuses / this rule / this job as
        their latest / made into this job), paged."""
        for page, _ in self.pages(
            ledger,
            statuses=statuses,
            rule=rule,
            job=job,
            in_job=in_job,
            full=full,
            page_size=page_size,
        ):
            yield from page

    def export_rows(
        self,
        ledger: str,
        out: TextIO,
        *,
        format: ExportFormat = "jsonl",
        statuses: Sequence[common_pb2.RowStatus] = (),
        rule: str = "",
        model: str = "",
        prompt: str = "",
        after: str = "",
        page_size: int = 1000,
        on_page: Callable[[ExportProgress], None] | None = None,
    ) -> ExportProgress:
        """Writes the rows (with results) to `out` as `jsonl` (tally's shape),
        `openai` (batch output lines) or `csv` (a header unless resuming),
        one page in memory at a time. After each page, `on_page` gets the
        cursor to pass as `after` to resume past what was written (with the
        same filters); the returned progress has `cursor` `""` when done."""
        if format not in FORMATS:
            raise ValueError(
                f"format must be one of {', '.join(FORMATS)}, got {format!r}"
                + (" (Parquet: export_parquet)" if str(format) == "parquet" else "")
            )
        if format == "csv" and not after:
            out.write(csv_line(CSV_COLUMNS))
        return self._export_pages(
            ledger,
            lambda page: out.write("".join(line(row, format) for row in page)),
            out.flush,
            statuses=statuses,
            rule=rule,
            model=model,
            prompt=prompt,
            after=after,
            page_size=page_size,
            on_page=on_page,
        )

    def _export_pages(
        self,
        ledger: str,
        write: Callable[[list[ledger_pb2.Row]], object],
        flush: Callable[[], object],
        *,
        statuses: Sequence[common_pb2.RowStatus],
        rule: str,
        model: str,
        prompt: str,
        after: str,
        page_size: int,
        on_page: Callable[[ExportProgress], None] | None,
    ) -> ExportProgress:
        """Pages of rows (FULL view) to `write`; after each, `flush` and the
        progress with the cursor that resumes after it."""
        written = 0
        cursor = after
        for page, cursor in self.pages(
            ledger,
            statuses=statuses,
            rule=rule,
            model=model,
            prompt=prompt,
            full=True,
            page_size=page_size,
            after=after,
        ):
            write(page)
            written += len(page)
            if on_page is not None:
                flush()
                on_page(ExportProgress(written, cursor))
        return ExportProgress(written, cursor)

    def export_parquet(
        self,
        ledger: str,
        path: str | Path,
        *,
        statuses: Sequence[common_pb2.RowStatus] = (),
        rule: str = "",
        model: str = "",
        prompt: str = "",
        after: str = "",
        page_size: int = 1000,
        on_page: Callable[[ExportProgress], None] | None = None,
    ) -> ExportProgress:
        """Writes the rows (with results) to a new Parquet file at `path`,
        the file `tallyctl export --format parquet` writes (needs pyarrow:
        `pip install 'tally-client[parquet]'`). A Parquet file cannot be
        continued: to resume after a cursor, write the rest to another file.
        If the export stops early, what was written is a valid file and the
        last `on_page` cursor resumes after it."""
        from tally_client.parquet import ParquetWriter

        target = Path(path)
        if target.exists():
            raise FileExistsError(f"{target} exists: a Parquet export is always a new file")
        with ParquetWriter(target) as writer:
            return self._export_pages(
                ledger,
                writer.write,
                lambda: None,
                statuses=statuses,
                rule=rule,
                model=model,
                prompt=prompt,
                after=after,
                page_size=page_size,
                on_page=on_page,
            )

    def archive_ledger(
        self,
        ledger: str,
        path: str | Path,
        *,
        format: ArchiveFormat = "jsonl",
        wait: bool = True,
        poll_seconds: float = 1.0,
    ) -> ArchiveResult:
        """Exports the whole ledger to a new file, makes it durable, then
        deletes the ledger, as `tallyctl ledgers archive` does; see
        `tally_client.archive.archive_ledger` for the guarantees."""
        from tally_client.archive import archive_ledger

        return archive_ledger(
            self, ledger, path, format=format, wait=wait, poll_seconds=poll_seconds
        )

    # ----- workers -----

    def claim(
        self,
        ledger: str,
        max_rows: int,
        *,
        lease: float = 60.0,
        worker: str = "python",
        model: str = "",
    ) -> ClaimSession | None:
        """Claims up to `max_rows` runnable rows; `None` when there are none.
        Use the session as a context manager: it extends the lease in the
        background and gives back every row not reported when it ends."""
        req = ledger_pb2.ClaimRowsRequest(
            parent=ledger_name(ledger),
            max_rows=max_rows,
            lease=_duration(lease),
            worker=worker,
            request_id=str(uuid.uuid4()),
            model=model,
            max_response_bytes=MAX_RECEIVE_BYTES,
        )
        r = self.call(self.ledgers.ClaimRows, req)
        if not r.rows:
            return None
        return ClaimSession(self, r.claim, list(r.rows), lease)

    # ----- jobs -----

    def watch_jobs(
        self,
        ledger: str,
        *,
        after_sequence: int = 0,
        reconnect_delay: float = 1.0,
        max_reconnects: int = 60,
    ) -> Iterator[job_pb2.JobEvent]:
        """Job events as they happen, resuming after the last one seen when
        the stream breaks (up to `max_reconnects` times in a row)."""
        last = after_sequence
        failures = 0
        while True:
            req = job_pb2.WatchJobsRequest(parent=ledger_name(ledger), after_sequence=last)
            try:
                for event in self.jobs.WatchJobs(req, metadata=self._metadata):
                    failures = 0
                    last = event.sequence
                    yield event
                return
            except grpc.RpcError as e:
                error = from_rpc_error(e)
                if error.code != grpc.StatusCode.UNAVAILABLE or failures >= max_reconnects:
                    raise error from None
                failures += 1
                time.sleep(reconnect_delay)


class ClaimSession:
    """Rows claimed by a Python worker. Report outcomes with `succeed`,
    `fail` or `report`; the lease is extended every third of it until the
    session ends, and rows still held then are released (no attempt)."""

    def __init__(
        self,
        client: Client,
        claim: ledger_pb2.Claim,
        rows: list[ledger_pb2.ClaimedRow],
        lease: float,
    ) -> None:
        self.client = client
        self.claim = claim
        self.rows = rows
        self._lease = lease
        self._reported: set[str] = set()
        self._stop = threading.Event()
        self._heartbeat = threading.Thread(target=self._beat, daemon=True)

    def __enter__(self) -> ClaimSession:
        self._heartbeat.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._heartbeat.join()
        held = [r.key for r in self.rows if r.key not in self._reported]
        if held:
            req = ledger_pb2.ReleaseClaimRequest(name=self.claim.name, keys=held)
            try:
                self.client.call(self.client.ledgers.ReleaseClaim, req)
            except TallyError:
                if error is None:
                    raise

    def _beat(self) -> None:
        req = ledger_pb2.ExtendClaimRequest(name=self.claim.name, lease=_duration(self._lease))
        while not self._stop.wait(self._lease / 3):
            try:
                self.client.call(self.client.ledgers.ExtendClaim, req)
            except TallyError:
                return

    def report(
        self, outcomes: Sequence[ledger_pb2.RowOutcome]
    ) -> ledger_pb2.ReportOutcomesResponse:
        req = ledger_pb2.ReportOutcomesRequest(claim=self.claim.name, outcomes=list(outcomes))
        r: ledger_pb2.ReportOutcomesResponse = self.client.call(
            self.client.ledgers.ReportOutcomes, req
        )
        self._reported.update(o.key for o in outcomes)
        return r

    def succeed(self, key: str, result: Any) -> ledger_pb2.ReportOutcomesResponse:
        """Reports a row's result (JSON-serialisable, or a JSON string)."""
        text = result if isinstance(result, str) else json.dumps(result)
        return self.report([ledger_pb2.RowOutcome(key=key, result=text)])

    def fail(
        self, key: str, *, message: str, http_code: int = 0, status: str = ""
    ) -> ledger_pb2.ReportOutcomesResponse:
        """Reports the facts of a failure; the server's classifier decides."""
        failure = common_pb2.Failure(
            kind=common_pb2.FAILURE_KIND_PROVIDER_ERROR,
            http_code=http_code,
            status=status,
            message=message,
        )
        return self.report([ledger_pb2.RowOutcome(key=key, failure=failure)])
