"""What the sync and the async client share: requests built from Python
arguments, checked before anything is sent (pure: no I/O here)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import duration_pb2, json_format
from google.protobuf.message import Message

from tally_client._proto.tally.v1 import common_pb2, job_pb2, ledger_pb2
from tally_client.errors import AlreadyExists, FailedPrecondition
from tally_client.rows import RowLike, row_input
from tally_client.types import (
    FailureKind,
    JobState,
    Ledger,
    LedgerState,
    RowStatus,
    Usage,
)

#: The server's default rows-per-call limit (`--max-rows-per-call`).
DEFAULT_CHUNK = 1000
#: The largest message this client receives: grpc's default, set on the
#: channel explicitly and sent with every ClaimRows so the server answers
#: with fewer rows rather than a message the channel would refuse.
MAX_RECEIVE_BYTES = 4 * 1024 * 1024
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", MAX_RECEIVE_BYTES)]
#: Most keys of CONFLICT rows an enrolment keeps to show.
MAX_CONFLICT_KEYS = 100

PolicyLike = ledger_pb2.LedgerPolicy | Mapping[str, Any]
StatusLike = RowStatus | str | int


def ledger_name(ledger: str) -> str:
    """`ledgers/{id}` whichever way it was given."""
    return ledger if ledger.startswith("ledgers/") else f"ledgers/{ledger}"


def duration(seconds: float) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromNanoseconds(int(seconds * 1e9))
    return d


def policy_message(policy: PolicyLike | None) -> ledger_pb2.LedgerPolicy | None:
    """A policy message from itself or its JSON form (the form grpcurl and
    the README use: `{"budgets": {"provider": 3}, "lease": "600s"}`);
    unknown fields are refused."""
    if policy is None or isinstance(policy, ledger_pb2.LedgerPolicy):
        return policy
    if not isinstance(policy, Mapping):
        raise TypeError(f"policy must be a LedgerPolicy or a mapping, got {type(policy).__name__}")
    try:
        return json_format.ParseDict(dict(policy), ledger_pb2.LedgerPolicy())
    except json_format.ParseError as e:
        raise ValueError(f"policy: {e}") from None


def _value_text(value: Any) -> str:
    if isinstance(value, Message):
        return json.dumps(json_format.MessageToDict(value), sort_keys=True)
    if isinstance(value, Iterable) and not isinstance(value, str | bytes):
        items = [json_format.MessageToDict(v) if isinstance(v, Message) else v for v in value]
        return json.dumps(items, sort_keys=True)
    return repr(value)


def policy_differences(asked: Message, stored: Message, prefix: str = "") -> list[str]:
    """Each field set in `asked` whose value `stored` does not have, as
    `budgets.provider is 4, asked 3` (fields left unset in `asked` take
    whatever `stored` has: defaults, or an earlier update)."""
    out: list[str] = []
    for descriptor, value in asked.ListFields():
        path = prefix + descriptor.name
        current = getattr(stored, descriptor.name)
        kind = descriptor.message_type
        if kind is not None and _is_map(kind):
            if dict(value) != dict(current):
                out.append(
                    f"{path} is {_value_text(dict(current))}, asked {_value_text(dict(value))}"
                )
        elif descriptor.is_repeated:
            if list(value) != list(current):
                out.append(f"{path} is {_value_text(current)}, asked {_value_text(value)}")
        elif kind is not None and kind.full_name.startswith("tally."):
            out += policy_differences(value, current, path + ".")
        elif value != current:
            out.append(f"{path} is {_value_text(current)}, asked {_value_text(value)}")
    return out


def _is_map(kind: Any) -> bool:
    options = kind.GetOptions()
    return bool(getattr(options, "map_entry", False))


def existing_ledger(ledger_id: str, found: Ledger, asked: ledger_pb2.LedgerPolicy | None) -> Ledger:
    """The ledger get-or-create found: refused when it is being deleted, or
    when it holds another policy than the one asked for."""
    if found.state == LedgerState.DELETING:
        raise FailedPrecondition(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"ledger {ledger_id} is being deleted: wait until get_ledger raises NotFound "
            "(the purge has finished), or use another id",
            reason="LEDGER_DELETING",
        )
    differences = policy_differences(asked, found.policy) if asked is not None else []
    if differences:
        raise AlreadyExists(
            grpc.StatusCode.ALREADY_EXISTS,
            f"ledger {ledger_id} exists with another policy: {'; '.join(differences)} "
            "(change it with update_ledger, or use another id)",
            reason="LEDGER_POLICY_DIFFERS",
        )
    return found


_NESTED_PATHS = ("budgets", "backoff", "batch_fill")


def _set_paths(message: Any, prefix: str) -> list[str]:
    """The field paths a message sets, as an update mask names them (the
    server takes nested paths of `budgets`, `backoff` and `batch_fill`, so
    an update changes only the fields given)."""
    out = []
    for descriptor, value in message.ListFields():
        if descriptor.name in _NESTED_PATHS:
            out += _set_paths(value, f"{prefix}{descriptor.name}.")
        else:
            out.append(prefix + descriptor.name)
    return out


def update_request(ledger: str, policy: PolicyLike, etag: str) -> ledger_pb2.UpdateLedgerRequest:
    """UpdateLedger of the fields `policy` sets."""
    message = policy_message(policy)
    assert message is not None
    paths = sorted(_set_paths(message, "policy."))
    if not paths:
        raise ValueError("update_ledger: the policy sets no field")
    return ledger_pb2.UpdateLedgerRequest(
        ledger=ledger_pb2.Ledger(name=ledger_name(ledger), policy=message, etag=etag),
        update_mask={"paths": paths},
    )


def statuses_of(statuses: StatusLike | Sequence[StatusLike]) -> list[Any]:
    """Proto numbers of statuses given as members, names or numbers."""
    if isinstance(statuses, RowStatus | str | int):
        statuses = [statuses]
    return [RowStatus.parse(s).number for s in statuses]


def list_request(
    ledger: str,
    *,
    statuses: StatusLike | Sequence[StatusLike],
    rule: str,
    job: str,
    in_job: str,
    model: str,
    prompt: str,
    full: bool,
    page_size: int,
    token: str,
) -> ledger_pb2.ListRowsRequest:
    if not 1 <= page_size <= 1000:
        raise ValueError("page_size must be between 1 and 1000")
    prompt_name, _, prompt_version = prompt.partition("@")
    return ledger_pb2.ListRowsRequest(
        parent=ledger_name(ledger),
        filter=ledger_pb2.RowFilter(
            statuses=statuses_of(statuses),
            rule=rule,
            job=job,
            in_job=in_job,
            model=model,
            prompt_name=prompt_name,
            prompt_version=prompt_version,
        ),
        page_size=page_size,
        page_token=token,
        view=ledger_pb2.ROW_VIEW_FULL if full else ledger_pb2.ROW_VIEW_BASIC,
    )


def claim_request(
    ledger: str, max_rows: int, *, lease: float, worker: str, model: str
) -> ledger_pb2.ClaimRowsRequest:
    if max_rows < 1:
        raise ValueError(f"max_rows must be at least 1, got {max_rows}")
    if lease < 1:
        raise ValueError(f"lease must be at least 1 second, got {lease}")
    return ledger_pb2.ClaimRowsRequest(
        parent=ledger_name(ledger),
        max_rows=max_rows,
        lease=duration(lease),
        worker=worker,
        request_id=str(uuid.uuid4()),
        model=model,
        max_response_bytes=MAX_RECEIVE_BYTES,
    )


def chunks(rows: Iterable[RowLike], size: int) -> Iterable[list[ledger_pb2.RowInput]]:
    """Rows checked and made canonical, in chunks of `size`; a bad row
    raises `RowError` with its index in `rows` before its chunk is sent."""
    if not 1 <= size <= 10_000:
        raise ValueError("chunk_size must be between 1 and 10000")
    chunk: list[ledger_pb2.RowInput] = []
    for index, row in enumerate(rows):
        chunk.append(row_input(row, index))
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


@dataclass(frozen=True)
class EnrollProgress:
    """Where an enrolment is: rows sent so far, and what became of them."""

    sent: int
    enrolled: int
    already_present: int
    #: Rows whose key is enrolled with other content (left unchanged).
    conflicts: int = 0
    #: The first keys in CONFLICT (up to 100).
    conflict_keys: tuple[str, ...] = field(default=(), compare=False)

    def add(self, sent: int, response: ledger_pb2.EnrollRowsResponse) -> EnrollProgress:
        keys = self.conflict_keys
        if response.conflicts and len(keys) < MAX_CONFLICT_KEYS:
            more = [
                r.key for r in response.results if r.outcome == ledger_pb2.ENROLL_OUTCOME_CONFLICT
            ]
            keys = keys + tuple(more[: MAX_CONFLICT_KEYS - len(keys)])
        return EnrollProgress(
            self.sent + sent,
            self.enrolled + response.enrolled,
            self.already_present + response.already_present,
            self.conflicts + response.conflicts,
            keys,
        )


@dataclass(frozen=True)
class Success:
    """A row's result: any JSON value (`result`), or its JSON text
    (`result_text`, sent verbatim), with the tokens the attempt used."""

    key: str
    result: Any = None
    usage: Usage | Mapping[str, int] | None = None
    result_text: str | None = None

    def to_pb(self) -> ledger_pb2.RowOutcome:
        if self.result_text is not None:
            if self.result is not None:
                raise ValueError(f"row {self.key}: give result or result_text, not both")
            text = self.result_text
        else:
            try:
                text = json.dumps(self.result, ensure_ascii=False, allow_nan=False)
            except (TypeError, ValueError) as e:
                raise ValueError(f"row {self.key}: the result is not JSON: {e}") from None
        usage = Usage.coerce(self.usage)
        return ledger_pb2.RowOutcome(
            key=self.key, result=text, usage=usage.to_pb() if usage else None
        )


@dataclass(frozen=True)
class Failure:
    """The facts of a row's failure, as the worker saw them; the server's
    classifier decides what they mean (retry, or PERMANENT)."""

    key: str
    message: str
    http_code: int = 0
    status: str = ""
    finish_reason: str = ""
    block_reason: str = ""
    kind: FailureKind | str = FailureKind.PROVIDER_ERROR
    #: Seconds the provider asked to wait before a retry.
    retry_delay: float | None = None
    usage: Usage | Mapping[str, int] | None = None

    def to_pb(self) -> ledger_pb2.RowOutcome:
        usage = Usage.coerce(self.usage)
        failure = common_pb2.Failure(
            kind=FailureKind.parse(self.kind).number,
            http_code=self.http_code,
            status=self.status,
            message=self.message,
            finish_reason=self.finish_reason,
            block_reason=self.block_reason,
            retry_delay=duration(self.retry_delay) if self.retry_delay is not None else None,
        )
        return ledger_pb2.RowOutcome(
            key=self.key, failure=failure, usage=usage.to_pb() if usage else None
        )


Outcome = Success | Failure


def job_event_request(ledger: str, after_sequence: int) -> job_pb2.WatchJobsRequest:
    return job_pb2.WatchJobsRequest(parent=ledger_name(ledger), after_sequence=after_sequence)


def jobs_request(
    ledger: str, states: Sequence[JobState | str | int], page_token: str
) -> job_pb2.ListJobsRequest:
    """One page of ListJobs, newest first, in the given states (any when
    empty)."""
    return job_pb2.ListJobsRequest(
        parent=ledger_name(ledger),
        states=[JobState.parse(s).number for s in states],
        page_size=1000,
        page_token=page_token,
    )
