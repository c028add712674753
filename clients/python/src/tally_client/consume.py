"""Consuming a ledger's results through a named consumer, shared by the sync
and the async client: the requests, the results as `Delivery` values, and
what an iteration holds (pure: the clients make the calls).

A consumer is a cursor the server keeps over the ledger's finished results
(SUCCEEDED and PERMANENT rows, in commit order). What it hands out is
leased; a result not acknowledged within the visibility timeout is handed
out again, to this or another instance of the consumer. The iterators
acknowledge a result when the loop asks for the next one, that is once the
loop's body has finished with it: a consumer killed in the middle of a
result sees it again, and nothing is skipped. `(ledger, key, version)` is
the identity a sink deduplicates on."""

from __future__ import annotations

import enum
import logging
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tally_client._calls import duration, ledger_name
from tally_client._proto.tally.v1 import delivery_pb2
from tally_client.types import PromptRef, RowStatus, Usage, decode_json, time_of

__all__ = ["ConsumeCore", "Delivery", "Start"]

log = logging.getLogger("tally_client")


class Start(str, enum.Enum):
    """Where a consumer made by `consume(create=True)` starts."""

    #: Every result the ledger's log holds.
    BEGINNING = "beginning"
    #: Only results logged from now on.
    NOW = "now"


@dataclass(frozen=True)
class Delivery:
    """One result handed to a consumer. `result` and `payload` are the
    decoded JSON (`result_text` the stored text); `version` numbers the
    row's final results (a redrive that answers again gives the next);
    `delivery_count` above 1 means it was handed out before and not
    acknowledged."""

    ledger: str
    key: str
    version: int
    status: RowStatus
    result: Any
    rule: str
    error: str
    model: str
    prompt: PromptRef | None
    attempts: int
    usage: Usage
    finish_time: datetime | None
    delivery_count: int
    lease_expire_time: datetime | None
    payload: Any
    #: The result's place in the ledger's results log (what an ack names).
    position: int = field(repr=False)
    #: `ledgers/{ledger}/rows/{key}`.
    row: str = field(repr=False)
    result_text: str = field(repr=False)
    raw: delivery_pb2.ResultDelivery = field(repr=False, compare=False)

    @property
    def identity(self) -> tuple[str, str, int]:
        """`(ledger, key, version)`: the same however many times it is
        handed out; what a sink deduplicates on."""
        return (self.ledger, self.key, self.version)

    @classmethod
    def from_pb(cls, ledger: str, r: delivery_pb2.ResultDelivery) -> Delivery:
        return cls(
            ledger=ledger,
            key=r.key,
            version=r.version,
            status=RowStatus.from_number(r.status),
            result=decode_json(r.result),
            rule=r.rule,
            error=r.error,
            model=r.model,
            prompt=PromptRef.from_pb(r.prompt, r.HasField("prompt")),
            attempts=r.attempts,
            usage=Usage.from_pb(r.usage),
            finish_time=time_of(r.finish_time, r.HasField("finish_time")),
            delivery_count=r.delivery_count,
            lease_expire_time=time_of(r.lease_expire_time, r.HasField("lease_expire_time")),
            payload=decode_json(r.payload),
            position=r.position,
            row=r.row,
            result_text=r.result,
            raw=r,
        )


class ConsumeCore:
    """One iteration over a consumer: its requests, and the results
    received and not yet handed to the loop."""

    def __init__(
        self,
        ledger: str,
        consumer: str,
        *,
        batch: int,
        wait: float,
        visibility: float | None,
        include_payload: bool,
        until_empty: bool,
        limit: int | None = None,
    ) -> None:
        if not 1 <= batch <= 1000:
            raise ValueError(f"batch must be between 1 and 1000, got {batch}")
        if not 0 <= wait <= 20:
            raise ValueError(f"wait must be between 0 and 20 seconds, got {wait}")
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        if visibility is not None and not 1 <= visibility <= 12 * 3600:
            raise ValueError(f"visibility must be between 1s and 12h, got {visibility}")
        self.ledger = ledger.removeprefix("ledgers/")
        self.consumer = consumer
        self.name = f"{ledger_name(ledger)}/consumers/{consumer}"
        self.batch = batch
        self.wait = wait
        self.visibility = visibility
        self.include_payload = include_payload
        self.until_empty = until_empty
        self.limit = limit
        self.acks = 0
        self.held: deque[Delivery] = deque()

    def create_request(self, start: Start | str) -> delivery_pb2.CreateConsumerRequest:
        at = Start(start)
        if at is Start.BEGINNING:
            begin = delivery_pb2.ConsumerStart(beginning=True)
        else:
            begin = delivery_pb2.ConsumerStart(now=True)
        consumer = delivery_pb2.Consumer()
        if self.visibility is not None:
            consumer.visibility_timeout.CopyFrom(duration(self.visibility))
        return delivery_pb2.CreateConsumerRequest(
            parent=ledger_name(self.ledger),
            consumer_id=self.consumer,
            consumer=consumer,
            start=begin,
        )

    def receive_request(self) -> delivery_pb2.ReceiveResultsRequest:
        req = delivery_pb2.ReceiveResultsRequest(
            consumer=self.name,
            max_rows=self.receive_size(),
            include_payload=self.include_payload,
        )
        if self.wait > 0:
            req.wait.CopyFrom(duration(self.wait))
        if self.visibility is not None:
            req.visibility_timeout.CopyFrom(duration(self.visibility))
        return req

    def done(self) -> bool:
        """Whether `limit` results were acknowledged."""
        return self.limit is not None and self.acks >= self.limit

    def acked(self) -> bool:
        """Counts an acknowledged result; answers `done()`."""
        self.acks += 1
        return self.done()

    def receive_size(self) -> int:
        """Results the next receive asks for (no more than `limit` needs)."""
        if self.limit is None:
            return self.batch
        return max(1, min(self.batch, self.limit - self.acks))

    def received(self, response: delivery_pb2.ReceiveResultsResponse) -> int:
        """Holds what a receive handed out; answers how many."""
        self.held.extend(Delivery.from_pb(self.ledger, r) for r in response.results)
        return len(response.results)

    def next(self) -> Delivery | None:
        return self.held.popleft() if self.held else None

    def ack_request(self, positions: list[int]) -> delivery_pb2.AckResultsRequest:
        return delivery_pb2.AckResultsRequest(consumer=self.name, positions=positions)

    def lease_lost(self, response: delivery_pb2.AckResultsResponse) -> bool:
        """Reads an acknowledgement's answer: True when the result was no
        longer leased (its visibility timeout ran out and another instance
        may have it). The rest of this receive is then left to be handed out
        again, uncounted, and the loop receives anew: at most the result
        just handled is repeated."""
        if response.not_leased == 0:
            return False
        self.held.clear()
        log.warning(
            "%s: %d result(s) were no longer leased when acknowledged (the "
            "visibility timeout ran out; another instance may have them): receiving anew",
            self.name,
            response.not_leased,
        )
        return True

    def keep(self, result: Delivery) -> None:
        """Holds `result` again (the loop failed on it): it is given back
        with the rest."""
        self.held.appendleft(result)

    def give_back(self) -> delivery_pb2.NackResultsRequest | None:
        """What was received and never handed to the loop (it stopped):
        given back, to be handed out again at once. None when nothing."""
        if not self.held:
            return None
        positions = [d.position for d in self.held]
        self.held.clear()
        return delivery_pb2.NackResultsRequest(consumer=self.name, positions=positions)
