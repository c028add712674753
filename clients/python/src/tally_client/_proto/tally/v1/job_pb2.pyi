import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import empty_pb2 as _empty_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from tally_client._proto.tally.v1 import ledger_pb2 as _ledger_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATE_UNSPECIFIED: _ClassVar[JobState]
    JOB_STATE_PREPARING: _ClassVar[JobState]
    JOB_STATE_SUBMITTED: _ClassVar[JobState]
    JOB_STATE_RUNNING: _ClassVar[JobState]
    JOB_STATE_SUCCEEDED: _ClassVar[JobState]
    JOB_STATE_FAILED: _ClassVar[JobState]
    JOB_STATE_CANCELLED: _ClassVar[JobState]
    JOB_STATE_EXPIRED: _ClassVar[JobState]
    JOB_STATE_RECONCILED: _ClassVar[JobState]
    JOB_STATE_CREATING: _ClassVar[JobState]

class ProviderRefusal(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PROVIDER_REFUSAL_UNSPECIFIED: _ClassVar[ProviderRefusal]
    PROVIDER_REFUSAL_QUOTA: _ClassVar[ProviderRefusal]
    PROVIDER_REFUSAL_BILLING: _ClassVar[ProviderRefusal]
    PROVIDER_REFUSAL_MODEL: _ClassVar[ProviderRefusal]
    PROVIDER_REFUSAL_REQUEST: _ClassVar[ProviderRefusal]

class JobEventType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_EVENT_TYPE_UNSPECIFIED: _ClassVar[JobEventType]
    JOB_EVENT_TYPE_CREATED: _ClassVar[JobEventType]
    JOB_EVENT_TYPE_STATE_CHANGED: _ClassVar[JobEventType]
    JOB_EVENT_TYPE_PROGRESS: _ClassVar[JobEventType]
    JOB_EVENT_TYPE_ADOPTED: _ClassVar[JobEventType]
    JOB_EVENT_TYPE_LEDGER_PAUSED: _ClassVar[JobEventType]
    JOB_EVENT_TYPE_LEDGER_RESUMED: _ClassVar[JobEventType]
JOB_STATE_UNSPECIFIED: JobState
JOB_STATE_PREPARING: JobState
JOB_STATE_SUBMITTED: JobState
JOB_STATE_RUNNING: JobState
JOB_STATE_SUCCEEDED: JobState
JOB_STATE_FAILED: JobState
JOB_STATE_CANCELLED: JobState
JOB_STATE_EXPIRED: JobState
JOB_STATE_RECONCILED: JobState
JOB_STATE_CREATING: JobState
PROVIDER_REFUSAL_UNSPECIFIED: ProviderRefusal
PROVIDER_REFUSAL_QUOTA: ProviderRefusal
PROVIDER_REFUSAL_BILLING: ProviderRefusal
PROVIDER_REFUSAL_MODEL: ProviderRefusal
PROVIDER_REFUSAL_REQUEST: ProviderRefusal
JOB_EVENT_TYPE_UNSPECIFIED: JobEventType
JOB_EVENT_TYPE_CREATED: JobEventType
JOB_EVENT_TYPE_STATE_CHANGED: JobEventType
JOB_EVENT_TYPE_PROGRESS: JobEventType
JOB_EVENT_TYPE_ADOPTED: JobEventType
JOB_EVENT_TYPE_LEDGER_PAUSED: JobEventType
JOB_EVENT_TYPE_LEDGER_RESUMED: JobEventType

class MediaUpload(_message.Message):
    __slots__ = ("provider_account", "sha256", "file", "uri", "mime_type", "size_bytes", "expire_time", "create_time", "in_use")
    PROVIDER_ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    URI_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    IN_USE_FIELD_NUMBER: _ClassVar[int]
    provider_account: str
    sha256: str
    file: str
    uri: str
    mime_type: str
    size_bytes: int
    expire_time: _timestamp_pb2.Timestamp
    create_time: _timestamp_pb2.Timestamp
    in_use: bool
    def __init__(self, provider_account: _Optional[str] = ..., sha256: _Optional[str] = ..., file: _Optional[str] = ..., uri: _Optional[str] = ..., mime_type: _Optional[str] = ..., size_bytes: _Optional[int] = ..., expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., in_use: _Optional[bool] = ...) -> None: ...

class LookupMediaUploadsRequest(_message.Message):
    __slots__ = ("parent", "provider_account", "sha256")
    PARENT_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    parent: str
    provider_account: str
    sha256: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, parent: _Optional[str] = ..., provider_account: _Optional[str] = ..., sha256: _Optional[_Iterable[str]] = ...) -> None: ...

