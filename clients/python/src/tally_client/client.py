"""A typed client for tally over gRPC: ledgers (get-or-create), enrolment
in chunks with canonical payloads, rows as dataclasses page by page,
summaries, a claim session for Python workers with batched reports and a
heartbeat whose failure reaches the caller, and a resumable job watch.
Every refused call raises the `TallyError` subclass of its status code
(see `tally_client.errors`). `tally_client.aio.AsyncClient` is the same
client for asyncio."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

import grpc

from tally_client._calls import (
    CHANNEL_OPTIONS,
    DEFAULT_CHUNK,
    EnrollProgress,
    Failure,
    Outcome,
    PolicyLike,
    StatusLike,
    Success,
    chunks,
    claim_request,
    duration,
    existing_ledger,
    jobs_request,
    ledger_name,
    list_request,
    policy_message,
    update_request,
)
from tally_client._proto.tally.v1 import (
    delivery_pb2_grpc,
    job_pb2,
    job_pb2_grpc,
    ledger_pb2,
    ledger_pb2_grpc,
)
from tally_client.address import default_address, parse_address, warn_plaintext_token
from tally_client.archive import ArchiveFormat, ArchiveResult, archive_ledger
from tally_client.consume import ConsumeCore, Delivery, Start
from tally_client.errors import (
    AlreadyExists,
    DeadlineExceeded,
    NotFound,
    TallyError,
    Unavailable,
    from_rpc_error,
)
from tally_client.export import CSV_COLUMNS, FORMATS, ExportFormat, csv_line, line
from tally_client.formats import BatchFormat, batch_rows, check_batch_file
from tally_client.rows import RowLike
from tally_client.session import SessionCore
from tally_client.types import (
    ClaimedRow,
    FailureKind,
    Forecast,
    Job,
    JobState,
    Ledger,
    Pause,
    Redrive,
    ReportResult,
    Row,
    RowPage,
    Summary,
    Usage,
)

__all__ = [
    "ClaimSession",
    "Client",
    "Consumption",
    "EnrollProgress",
    "ExportProgress",
    "ledger_name",
]


@dataclass(frozen=True)
class ExportProgress:
    """Rows written so far, and the cursor that resumes after them (`""`
    once the export is complete)."""

    rows: int
    cursor: str


class Client:
    """One connection to tally. Use it as a context manager, or `close()`.

    `address` is `host:port`, `http://host:port` or `https://host:port`
    (TLS, as `tls=True`); without one, `TALLY_SERVER` from the environment,
    else `127.0.0.1:50051` (as tallyctl). `token` is sent as a bearer
    token; without one, `TALLY_TOKEN` from the environment, if set.
    `timeout` bounds every call (seconds)."""

    def __init__(
        self,
        address: str | None = None,
        *,
        token: str | None = None,
        tls: bool = False,
        root_certificates: bytes | None = None,
        timeout: float = 30.0,
    ) -> None:
        target = parse_address(
            address or default_address(), tls=tls or root_certificates is not None
        )
        token = token or os.environ.get("TALLY_TOKEN") or None
        warn_plaintext_token(target, token)
        self.address = target
        if target.tls:
            creds = grpc.ssl_channel_credentials(root_certificates=root_certificates)
            self._channel = grpc.secure_channel(target.target, creds, options=CHANNEL_OPTIONS)
        else:
            self._channel = grpc.insecure_channel(target.target, options=CHANNEL_OPTIONS)
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self._timeout = timeout
        # The generated stubs carry no annotations.
        self.ledgers = ledger_pb2_grpc.LedgerServiceStub(self._channel)  # type: ignore[no-untyped-call]
        self.jobs_stub = job_pb2_grpc.JobServiceStub(self._channel)  # type: ignore[no-untyped-call]
        self.deliveries = delivery_pb2_grpc.DeliveryServiceStub(self._channel)  # type: ignore[no-untyped-call]

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

    def call(self, method: Callable[..., Any], request: Any, *, wait: float = 0.0) -> Any:
        """Calls a unary RPC of `ledgers`, `jobs` or `deliveries` (the
        generated stubs), raising `TallyError`: the way to any RPC this class
        does not wrap. `wait` adds to the call's timeout (a long poll)."""
        try:
            return method(request, timeout=self._timeout + wait, metadata=self._metadata)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    # ----- ledgers -----

    def create_ledger(self, ledger_id: str, policy: PolicyLike | None = None) -> Ledger:
        """Creates a ledger; `AlreadyExists` if the id is taken (see
        `get_or_create_ledger`). `policy` is a `LedgerPolicy` or its JSON
        form (`{"budgets": {"provider": 3}, "lease": "600s"}`); unset fields
        take the documented defaults."""
        req = ledger_pb2.CreateLedgerRequest(ledger_id=ledger_id, policy=policy_message(policy))
        return Ledger.from_pb(self.call(self.ledgers.CreateLedger, req))

    def get_or_create_ledger(
        self, ledger_id: str, policy: PolicyLike | None = None
    ) -> tuple[Ledger, bool]:
        """The ledger, created if it does not exist, and whether it was
        created now. An existing ledger must hold every field `policy`
        sets (`AlreadyExists`, reason LEDGER_POLICY_DIFFERS, naming the
        fields, otherwise: change it with `update_ledger`); one being
        deleted raises `FailedPrecondition` (LEDGER_DELETING)."""
        asked = policy_message(policy)
        for _ in range(3):
            try:
                return self.create_ledger(ledger_id, asked), True
            except AlreadyExists:
                pass
            try:
                return existing_ledger(ledger_id, self.get_ledger(ledger_id), asked), False
            except NotFound:
                continue  # deleted between the two calls: create it again
        raise AlreadyExists(
            grpc.StatusCode.ALREADY_EXISTS,
            f"ledger {ledger_id} kept appearing and disappearing; try again",
        )

    def get_ledger(self, ledger: str) -> Ledger:
        req = ledger_pb2.GetLedgerRequest(name=ledger_name(ledger))
        return Ledger.from_pb(self.call(self.ledgers.GetLedger, req))

    def list_ledgers(self, *, show_deleted: bool = False) -> Iterator[Ledger]:
        """Every ledger the caller may see, paged."""
        token = ""
        while True:
            req = ledger_pb2.ListLedgersRequest(
                page_size=1000, page_token=token, show_deleted=show_deleted
            )
            page = self.call(self.ledgers.ListLedgers, req)
            yield from (Ledger.from_pb(m) for m in page.ledgers)
            if not page.next_page_token:
                return
            token = page.next_page_token

    def update_ledger(self, ledger: str, policy: PolicyLike, *, etag: str = "") -> Ledger:
        """Changes the policy fields `policy` sets (the others are kept);
        with `etag`, refused (`Aborted`) if the ledger changed since."""
        req = update_request(ledger, policy, etag)
        return Ledger.from_pb(self.call(self.ledgers.UpdateLedger, req))

    def pause_ledger(self, ledger: str, message: str) -> Ledger:
        """PauseLedger (operator role): no claims are handed out until
        `resume_ledger`; work already out runs to its end."""
        req = ledger_pb2.PauseLedgerRequest(name=ledger_name(ledger), message=message)
        return Ledger.from_pb(self.call(self.ledgers.PauseLedger, req))

    def resume_ledger(self, ledger: str) -> Ledger:
        req = ledger_pb2.ResumeLedgerRequest(name=ledger_name(ledger))
        return Ledger.from_pb(self.call(self.ledgers.ResumeLedger, req))

    def delete_ledger(
        self, ledger: str, *, force: bool = False, etag: str = "", content_etag: str = ""
    ) -> Ledger:
        """DeleteLedger (operator role): the ledger is DELETING at once (every
        work call on it answers NOT_FOUND) and is purged in the background;
        `get_ledger` shows the purge until it answers NOT_FOUND. Refused
        (`FailedPrecondition`, reason LEDGER_ACTIVE) while claims are live or
        jobs open, unless `force`, which expires the claims and abandons the
        jobs: batches still running at the provider are not cancelled and may
        still be billed (see services/server/README.md, "Deleting a ledger"). With
        `content_etag` (a `Summary.content_etag` read earlier) it is
        refused (`FailedPrecondition`, reason LEDGER_CHANGED) if any row was
        enrolled, reported, rescued or redriven since."""
        req = ledger_pb2.DeleteLedgerRequest(
            name=ledger_name(ledger), force=force, etag=etag, content_etag=content_etag
        )
        return Ledger.from_pb(self.call(self.ledgers.DeleteLedger, req))

    def redrive(
        self,
        ledger: str,
        keys: Sequence[str],
        *,
        include_succeeded: bool = False,
        dry_run: bool = False,
        reason: str = "",
    ) -> Redrive:
        """RedriveRows (operator role) for rows `keys`: PERMANENT and
        BLOCKED ones back to PENDING with fresh budgets; with
        `include_succeeded`, SUCCEEDED ones asked again too (their results
        kept as superseded; see services/server/README.md, "When a
        dependency answers differently"). `dry_run` says what it would do
        and cost, and changes nothing."""
        req = ledger_pb2.RedriveRowsRequest(
            parent=ledger_name(ledger),
            keys=ledger_pb2.RowKeys(keys=list(keys)),
            validate_only=dry_run,
            include_succeeded=include_succeeded,
            reason=reason,
        )
        return Redrive.from_pb(self.call(self.ledgers.RedriveRows, req))

    def summarize(self, ledger: str) -> Summary:
        req = ledger_pb2.SummarizeLedgerRequest(name=ledger_name(ledger))
        return Summary.from_pb(self.call(self.ledgers.SummarizeLedger, req))

    def forecast(self, ledger: str) -> Forecast:
        """When the ledger is forecast to finish and what its unfinished rows
        cost, under the plan its deadline and lanes make and under
        all-batch (tally-server's README, "The critical path")."""
        req = ledger_pb2.SummarizeLedgerRequest(name=ledger_name(ledger), forecast=True)
        return Forecast.from_pb((self.call(self.ledgers.SummarizeLedger, req)).forecast)

    # ----- rows -----

    def enroll(
        self,
        ledger: str,
        rows: Iterable[RowLike],
        *,
        chunk_size: int = DEFAULT_CHUNK,
        on_progress: Callable[[EnrollProgress], None] | None = None,
    ) -> EnrollProgress:
        """Enrolls rows (mappings, see `tally_client.rows`) from any
        iterable, a chunk at a time. Payloads are sent canonical, as
        tallyctl sends them, so a row already present with the same content
        is ALREADY_PRESENT whoever enrolled it: a re-run after a crash adds
        only what is missing. A row that cannot be enrolled raises
        `RowError` (with its index) before its chunk is sent; rows in
        CONFLICT are counted (`conflicts`, `conflict_keys`), not raised."""
        progress = EnrollProgress(0, 0, 0)
        for chunk in chunks(rows, chunk_size):
            req = ledger_pb2.EnrollRowsRequest(parent=ledger_name(ledger), rows=chunk)
            progress = progress.add(len(chunk), self.call(self.ledgers.EnrollRows, req))
            if on_progress is not None:
                on_progress(progress)
        return progress

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
        file (`format` `openai` or `anthropic`) as `tallyctl enroll --format`
        does: for a ledger whose model runs at OpenAI (or a named
        OpenAI-compatible server) OpenAI lines are kept as written; for a
        Gemini ledger both formats are converted to Gemini requests. The
        whole file is checked first: a bad line or a repeated `custom_id`
        raises `BatchFileError` and nothing is enrolled."""
        model = self.get_ledger(ledger).policy.model
        check_batch_file(path, format, model)
        return self.enroll(
            ledger, batch_rows(path, format, model), chunk_size=chunk_size, on_progress=on_progress
        )

    def get_row(self, ledger: str, key: str) -> Row:
        """One row with its attempts history."""
        req = ledger_pb2.GetRowRequest(name=f"{ledger_name(ledger)}/rows/{key}")
        return Row.from_pb(self.call(self.ledgers.GetRow, req))

    def _pb_pages(
        self,
        ledger: str,
        *,
        statuses: StatusLike | Sequence[StatusLike] = (),
        rule: str = "",
        job: str = "",
        in_job: str = "",
        model: str = "",
        prompt: str = "",
        full: bool = False,
        page_size: int = 1000,
        after: str = "",
    ) -> Iterator[tuple[list[ledger_pb2.Row], str]]:
        token = after
        while True:
            req = list_request(
                ledger,
                statuses=statuses,
                rule=rule,
                job=job,
                in_job=in_job,
                model=model,
                prompt=prompt,
                full=full,
                page_size=page_size,
                token=token,
            )
            page = self.call(self.ledgers.ListRows, req)
            yield list(page.rows), page.next_page_token
            if not page.next_page_token:
                return
            token = page.next_page_token

    def pages(
        self,
        ledger: str,
        *,
        statuses: StatusLike | Sequence[StatusLike] = (),
        rule: str = "",
        job: str = "",
        in_job: str = "",
        model: str = "",
        prompt: str = "",
        full: bool = False,
        page_size: int = 1000,
        after: str = "",
    ) -> Iterator[RowPage]:
        """Pages of rows, each with the cursor after it (`""` after the
        last; pass it as `after` to resume with the same filters).
        `statuses` takes `RowStatus` members or their names; `job` selects
        the rows whose latest job it is, `in_job` the rows the job was made
        with; `prompt` is `name` or `name@version`; `full` adds payload,
        result and history. `page.to_arrow()` / `page.to_pandas()` make a
        table of a page."""
        for rows, cursor in self._pb_pages(
            ledger,
            statuses=statuses,
            rule=rule,
            job=job,
            in_job=in_job,
            model=model,
            prompt=prompt,
            full=full,
            page_size=page_size,
            after=after,
        ):
            yield RowPage([Row.from_pb(r) for r in rows], cursor)

    def rows(
        self,
        ledger: str,
        *,
        statuses: StatusLike | Sequence[StatusLike] = (),
        rule: str = "",
        job: str = "",
        in_job: str = "",
        model: str = "",
        prompt: str = "",
        full: bool = False,
        page_size: int = 1000,
    ) -> Iterator[Row]:
        """Every row that matches (see `pages`), one page in memory at a time."""
        for page in self.pages(
            ledger,
            statuses=statuses,
            rule=rule,
            job=job,
            in_job=in_job,
            model=model,
            prompt=prompt,
            full=full,
            page_size=page_size,
        ):
            yield from page.rows

    def export_rows(
        self,
        ledger: str,
        out: TextIO,
        *,
        format: ExportFormat = "jsonl",
        statuses: StatusLike | Sequence[StatusLike] = (),
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
        statuses: StatusLike | Sequence[StatusLike],
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
        for page, cursor in self._pb_pages(
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
        statuses: StatusLike | Sequence[StatusLike] = (),
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
        report_batch: int = 100,
    ) -> ClaimSession:
        """Claims up to `max_rows` runnable rows. The session is always
        returned: empty (falsy, no rows) when nothing is runnable or the
        ledger is paused (`session.pause` says why). Use it as a context
        manager: it extends the lease in the background (a failed
        extension is raised by the session's next call), sends reports in
        batches of `report_batch`, and when it ends sends what is left and
        gives back every row not reported (no attempt counted)."""
        req = claim_request(ledger, max_rows, lease=lease, worker=worker, model=model)
        r: ledger_pb2.ClaimRowsResponse = self.call(self.ledgers.ClaimRows, req)
        return ClaimSession(self, r, lease, report_batch, req)

    # ----- jobs -----

    def jobs(self, ledger: str, *, states: Sequence[JobState | str] = ()) -> Iterator[Job]:
        """The ledger's jobs (newest first), each with the provider and
        model its rows run at; `states` limits them (`["RUNNING"]`)."""
        token = ""
        while True:
            page = self.call(self.jobs_stub.ListJobs, jobs_request(ledger, states, token))
            yield from (Job.from_pb(j) for j in page.jobs)
            if not page.next_page_token:
                return
            token = page.next_page_token

    def watch_jobs(
        self,
        ledger: str,
        *,
        after_sequence: int = 0,
        reconnect_delay: float = 1.0,
        max_reconnects: int = 60,
    ) -> Iterator[job_pb2.JobEvent]:
        """Job events as they happen (`after_sequence` -1: from the first
        one stored), resuming after the last one seen when the stream
        breaks (up to `max_reconnects` times in a row)."""
        last = after_sequence
        failures = 0
        while True:
            req = job_pb2.WatchJobsRequest(parent=ledger_name(ledger), after_sequence=last)
            try:
                for event in self.jobs_stub.WatchJobs(req, metadata=self._metadata):
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

    # ----- delivery -----

    def consume(
        self,
        ledger: str,
        consumer: str,
        *,
        create: bool = True,
        start: Start | str = Start.BEGINNING,
        batch: int = 10,
        wait: float = 5.0,
        visibility: float | None = None,
        include_payload: bool = False,
        until_empty: bool = False,
        limit: int | None = None,
        retries: int = 30,
    ) -> Consumption:
        """The ledger's finished results (SUCCEEDED and PERMANENT rows, in
        commit order) through the named consumer, made first (at `start`)
        unless it exists or `create=False`:

            for result in tally.consume("reviews-nightly", "morning-sink"):
                db.upsert(result.identity, result.result)

        A result is acknowledged when the loop asks for the next one, once
        the body has finished with it. Leaving the loop (an exception, a
        break, a kill) leaves the current result unacknowledged: it is
        handed out again after its visibility timeout (`visibility`
        seconds, else the consumer's), so nothing is skipped and a result
        may come twice; deduplicate on `result.identity`. Results received
        but not yet reached are given back at once; so is the current one
        when the loop runs in a `with` block that an exception ends
        (`with tally.consume(...) as results: for result in results: ...`). `batch` results are
        received at a time; each receive waits up to `wait` seconds for one.
        It runs until the loop ends, with `until_empty` until a receive that
        waited finds nothing, and with `limit` once that many results were
        acknowledged. A server that is briefly unreachable is
        retried (`retries` times in a row, a second apart)."""
        core = ConsumeCore(
            ledger,
            consumer,
            batch=batch,
            wait=wait,
            visibility=visibility,
            include_payload=include_payload,
            until_empty=until_empty,
            limit=limit,
        )
        if create:
            try:
                self.call(self.deliveries.CreateConsumer, core.create_request(start))
            except AlreadyExists:
                pass
        return Consumption(self._consume(core, retries))

    def _retrying(self, retries: int, method: Callable[..., Any], req: Any, wait: float) -> Any:
        for attempt in range(retries + 1):
            try:
                return self.call(method, req, wait=wait)
            except (Unavailable, DeadlineExceeded):
                if attempt == retries:
                    raise
                time.sleep(1.0)
        raise AssertionError("unreachable")

    def _consume(self, core: ConsumeCore, retries: int) -> Generator[Delivery, None, None]:
        try:
            while True:
                page = self._retrying(
                    retries, self.deliveries.ReceiveResults, core.receive_request(), core.wait
                )
                if core.received(page) == 0:
                    if core.until_empty:
                        return
                    continue
                while (result := core.next()) is not None:
                    try:
                        yield result
                    except Exception:
                        # Thrown in by `Consumption.__exit__`: the body
                        # failed on it, so it goes back with the rest.
                        core.keep(result)
                        raise
                    # The loop asked for the next one: this one is done.
                    answer = self._retrying(
                        retries, self.deliveries.AckResults, core.ack_request([result.position]), 0
                    )
                    if core.lease_lost(answer):
                        break
                    if core.acked():
                        return
        finally:
            back = core.give_back()
            if back is not None:
                with contextlib.suppress(TallyError):
                    self.call(self.deliveries.NackResults, back)


class Consumption:
    """What `Client.consume` returns: an iterator of `Delivery`s, and a
    context manager whose exit gives back what was received and not
    handled (the current result too when an exception ends the block)."""

    def __init__(self, results: Generator[Delivery, None, None]) -> None:
        self._results = results

    def __iter__(self) -> Consumption:
        return self

    def __next__(self) -> Delivery:
        return next(self._results)

    def close(self) -> None:
        """Gives back what was received and not reached; the current result
        stays leased until its visibility timeout."""
        self._results.close()

    def __enter__(self) -> Consumption:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if isinstance(error, Exception):
            # The generator gives the current result back and raises the
            # error again; the `with` statement raises the original.
            with contextlib.suppress(Exception):
                self._results.throw(error)
        self._results.close()


class ClaimSession:
    """Rows claimed by a Python worker (`rows`, each a `ClaimedRow` with its
    decoded payload). Empty (falsy) when nothing was runnable.

    Report with `succeed` and `fail` (queued, sent `report_batch` at a
    time and when the session ends) or `report` (sent at once). The lease
    is extended every third of it in the background; if an extension
    fails for good (the claim was lost, the ledger deleted), the next
    call on the session raises that error, and so does the end of the
    `with` block. When the session ends, queued reports are sent, then
    the rows not reported are given back (no attempt counted)."""

    def __init__(
        self,
        client: Client,
        response: ledger_pb2.ClaimRowsResponse,
        lease: float,
        report_batch: int,
        request: ledger_pb2.ClaimRowsRequest,
    ) -> None:
        self.client = client
        self._core = SessionCore(response, lease, report_batch, request)
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None

    # What was claimed.

    @property
    def name(self) -> str:
        """`ledgers/{ledger}/claims/{claim}` (the fencing token); `""` when empty."""
        return self._core.name

    @property
    def claim(self) -> ledger_pb2.Claim | None:
        return self._core.claim

    @property
    def rows(self) -> list[ClaimedRow]:
        return self._core.rows

    @property
    def pause(self) -> Pause | None:
        """Why nothing was claimed, when the ledger is paused."""
        return self._core.pause

    @property
    def truncated(self) -> bool:
        """More rows were runnable than fit in one answer."""
        return self._core.truncated

    @property
    def results(self) -> ReportResult:
        """Every verdict so far."""
        return self._core.results

    @property
    def lost(self) -> TallyError | None:
        """The error that ended the heartbeat, if one did."""
        return self._core.lost

    def __bool__(self) -> bool:
        return bool(self._core.rows)

    def __len__(self) -> int:
        return len(self._core.rows)

    def __iter__(self) -> Iterator[ClaimedRow]:
        return iter(self._core.rows)

    def __enter__(self) -> ClaimSession:
        if self._core.rows and self._heartbeat is None:
            self._heartbeat = threading.Thread(
                target=self._beat, name=f"tally-heartbeat {self.name}", daemon=True
            )
            self._heartbeat.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close(error)

    def close(self, error: BaseException | None = None) -> None:
        """Ends the session (what `with` does): stops the heartbeat, sends
        the queued reports, gives back the rows not reported. Raises the
        heartbeat's error, or one of these calls', unless `error` (the
        exception ending the block) is already on its way."""
        self._end(error, None)

    def claim_next(self, max_rows: int | None = None) -> ClaimSession:
        """Ends this session as `close` does and claims the next rows as
        `Client.claim` did for this one (`max_rows` to change how many):
        the last report also claims them (ReportOutcomes with
        `claim_next`, one call instead of two); with nothing left to
        report, a ClaimRows does. Returns the next session, empty when
        nothing is runnable; raises what `close` would (then nothing more
        is claimed)."""
        req = self._core.next_request(max_rows)
        try:
            self._end(None, req)
        except TallyError:
            # Nothing more is claimed: give back a claim the report took.
            release = self._core.untaken()
            if release is not None:
                with contextlib.suppress(TallyError):
                    self.client.call(self.client.ledgers.ReleaseClaim, release)
            raise
        r = self._core.next_claim
        if r is None:
            r = self.client.call(self.client.ledgers.ClaimRows, req)
        return ClaimSession(self.client, r, self._core.lease, self._core.report_batch, req)

    def _end(
        self, error: BaseException | None, claim_next: ledger_pb2.ClaimRowsRequest | None
    ) -> None:
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join()
        if not self._core.rows or self._core.closed:
            return
        self._core.closed = True
        failure: TallyError | None = None
        try:
            self._send(self._core.last_reports(claim_next))
        except TallyError as e:
            failure = e
        held = self._core.held()
        if held:
            req = ledger_pb2.ReleaseClaimRequest(name=self.name, keys=held)
            try:
                self.client.call(self.client.ledgers.ReleaseClaim, req)
            except TallyError as e:
                failure = failure or e
        failure = self._core.lost or failure
        if failure is not None and error is None:
            raise failure

    def heartbeat(self) -> None:
        """Extends the lease now (the background thread does this every
        third of the lease); raises what the server answers."""
        req = ledger_pb2.ExtendClaimRequest(name=self.name, lease=duration(self._core.lease))
        self.client.call(self.client.ledgers.ExtendClaim, req)

    def _beat(self) -> None:
        period = self._core.lease / 3
        deadline = time.monotonic() + self._core.lease
        while not self._stop.wait(period):
            while True:
                try:
                    self.heartbeat()
                    deadline = time.monotonic() + self._core.lease
                    period = self._core.lease / 3
                    break
                except (Unavailable, DeadlineExceeded) as e:
                    # A server restarting or a slow network: keep trying
                    # while the lease may still hold.
                    if time.monotonic() >= deadline:
                        self._core.lose(e)
                        return
                    if self._stop.wait(min(1.0, period)):
                        return
                except TallyError as e:
                    self._core.lose(e)
                    return

    # Reports.

    def succeed(
        self,
        key: str,
        result: Any = None,
        *,
        usage: Usage | dict[str, int] | None = None,
        result_text: str | None = None,
    ) -> None:
        """Queues a row's result (any JSON value, or `result_text` sent
        verbatim) with the tokens it used."""
        self._queue(Success(key, result, usage, result_text))

    def fail(
        self,
        key: str,
        *,
        message: str,
        http_code: int = 0,
        status: str = "",
        finish_reason: str = "",
        block_reason: str = "",
        kind: FailureKind | str = FailureKind.PROVIDER_ERROR,
        retry_delay: float | None = None,
        usage: Usage | dict[str, int] | None = None,
    ) -> None:
        """Queues the facts of a failure; the server's classifier decides."""
        self._queue(
            Failure(
                key,
                message,
                http_code,
                status,
                finish_reason,
                block_reason,
                kind,
                retry_delay,
                usage,
            )
        )

    def _queue(self, outcome: Outcome) -> None:
        if self._core.queue(outcome):
            self._send(self._core.take_queue())

    def flush(self) -> ReportResult:
        """Sends the queued reports now; their verdicts."""
        return self._send(self._core.take_queue())

    def report(self, outcomes: Iterable[Outcome]) -> ReportResult:
        """Sends these outcomes (and anything queued) now; their verdicts."""
        for outcome in outcomes:
            self._core.queue(outcome)
        return self.flush()

    def _send(self, batches: list[ledger_pb2.ReportOutcomesRequest]) -> ReportResult:
        self._core.check()
        total = ReportResult()
        for req in batches:
            r = self.client.call(self.client.ledgers.ReportOutcomes, req)
            total += self._core.reported(req, r)
        return total
