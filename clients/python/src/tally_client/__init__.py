"""tally-client: the Python client of tally, a control plane for large,
unattended LLM batch inference.

    from tally_client import Client, RowStatus, derive_key

    with Client("127.0.0.1:50051") as tally:
        tally.get_or_create_ledger("reviews")
        tally.enroll("reviews", ({"key": derive_key("app", str(i)), "payload": {"text": t}}
                                 for i, t in enumerate(texts)))
        for row in tally.rows("reviews", statuses=[RowStatus.SUCCEEDED], full=True):
            print(row.key, row.result)

A ledger's finished results leave through a named consumer, each once,
acknowledged when the loop moves on (`Client.consume`):

    for result in tally.consume("reviews", "morning-sink"):
        sink.upsert(result.identity, result.result)

Rows, ledgers, summaries and verdicts are dataclasses with enum statuses
and decoded JSON (`tally_client.types`); every refused call raises the
`TallyError` subclass of its status code (`tally_client.errors`);
`tally_client.aio.AsyncClient` is the asyncio client. The generated
messages and stubs are in `tally_client.pb`.
"""

from tally_client import pb
from tally_client._calls import EnrollProgress, Failure, Outcome, Success, ledger_name
from tally_client.address import Address, parse_address
from tally_client.archive import ArchiveError, ArchiveFormat, ArchiveResult
from tally_client.client import ClaimSession, Client, ExportProgress
from tally_client.consume import Delivery, Start
from tally_client.errors import (
    Aborted,
    AlreadyExists,
    Cancelled,
    DataLoss,
    DeadlineExceeded,
    FailedPrecondition,
    FieldViolation,
    Internal,
    InvalidArgument,
    NotFound,
    OutOfRange,
    PermissionDenied,
    ResourceExhausted,
    TallyError,
    Unauthenticated,
    Unavailable,
    Unimplemented,
    Unknown,
)
from tally_client.export import ExportFormat
from tally_client.formats import (
    BatchFileError,
    BatchFormat,
    Converted,
    FormatError,
    check_batch_file,
)
from tally_client.keys import canonical_parts, derive_key, validate_key
from tally_client.rows import RowError, canonical_payload, row_input
from tally_client.types import (
    Attempt,
    AttemptCounts,
    Budget,
    CacheStats,
    ClaimedRow,
    DependencyInput,
    FailureKind,
    Forecast,
    ForecastPlan,
    Job,
    JobState,
    Ledger,
    LedgerState,
    Pause,
    PauseReason,
    PromptRef,
    Purge,
    Redrive,
    ReportResult,
    Row,
    RowPage,
    RowStatus,
    RowVerdict,
    Summary,
    Superseded,
    Usage,
    Verdict,
)

__all__ = [
    "Aborted",
    "Address",
    "AlreadyExists",
    "ArchiveError",
    "ArchiveFormat",
    "ArchiveResult",
    "Attempt",
    "AttemptCounts",
    "BatchFileError",
    "BatchFormat",
    "Budget",
    "CacheStats",
    "Cancelled",
    "ClaimSession",
    "ClaimedRow",
    "Client",
    "Converted",
    "DataLoss",
    "DeadlineExceeded",
    "DependencyInput",
    "Delivery",
    "EnrollProgress",
    "ExportFormat",
    "ExportProgress",
    "FailedPrecondition",
    "Failure",
    "FailureKind",
    "FieldViolation",
    "Forecast",
    "ForecastPlan",
    "FormatError",
    "Internal",
    "InvalidArgument",
    "Job",
    "JobState",
    "Ledger",
    "LedgerState",
    "NotFound",
    "OutOfRange",
    "Outcome",
    "Pause",
    "PauseReason",
    "PermissionDenied",
    "PromptRef",
    "Purge",
    "Redrive",
    "ReportResult",
    "ResourceExhausted",
    "Row",
    "RowError",
    "RowPage",
    "RowStatus",
    "RowVerdict",
    "Start",
    "Success",
    "Summary",
    "Superseded",
    "TallyError",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
    "Unknown",
    "Usage",
    "Verdict",
    "canonical_parts",
    "canonical_payload",
    "check_batch_file",
    "derive_key",
    "ledger_name",
    "parse_address",
    "pb",
    "row_input",
    "validate_key",
]
