"""The state of a claim session, shared by the sync and the async client:
what was claimed, the queue of reports, which rows are reported, and the
error that ended the heartbeat (pure: the clients make the calls)."""

from __future__ import annotations

import dataclasses
import uuid

from tally_client._calls import DEFAULT_CHUNK, Outcome
from tally_client._proto.tally.v1 import ledger_pb2
from tally_client.errors import TallyError
from tally_client.types import ClaimedRow, Pause, ReportResult


class SessionCore:
    def __init__(
        self,
        response: ledger_pb2.ClaimRowsResponse,
        lease: float,
        report_batch: int,
        request: ledger_pb2.ClaimRowsRequest,
    ) -> None:
        if not 1 <= report_batch <= DEFAULT_CHUNK:
            raise ValueError(f"report_batch must be between 1 and {DEFAULT_CHUNK}")
        has_claim = response.HasField("claim") and bool(response.rows)
        self.claim = response.claim if has_claim else None
        self.name = response.claim.name if has_claim else ""
        self.rows = [ClaimedRow.from_pb(r) for r in response.rows] if has_claim else []
        self.pause = Pause.from_pb(response.pause, response.HasField("pause"))
        self.truncated = response.truncated
        self.lease = lease
        self.report_batch = report_batch
        self.keys = {r.key for r in self.rows}
        self.reported_keys: set[str] = set()
        self.outcomes: list[ledger_pb2.RowOutcome] = []
        self.results = ReportResult()
        self.lost: TallyError | None = None
        self.closed = False
        self.request = request
        # The answer to the `claim_next` of the session's last report.
        self.next_claim: ledger_pb2.ClaimRowsResponse | None = None

    def check(self) -> None:
        """Raises the heartbeat's error, once the lease is lost."""
        if self.lost is not None:
            raise self.lost

    def lose(self, error: TallyError) -> None:
        self.lost = dataclasses.replace(
            error, message=f"the claim's heartbeat failed, its rows may be lost: {error.message}"
        )

    def queue(self, outcome: Outcome) -> bool:
        """Queues an outcome (checked now); True when a batch is due."""
        self.check()
        if self.closed:
            raise RuntimeError(f"claim session {self.name or '(empty)'} has ended")
        if outcome.key not in self.keys:
            raise KeyError(f"row {outcome.key!r} is not a row of claim {self.name or '(empty)'}")
        self.outcomes.append(outcome.to_pb())
        return len(self.outcomes) >= self.report_batch

    def take_queue(self) -> list[ledger_pb2.ReportOutcomesRequest]:
        """The queued outcomes as requests (at most a server call's worth
        each); the queue is left empty."""
        queued, self.outcomes = self.outcomes, []
        return [
            ledger_pb2.ReportOutcomesRequest(
                claim=self.name, outcomes=queued[i : i + DEFAULT_CHUNK]
            )
            for i in range(0, len(queued), DEFAULT_CHUNK)
        ]

    def next_request(self, max_rows: int | None) -> ledger_pb2.ClaimRowsRequest:
        """The claim request of the next session: this one's, with a new
        request id (and `max_rows` when given)."""
        if max_rows is not None and max_rows < 1:
            raise ValueError(f"max_rows must be at least 1, got {max_rows}")
        req = ledger_pb2.ClaimRowsRequest()
        req.CopyFrom(self.request)
        req.request_id = str(uuid.uuid4())
        if max_rows is not None:
            req.max_rows = max_rows
        return req

    def last_reports(
        self, claim_next: ledger_pb2.ClaimRowsRequest | None
    ) -> list[ledger_pb2.ReportOutcomesRequest]:
        """The queued outcomes as requests (`take_queue`), the last one also
        claiming the next rows when `claim_next` is given."""
        batches = self.take_queue()
        if claim_next is not None and batches:
            batches[-1].claim_next.CopyFrom(claim_next)
        return batches

    def untaken(self) -> ledger_pb2.ReleaseClaimRequest | None:
        """Gives back the claim the session's last report took, for a
        `claim_next` that fails after it (None when it took none)."""
        taken = self.next_claim
        if taken is None or not taken.HasField("claim"):
            return None
        return ledger_pb2.ReleaseClaimRequest(name=taken.claim.name)

    def reported(
        self,
        request: ledger_pb2.ReportOutcomesRequest,
        response: ledger_pb2.ReportOutcomesResponse,
    ) -> ReportResult:
        self.reported_keys.update(o.key for o in request.outcomes)
        if response.HasField("next_claim"):
            self.next_claim = response.next_claim
        result = ReportResult.from_pb(response)
        self.results += result
        return result

    def held(self) -> list[str]:
        """Rows still held: neither reported nor queued."""
        return [r.key for r in self.rows if r.key not in self.reported_keys]