class LookupMediaUploadsResponse(_message.Message):
    __slots__ = ("uploads", "stored_bytes")
    UPLOADS_FIELD_NUMBER: _ClassVar[int]
    STORED_BYTES_FIELD_NUMBER: _ClassVar[int]
    uploads: _containers.RepeatedCompositeFieldContainer[MediaUpload]
    stored_bytes: int
    def __init__(self, uploads: _Optional[_Iterable[_Union[MediaUpload, _Mapping]]] = ..., stored_bytes: _Optional[int] = ...) -> None: ...

class RecordMediaUploadRequest(_message.Message):
    __slots__ = ("parent", "upload")
    PARENT_FIELD_NUMBER: _ClassVar[int]
    UPLOAD_FIELD_NUMBER: _ClassVar[int]
    parent: str
    upload: MediaUpload
    def __init__(self, parent: _Optional[str] = ..., upload: _Optional[_Union[MediaUpload, _Mapping]] = ...) -> None: ...

class ListMediaUploadsRequest(_message.Message):
    __slots__ = ("parent", "provider_account", "page_size", "page_token")
    PARENT_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    parent: str
    provider_account: str
    page_size: int
    page_token: str
    def __init__(self, parent: _Optional[str] = ..., provider_account: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListMediaUploadsResponse(_message.Message):
    __slots__ = ("uploads", "next_page_token")
    UPLOADS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    uploads: _containers.RepeatedCompositeFieldContainer[MediaUpload]
    next_page_token: str
    def __init__(self, uploads: _Optional[_Iterable[_Union[MediaUpload, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ForgetMediaUploadRequest(_message.Message):
    __slots__ = ("parent", "provider_account", "sha256", "file")
    PARENT_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    parent: str
    provider_account: str
    sha256: str
    file: str
    def __init__(self, parent: _Optional[str] = ..., provider_account: _Optional[str] = ..., sha256: _Optional[str] = ..., file: _Optional[str] = ...) -> None: ...

class GoldenAnswer(_message.Message):
    __slots__ = ("key", "text", "model_version", "error")
    KEY_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    key: str
    text: str
    model_version: str
    error: str
    def __init__(self, key: _Optional[str] = ..., text: _Optional[str] = ..., model_version: _Optional[str] = ..., error: _Optional[str] = ...) -> None: ...

class ReportGoldenResultsRequest(_message.Message):
    __slots__ = ("name", "claim", "answers")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CLAIM_FIELD_NUMBER: _ClassVar[int]
    ANSWERS_FIELD_NUMBER: _ClassVar[int]
    name: str
    claim: str
    answers: _containers.RepeatedCompositeFieldContainer[GoldenAnswer]
    def __init__(self, name: _Optional[str] = ..., claim: _Optional[str] = ..., answers: _Optional[_Iterable[_Union[GoldenAnswer, _Mapping]]] = ...) -> None: ...

class ReportGoldenResultsResponse(_message.Message):
    __slots__ = ("matched", "mismatched", "drift")
    MATCHED_FIELD_NUMBER: _ClassVar[int]
    MISMATCHED_FIELD_NUMBER: _ClassVar[int]
    DRIFT_FIELD_NUMBER: _ClassVar[int]
    matched: int
    mismatched: int
    drift: _ledger_pb2.GoldenDrift
    def __init__(self, matched: _Optional[int] = ..., mismatched: _Optional[int] = ..., drift: _Optional[_Union[_ledger_pb2.GoldenDrift, _Mapping]] = ...) -> None: ...

class JobCounts(_message.Message):
    __slots__ = ("rows", "succeeded", "retryable", "permanent", "missing", "unreported")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    PERMANENT_FIELD_NUMBER: _ClassVar[int]
    MISSING_FIELD_NUMBER: _ClassVar[int]
    UNREPORTED_FIELD_NUMBER: _ClassVar[int]
    rows: int
    succeeded: int
    retryable: int
    permanent: int
    missing: int
    unreported: int
    def __init__(self, rows: _Optional[int] = ..., succeeded: _Optional[int] = ..., retryable: _Optional[int] = ..., permanent: _Optional[int] = ..., missing: _Optional[int] = ..., unreported: _Optional[int] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("name", "job_id", "claim", "state", "model", "owner", "batch", "input_file", "output_file", "counts", "summary", "error", "adoptions", "operation", "create_time", "submit_time", "end_time", "update_time", "lease_expire_time", "final_state", "create_attempt_time", "golden_rows", "provider_token_limit", "provider_account", "provider", "create_unresolved", "create_unresolved_time")
    NAME_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    CLAIM_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    INPUT_FILE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FILE_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ADOPTIONS_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    SUBMIT_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    FINAL_STATE_FIELD_NUMBER: _ClassVar[int]
    CREATE_ATTEMPT_TIME_FIELD_NUMBER: _ClassVar[int]
    GOLDEN_ROWS_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_TOKEN_LIMIT_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    CREATE_UNRESOLVED_FIELD_NUMBER: _ClassVar[int]
    CREATE_UNRESOLVED_TIME_FIELD_NUMBER: _ClassVar[int]
    name: str
    job_id: str
    claim: str
    state: JobState
    model: str
    owner: str
    batch: str
    input_file: str
    output_file: str
    counts: JobCounts
    summary: str
    error: str
    adoptions: int
    operation: str
    create_time: _timestamp_pb2.Timestamp
    submit_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    lease_expire_time: _timestamp_pb2.Timestamp
    final_state: JobState
    create_attempt_time: _timestamp_pb2.Timestamp
    golden_rows: _containers.RepeatedCompositeFieldContainer[_ledger_pb2.GoldenRow]
    provider_token_limit: int
    provider_account: str
    provider: str
    create_unresolved: str
    create_unresolved_time: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., job_id: _Optional[str] = ..., claim: _Optional[str] = ..., state: _Optional[_Union[JobState, str]] = ..., model: _Optional[str] = ..., owner: _Optional[str] = ..., batch: _Optional[str] = ..., input_file: _Optional[str] = ..., output_file: _Optional[str] = ..., counts: _Optional[_Union[JobCounts, _Mapping]] = ..., summary: _Optional[str] = ..., error: _Optional[str] = ..., adoptions: _Optional[int] = ..., operation: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., submit_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., lease_expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., final_state: _Optional[_Union[JobState, str]] = ..., create_attempt_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., golden_rows: _Optional[_Iterable[_Union[_ledger_pb2.GoldenRow, _Mapping]]] = ..., provider_token_limit: _Optional[int] = ..., provider_account: _Optional[str] = ..., provider: _Optional[str] = ..., create_unresolved: _Optional[str] = ..., create_unresolved_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class CreateJobRequest(_message.Message):
    __slots__ = ("claim", "provider_account")
    CLAIM_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    claim: str
    provider_account: str
    def __init__(self, claim: _Optional[str] = ..., provider_account: _Optional[str] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("parent", "states", "page_size", "page_token")
    PARENT_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    parent: str
    states: _containers.RepeatedScalarFieldContainer[JobState]
    page_size: int
    page_token: str
    def __init__(self, parent: _Optional[str] = ..., states: _Optional[_Iterable[_Union[JobState, str]]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    next_page_token: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class MarkSubmittedRequest(_message.Message):
    __slots__ = ("name", "claim", "batch", "input_file")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CLAIM_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    INPUT_FILE_FIELD_NUMBER: _ClassVar[int]
    name: str
    claim: str
    batch: str
    input_file: str
    def __init__(self, name: _Optional[str] = ..., claim: _Optional[str] = ..., batch: _Optional[str] = ..., input_file: _Optional[str] = ...) -> None: ...

class MarkCreatingRequest(_message.Message):
    __slots__ = ("name", "claim", "input_file", "estimated_tokens", "media_sha256")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CLAIM_FIELD_NUMBER: _ClassVar[int]
    INPUT_FILE_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MEDIA_SHA256_FIELD_NUMBER: _ClassVar[int]
    name: str
    claim: str
    input_file: str
    estimated_tokens: int
    media_sha256: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., claim: _Optional[str] = ..., input_file: _Optional[str] = ..., estimated_tokens: _Optional[int] = ..., media_sha256: _Optional[_Iterable[str]] = ...) -> None: ...

class MarkNotCreatedRequest(_message.Message):
    __slots__ = ("name", "claim", "reason", "provider_cooldown", "provider_refusal", "batch_refused")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CLAIM_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_COOLDOWN_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_REFUSAL_FIELD_NUMBER: _ClassVar[int]
    BATCH_REFUSED_FIELD_NUMBER: _ClassVar[int]
    name: str
    claim: str
    reason: str
    provider_cooldown: _duration_pb2.Duration
    provider_refusal: ProviderRefusal
    batch_refused: bool
    def __init__(self, name: _Optional[str] = ..., claim: _Optional[str] = ..., reason: _Optional[str] = ..., provider_cooldown: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., provider_refusal: _Optional[_Union[ProviderRefusal, str]] = ..., batch_refused: _Optional[bool] = ...) -> None: ...

class FlagCreateUnresolvedRequest(_message.Message):
    __slots__ = ("name", "claim", "reason")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CLAIM_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    name: str
    claim: str
    reason: str
    def __init__(self, name: _Optional[str] = ..., claim: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class AdoptJobsRequest(_message.Message):
    __slots__ = ("parent", "worker", "max_jobs", "lease", "process", "starting", "gone")
    PARENT_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    MAX_JOBS_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    PROCESS_FIELD_NUMBER: _ClassVar[int]
    STARTING_FIELD_NUMBER: _ClassVar[int]
    GONE_FIELD_NUMBER: _ClassVar[int]
    parent: str
    worker: str
    max_jobs: int
    lease: _duration_pb2.Duration
    process: WorkerProcess
    starting: bool
    gone: _containers.RepeatedCompositeFieldContainer[WorkerProcess]
    def __init__(self, parent: _Optional[str] = ..., worker: _Optional[str] = ..., max_jobs: _Optional[int] = ..., lease: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., process: _Optional[_Union[WorkerProcess, _Mapping]] = ..., starting: _Optional[bool] = ..., gone: _Optional[_Iterable[_Union[WorkerProcess, _Mapping]]] = ...) -> None: ...

class WorkerProcess(_message.Message):
    __slots__ = ("host", "boot_id", "pid", "start_ticks")
    HOST_FIELD_NUMBER: _ClassVar[int]
    BOOT_ID_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    START_TICKS_FIELD_NUMBER: _ClassVar[int]
    host: str
    boot_id: str
    pid: int
    start_ticks: int
    def __init__(self, host: _Optional[str] = ..., boot_id: _Optional[str] = ..., pid: _Optional[int] = ..., start_ticks: _Optional[int] = ...) -> None: ...

class HeldJob(_message.Message):
    __slots__ = ("job", "state", "owner", "process", "lease_expire_time")
    JOB_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    PROCESS_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    job: str
    state: JobState
    owner: str
    process: WorkerProcess
    lease_expire_time: _timestamp_pb2.Timestamp
    def __init__(self, job: _Optional[str] = ..., state: _Optional[_Union[JobState, str]] = ..., owner: _Optional[str] = ..., process: _Optional[_Union[WorkerProcess, _Mapping]] = ..., lease_expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class AdoptedJob(_message.Message):
    __slots__ = ("job", "claim", "keys")
    JOB_FIELD_NUMBER: _ClassVar[int]
    CLAIM_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    job: Job
    claim: _ledger_pb2.Claim
    keys: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ..., claim: _Optional[_Union[_ledger_pb2.Claim, _Mapping]] = ..., keys: _Optional[_Iterable[str]] = ...) -> None: ...

class AdoptJobsResponse(_message.Message):
    __slots__ = ("jobs", "released_jobs", "held", "taken_over")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    RELEASED_JOBS_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    TAKEN_OVER_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[AdoptedJob]
    released_jobs: int
    held: _containers.RepeatedCompositeFieldContainer[HeldJob]
    taken_over: int
    def __init__(self, jobs: _Optional[_Iterable[_Union[AdoptedJob, _Mapping]]] = ..., released_jobs: _Optional[int] = ..., held: _Optional[_Iterable[_Union[HeldJob, _Mapping]]] = ..., taken_over: _Optional[int] = ...) -> None: ...

class HandOverJobRequest(_message.Message):
    __slots__ = ("name", "claim")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CLAIM_FIELD_NUMBER: _ClassVar[int]
    name: str
    claim: str
    def __init__(self, name: _Optional[str] = ..., claim: _Optional[str] = ...) -> None: ...

class FinishJobRequest(_message.Message):
    __slots__ = ("name", "claim", "final_state", "output_file", "error", "not_run")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CLAIM_FIELD_NUMBER: _ClassVar[int]
    FINAL_STATE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FILE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    NOT_RUN_FIELD_NUMBER: _ClassVar[int]
    name: str
    claim: str
    final_state: JobState
    output_file: str
    error: str
    not_run: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., claim: _Optional[str] = ..., final_state: _Optional[_Union[JobState, str]] = ..., output_file: _Optional[str] = ..., error: _Optional[str] = ..., not_run: _Optional[_Iterable[str]] = ...) -> None: ...

class WatchJobsRequest(_message.Message):
    __slots__ = ("parent", "after_sequence")
    PARENT_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    parent: str
    after_sequence: int
    def __init__(self, parent: _Optional[str] = ..., after_sequence: _Optional[int] = ...) -> None: ...

class JobEvent(_message.Message):
    __slots__ = ("sequence", "type", "job", "time", "actor", "ledger", "pause")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    LEDGER_FIELD_NUMBER: _ClassVar[int]
    PAUSE_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    type: JobEventType
    job: Job
    time: _timestamp_pb2.Timestamp
    actor: str
    ledger: str
    pause: _ledger_pb2.LedgerPause
    def __init__(self, sequence: _Optional[int] = ..., type: _Optional[_Union[JobEventType, str]] = ..., job: _Optional[_Union[Job, _Mapping]] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., actor: _Optional[str] = ..., ledger: _Optional[str] = ..., pause: _Optional[_Union[_ledger_pb2.LedgerPause, _Mapping]] = ...) -> None: ...

class Lock(_message.Message):
    __slots__ = ("name", "owner", "token", "acquire_time", "expire_time")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    ACQUIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    name: str
    owner: str
    token: str
    acquire_time: _timestamp_pb2.Timestamp
    expire_time: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., owner: _Optional[str] = ..., token: _Optional[str] = ..., acquire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class AcquireLockRequest(_message.Message):
    __slots__ = ("name", "owner", "ttl")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    name: str
    owner: str
    ttl: _duration_pb2.Duration
    def __init__(self, name: _Optional[str] = ..., owner: _Optional[str] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class AcquireLockResponse(_message.Message):
    __slots__ = ("acquired", "lock")
    ACQUIRED_FIELD_NUMBER: _ClassVar[int]
    LOCK_FIELD_NUMBER: _ClassVar[int]
    acquired: bool
    lock: Lock
    def __init__(self, acquired: _Optional[bool] = ..., lock: _Optional[_Union[Lock, _Mapping]] = ...) -> None: ...

class RenewLockRequest(_message.Message):
    __slots__ = ("name", "token", "ttl")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    name: str
    token: str
    ttl: _duration_pb2.Duration
    def __init__(self, name: _Optional[str] = ..., token: _Optional[str] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ReleaseLockRequest(_message.Message):
    __slots__ = ("name", "token")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    name: str
    token: str
    def __init__(self, name: _Optional[str] = ..., token: _Optional[str] = ...) -> None: ...

class AcquireCapacityRequest(_message.Message):
    __slots__ = ("claim", "provider_account", "tokens", "rate_limited", "shed", "refused", "reason")
    CLAIM_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMITED_FIELD_NUMBER: _ClassVar[int]
    SHED_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    claim: str
    provider_account: str
    tokens: _containers.RepeatedScalarFieldContainer[int]
    rate_limited: _duration_pb2.Duration
    shed: bool
    refused: ProviderRefusal
    reason: str
    def __init__(self, claim: _Optional[str] = ..., provider_account: _Optional[str] = ..., tokens: _Optional[_Iterable[int]] = ..., rate_limited: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., shed: _Optional[bool] = ..., refused: _Optional[_Union[ProviderRefusal, str]] = ..., reason: _Optional[str] = ...) -> None: ...

class AcquireCapacityResponse(_message.Message):
    __slots__ = ("granted", "retry_after", "requests_per_minute", "tokens_per_minute")
    GRANTED_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_PER_MINUTE_FIELD_NUMBER: _ClassVar[int]
    TOKENS_PER_MINUTE_FIELD_NUMBER: _ClassVar[int]
    granted: int
    retry_after: _duration_pb2.Duration
    requests_per_minute: int
    tokens_per_minute: int
    def __init__(self, granted: _Optional[int] = ..., retry_after: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., requests_per_minute: _Optional[int] = ..., tokens_per_minute: _Optional[int] = ...) -> None: ...
