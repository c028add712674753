import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import empty_pb2 as _empty_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from tally_client._proto.tally.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ConsumerKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONSUMER_KIND_UNSPECIFIED: _ClassVar[ConsumerKind]
    CONSUMER_KIND_PULL: _ClassVar[ConsumerKind]
    CONSUMER_KIND_WEBHOOK: _ClassVar[ConsumerKind]
CONSUMER_KIND_UNSPECIFIED: ConsumerKind
CONSUMER_KIND_PULL: ConsumerKind
CONSUMER_KIND_WEBHOOK: ConsumerKind

class ConsumerStart(_message.Message):
    __slots__ = ("beginning", "now", "after_position")
    BEGINNING_FIELD_NUMBER: _ClassVar[int]
    NOW_FIELD_NUMBER: _ClassVar[int]
    AFTER_POSITION_FIELD_NUMBER: _ClassVar[int]
    beginning: bool
    now: bool
    after_position: int
    def __init__(self, beginning: _Optional[bool] = ..., now: _Optional[bool] = ..., after_position: _Optional[int] = ...) -> None: ...

class WebhookTarget(_message.Message):
    __slots__ = ("url", "secret", "max_batch_rows")
    URL_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_ROWS_FIELD_NUMBER: _ClassVar[int]
    url: str
    secret: str
    max_batch_rows: int
    def __init__(self, url: _Optional[str] = ..., secret: _Optional[str] = ..., max_batch_rows: _Optional[int] = ...) -> None: ...

class Consumer(_message.Message):
    __slots__ = ("name", "kind", "visibility_timeout", "max_deliveries", "webhook", "read_position", "acked_position", "in_flight", "dead_letters", "lag_rows", "lag_age", "failures", "next_post_time", "create_time", "update_time", "creator")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    VISIBILITY_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    MAX_DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    WEBHOOK_FIELD_NUMBER: _ClassVar[int]
    READ_POSITION_FIELD_NUMBER: _ClassVar[int]
    ACKED_POSITION_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERS_FIELD_NUMBER: _ClassVar[int]
    LAG_ROWS_FIELD_NUMBER: _ClassVar[int]
    LAG_AGE_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    NEXT_POST_TIME_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    CREATOR_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: ConsumerKind
    visibility_timeout: _duration_pb2.Duration
    max_deliveries: int
    webhook: WebhookTarget
    read_position: int
    acked_position: int
    in_flight: int
    dead_letters: int
    lag_rows: int
    lag_age: _duration_pb2.Duration
    failures: int
    next_post_time: _timestamp_pb2.Timestamp
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    creator: str
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[_Union[ConsumerKind, str]] = ..., visibility_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., max_deliveries: _Optional[int] = ..., webhook: _Optional[_Union[WebhookTarget, _Mapping]] = ..., read_position: _Optional[int] = ..., acked_position: _Optional[int] = ..., in_flight: _Optional[int] = ..., dead_letters: _Optional[int] = ..., lag_rows: _Optional[int] = ..., lag_age: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., failures: _Optional[int] = ..., next_post_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., creator: _Optional[str] = ...) -> None: ...

class CreateConsumerRequest(_message.Message):
    __slots__ = ("parent", "consumer_id", "consumer", "start")
    PARENT_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    parent: str
    consumer_id: str
    consumer: Consumer
    start: ConsumerStart
    def __init__(self, parent: _Optional[str] = ..., consumer_id: _Optional[str] = ..., consumer: _Optional[_Union[Consumer, _Mapping]] = ..., start: _Optional[_Union[ConsumerStart, _Mapping]] = ...) -> None: ...

class GetConsumerRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListConsumersRequest(_message.Message):
    __slots__ = ("parent", "page_size", "page_token")
    PARENT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    parent: str
    page_size: int
    page_token: str
    def __init__(self, parent: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListConsumersResponse(_message.Message):
    __slots__ = ("consumers", "next_page_token")
    CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    consumers: _containers.RepeatedCompositeFieldContainer[Consumer]
    next_page_token: str
    def __init__(self, consumers: _Optional[_Iterable[_Union[Consumer, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DeleteConsumerRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ReceiveResultsRequest(_message.Message):
    __slots__ = ("consumer", "max_rows", "wait", "visibility_timeout", "include_payload")
    CONSUMER_FIELD_NUMBER: _ClassVar[int]
    MAX_ROWS_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    VISIBILITY_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    consumer: str
    max_rows: int
    wait: _duration_pb2.Duration
    visibility_timeout: _duration_pb2.Duration
    include_payload: bool
    def __init__(self, consumer: _Optional[str] = ..., max_rows: _Optional[int] = ..., wait: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., visibility_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., include_payload: _Optional[bool] = ...) -> None: ...

class ResultDelivery(_message.Message):
    __slots__ = ("position", "row", "key", "version", "status", "result", "rule", "error", "model", "prompt", "attempts", "usage", "finish_time", "delivery_count", "lease_expire_time", "payload")
    POSITION_FIELD_NUMBER: _ClassVar[int]
    ROW_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    FINISH_TIME_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_COUNT_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    position: int
    row: str
    key: str
    version: int
    status: _common_pb2.RowStatus
    result: str
    rule: str
    error: str
    model: str
    prompt: _common_pb2.PromptRef
    attempts: int
    usage: _common_pb2.Usage
    finish_time: _timestamp_pb2.Timestamp
    delivery_count: int
    lease_expire_time: _timestamp_pb2.Timestamp
    payload: str
    def __init__(self, position: _Optional[int] = ..., row: _Optional[str] = ..., key: _Optional[str] = ..., version: _Optional[int] = ..., status: _Optional[_Union[_common_pb2.RowStatus, str]] = ..., result: _Optional[str] = ..., rule: _Optional[str] = ..., error: _Optional[str] = ..., model: _Optional[str] = ..., prompt: _Optional[_Union[_common_pb2.PromptRef, _Mapping]] = ..., attempts: _Optional[int] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., finish_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., delivery_count: _Optional[int] = ..., lease_expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., payload: _Optional[str] = ...) -> None: ...

class ReceiveResultsResponse(_message.Message):
    __slots__ = ("results", "read_position")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    READ_POSITION_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ResultDelivery]
    read_position: int
    def __init__(self, results: _Optional[_Iterable[_Union[ResultDelivery, _Mapping]]] = ..., read_position: _Optional[int] = ...) -> None: ...

class AckResultsRequest(_message.Message):
    __slots__ = ("consumer", "positions", "up_to_position")
    CONSUMER_FIELD_NUMBER: _ClassVar[int]
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    UP_TO_POSITION_FIELD_NUMBER: _ClassVar[int]
    consumer: str
    positions: _containers.RepeatedScalarFieldContainer[int]
    up_to_position: int
    def __init__(self, consumer: _Optional[str] = ..., positions: _Optional[_Iterable[int]] = ..., up_to_position: _Optional[int] = ...) -> None: ...

class AckResultsResponse(_message.Message):
    __slots__ = ("acked", "not_leased")
    ACKED_FIELD_NUMBER: _ClassVar[int]
    NOT_LEASED_FIELD_NUMBER: _ClassVar[int]
    acked: int
    not_leased: int
    def __init__(self, acked: _Optional[int] = ..., not_leased: _Optional[int] = ...) -> None: ...

class NackResultsRequest(_message.Message):
    __slots__ = ("consumer", "positions", "retry_after", "dead_letter", "reason")
    CONSUMER_FIELD_NUMBER: _ClassVar[int]
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    consumer: str
    positions: _containers.RepeatedScalarFieldContainer[int]
    retry_after: _duration_pb2.Duration
    dead_letter: bool
    reason: str
    def __init__(self, consumer: _Optional[str] = ..., positions: _Optional[_Iterable[int]] = ..., retry_after: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., dead_letter: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class NackResultsResponse(_message.Message):
    __slots__ = ("requeued", "dead_lettered", "not_leased")
    REQUEUED_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERED_FIELD_NUMBER: _ClassVar[int]
    NOT_LEASED_FIELD_NUMBER: _ClassVar[int]
    requeued: int
    dead_lettered: int
    not_leased: int
    def __init__(self, requeued: _Optional[int] = ..., dead_lettered: _Optional[int] = ..., not_leased: _Optional[int] = ...) -> None: ...

class DeadLetter(_message.Message):
    __slots__ = ("position", "row", "version", "delivery_count", "reason", "time")
    POSITION_FIELD_NUMBER: _ClassVar[int]
    ROW_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_COUNT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    position: int
    row: str
    version: int
    delivery_count: int
    reason: str
    time: _timestamp_pb2.Timestamp
    def __init__(self, position: _Optional[int] = ..., row: _Optional[str] = ..., version: _Optional[int] = ..., delivery_count: _Optional[int] = ..., reason: _Optional[str] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListDeadLettersRequest(_message.Message):
    __slots__ = ("parent", "page_size", "page_token")
    PARENT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    parent: str
    page_size: int
    page_token: str
    def __init__(self, parent: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListDeadLettersResponse(_message.Message):
    __slots__ = ("dead_letters", "next_page_token")
    DEAD_LETTERS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    dead_letters: _containers.RepeatedCompositeFieldContainer[DeadLetter]
    next_page_token: str
    def __init__(self, dead_letters: _Optional[_Iterable[_Union[DeadLetter, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ResetConsumerRequest(_message.Message):
    __slots__ = ("name", "to")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    name: str
    to: ConsumerStart
    def __init__(self, name: _Optional[str] = ..., to: _Optional[_Union[ConsumerStart, _Mapping]] = ...) -> None: ...

class WebhookDelivery(_message.Message):
    __slots__ = ("message_id", "results", "first_position", "last_position", "http_status", "error", "duration", "time")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    FIRST_POSITION_FIELD_NUMBER: _ClassVar[int]
    LAST_POSITION_FIELD_NUMBER: _ClassVar[int]
    HTTP_STATUS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    results: int
    first_position: int
    last_position: int
    http_status: int
    error: str
    duration: _duration_pb2.Duration
    time: _timestamp_pb2.Timestamp
    def __init__(self, message_id: _Optional[str] = ..., results: _Optional[int] = ..., first_position: _Optional[int] = ..., last_position: _Optional[int] = ..., http_status: _Optional[int] = ..., error: _Optional[str] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListWebhookDeliveriesRequest(_message.Message):
    __slots__ = ("parent", "page_size", "page_token")
    PARENT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    parent: str
    page_size: int
    page_token: str
    def __init__(self, parent: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListWebhookDeliveriesResponse(_message.Message):
    __slots__ = ("deliveries", "next_page_token")
    DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    deliveries: _containers.RepeatedCompositeFieldContainer[WebhookDelivery]
    next_page_token: str
    def __init__(self, deliveries: _Optional[_Iterable[_Union[WebhookDelivery, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
