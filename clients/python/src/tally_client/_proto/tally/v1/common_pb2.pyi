import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Budget(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BUDGET_UNSPECIFIED: _ClassVar[Budget]
    BUDGET_PROVIDER: _ClassVar[Budget]
    BUDGET_CONTENT: _ClassVar[Budget]
    BUDGET_INFRA: _ClassVar[Budget]

class RowStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROW_STATUS_UNSPECIFIED: _ClassVar[RowStatus]
    ROW_STATUS_PENDING: _ClassVar[RowStatus]
    ROW_STATUS_RUNNING: _ClassVar[RowStatus]
    ROW_STATUS_RETRYABLE: _ClassVar[RowStatus]
    ROW_STATUS_SUCCEEDED: _ClassVar[RowStatus]
    ROW_STATUS_PERMANENT: _ClassVar[RowStatus]
    ROW_STATUS_BLOCKED: _ClassVar[RowStatus]

class FailureKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FAILURE_KIND_UNSPECIFIED: _ClassVar[FailureKind]
    FAILURE_KIND_PROVIDER_ERROR: _ClassVar[FailureKind]
    FAILURE_KIND_EMPTY_RESPONSE: _ClassVar[FailureKind]
    FAILURE_KIND_INVALID_OUTPUT: _ClassVar[FailureKind]
    FAILURE_KIND_BLOCKED: _ClassVar[FailureKind]
    FAILURE_KIND_MISSING_FROM_OUTPUT: _ClassVar[FailureKind]
    FAILURE_KIND_MEDIA_UNREADABLE: _ClassVar[FailureKind]
    FAILURE_KIND_MEDIA_UNAVAILABLE: _ClassVar[FailureKind]
    FAILURE_KIND_ANSWER_LOST: _ClassVar[FailureKind]
BUDGET_UNSPECIFIED: Budget
BUDGET_PROVIDER: Budget
BUDGET_CONTENT: Budget
BUDGET_INFRA: Budget
ROW_STATUS_UNSPECIFIED: RowStatus
ROW_STATUS_PENDING: RowStatus
ROW_STATUS_RUNNING: RowStatus
ROW_STATUS_RETRYABLE: RowStatus
ROW_STATUS_SUCCEEDED: RowStatus
ROW_STATUS_PERMANENT: RowStatus
ROW_STATUS_BLOCKED: RowStatus
FAILURE_KIND_UNSPECIFIED: FailureKind
FAILURE_KIND_PROVIDER_ERROR: FailureKind
FAILURE_KIND_EMPTY_RESPONSE: FailureKind
FAILURE_KIND_INVALID_OUTPUT: FailureKind
FAILURE_KIND_BLOCKED: FailureKind
FAILURE_KIND_MISSING_FROM_OUTPUT: FailureKind
FAILURE_KIND_MEDIA_UNREADABLE: FailureKind
FAILURE_KIND_MEDIA_UNAVAILABLE: FailureKind
FAILURE_KIND_ANSWER_LOST: FailureKind

class Usage(_message.Message):
    __slots__ = ("input_tokens", "output_tokens", "thinking_tokens", "cached_tokens", "cache_write_tokens")
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    THINKING_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHE_WRITE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    input_tokens: int
    output_tokens: int
    thinking_tokens: int
    cached_tokens: int
    cache_write_tokens: int
    def __init__(self, input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., thinking_tokens: _Optional[int] = ..., cached_tokens: _Optional[int] = ..., cache_write_tokens: _Optional[int] = ...) -> None: ...

class PromptRef(_message.Message):
    __slots__ = ("name", "version")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ...) -> None: ...

class AttemptCounts(_message.Message):
    __slots__ = ("provider", "content", "infra", "total")
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    INFRA_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    provider: int
    content: int
    infra: int
    total: int
    def __init__(self, provider: _Optional[int] = ..., content: _Optional[int] = ..., infra: _Optional[int] = ..., total: _Optional[int] = ...) -> None: ...

class Classification(_message.Message):
    __slots__ = ("status", "rule", "budget")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    status: RowStatus
    rule: str
    budget: Budget
    def __init__(self, status: _Optional[_Union[RowStatus, str]] = ..., rule: _Optional[str] = ..., budget: _Optional[_Union[Budget, str]] = ...) -> None: ...

class Failure(_message.Message):
    __slots__ = ("kind", "http_code", "status", "message", "finish_reason", "block_reason", "retry_delay", "grpc_code")
    KIND_FIELD_NUMBER: _ClassVar[int]
    HTTP_CODE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    BLOCK_REASON_FIELD_NUMBER: _ClassVar[int]
    RETRY_DELAY_FIELD_NUMBER: _ClassVar[int]
    GRPC_CODE_FIELD_NUMBER: _ClassVar[int]
    kind: FailureKind
    http_code: int
    status: str
    message: str
    finish_reason: str
    block_reason: str
    retry_delay: _duration_pb2.Duration
    grpc_code: int
    def __init__(self, kind: _Optional[_Union[FailureKind, str]] = ..., http_code: _Optional[int] = ..., status: _Optional[str] = ..., message: _Optional[str] = ..., finish_reason: _Optional[str] = ..., block_reason: _Optional[str] = ..., retry_delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., grpc_code: _Optional[int] = ...) -> None: ...
