"""The client for asyncio: `AsyncClient` has the calls of `Client` (but
the exports and the archive, which write files page by page: run those on
a thread with the sync client), awaited, with listings, the job watch and `consume` as
async iterators and the claim session as an async context manager whose
heartbeat is a task.

    from tally_client.aio import AsyncClient

    async with AsyncClient() as tally:
        await tally.get_or_create_ledger("reviews")
        await tally.enroll("reviews", rows)
        async with await tally.claim("reviews", 100) as session:
            for row in session:
                await session.succeed(row.key, await answer(row.payload))
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Callable,
    Iterable,
    Sequence,
)
from types import TracebackType
from typing import Any

import grpc
import grpc.aio

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
from tally_client.consume import ConsumeCore, Delivery, Start
from tally_client.errors import (
    AlreadyExists,
    DeadlineExceeded,
    NotFound,
    TallyError,
    Unavailable,
    from_rpc_error,
)
from tally_client.rows import RowLike, row_input
from tally_client.session import SessionCore
from tally_client.types import (
    ClaimedRow,
    FailureKind,
    Forecast,
    Job,
    JobState,
    Ledger,
    Pause,
    ReportResult,
    Row,
    RowPage,
    Summary,
    Usage,
)

__all__ = ["AsyncClaimSession", "AsyncClient", "AsyncConsumption"]


class AsyncClient:
    """One asyncio connection to tally; `async with`, or `await close()`.
    Arguments as `Client`'s (`TALLY_SERVER` and `TALLY_TOKEN` when not
    given)."""

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
        self.address = target
        token = token or os.environ.get("TALLY_TOKEN") or None
        warn_plaintext_token(target, token)
        if target.tls:
            creds = grpc.ssl_channel_credentials(root_certificates=root_certificates)
            self._channel = grpc.aio.secure_channel(target.target, creds, options=CHANNEL_OPTIONS)
        else:
            self._channel = grpc.aio.insecure_channel(target.target, options=CHANNEL_OPTIONS)
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self._timeout = timeout
        # The generated stubs carry no annotations.
        self.ledgers = ledger_pb2_grpc.LedgerServiceStub(self._channel)  # type: ignore[no-untyped-call]
        self.jobs_stub = job_pb2_grpc.JobServiceStub(self._channel)  # type: ignore[no-untyped-call]
        self.deliveries = delivery_pb2_grpc.DeliveryServiceStub(self._channel)  # type: ignore[no-untyped-call]

    async def close(self) -> None:
        await self._channel.close(grace=None)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.close()

    async def call(self, method: Callable[..., Any], request: Any, *, wait: float = 0.0) -> Any:
        """Awaits a unary RPC of `ledgers`, `jobs` or `deliveries`, raising
        `TallyError`; `wait` adds to the call's timeout (a long poll)."""
        try:
            return await method(request, timeout=self._timeout + wait, metadata=self._metadata)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    # ----- ledgers -----

    async def create_ledger(self, ledger_id: str, policy: PolicyLike | None = None) -> Ledger:
        req = ledger_pb2.CreateLedgerRequest(ledger_id=ledger_id, policy=policy_message(policy))
        return Ledger.from_pb(await self.call(self.ledgers.CreateLedger, req))

    async def get_or_create_ledger(
        self, ledger_id: str, policy: PolicyLike | None = None
    ) -> tuple[Ledger, bool]:
        """As `Client.get_or_create_ledger`."""
        asked = policy_message(policy)
        for _ in range(3):
            try:
                return await self.create_ledger(ledger_id, asked), True
            except AlreadyExists:
                pass
            try:
                return existing_ledger(ledger_id, await self.get_ledger(ledger_id), asked), False
            except NotFound:
                continue
        raise AlreadyExists(
            grpc.StatusCode.ALREADY_EXISTS,
            f"ledger {ledger_id} kept appearing and disappearing; try again",
        )

    async def get_ledger(self, ledger: str) -> Ledger:
        req = ledger_pb2.GetLedgerRequest(name=ledger_name(ledger))
        return Ledger.from_pb(await self.call(self.ledgers.GetLedger, req))

    async def list_ledgers(self, *, show_deleted: bool = False) -> AsyncIterator[Ledger]:
        token = ""
        while True:
            req = ledger_pb2.ListLedgersRequest(
                page_size=1000, page_token=token, show_deleted=show_deleted
            )
            page = await self.call(self.ledgers.ListLedgers, req)
            for m in page.ledgers:
                yield Ledger.from_pb(m)
            if not page.next_page_token:
                return
            token = page.next_page_token

    async def update_ledger(self, ledger: str, policy: PolicyLike, *, etag: str = "") -> Ledger:
        req = update_request(ledger, policy, etag)
        return Ledger.from_pb(await self.call(self.ledgers.UpdateLedger, req))

    async def pause_ledger(self, ledger: str, message: str) -> Ledger:
        req = ledger_pb2.PauseLedgerRequest(name=ledger_name(ledger), message=message)
        return Ledger.from_pb(await self.call(self.ledgers.PauseLedger, req))

    async def resume_ledger(self, ledger: str) -> Ledger:
        req = ledger_pb2.ResumeLedgerRequest(name=ledger_name(ledger))
        return Ledger.from_pb(await self.call(self.ledgers.ResumeLedger, req))

    async def delete_ledger(
        self, ledger: str, *, force: bool = False, etag: str = "", content_etag: str = ""
    ) -> Ledger:
        """As `Client.delete_ledger`."""
        req = ledger_pb2.DeleteLedgerRequest(
            name=ledger_name(ledger), force=force, etag=etag, content_etag=content_etag
        )
        return Ledger.from_pb(await self.call(self.ledgers.DeleteLedger, req))

    async def summarize(self, ledger: str) -> Summary:
        req = ledger_pb2.SummarizeLedgerRequest(name=ledger_name(ledger))
        return Summary.from_pb(await self.call(self.ledgers.SummarizeLedger, req))

    async def forecast(self, ledger: str) -> Forecast:
        """When the ledger is forecast to finish and what its unfinished rows
        cost, under the plan its deadline and lanes make and under
        all-batch (tally-server's README, "The critical path")."""
        req = ledger_pb2.SummarizeLedgerRequest(name=ledger_name(ledger), forecast=True)
        return Forecast.from_pb((await self.call(self.ledgers.SummarizeLedger, req)).forecast)

    # ----- rows -----

    async def enroll(
        self,
        ledger: str,
        rows: Iterable[RowLike] | AsyncIterable[RowLike],
        *,
        chunk_size: int = DEFAULT_CHUNK,
        on_progress: Callable[[EnrollProgress], None] | None = None,
    ) -> EnrollProgress:
        """As `Client.enroll`; `rows` may also be an async iterable."""
        progress = EnrollProgress(0, 0, 0)

        async def send(chunk: list[ledger_pb2.RowInput]) -> None:
            nonlocal progress
            req = ledger_pb2.EnrollRowsRequest(parent=ledger_name(ledger), rows=chunk)
            progress = progress.add(len(chunk), await self.call(self.ledgers.EnrollRows, req))
            if on_progress is not None:
                on_progress(progress)

        if isinstance(rows, AsyncIterable):
            if not 1 <= chunk_size <= 10_000:
                raise ValueError("chunk_size must be between 1 and 10000")
            chunk: list[ledger_pb2.RowInput] = []
            index = 0
            async for row in rows:
                chunk.append(row_input(row, index))
                index += 1
                if len(chunk) == chunk_size:
                    await send(chunk)
                    chunk = []
            if chunk:
                await send(chunk)
        else:
            for ready in chunks(rows, chunk_size):
                await send(ready)
        return progress

    async def get_row(self, ledger: str, key: str) -> Row:
        req = ledger_pb2.GetRowRequest(name=f"{ledger_name(ledger)}/rows/{key}")
        return Row.from_pb(await self.call(self.ledgers.GetRow, req))

    async def pages(
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
    ) -> AsyncIterator[RowPage]:
        """As `Client.pages`."""
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
            page = await self.call(self.ledgers.ListRows, req)
            yield RowPage([Row.from_pb(r) for r in page.rows], page.next_page_token)
            if not page.next_page_token:
                return
            token = page.next_page_token

    async def rows(
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
    ) -> AsyncIterator[Row]:
        """As `Client.rows`."""
        async for page in self.pages(
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
            for row in page.rows:
                yield row

    # ----- workers -----

    async def claim(
        self,
        ledger: str,
        max_rows: int,
        *,
        lease: float = 60.0,
        worker: str = "python",
        model: str = "",
        report_batch: int = 100,
    ) -> AsyncClaimSession:
        """As `Client.claim`: always a session (empty when nothing is
        runnable); use it with `async with`."""
        req = claim_request(ledger, max_rows, lease=lease, worker=worker, model=model)
        r: ledger_pb2.ClaimRowsResponse = await self.call(self.ledgers.ClaimRows, req)
        return AsyncClaimSession(self, r, lease, report_batch, req)

    # ----- jobs -----

    async def jobs(
        self, ledger: str, *, states: Sequence[JobState | str] = ()
    ) -> AsyncIterator[Job]:
        """As `Client.jobs`."""
        token = ""
        while True:
            page = await self.call(self.jobs_stub.ListJobs, jobs_request(ledger, states, token))
            for j in page.jobs:
                yield Job.from_pb(j)
            if not page.next_page_token:
                return
            token = page.next_page_token

    async def watch_jobs(
        self,
        ledger: str,
        *,
        after_sequence: int = 0,
        reconnect_delay: float = 1.0,
        max_reconnects: int = 60,
    ) -> AsyncIterator[job_pb2.JobEvent]:
        """As `Client.watch_jobs`."""
        last = after_sequence
        failures = 0
        while True:
            req = job_pb2.WatchJobsRequest(parent=ledger_name(ledger), after_sequence=last)
            try:
                async for event in self.jobs_stub.WatchJobs(req, metadata=self._metadata):
                    failures = 0
                    last = event.sequence
                    yield event
                return
            except grpc.RpcError as e:
                error = from_rpc_error(e)
                if error.code != grpc.StatusCode.UNAVAILABLE or failures >= max_reconnects:
                    raise error from None
                failures += 1
                await asyncio.sleep(reconnect_delay)

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
    ) -> AsyncConsumption:
        """As `Client.consume`, for `async for` (and `async with`): a result
        is acknowledged when the loop asks for the next one."""
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
        return AsyncConsumption(self._consume(core, start if create else None, retries))

    async def _consume(
        self, core: ConsumeCore, start: Start | str | None, retries: int
    ) -> AsyncGenerator[Delivery, None]:
        if start is not None:
            try:
                await self.call(self.deliveries.CreateConsumer, core.create_request(start))
            except AlreadyExists:
                pass
        try:
            while True:
                page = await self._retrying(
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
                        # Thrown in by `AsyncConsumption.__aexit__`.
                        core.keep(result)
                        raise
                    # The loop asked for the next one: this one is done.
                    answer = await self._retrying(
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
                    await self.call(self.deliveries.NackResults, back)

    async def _retrying(
        self, retries: int, method: Callable[..., Any], req: Any, wait: float
    ) -> Any:
        for attempt in range(retries + 1):
            try:
                return await self.call(method, req, wait=wait)
            except (Unavailable, DeadlineExceeded):
                if attempt == retries:
                    raise
                await asyncio.sleep(1.0)
        raise AssertionError("unreachable")


class AsyncConsumption:
    """What `AsyncClient.consume` returns: an async iterator of
    `Delivery`s, and an async context manager, as `Consumption`."""

    def __init__(self, results: AsyncGenerator[Delivery, None]) -> None:
        self._results = results

    def __aiter__(self) -> AsyncConsumption:
        return self

    async def __anext__(self) -> Delivery:
        return await self._results.__anext__()

    async def aclose(self) -> None:
        await self._results.aclose()

    async def __aenter__(self) -> AsyncConsumption:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if isinstance(error, Exception):
            with contextlib.suppress(Exception):
                await self._results.athrow(error)
        await self._results.aclose()


class AsyncClaimSession:
    """`ClaimSession` for asyncio: `await succeed(...)` and `await
    fail(...)` queue (sending a batch when one is full), `await flush()` and
    `await report(...)` send; the heartbeat is a task; `async with` ends it
    as `ClaimSession`'s `with` does."""

    def __init__(
        self,
        client: AsyncClient,
        response: ledger_pb2.ClaimRowsResponse,
        lease: float,
        report_batch: int,
        request: ledger_pb2.ClaimRowsRequest,
    ) -> None:
        self.client = client
        self._core = SessionCore(response, lease, report_batch, request)
        self._heartbeat: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return self._core.name

    @property
    def claim(self) -> ledger_pb2.Claim | None:
        return self._core.claim

    @property
    def rows(self) -> list[ClaimedRow]:
        return self._core.rows

    @property
    def pause(self) -> Pause | None:
        return self._core.pause

    @property
    def truncated(self) -> bool:
        return self._core.truncated

    @property
    def results(self) -> ReportResult:
        return self._core.results

    @property
    def lost(self) -> TallyError | None:
        return self._core.lost

    def __bool__(self) -> bool:
        return bool(self._core.rows)

    def __len__(self) -> int:
        return len(self._core.rows)

    def __iter__(self) -> Any:
        return iter(self._core.rows)

    async def __aenter__(self) -> AsyncClaimSession:
        if self._core.rows and self._heartbeat is None:
            self._heartbeat = asyncio.create_task(self._beat(), name=f"tally-heartbeat {self.name}")
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.close(error)

    async def close(self, error: BaseException | None = None) -> None:
        """As `ClaimSession.close`."""
        await self._end(error, None)

    async def claim_next(self, max_rows: int | None = None) -> AsyncClaimSession:
        """As `ClaimSession.claim_next`."""
        req = self._core.next_request(max_rows)
        try:
            await self._end(None, req)
        except TallyError:
            # Nothing more is claimed: give back a claim the report took.
            release = self._core.untaken()
            if release is not None:
                with contextlib.suppress(TallyError):
                    await self.client.call(self.client.ledgers.ReleaseClaim, release)
            raise
        r = self._core.next_claim
        if r is None:
            r = await self.client.call(self.client.ledgers.ClaimRows, req)
        return AsyncClaimSession(self.client, r, self._core.lease, self._core.report_batch, req)

    async def _end(
        self, error: BaseException | None, claim_next: ledger_pb2.ClaimRowsRequest | None
    ) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            try:
                await self._heartbeat
            except asyncio.CancelledError:
                pass
        if not self._core.rows or self._core.closed:
            return
        self._core.closed = True
        failure: TallyError | None = None
        try:
            await self._send(self._core.last_reports(claim_next))
        except TallyError as e:
            failure = e
        held = self._core.held()
        if held:
            req = ledger_pb2.ReleaseClaimRequest(name=self.name, keys=held)
            try:
                await self.client.call(self.client.ledgers.ReleaseClaim, req)
            except TallyError as e:
                failure = failure or e
        failure = self._core.lost or failure
        if failure is not None and error is None:
            raise failure

    async def heartbeat(self) -> None:
        req = ledger_pb2.ExtendClaimRequest(name=self.name, lease=duration(self._core.lease))
        await self.client.call(self.client.ledgers.ExtendClaim, req)

    async def _beat(self) -> None:
        period = self._core.lease / 3
        deadline = time.monotonic() + self._core.lease
        while True:
            await asyncio.sleep(period)
            while True:
                try:
                    await self.heartbeat()
                    deadline = time.monotonic() + self._core.lease
                    break
                except (Unavailable, DeadlineExceeded) as e:
                    if time.monotonic() >= deadline:
                        self._core.lose(e)
                        return
                    await asyncio.sleep(min(1.0, period))
                except TallyError as e:
                    self._core.lose(e)
                    return

    async def succeed(
        self,
        key: str,
        result: Any = None,
        *,
        usage: Usage | dict[str, int] | None = None,
        result_text: str | None = None,
    ) -> None:
        """Queues a row's result (sent when `report_batch` are queued, by
        `flush`, or when the session ends)."""
        await self._queue(Success(key, result, usage, result_text))

    async def fail(
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
        await self._queue(
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

    async def _queue(self, outcome: Outcome) -> None:
        if self._core.queue(outcome):
            await self._send(self._core.take_queue())

    async def flush(self) -> ReportResult:
        """Sends the queued reports now; their verdicts."""
        return await self._send(self._core.take_queue())

    async def report(self, outcomes: Iterable[Outcome]) -> ReportResult:
        """Sends these outcomes (and anything queued) now; their verdicts."""
        for outcome in outcomes:
            self._core.queue(outcome)
        return await self.flush()

    async def _send(self, batches: list[ledger_pb2.ReportOutcomesRequest]) -> ReportResult:
        self._core.check()
        total = ReportResult()
        for req in batches:
            r = await self.client.call(self.client.ledgers.ReportOutcomes, req)
            total += self._core.reported(req, r)
        return total
