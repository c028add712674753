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


class Cancelled(TallyError):
    """The call was cancelled (by the caller, or its deadline on the way)."""


class Unknown(TallyError):
    """The server failed in a way it did not name."""


class InvalidArgument(TallyError):
    """The request was wrong; `field_violations` says where."""


class DeadlineExceeded(TallyError):
    """The call took longer than its timeout (`Client(timeout=…)`)."""


class NotFound(TallyError):
    """The named ledger, row, job or claim does not exist."""


class AlreadyExists(TallyError):
    """What the call would create exists already (a ledger id, a prompt
    version with other text)."""


class PermissionDenied(TallyError):
    """The token's roles or ledgers do not cover the call (`reason` says
    which, e.g. ROLE_DENIED); a ledger out of scope is never revealed."""


class ResourceExhausted(TallyError):
    """A limit was reached (jobs per ledger, calls or bytes per caller);
    `retry_delay` says when to try again."""


class FailedPrecondition(TallyError):
    """The request is valid but not now (`reason` says why)."""


class Aborted(TallyError):
    """A concurrent change won (a stale etag); read again and retry."""


class OutOfRange(TallyError):
    """A value is past what the server accepts (a page token, a sequence)."""


class Unimplemented(TallyError):
    """The server does not offer this call (an older server?)."""


class Internal(TallyError):
    """The server broke an invariant; its log has the details."""


class Unavailable(TallyError):
    """The server or its database cannot be reached; retry."""


class DataLoss(TallyError):
    """Unrecoverable data loss or corruption."""


class Unauthenticated(TallyError):
    """No token, or one the server does not know (`Client(token=…)`)."""


#: The exception class of every status code but OK (a test checks each
#: code has its own).
_CLASSES: dict[grpc.StatusCode, type[TallyError]] = {
    grpc.StatusCode.CANCELLED: Cancelled,
    grpc.StatusCode.UNKNOWN: Unknown,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.ABORTED: Aborted,
    grpc.StatusCode.OUT_OF_RANGE: OutOfRange,
    grpc.StatusCode.UNIMPLEMENTED: Unimplemented,
    grpc.StatusCode.INTERNAL: Internal,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DATA_LOSS: DataLoss,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
}


def error_class(code: grpc.StatusCode) -> type[TallyError]:
    """The exception class raised for `code`."""
    return _CLASSES.get(code, TallyError)


def from_rpc_error(error: grpc.RpcError) -> TallyError:
    """The exception for a failed call (of `grpc` or `grpc.aio`), details
    decoded."""
    code_of = getattr(error, "code", None)
    details_of = getattr(error, "details", None)
    trailers_of = getattr(error, "trailing_metadata", None)
    code = code_of() if callable(code_of) else grpc.StatusCode.UNKNOWN
    message = (details_of() if callable(details_of) else None) or str(error)
    violations: list[FieldViolation] = []
    reason = ""
    retry_delay: float | None = None
    trailers: tuple[tuple[str, str | bytes], ...] = tuple(
        (trailers_of() if callable(trailers_of) else None) or ()
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
    return error_class(code)(code, message, violations, reason, retry_delay)
