"""The asyncio client against a real tally-server: the same calls as the
sync client, awaited."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import pytest

from tally_client import AlreadyExists, NotFound, RowStatus, Usage, derive_key
from tally_client.aio import AsyncClient


async def rows_of(n: int) -> AsyncIterator[dict[str, object]]:
    for i in range(n):
        yield {"key": derive_key("aio", str(i)), "payload": {"n": i}}


def test_the_async_client_enrolls_claims_reports_and_lists(address: str) -> None:
    async def scenario() -> None:
        ledger = f"py-aio-{uuid.uuid4().hex[:10]}"
        async with AsyncClient(f"http://{address}") as tally:
            created, was_created = await tally.get_or_create_ledger(
                ledger, {"budgets": {"provider": 2}}
            )
            assert was_created and created.policy.budgets.provider == 2
            assert (await tally.get_or_create_ledger(ledger))[1] is False
            with pytest.raises(AlreadyExists):
                await tally.create_ledger(ledger)
            first = await tally.enroll(ledger, rows_of(5), chunk_size=2)
            assert (first.sent, first.enrolled) == (5, 5)
            again = await tally.enroll(
                ledger, [{"key": derive_key("aio", "0"), "payload": {"n": 0}}]
            )
            assert again.already_present == 1
            async with await tally.claim(ledger, 10, report_batch=2) as session:
                assert len(session) == 5
                for row in session:
                    if row.payload["n"] < 4:
                        await session.succeed(
                            row.key, {"double": 2 * row.payload["n"]}, usage=Usage(3, 1)
                        )
                assert session.results.succeeded == 4, "two full batches went out"
            summary = await tally.summarize(ledger)
            assert (summary.succeeded, summary.pending, summary.usage.input_tokens) == (4, 1, 12)
            done = [r async for r in tally.rows(ledger, statuses=[RowStatus.SUCCEEDED], full=True)]
            assert sorted(r.result["double"] for r in done) == [0, 2, 4, 6]
            async with await tally.claim(ledger, 10) as rest:
                assert len(rest) == 1, "the row not reported was given back"
                await rest.fail(rest.rows[0].key, message="bad input", http_code=400)
            async with await tally.claim(ledger, 10) as empty:
                assert not empty and empty.rows == []
            assert (await tally.summarize(ledger)).permanent == 1

    asyncio.run(scenario())


def test_the_async_claim_next_claims_with_the_last_report(address: str) -> None:
    # Invariant: as the sync client's: each row is handed out once and
    # reported once, the loop ends with an empty session.
    async def scenario() -> None:
        ledger = f"py-aio-{uuid.uuid4().hex[:10]}"
        async with AsyncClient(f"http://{address}") as tally:
            await tally.create_ledger(ledger)
            await tally.enroll(ledger, rows_of(5))
            seen: list[str] = []
            session = await tally.claim(ledger, 2)
            while session:
                async with session:
                    for row in session:
                        seen.append(row.key)
                        await session.succeed(row.key, {})
                    session = await session.claim_next()
            assert len(seen) == 5 and len(set(seen)) == 5
            summary = await tally.summarize(ledger)
            assert (summary.succeeded, summary.attempts_total) == (5, 5)

    asyncio.run(scenario())


def test_the_async_heartbeat_failure_reaches_the_caller(address: str) -> None:
    async def scenario() -> None:
        ledger = f"py-aio-{uuid.uuid4().hex[:10]}"
        async with AsyncClient(address) as tally:
            await tally.create_ledger(ledger)
            await tally.enroll(ledger, rows_of(1))
            session = await tally.claim(ledger, 1, lease=3)
            with pytest.raises(NotFound, match="heartbeat failed"):
                async with session:
                    await tally.delete_ledger(ledger, force=True)
                    deadline = time.monotonic() + 30
                    while session.lost is None:
                        assert time.monotonic() < deadline, "the heartbeat never ran"
                        await asyncio.sleep(0.05)
                    await session.flush()

    asyncio.run(scenario())
