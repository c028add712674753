"""tally's gRPC errors as exceptions, with the `google.rpc` details the
server attaches (field violations, the reason of a refusal, how long to wait
before retrying) decoded from the `grpc-status-details-bin` trailer."""

from __future__ import annotations

from dataclasses import dataclass, field

import grpc
from google.rpc import error_details_pb2, status_pb2


@dataclass(frozen=True)
class FieldViolation:
    """One bad field of a request: where (`rows[3].key`) and why."""

    field: str
    description: str


@dataclass
class TallyError(Exception):
    """A call tally refused or could not answer."""

    code: grpc.StatusCode
    message: str
    field_violations: list[FieldViolation] = field(default_factory=list)
    #: `ErrorInfo.reason`, e.g. `JOB_CLOSED`, `ROLE_DENIED`.
    reason: str = ""
    #: `RetryInfo.retry_delay` in seconds, when the server asked for patience.
    retry_delay: float | None = None

    def __str__(self) -> str:
        text = f"{self.code.name}: {self.message}"
        if self.reason:
            text += f" ({self.reason})"
        for v in self.field_violations:
            text += f"\n  {v.field}: {v.description}"
        return text


class InvalidArgument(TallyError):
    """The request was wrong; `field_violations` says where."""


class NotFound(TallyError):
    """The named ledger, row, job or claim does not exist."""


class FailedPrecondition(TallyError):
    """The request is valid but not now (`reason` says why)."""


class Unavailable(TallyError):
    """The server or its database cannot be reached; retry."""


_CLASSES: dict[grpc.StatusCode, type[TallyError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
}


def from_rpc_error(error: grpc.RpcError) -> TallyError:
    """The exception for a failed call, details decoded."""
    call = error if isinstance(error, grpc.Call) else None
    code = call.code() if call else grpc.StatusCode.UNKNOWN
    message = (call.details() if call else None) or str(error)
    violations: list[FieldViolation] = []
    reason = ""
    retry_delay: float | None = None
    trailers: tuple[tuple[str, str | bytes], ...] = tuple(
        (call.trailing_metadata() if call else None) or ()
    )
    for key, value in trailers:
        if key != "grpc-status-details-bin" or not isinstance(value, bytes):
            continue
        status = status_pb2.Status.FromString(value)
        for detail in status.details:
            bad = error_details_pb2.BadRequest()
            info = error_details_pb2.ErrorInfo()
            retry = error_details_pb2.RetryInfo()
            if detail.Unpack(bad):
                violations += [FieldViolation(v.field, v.description) for v in bad.field_violations]
            elif detail.Unpack(info):
                reason = info.reason
            elif detail.Unpack(retry):
                retry_delay = retry.retry_delay.ToTimedelta().total_seconds()
    cls = _CLASSES.get(code, TallyError)
    return cls(code, message, violations, reason, retry_delay)
