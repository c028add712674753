import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class OperationState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OPERATION_STATE_UNSPECIFIED: _ClassVar[OperationState]
    OPERATION_STATE_PENDING: _ClassVar[OperationState]
    OPERATION_STATE_RUNNING: _ClassVar[OperationState]
    OPERATION_STATE_SUCCEEDED: _ClassVar[OperationState]
    OPERATION_STATE_FAILED: _ClassVar[OperationState]
    OPERATION_STATE_CANCELLED: _ClassVar[OperationState]
    OPERATION_STATE_EXPIRED: _ClassVar[OperationState]

class EventSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EVENT_SOURCE_UNSPECIFIED: _ClassVar[EventSource]
    EVENT_SOURCE_WEBHOOK: _ClassVar[EventSource]
    EVENT_SOURCE_POLLER: _ClassVar[EventSource]
    EVENT_SOURCE_OPERATOR: _ClassVar[EventSource]

class EventVerdict(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EVENT_VERDICT_UNSPECIFIED: _ClassVar[EventVerdict]
    EVENT_VERDICT_APPLIED: _ClassVar[EventVerdict]
    EVENT_VERDICT_DROPPED: _ClassVar[EventVerdict]
    EVENT_VERDICT_RECORDED: _ClassVar[EventVerdict]
OPERATION_STATE_UNSPECIFIED: OperationState
OPERATION_STATE_PENDING: OperationState
OPERATION_STATE_RUNNING: OperationState
OPERATION_STATE_SUCCEEDED: OperationState
OPERATION_STATE_FAILED: OperationState
OPERATION_STATE_CANCELLED: OperationState
OPERATION_STATE_EXPIRED: OperationState
EVENT_SOURCE_UNSPECIFIED: EventSource
EVENT_SOURCE_WEBHOOK: EventSource
EVENT_SOURCE_POLLER: EventSource
EVENT_SOURCE_OPERATOR: EventSource
EVENT_VERDICT_UNSPECIFIED: EventVerdict
EVENT_VERDICT_APPLIED: EventVerdict
EVENT_VERDICT_DROPPED: EventVerdict
EVENT_VERDICT_RECORDED: EventVerdict

class Operation(_message.Message):
    __slots__ = ("name", "state", "update_time", "version", "job", "output_file", "error_code", "error_message", "applied_events", "drops", "create_time")
    class DropsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FILE_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    APPLIED_EVENTS_FIELD_NUMBER: _ClassVar[int]
    DROPS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    name: str
    state: OperationState
    update_time: _timestamp_pb2.Timestamp
    version: int
    job: str
    output_file: str
    error_code: str
    error_message: str
    applied_events: int
    drops: _containers.ScalarMap[str, int]
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., state: _Optional[_Union[OperationState, str]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., version: _Optional[int] = ..., job: _Optional[str] = ..., output_file: _Optional[str] = ..., error_code: _Optional[str] = ..., error_message: _Optional[str] = ..., applied_events: _Optional[int] = ..., drops: _Optional[_Mapping[str, int]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class OperationEvent(_message.Message):
    __slots__ = ("operation", "state", "update_time", "source", "event_id", "output_file", "error_code", "error_message")
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FILE_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    operation: str
    state: str
    update_time: _timestamp_pb2.Timestamp
    source: EventSource
    event_id: str
    output_file: str
    error_code: str
    error_message: str
    def __init__(self, operation: _Optional[str] = ..., state: _Optional[str] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., source: _Optional[_Union[EventSource, str]] = ..., event_id: _Optional[str] = ..., output_file: _Optional[str] = ..., error_code: _Optional[str] = ..., error_message: _Optional[str] = ...) -> None: ...

class IngestEventRequest(_message.Message):
    __slots__ = ("event",)
    EVENT_FIELD_NUMBER: _ClassVar[int]
    event: OperationEvent
    def __init__(self, event: _Optional[_Union[OperationEvent, _Mapping]] = ...) -> None: ...

class IngestEventResponse(_message.Message):
    __slots__ = ("verdict", "reason", "operation", "sequence")
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    verdict: EventVerdict
    reason: str
    operation: Operation
    sequence: int
    def __init__(self, verdict: _Optional[_Union[EventVerdict, str]] = ..., reason: _Optional[str] = ..., operation: _Optional[_Union[Operation, _Mapping]] = ..., sequence: _Optional[int] = ...) -> None: ...

class GetOperationRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListOperationsRequest(_message.Message):
    __slots__ = ("states", "page_size", "page_token")
    STATES_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    states: _containers.RepeatedScalarFieldContainer[OperationState]
    page_size: int
    page_token: str
    def __init__(self, states: _Optional[_Iterable[_Union[OperationState, str]]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListOperationsResponse(_message.Message):
    __slots__ = ("operations", "next_page_token")
    OPERATIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    operations: _containers.RepeatedCompositeFieldContainer[Operation]
    next_page_token: str
    def __init__(self, operations: _Optional[_Iterable[_Union[Operation, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class OperationEventRecord(_message.Message):
    __slots__ = ("sequence", "source", "raw_state", "state", "update_time", "receive_time", "verdict", "reason", "event_id")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    RAW_STATE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    RECEIVE_TIME_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    source: EventSource
    raw_state: str
    state: OperationState
    update_time: _timestamp_pb2.Timestamp
    receive_time: _timestamp_pb2.Timestamp
    verdict: EventVerdict
    reason: str
    event_id: str
    def __init__(self, sequence: _Optional[int] = ..., source: _Optional[_Union[EventSource, str]] = ..., raw_state: _Optional[str] = ..., state: _Optional[_Union[OperationState, str]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., receive_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., verdict: _Optional[_Union[EventVerdict, str]] = ..., reason: _Optional[str] = ..., event_id: _Optional[str] = ...) -> None: ...

class ListOperationEventsRequest(_message.Message):
    __slots__ = ("parent", "page_size", "page_token")
    PARENT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    parent: str
    page_size: int
    page_token: str
    def __init__(self, parent: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListOperationEventsResponse(_message.Message):
    __slots__ = ("events", "next_page_token")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[OperationEventRecord]
    next_page_token: str
    def __init__(self, events: _Optional[_Iterable[_Union[OperationEventRecord, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class WatchOperationsRequest(_message.Message):
    __slots__ = ("after_sequence",)
    AFTER_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    after_sequence: int
    def __init__(self, after_sequence: _Optional[int] = ...) -> None: ...

class OperationTransition(_message.Message):
    __slots__ = ("sequence", "operation", "from_state", "to_state", "source", "time")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    FROM_STATE_FIELD_NUMBER: _ClassVar[int]
    TO_STATE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    operation: Operation
    from_state: OperationState
    to_state: OperationState
    source: EventSource
    time: _timestamp_pb2.Timestamp
    def __init__(self, sequence: _Optional[int] = ..., operation: _Optional[_Union[Operation, _Mapping]] = ..., from_state: _Optional[_Union[OperationState, str]] = ..., to_state: _Optional[_Union[OperationState, str]] = ..., source: _Optional[_Union[EventSource, str]] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...
