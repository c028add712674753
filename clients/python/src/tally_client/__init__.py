"""tally-client: the Python client of tally, a control plane for large,
unattended LLM batch inference.

    from tally_client import Client, derive_key

    with Client("127.0.0.1:50051") as tally:
        tally.enroll("reviews", ({"key": derive_key("app", str(i)), "payload": {"text": t}}
                                 for i, t in enumerate(texts)))
        print(tally.summarize("reviews"))

The generated messages and stubs are in `tally_client.pb` (`ledger_pb2`,
`job_pb2`, `common_pb2`, `operations_pb2`).
"""

from tally_client import pb
from tally_client.archive import ArchiveError, ArchiveFormat, ArchiveResult
from tally_client.client import (
    ClaimSession,
    Client,
    EnrollProgress,
    ExportProgress,
    ledger_name,
    row_input,
)
from tally_client.errors import (
    FailedPrecondition,
    FieldViolation,
    InvalidArgument,
    NotFound,
    TallyError,
    Unavailable,
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

__all__ = [
    "ArchiveError",
    "ArchiveFormat",
    "ArchiveResult",
    "BatchFileError",
    "BatchFormat",
    "Converted",
    "FormatError",
    "check_batch_file",
    "ClaimSession",
    "Client",
    "EnrollProgress",
    "ExportFormat",
    "ExportProgress",
    "FailedPrecondition",
    "FieldViolation",
    "InvalidArgument",
    "NotFound",
    "TallyError",
    "Unavailable",
    "canonical_parts",
    "derive_key",
    "ledger_name",
    "pb",
    "row_input",
    "validate_key",
]
