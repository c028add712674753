"""Consuming results through a named consumer (issue 52) against a real
tally-server: the sync iterator, its asyncio twin and the Prefect task. A
result is acknowledged when the loop asks for the next one; one left by an
exception comes back; nothing is skipped. Each test says the invariant it
checks."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prefect import flow

from tally_client import Client, Delivery, InvalidArgument, RowStatus, pb
from tally_client.aio import AsyncClient
from tally_prefect import TallyServer, deliver_results


def finish(tally: Client, ledger: str, n: int, *, fail: set[str] | None = None) -> list[str]:
    """Enrolls `n` rows and settles them as a worker would: the keys in
    `fail` PERMANENT, the rest SUCCEEDED. Answers the keys."""
    keys = [f"k{i:03}" for i in range(n)]
    tally.enroll(ledger, [{"key": k, "payload": {"i": i}} for i, k in enumerate(keys)])
    with tally.claim(ledger, n) as session:
        for row in session:
            if fail and row.key in fail:
                session.fail(row.key, message="bad request", http_code=400)
            else:
                session.succeed(row.key, {"label": row.key.upper()})
    return keys


def test_each_result_is_delivered_once_and_acknowledged_as_the_loop_moves_on(
    tally: Client, ledger: str
) -> None:
    # Invariant: a consumer gets every final result once, with its version
    # and decoded result; acknowledged results are not handed out again.
    keys = finish(tally, ledger, 12, fail={"k003"})
    got: list[Delivery] = list(tally.consume(ledger, "sink", batch=5, wait=0.5, until_empty=True))
    assert sorted(d.key for d in got) == keys
    by_key = {d.key: d for d in got}
    assert by_key["k000"].result == {"label": "K000"}
    assert by_key["k000"].status is RowStatus.SUCCEEDED
    assert by_key["k003"].status is RowStatus.PERMANENT and by_key["k003"].result is None
    assert all(d.version == 1 and d.delivery_count == 1 for d in got)
    assert by_key["k005"].identity == (ledger, "k005", 1)
    assert list(tally.consume(ledger, "sink", wait=0.5, until_empty=True)) == []


def test_a_result_left_by_an_exception_is_handed_out_again(tally: Client, ledger: str) -> None:
    # Invariant: leaving the loop with an exception acknowledges nothing
    # more: the result being handled comes again after its visibility
    # timeout, those received and not reached come again at once; nothing
    # is skipped and what was acknowledged does not come again.
    keys = finish(tally, ledger, 10)
    done: list[str] = []
    with pytest.raises(RuntimeError, match="sink down"):
        for result in tally.consume(ledger, "sink", batch=10, visibility=1, until_empty=True):
            if len(done) == 4:
                raise RuntimeError("sink down")
            done.append(result.key)
    again = list(tally.consume(ledger, "sink", batch=10, wait=5, until_empty=True))
    assert sorted(done + [d.key for d in again]) == keys
    assert all(d.delivery_count == 2 for d in again)
    assert keys[4] in [d.key for d in again]


def test_a_loop_that_lost_its_leases_leaves_the_rest_to_the_instance_that_has_them(
    tally: Client, ledger: str
) -> None:
    # Invariant: a loop slower than the visibility timeout whose results
    # went to another instance (which acknowledged them) learns so at its
    # next acknowledgement and hands its loop none of the rest it held: only
    # the result it was on is seen twice, and every result is acknowledged
    # once, by the instance that had it.
    keys = finish(tally, ledger, 3)
    slow = tally.consume(ledger, "sink", batch=3, visibility=1, wait=0.5, until_empty=True)
    first = next(slow)
    other = list(tally.consume(ledger, "sink", batch=10, wait=5, until_empty=True))
    assert sorted(d.key for d in other) == keys
    assert list(slow) == [], "the slow loop gets none of what it lost"
    assert first.key in keys
    assert list(tally.consume(ledger, "sink", wait=0.5, until_empty=True)) == []


def test_a_redrive_delivers_the_new_answers_at_a_higher_version(tally: Client, ledger: str) -> None:
    # Invariant: after a redrive that answers again, the consumer gets the
    # changed results again, each at version 2, and nothing else.
    finish(tally, ledger, 6, fail={"k001", "k004"})
    assert len(list(tally.consume(ledger, "sink", wait=0.5, until_empty=True))) == 6
    tally.call(
        tally.ledgers.RedriveRows,
        pb.ledger_pb2.RedriveRowsRequest(
            parent=f"ledgers/{ledger}", keys=pb.ledger_pb2.RowKeys(keys=["k001", "k004"])
        ),
    )
    with tally.claim(ledger, 10) as session:
        for row in session:
            session.succeed(row.key, {"label": "fixed"})
    again = list(tally.consume(ledger, "sink", wait=0.5, until_empty=True))
    assert sorted((d.key, d.version, d.result["label"]) for d in again) == [
        ("k001", 2, "fixed"),
        ("k004", 2, "fixed"),
    ]
    # The row says which version it holds; a row not final holds none.
    assert (
        tally.get_row(ledger, "k001").result_version,
        tally.get_row(ledger, "k000").result_version,
    ) == (2, 1)


def test_bad_arguments_are_refused_before_anything_is_sent(tally: Client, ledger: str) -> None:
    with pytest.raises(ValueError, match="batch"):
        tally.consume(ledger, "sink", batch=0)
    with pytest.raises(ValueError, match="wait"):
        tally.consume(ledger, "sink", wait=60)
    with pytest.raises(InvalidArgument):
        next(iter(tally.consume(ledger, "Not-A-Consumer", wait=0)))


def test_the_async_iterator_acknowledges_as_the_loop_moves_on(
    address: str, tally: Client, ledger: str
) -> None:
    # Invariant: as the sync iterator: every result once, acknowledged.
    keys = finish(tally, ledger, 7)

    async def scenario() -> tuple[list[str], list[str]]:
        async with AsyncClient(f"http://{address}") as aio:
            first = [
                d.key
                async for d in aio.consume(ledger, "sink", batch=3, until_empty=True, wait=0.5)
            ]
            second = [d.key async for d in aio.consume(ledger, "sink", until_empty=True, wait=0.5)]
            return first, second

    first, second = asyncio.run(scenario())
    assert sorted(first) == keys and second == []


def test_the_async_iterator_gives_back_what_an_exception_left(
    address: str, tally: Client, ledger: str
) -> None:
    # Invariant: as the sync iterator, leaving an `async with` block with an
    # exception acknowledges nothing more: the result being handled comes
    # again after its visibility timeout, the ones received and not reached
    # come again at once, and nothing acknowledged comes again.
    keys = finish(tally, ledger, 8)

    async def scenario() -> tuple[list[str], list[Delivery]]:
        done: list[str] = []
        async with AsyncClient(f"http://{address}") as aio:
            with pytest.raises(RuntimeError, match="sink down"):
                async with aio.consume(
                    ledger, "sink", batch=8, visibility=1, until_empty=True
                ) as results:
                    async for result in results:
                        if len(done) == 3:
                            raise RuntimeError("sink down")
                        done.append(result.key)
            again = [
                d async for d in aio.consume(ledger, "sink", batch=8, wait=5, until_empty=True)
            ]
            return done, again

    done, again = asyncio.run(scenario())
    assert sorted(done + [d.key for d in again]) == keys
    assert all(d.delivery_count == 2 for d in again)


def test_deliver_results_hands_each_new_result_to_the_callable_once(
    prefect_api: str, address: str, tally: Client, ledger: str
) -> None:
    # Invariant: the Prefect task delivers each result once across runs (the
    # consumer's cursor is tally's), a run stopped by a failing callable
    # leaves that result for the next run, and new results come next time.
    server = TallyServer(address=address)
    finish(tally, ledger, 5)
    sink: dict[tuple[str, str, int], Any] = {}
    calls: list[str] = []

    def write(result: Delivery) -> None:
        calls.append(result.key)
        if result.key == "k002" and calls.count("k002") == 1:
            raise ConnectionError("database down")
        sink[result.identity] = result.result

    @flow
    def deliver() -> dict[str, int]:
        return deliver_results(ledger, "morning", write, server=server, wait=0.5)

    with pytest.raises(ConnectionError):
        deliver()
    first = deliver()
    assert sorted(k for _, k, _ in sink) == ["k000", "k001", "k002", "k003", "k004"]
    assert calls.count("k002") == 2 and first["redelivered"] >= 1
    tally.enroll(ledger, [{"key": "k900", "payload": {}}])
    with tally.claim(ledger, 1) as session:
        for row in session:
            session.succeed(row.key, {"label": "late"})
    assert deliver()["delivered"] == 1
    assert sink[(ledger, "k900", 1)] == {"label": "late"}
