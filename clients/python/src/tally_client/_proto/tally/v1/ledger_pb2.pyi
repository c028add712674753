import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import field_mask_pb2 as _field_mask_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from tally_client._proto.tally.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LedgerState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LEDGER_STATE_UNSPECIFIED: _ClassVar[LedgerState]
    LEDGER_STATE_ACTIVE: _ClassVar[LedgerState]
    LEDGER_STATE_DELETING: _ClassVar[LedgerState]
    LEDGER_STATE_PAUSED: _ClassVar[LedgerState]

class LedgerPauseReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LEDGER_PAUSE_REASON_UNSPECIFIED: _ClassVar[LedgerPauseReason]
    LEDGER_PAUSE_REASON_OPERATOR: _ClassVar[LedgerPauseReason]
    LEDGER_PAUSE_REASON_SPEND_CAP: _ClassVar[LedgerPauseReason]
    LEDGER_PAUSE_REASON_QUOTA: _ClassVar[LedgerPauseReason]
    LEDGER_PAUSE_REASON_BILLING: _ClassVar[LedgerPauseReason]
    LEDGER_PAUSE_REASON_MODEL_DRIFT: _ClassVar[LedgerPauseReason]
    LEDGER_PAUSE_REASON_MODEL: _ClassVar[LedgerPauseReason]
    LEDGER_PAUSE_REASON_REFUSED: _ClassVar[LedgerPauseReason]

class CacheScope(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CACHE_SCOPE_UNSPECIFIED: _ClassVar[CacheScope]
    CACHE_SCOPE_TEAM: _ClassVar[CacheScope]
    CACHE_SCOPE_SHARED: _ClassVar[CacheScope]

class Lane(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LANE_UNSPECIFIED: _ClassVar[Lane]
    LANE_BATCH: _ClassVar[Lane]
    LANE_FLEX: _ClassVar[Lane]
    LANE_STANDARD: _ClassVar[Lane]
    LANE_PRIORITY: _ClassVar[Lane]

class EnrollOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ENROLL_OUTCOME_UNSPECIFIED: _ClassVar[EnrollOutcome]
    ENROLL_OUTCOME_ENROLLED: _ClassVar[EnrollOutcome]
    ENROLL_OUTCOME_ALREADY_PRESENT: _ClassVar[EnrollOutcome]
    ENROLL_OUTCOME_CONFLICT: _ClassVar[EnrollOutcome]

class ClaimState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CLAIM_STATE_UNSPECIFIED: _ClassVar[ClaimState]
    CLAIM_STATE_ACTIVE: _ClassVar[ClaimState]
    CLAIM_STATE_DONE: _ClassVar[ClaimState]
    CLAIM_STATE_EXPIRED: _ClassVar[ClaimState]

class Verdict(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VERDICT_UNSPECIFIED: _ClassVar[Verdict]
    VERDICT_SUCCEEDED: _ClassVar[Verdict]
    VERDICT_RETRYABLE: _ClassVar[Verdict]
    VERDICT_PERMANENT: _ClassVar[Verdict]
    VERDICT_STALE: _ClassVar[Verdict]
    VERDICT_DUPLICATE: _ClassVar[Verdict]

class RowView(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROW_VIEW_UNSPECIFIED: _ClassVar[RowView]
    ROW_VIEW_BASIC: _ClassVar[RowView]
    ROW_VIEW_FULL: _ClassVar[RowView]
LEDGER_STATE_UNSPECIFIED: LedgerState
LEDGER_STATE_ACTIVE: LedgerState
LEDGER_STATE_DELETING: LedgerState
LEDGER_STATE_PAUSED: LedgerState
LEDGER_PAUSE_REASON_UNSPECIFIED: LedgerPauseReason
LEDGER_PAUSE_REASON_OPERATOR: LedgerPauseReason
LEDGER_PAUSE_REASON_SPEND_CAP: LedgerPauseReason
LEDGER_PAUSE_REASON_QUOTA: LedgerPauseReason
LEDGER_PAUSE_REASON_BILLING: LedgerPauseReason
LEDGER_PAUSE_REASON_MODEL_DRIFT: LedgerPauseReason
LEDGER_PAUSE_REASON_MODEL: LedgerPauseReason
LEDGER_PAUSE_REASON_REFUSED: LedgerPauseReason
CACHE_SCOPE_UNSPECIFIED: CacheScope
CACHE_SCOPE_TEAM: CacheScope
CACHE_SCOPE_SHARED: CacheScope
LANE_UNSPECIFIED: Lane
LANE_BATCH: Lane
LANE_FLEX: Lane
LANE_STANDARD: Lane
LANE_PRIORITY: Lane
ENROLL_OUTCOME_UNSPECIFIED: EnrollOutcome
ENROLL_OUTCOME_ENROLLED: EnrollOutcome
ENROLL_OUTCOME_ALREADY_PRESENT: EnrollOutcome
ENROLL_OUTCOME_CONFLICT: EnrollOutcome
CLAIM_STATE_UNSPECIFIED: ClaimState
CLAIM_STATE_ACTIVE: ClaimState
CLAIM_STATE_DONE: ClaimState
CLAIM_STATE_EXPIRED: ClaimState
VERDICT_UNSPECIFIED: Verdict
VERDICT_SUCCEEDED: Verdict
VERDICT_RETRYABLE: Verdict
VERDICT_PERMANENT: Verdict
VERDICT_STALE: Verdict
VERDICT_DUPLICATE: Verdict
ROW_VIEW_UNSPECIFIED: RowView
ROW_VIEW_BASIC: RowView
ROW_VIEW_FULL: RowView

class GoldenRow(_message.Message):
    __slots__ = ("key", "payload", "prompt", "expected", "fields")
    KEY_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    key: str
    payload: str
    prompt: _common_pb2.PromptRef
    expected: str
    fields: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, key: _Optional[str] = ..., payload: _Optional[str] = ..., prompt: _Optional[_Union[_common_pb2.PromptRef, _Mapping]] = ..., expected: _Optional[str] = ..., fields: _Optional[_Iterable[str]] = ...) -> None: ...

class GoldenSet(_message.Message):
    __slots__ = ("name", "rows", "every_nth_job", "window", "max_mismatch_fraction", "pause_on_drift", "drift")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    EVERY_NTH_JOB_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    MAX_MISMATCH_FRACTION_FIELD_NUMBER: _ClassVar[int]
    PAUSE_ON_DRIFT_FIELD_NUMBER: _ClassVar[int]
    DRIFT_FIELD_NUMBER: _ClassVar[int]
    name: str
    rows: _containers.RepeatedCompositeFieldContainer[GoldenRow]
    every_nth_job: int
    window: int
    max_mismatch_fraction: float
    pause_on_drift: bool
    drift: GoldenDrift
    def __init__(self, name: _Optional[str] = ..., rows: _Optional[_Iterable[_Union[GoldenRow, _Mapping]]] = ..., every_nth_job: _Optional[int] = ..., window: _Optional[int] = ..., max_mismatch_fraction: _Optional[float] = ..., pause_on_drift: _Optional[bool] = ..., drift: _Optional[_Union[GoldenDrift, _Mapping]] = ...) -> None: ...

class GoldenDrift(_message.Message):
    __slots__ = ("results", "mismatches", "fields", "drifted", "model", "model_version")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    MISMATCHES_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    DRIFTED_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    results: int
    mismatches: int
    fields: _containers.RepeatedCompositeFieldContainer[GoldenFieldCount]
    drifted: bool
    model: str
    model_version: str
    def __init__(self, results: _Optional[int] = ..., mismatches: _Optional[int] = ..., fields: _Optional[_Iterable[_Union[GoldenFieldCount, _Mapping]]] = ..., drifted: _Optional[bool] = ..., model: _Optional[str] = ..., model_version: _Optional[str] = ...) -> None: ...

class GoldenFieldCount(_message.Message):
    __slots__ = ("field", "mismatches")
    FIELD_FIELD_NUMBER: _ClassVar[int]
    MISMATCHES_FIELD_NUMBER: _ClassVar[int]
    field: str
    mismatches: int
    def __init__(self, field: _Optional[str] = ..., mismatches: _Optional[int] = ...) -> None: ...

class SetGoldenRowsRequest(_message.Message):
    __slots__ = ("golden",)
    GOLDEN_FIELD_NUMBER: _ClassVar[int]
    golden: GoldenSet
    def __init__(self, golden: _Optional[_Union[GoldenSet, _Mapping]] = ...) -> None: ...

class GetGoldenRowsRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class Ledger(_message.Message):
    __slots__ = ("name", "policy", "create_time", "update_time", "etag", "state", "delete_time", "purge", "pause")
    NAME_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    DELETE_TIME_FIELD_NUMBER: _ClassVar[int]
    PURGE_FIELD_NUMBER: _ClassVar[int]
    PAUSE_FIELD_NUMBER: _ClassVar[int]
    name: str
    policy: LedgerPolicy
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    etag: str
    state: LedgerState
    delete_time: _timestamp_pb2.Timestamp
    purge: LedgerPurge
    pause: LedgerPause
    def __init__(self, name: _Optional[str] = ..., policy: _Optional[_Union[LedgerPolicy, _Mapping]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., etag: _Optional[str] = ..., state: _Optional[_Union[LedgerState, str]] = ..., delete_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., purge: _Optional[_Union[LedgerPurge, _Mapping]] = ..., pause: _Optional[_Union[LedgerPause, _Mapping]] = ...) -> None: ...

class LedgerPause(_message.Message):
    __slots__ = ("reason", "message", "actor", "pause_time")
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    PAUSE_TIME_FIELD_NUMBER: _ClassVar[int]
    reason: LedgerPauseReason
    message: str
    actor: str
    pause_time: _timestamp_pb2.Timestamp
    def __init__(self, reason: _Optional[_Union[LedgerPauseReason, str]] = ..., message: _Optional[str] = ..., actor: _Optional[str] = ..., pause_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class LedgerPurge(_message.Message):
    __slots__ = ("rows_total", "rows_purged", "forced", "claims_expired", "jobs_abandoned")
    ROWS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    ROWS_PURGED_FIELD_NUMBER: _ClassVar[int]
    FORCED_FIELD_NUMBER: _ClassVar[int]
    CLAIMS_EXPIRED_FIELD_NUMBER: _ClassVar[int]
    JOBS_ABANDONED_FIELD_NUMBER: _ClassVar[int]
    rows_total: int
    rows_purged: int
    forced: bool
    claims_expired: int
    jobs_abandoned: int
    def __init__(self, rows_total: _Optional[int] = ..., rows_purged: _Optional[int] = ..., forced: _Optional[bool] = ..., claims_expired: _Optional[int] = ..., jobs_abandoned: _Optional[int] = ...) -> None: ...

class LedgerPolicy(_message.Message):
    __slots__ = ("model", "budgets", "lease", "backoff", "overrides", "review_threshold", "alert_url", "max_active_jobs", "prices", "spend_cap", "batch_fill", "lanes", "deadline", "turnarounds", "result_cache", "rerun_dependants")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    BUDGETS_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_FIELD_NUMBER: _ClassVar[int]
    OVERRIDES_FIELD_NUMBER: _ClassVar[int]
    REVIEW_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    ALERT_URL_FIELD_NUMBER: _ClassVar[int]
    MAX_ACTIVE_JOBS_FIELD_NUMBER: _ClassVar[int]
    PRICES_FIELD_NUMBER: _ClassVar[int]
    SPEND_CAP_FIELD_NUMBER: _ClassVar[int]
    BATCH_FILL_FIELD_NUMBER: _ClassVar[int]
    LANES_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    TURNAROUNDS_FIELD_NUMBER: _ClassVar[int]
    RESULT_CACHE_FIELD_NUMBER: _ClassVar[int]
    RERUN_DEPENDANTS_FIELD_NUMBER: _ClassVar[int]
    model: str
    budgets: AttemptBudgets
    lease: _duration_pb2.Duration
    backoff: Backoff
    overrides: _containers.RepeatedCompositeFieldContainer[ClassifierOverride]
    review_threshold: int
    alert_url: str
    max_active_jobs: int
    prices: _containers.RepeatedCompositeFieldContainer[ModelPrice]
    spend_cap: SpendCap
    batch_fill: BatchFill
    lanes: _containers.RepeatedScalarFieldContainer[Lane]
    deadline: _timestamp_pb2.Timestamp
    turnarounds: LaneTurnarounds
    result_cache: ResultCachePolicy
    rerun_dependants: bool
    def __init__(self, model: _Optional[str] = ..., budgets: _Optional[_Union[AttemptBudgets, _Mapping]] = ..., lease: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., backoff: _Optional[_Union[Backoff, _Mapping]] = ..., overrides: _Optional[_Iterable[_Union[ClassifierOverride, _Mapping]]] = ..., review_threshold: _Optional[int] = ..., alert_url: _Optional[str] = ..., max_active_jobs: _Optional[int] = ..., prices: _Optional[_Iterable[_Union[ModelPrice, _Mapping]]] = ..., spend_cap: _Optional[_Union[SpendCap, _Mapping]] = ..., batch_fill: _Optional[_Union[BatchFill, _Mapping]] = ..., lanes: _Optional[_Iterable[_Union[Lane, str]]] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., turnarounds: _Optional[_Union[LaneTurnarounds, _Mapping]] = ..., result_cache: _Optional[_Union[ResultCachePolicy, _Mapping]] = ..., rerun_dependants: _Optional[bool] = ...) -> None: ...

class ResultCachePolicy(_message.Message):
    __slots__ = ("max_age", "scope")
    MAX_AGE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    max_age: _duration_pb2.Duration
    scope: CacheScope
    def __init__(self, max_age: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., scope: _Optional[_Union[CacheScope, str]] = ...) -> None: ...

class LaneTurnarounds(_message.Message):
    __slots__ = ("batch", "flex", "standard", "priority")
    BATCH_FIELD_NUMBER: _ClassVar[int]
    FLEX_FIELD_NUMBER: _ClassVar[int]
    STANDARD_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    batch: _duration_pb2.Duration
    flex: _duration_pb2.Duration
    standard: _duration_pb2.Duration
    priority: _duration_pb2.Duration
    def __init__(self, batch: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., flex: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., standard: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., priority: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class BatchFill(_message.Message):
    __slots__ = ("max_wait", "quiet", "min_rows")
    MAX_WAIT_FIELD_NUMBER: _ClassVar[int]
    QUIET_FIELD_NUMBER: _ClassVar[int]
    MIN_ROWS_FIELD_NUMBER: _ClassVar[int]
    max_wait: _duration_pb2.Duration
    quiet: _duration_pb2.Duration
    min_rows: int
    def __init__(self, max_wait: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., quiet: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., min_rows: _Optional[int] = ...) -> None: ...

class SpendCap(_message.Message):
    __slots__ = ("max_cost_usd", "max_input_tokens", "max_output_tokens", "warn_fraction", "output_tokens_per_row")
    MAX_COST_USD_FIELD_NUMBER: _ClassVar[int]
    MAX_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    WARN_FRACTION_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_PER_ROW_FIELD_NUMBER: _ClassVar[int]
    max_cost_usd: float
    max_input_tokens: int
    max_output_tokens: int
    warn_fraction: float
    output_tokens_per_row: int
    def __init__(self, max_cost_usd: _Optional[float] = ..., max_input_tokens: _Optional[int] = ..., max_output_tokens: _Optional[int] = ..., warn_fraction: _Optional[float] = ..., output_tokens_per_row: _Optional[int] = ...) -> None: ...

class SpendAmount(_message.Message):
    __slots__ = ("cost_usd", "input_tokens", "output_tokens")
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    cost_usd: float
    input_tokens: int
    output_tokens: int
    def __init__(self, cost_usd: _Optional[float] = ..., input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ...) -> None: ...

class LedgerSpend(_message.Message):
    __slots__ = ("cap", "spent", "reserved")
    CAP_FIELD_NUMBER: _ClassVar[int]
    SPENT_FIELD_NUMBER: _ClassVar[int]
    RESERVED_FIELD_NUMBER: _ClassVar[int]
    cap: SpendCap
    spent: SpendAmount
    reserved: SpendAmount
    def __init__(self, cap: _Optional[_Union[SpendCap, _Mapping]] = ..., spent: _Optional[_Union[SpendAmount, _Mapping]] = ..., reserved: _Optional[_Union[SpendAmount, _Mapping]] = ...) -> None: ...

class AttemptBudgets(_message.Message):
    __slots__ = ("provider", "content", "infra")
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    INFRA_FIELD_NUMBER: _ClassVar[int]
    provider: int
    content: int
    infra: int
    def __init__(self, provider: _Optional[int] = ..., content: _Optional[int] = ..., infra: _Optional[int] = ...) -> None: ...

class Backoff(_message.Message):
    __slots__ = ("initial", "max", "multiplier", "jitter")
    INITIAL_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    MULTIPLIER_FIELD_NUMBER: _ClassVar[int]
    JITTER_FIELD_NUMBER: _ClassVar[int]
    initial: _duration_pb2.Duration
    max: _duration_pb2.Duration
    multiplier: float
    jitter: float
    def __init__(self, initial: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., max: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., multiplier: _Optional[float] = ..., jitter: _Optional[float] = ...) -> None: ...

class ClassifierOverride(_message.Message):
    __slots__ = ("name", "http_code", "status", "message_contains", "finish_reason", "kind", "verdict", "budget")
    NAME_FIELD_NUMBER: _ClassVar[int]
    HTTP_CODE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_CONTAINS_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    name: str
    http_code: int
    status: str
    message_contains: str
    finish_reason: str
    kind: _common_pb2.FailureKind
    verdict: _common_pb2.RowStatus
    budget: _common_pb2.Budget
    def __init__(self, name: _Optional[str] = ..., http_code: _Optional[int] = ..., status: _Optional[str] = ..., message_contains: _Optional[str] = ..., finish_reason: _Optional[str] = ..., kind: _Optional[_Union[_common_pb2.FailureKind, str]] = ..., verdict: _Optional[_Union[_common_pb2.RowStatus, str]] = ..., budget: _Optional[_Union[_common_pb2.Budget, str]] = ...) -> None: ...

class ModelPrice(_message.Message):
    __slots__ = ("model", "input_per_million", "output_per_million", "cached_input_per_million", "thinking_per_million", "lane")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    INPUT_PER_MILLION_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_PER_MILLION_FIELD_NUMBER: _ClassVar[int]
    CACHED_INPUT_PER_MILLION_FIELD_NUMBER: _ClassVar[int]
    THINKING_PER_MILLION_FIELD_NUMBER: _ClassVar[int]
    LANE_FIELD_NUMBER: _ClassVar[int]
    model: str
    input_per_million: float
    output_per_million: float
    cached_input_per_million: float
    thinking_per_million: float
    lane: Lane
    def __init__(self, model: _Optional[str] = ..., input_per_million: _Optional[float] = ..., output_per_million: _Optional[float] = ..., cached_input_per_million: _Optional[float] = ..., thinking_per_million: _Optional[float] = ..., lane: _Optional[_Union[Lane, str]] = ...) -> None: ...

class CreateLedgerRequest(_message.Message):
    __slots__ = ("ledger_id", "policy")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    ledger_id: str
    policy: LedgerPolicy
    def __init__(self, ledger_id: _Optional[str] = ..., policy: _Optional[_Union[LedgerPolicy, _Mapping]] = ...) -> None: ...

class GetLedgerRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListLedgersRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "show_deleted")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SHOW_DELETED_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    show_deleted: bool
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., show_deleted: _Optional[bool] = ...) -> None: ...

class DeleteLedgerRequest(_message.Message):
    __slots__ = ("name", "force", "etag", "content_etag")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    CONTENT_ETAG_FIELD_NUMBER: _ClassVar[int]
    name: str
    force: bool
    etag: str
    content_etag: str
    def __init__(self, name: _Optional[str] = ..., force: _Optional[bool] = ..., etag: _Optional[str] = ..., content_etag: _Optional[str] = ...) -> None: ...

class PauseLedgerRequest(_message.Message):
    __slots__ = ("name", "message", "etag")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    name: str
    message: str
    etag: str
    def __init__(self, name: _Optional[str] = ..., message: _Optional[str] = ..., etag: _Optional[str] = ...) -> None: ...

class ResumeLedgerRequest(_message.Message):
    __slots__ = ("name", "etag")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    name: str
    etag: str
    def __init__(self, name: _Optional[str] = ..., etag: _Optional[str] = ...) -> None: ...

class ListLedgersResponse(_message.Message):
    __slots__ = ("ledgers", "next_page_token")
    LEDGERS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ledgers: _containers.RepeatedCompositeFieldContainer[Ledger]
    next_page_token: str
    def __init__(self, ledgers: _Optional[_Iterable[_Union[Ledger, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class UpdateLedgerRequest(_message.Message):
    __slots__ = ("ledger", "update_mask")
    LEDGER_FIELD_NUMBER: _ClassVar[int]
    UPDATE_MASK_FIELD_NUMBER: _ClassVar[int]
    ledger: Ledger
    update_mask: _field_mask_pb2.FieldMask
    def __init__(self, ledger: _Optional[_Union[Ledger, _Mapping]] = ..., update_mask: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ...) -> None: ...

class RowInput(_message.Message):
    __slots__ = ("key", "payload", "depends_on", "prompt", "model", "dependency_names")
    class DependencyNamesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    KEY_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    DEPENDS_ON_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DEPENDENCY_NAMES_FIELD_NUMBER: _ClassVar[int]
    key: str
    payload: str
    depends_on: _containers.RepeatedScalarFieldContainer[str]
    prompt: _common_pb2.PromptRef
    model: str
    dependency_names: _containers.ScalarMap[str, str]
    def __init__(self, key: _Optional[str] = ..., payload: _Optional[str] = ..., depends_on: _Optional[_Iterable[str]] = ..., prompt: _Optional[_Union[_common_pb2.PromptRef, _Mapping]] = ..., model: _Optional[str] = ..., dependency_names: _Optional[_Mapping[str, str]] = ...) -> None: ...

class EnrollRowsRequest(_message.Message):
    __slots__ = ("parent", "rows")
    PARENT_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    parent: str
    rows: _containers.RepeatedCompositeFieldContainer[RowInput]
    def __init__(self, parent: _Optional[str] = ..., rows: _Optional[_Iterable[_Union[RowInput, _Mapping]]] = ...) -> None: ...

class EnrollResult(_message.Message):
    __slots__ = ("key", "outcome")
    KEY_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    key: str
    outcome: EnrollOutcome
    def __init__(self, key: _Optional[str] = ..., outcome: _Optional[_Union[EnrollOutcome, str]] = ...) -> None: ...

class EnrollRowsResponse(_message.Message):
    __slots__ = ("results", "enrolled", "already_present", "conflicts")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    ENROLLED_FIELD_NUMBER: _ClassVar[int]
    ALREADY_PRESENT_FIELD_NUMBER: _ClassVar[int]
    CONFLICTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[EnrollResult]
    enrolled: int
    already_present: int
    conflicts: int
    def __init__(self, results: _Optional[_Iterable[_Union[EnrollResult, _Mapping]]] = ..., enrolled: _Optional[int] = ..., already_present: _Optional[int] = ..., conflicts: _Optional[int] = ...) -> None: ...

class Claim(_message.Message):
    __slots__ = ("name", "worker", "model", "create_time", "expire_time", "state", "row_count", "held_count", "job", "lane", "result_cache")
    NAME_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ROW_COUNT_FIELD_NUMBER: _ClassVar[int]
    HELD_COUNT_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    LANE_FIELD_NUMBER: _ClassVar[int]
    RESULT_CACHE_FIELD_NUMBER: _ClassVar[int]
    name: str
    worker: str
    model: str
    create_time: _timestamp_pb2.Timestamp
    expire_time: _timestamp_pb2.Timestamp
    state: ClaimState
    row_count: int
    held_count: int
    job: str
    lane: Lane
    result_cache: bool
    def __init__(self, name: _Optional[str] = ..., worker: _Optional[str] = ..., model: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., state: _Optional[_Union[ClaimState, str]] = ..., row_count: _Optional[int] = ..., held_count: _Optional[int] = ..., job: _Optional[str] = ..., lane: _Optional[_Union[Lane, str]] = ..., result_cache: _Optional[bool] = ...) -> None: ...

class ClaimRowsRequest(_message.Message):
    __slots__ = ("parent", "max_rows", "lease", "worker", "request_id", "model", "max_response_bytes", "provider", "fill_batch", "lane")
    PARENT_FIELD_NUMBER: _ClassVar[int]
    MAX_ROWS_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MAX_RESPONSE_BYTES_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    FILL_BATCH_FIELD_NUMBER: _ClassVar[int]
    LANE_FIELD_NUMBER: _ClassVar[int]
    parent: str
    max_rows: int
    lease: _duration_pb2.Duration
    worker: str
    request_id: str
    model: str
    max_response_bytes: int
    provider: str
    fill_batch: bool
    lane: Lane
    def __init__(self, parent: _Optional[str] = ..., max_rows: _Optional[int] = ..., lease: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., worker: _Optional[str] = ..., request_id: _Optional[str] = ..., model: _Optional[str] = ..., max_response_bytes: _Optional[int] = ..., provider: _Optional[str] = ..., fill_batch: _Optional[bool] = ..., lane: _Optional[_Union[Lane, str]] = ...) -> None: ...

class FillWait(_message.Message):
    __slots__ = ("runnable_rows", "reason", "retry_after")
    RUNNABLE_ROWS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    runnable_rows: int
    reason: str
    retry_after: _duration_pb2.Duration
    def __init__(self, runnable_rows: _Optional[int] = ..., reason: _Optional[str] = ..., retry_after: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ClaimedRow(_message.Message):
    __slots__ = ("key", "payload", "prompt", "model", "attempts", "dependencies")
    KEY_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    DEPENDENCIES_FIELD_NUMBER: _ClassVar[int]
    key: str
    payload: str
    prompt: _common_pb2.PromptRef
    model: str
    attempts: _common_pb2.AttemptCounts
    dependencies: _containers.RepeatedCompositeFieldContainer[DependencyResult]
    def __init__(self, key: _Optional[str] = ..., payload: _Optional[str] = ..., prompt: _Optional[_Union[_common_pb2.PromptRef, _Mapping]] = ..., model: _Optional[str] = ..., attempts: _Optional[_Union[_common_pb2.AttemptCounts, _Mapping]] = ..., dependencies: _Optional[_Iterable[_Union[DependencyResult, _Mapping]]] = ...) -> None: ...

class DependencyResult(_message.Message):
    __slots__ = ("key", "name", "result", "result_hash")
    KEY_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    RESULT_HASH_FIELD_NUMBER: _ClassVar[int]
    key: str
    name: str
    result: str
    result_hash: str
    def __init__(self, key: _Optional[str] = ..., name: _Optional[str] = ..., result: _Optional[str] = ..., result_hash: _Optional[str] = ...) -> None: ...

class ClaimRowsResponse(_message.Message):
    __slots__ = ("claim", "rows", "pause", "truncated", "filling")
    CLAIM_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    PAUSE_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    FILLING_FIELD_NUMBER: _ClassVar[int]
    claim: Claim
    rows: _containers.RepeatedCompositeFieldContainer[ClaimedRow]
    pause: LedgerPause
    truncated: bool
    filling: FillWait
    def __init__(self, claim: _Optional[_Union[Claim, _Mapping]] = ..., rows: _Optional[_Iterable[_Union[ClaimedRow, _Mapping]]] = ..., pause: _Optional[_Union[LedgerPause, _Mapping]] = ..., truncated: _Optional[bool] = ..., filling: _Optional[_Union[FillWait, _Mapping]] = ...) -> None: ...

class ExtendClaimRequest(_message.Message):
    __slots__ = ("name", "lease")
    NAME_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    name: str
    lease: _duration_pb2.Duration
    def __init__(self, name: _Optional[str] = ..., lease: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ReleaseClaimRequest(_message.Message):
    __slots__ = ("name", "keys")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    name: str
    keys: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., keys: _Optional[_Iterable[str]] = ...) -> None: ...

class ReleaseClaimResponse(_message.Message):
    __slots__ = ("released", "claim")
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    CLAIM_FIELD_NUMBER: _ClassVar[int]
    released: int
    claim: Claim
    def __init__(self, released: _Optional[int] = ..., claim: _Optional[_Union[Claim, _Mapping]] = ...) -> None: ...

class RowOutcome(_message.Message):
    __slots__ = ("key", "result", "failure", "usage", "response", "request_id", "tier", "model_version")
    KEY_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    key: str
    result: str
    failure: _common_pb2.Failure
    usage: _common_pb2.Usage
    response: str
    request_id: str
    tier: str
    model_version: str
    def __init__(self, key: _Optional[str] = ..., result: _Optional[str] = ..., failure: _Optional[_Union[_common_pb2.Failure, _Mapping]] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., response: _Optional[str] = ..., request_id: _Optional[str] = ..., tier: _Optional[str] = ..., model_version: _Optional[str] = ...) -> None: ...

class ReportOutcomesRequest(_message.Message):
    __slots__ = ("claim", "outcomes", "claim_next")
    CLAIM_FIELD_NUMBER: _ClassVar[int]
    OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    CLAIM_NEXT_FIELD_NUMBER: _ClassVar[int]
    claim: str
    outcomes: _containers.RepeatedCompositeFieldContainer[RowOutcome]
    claim_next: ClaimRowsRequest
    def __init__(self, claim: _Optional[str] = ..., outcomes: _Optional[_Iterable[_Union[RowOutcome, _Mapping]]] = ..., claim_next: _Optional[_Union[ClaimRowsRequest, _Mapping]] = ...) -> None: ...

class RowVerdict(_message.Message):
    __slots__ = ("key", "verdict", "rule", "budget", "next_attempt_time", "attempts")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    NEXT_ATTEMPT_TIME_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    key: str
    verdict: Verdict
    rule: str
    budget: _common_pb2.Budget
    next_attempt_time: _timestamp_pb2.Timestamp
    attempts: _common_pb2.AttemptCounts
    def __init__(self, key: _Optional[str] = ..., verdict: _Optional[_Union[Verdict, str]] = ..., rule: _Optional[str] = ..., budget: _Optional[_Union[_common_pb2.Budget, str]] = ..., next_attempt_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., attempts: _Optional[_Union[_common_pb2.AttemptCounts, _Mapping]] = ...) -> None: ...

class ReportOutcomesResponse(_message.Message):
    __slots__ = ("verdicts", "succeeded", "retryable", "permanent", "stale", "duplicate", "held", "next_claim")
    VERDICTS_FIELD_NUMBER: _ClassVar[int]
    SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    PERMANENT_FIELD_NUMBER: _ClassVar[int]
    STALE_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    NEXT_CLAIM_FIELD_NUMBER: _ClassVar[int]
    verdicts: _containers.RepeatedCompositeFieldContainer[RowVerdict]
    succeeded: int
    retryable: int
    permanent: int
    stale: int
    duplicate: int
    held: int
    next_claim: ClaimRowsResponse
    def __init__(self, verdicts: _Optional[_Iterable[_Union[RowVerdict, _Mapping]]] = ..., succeeded: _Optional[int] = ..., retryable: _Optional[int] = ..., permanent: _Optional[int] = ..., stale: _Optional[int] = ..., duplicate: _Optional[int] = ..., held: _Optional[int] = ..., next_claim: _Optional[_Union[ClaimRowsResponse, _Mapping]] = ...) -> None: ...

class Attempt(_message.Message):
    __slots__ = ("number", "claim", "job", "batch", "model", "prompt", "vars_hash", "outcome", "rule", "budget", "usage", "error", "actor", "time", "lane", "request_id", "tier", "cost_usd", "cached")
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    CLAIM_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    VARS_HASH_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    LANE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    CACHED_FIELD_NUMBER: _ClassVar[int]
    number: int
    claim: str
    job: str
    batch: str
    model: str
    prompt: _common_pb2.PromptRef
    vars_hash: str
    outcome: _common_pb2.RowStatus
    rule: str
    budget: _common_pb2.Budget
    usage: _common_pb2.Usage
    error: str
    actor: str
    time: _timestamp_pb2.Timestamp
    lane: Lane
    request_id: str
    tier: str
    cost_usd: float
    cached: CachedAnswer
    def __init__(self, number: _Optional[int] = ..., claim: _Optional[str] = ..., job: _Optional[str] = ..., batch: _Optional[str] = ..., model: _Optional[str] = ..., prompt: _Optional[_Union[_common_pb2.PromptRef, _Mapping]] = ..., vars_hash: _Optional[str] = ..., outcome: _Optional[_Union[_common_pb2.RowStatus, str]] = ..., rule: _Optional[str] = ..., budget: _Optional[_Union[_common_pb2.Budget, str]] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., error: _Optional[str] = ..., actor: _Optional[str] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., lane: _Optional[_Union[Lane, str]] = ..., request_id: _Optional[str] = ..., tier: _Optional[str] = ..., cost_usd: _Optional[float] = ..., cached: _Optional[_Union[CachedAnswer, _Mapping]] = ...) -> None: ...

class CachedAnswer(_message.Message):
    __slots__ = ("row", "attempt", "cost_usd", "answer_time", "model_version")
    ROW_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    ANSWER_TIME_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    row: str
    attempt: int
    cost_usd: float
    answer_time: _timestamp_pb2.Timestamp
    model_version: str
    def __init__(self, row: _Optional[str] = ..., attempt: _Optional[int] = ..., cost_usd: _Optional[float] = ..., answer_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., model_version: _Optional[str] = ...) -> None: ...

class Row(_message.Message):
    __slots__ = ("name", "key", "payload", "depends_on", "prompt", "model", "status", "attempts", "rule", "last_error", "result", "usage", "claim", "job", "next_attempt_time", "create_time", "update_time", "history", "unmet_dependencies", "history_omitted", "response", "result_version", "inputs", "superseded", "superseded_omitted")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    DEPENDS_ON_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    CLAIM_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    NEXT_ATTEMPT_TIME_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    UNMET_DEPENDENCIES_FIELD_NUMBER: _ClassVar[int]
    HISTORY_OMITTED_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    RESULT_VERSION_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDED_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDED_OMITTED_FIELD_NUMBER: _ClassVar[int]
    name: str
    key: str
    payload: str
    depends_on: _containers.RepeatedScalarFieldContainer[str]
    prompt: _common_pb2.PromptRef
    model: str
    status: _common_pb2.RowStatus
    attempts: _common_pb2.AttemptCounts
    rule: str
    last_error: str
    result: str
    usage: _common_pb2.Usage
    claim: str
    job: str
    next_attempt_time: _timestamp_pb2.Timestamp
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    history: _containers.RepeatedCompositeFieldContainer[Attempt]
    unmet_dependencies: int
    history_omitted: int
    response: str
    result_version: int
    inputs: _containers.RepeatedCompositeFieldContainer[DependencyInput]
    superseded: _containers.RepeatedCompositeFieldContainer[SupersededResult]
    superseded_omitted: int
    def __init__(self, name: _Optional[str] = ..., key: _Optional[str] = ..., payload: _Optional[str] = ..., depends_on: _Optional[_Iterable[str]] = ..., prompt: _Optional[_Union[_common_pb2.PromptRef, _Mapping]] = ..., model: _Optional[str] = ..., status: _Optional[_Union[_common_pb2.RowStatus, str]] = ..., attempts: _Optional[_Union[_common_pb2.AttemptCounts, _Mapping]] = ..., rule: _Optional[str] = ..., last_error: _Optional[str] = ..., result: _Optional[str] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., claim: _Optional[str] = ..., job: _Optional[str] = ..., next_attempt_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., history: _Optional[_Iterable[_Union[Attempt, _Mapping]]] = ..., unmet_dependencies: _Optional[int] = ..., history_omitted: _Optional[int] = ..., response: _Optional[str] = ..., result_version: _Optional[int] = ..., inputs: _Optional[_Iterable[_Union[DependencyInput, _Mapping]]] = ..., superseded: _Optional[_Iterable[_Union[SupersededResult, _Mapping]]] = ..., superseded_omitted: _Optional[int] = ...) -> None: ...

class SupersededResult(_message.Message):
    __slots__ = ("result_version", "result", "rule", "reason", "actor", "supersede_time")
    RESULT_VERSION_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDE_TIME_FIELD_NUMBER: _ClassVar[int]
    result_version: int
    result: str
    rule: str
    reason: str
    actor: str
    supersede_time: _timestamp_pb2.Timestamp
    def __init__(self, result_version: _Optional[int] = ..., result: _Optional[str] = ..., rule: _Optional[str] = ..., reason: _Optional[str] = ..., actor: _Optional[str] = ..., supersede_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class DependencyInput(_message.Message):
    __slots__ = ("key", "name", "used_hash", "changed")
    KEY_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    USED_HASH_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    key: str
    name: str
    used_hash: str
    changed: bool
    def __init__(self, key: _Optional[str] = ..., name: _Optional[str] = ..., used_hash: _Optional[str] = ..., changed: _Optional[bool] = ...) -> None: ...

class GetRowRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class RowFilter(_message.Message):
    __slots__ = ("statuses", "rule", "model", "prompt_name", "prompt_version", "job", "in_job", "stale_cache", "inputs_changed")
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_NAME_FIELD_NUMBER: _ClassVar[int]
    PROMPT_VERSION_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    IN_JOB_FIELD_NUMBER: _ClassVar[int]
    STALE_CACHE_FIELD_NUMBER: _ClassVar[int]
    INPUTS_CHANGED_FIELD_NUMBER: _ClassVar[int]
    statuses: _containers.RepeatedScalarFieldContainer[_common_pb2.RowStatus]
    rule: str
    model: str
    prompt_name: str
    prompt_version: str
    job: str
    in_job: str
    stale_cache: bool
    inputs_changed: bool
    def __init__(self, statuses: _Optional[_Iterable[_Union[_common_pb2.RowStatus, str]]] = ..., rule: _Optional[str] = ..., model: _Optional[str] = ..., prompt_name: _Optional[str] = ..., prompt_version: _Optional[str] = ..., job: _Optional[str] = ..., in_job: _Optional[str] = ..., stale_cache: _Optional[bool] = ..., inputs_changed: _Optional[bool] = ...) -> None: ...

class ListRowsRequest(_message.Message):
    __slots__ = ("parent", "filter", "page_size", "page_token", "view")
    PARENT_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    parent: str
    filter: RowFilter
    page_size: int
    page_token: str
    view: RowView
    def __init__(self, parent: _Optional[str] = ..., filter: _Optional[_Union[RowFilter, _Mapping]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., view: _Optional[_Union[RowView, str]] = ...) -> None: ...

class ListRowsResponse(_message.Message):
    __slots__ = ("rows", "next_page_token")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    rows: _containers.RepeatedCompositeFieldContainer[Row]
    next_page_token: str
    def __init__(self, rows: _Optional[_Iterable[_Union[Row, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class SummarizeLedgerRequest(_message.Message):
    __slots__ = ("name", "forecast")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FORECAST_FIELD_NUMBER: _ClassVar[int]
    name: str
    forecast: bool
    def __init__(self, name: _Optional[str] = ..., forecast: _Optional[bool] = ...) -> None: ...

class LedgerSummary(_message.Message):
    __slots__ = ("ledger", "total", "pending", "running", "retryable", "succeeded", "permanent", "blocked", "attempts_provider", "attempts_content", "attempts_infra", "attempts_total", "usage", "estimated_cost_usd", "unpriced_models", "permanent_by_rule", "active_jobs", "summary_line", "state", "pause", "spend", "content_etag", "cost_by_lane", "forecast", "result_cache", "inputs_changed")
    class PermanentByRuleEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    LEDGER_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    PERMANENT_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_PROVIDER_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_CONTENT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_INFRA_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_COST_USD_FIELD_NUMBER: _ClassVar[int]
    UNPRICED_MODELS_FIELD_NUMBER: _ClassVar[int]
    PERMANENT_BY_RULE_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_JOBS_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_LINE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PAUSE_FIELD_NUMBER: _ClassVar[int]
    SPEND_FIELD_NUMBER: _ClassVar[int]
    CONTENT_ETAG_FIELD_NUMBER: _ClassVar[int]
    COST_BY_LANE_FIELD_NUMBER: _ClassVar[int]
    FORECAST_FIELD_NUMBER: _ClassVar[int]
    RESULT_CACHE_FIELD_NUMBER: _ClassVar[int]
    INPUTS_CHANGED_FIELD_NUMBER: _ClassVar[int]
    ledger: str
    total: int
    pending: int
    running: int
    retryable: int
    succeeded: int
    permanent: int
    blocked: int
    attempts_provider: int
    attempts_content: int
    attempts_infra: int
    attempts_total: int
    usage: _common_pb2.Usage
    estimated_cost_usd: float
    unpriced_models: _containers.RepeatedScalarFieldContainer[str]
    permanent_by_rule: _containers.ScalarMap[str, int]
    active_jobs: int
    summary_line: str
    state: LedgerState
    pause: LedgerPause
    spend: LedgerSpend
    content_etag: str
    cost_by_lane: _containers.RepeatedCompositeFieldContainer[LaneCost]
    forecast: LedgerForecast
    result_cache: ResultCacheStats
    inputs_changed: int
    def __init__(self, ledger: _Optional[str] = ..., total: _Optional[int] = ..., pending: _Optional[int] = ..., running: _Optional[int] = ..., retryable: _Optional[int] = ..., succeeded: _Optional[int] = ..., permanent: _Optional[int] = ..., blocked: _Optional[int] = ..., attempts_provider: _Optional[int] = ..., attempts_content: _Optional[int] = ..., attempts_infra: _Optional[int] = ..., attempts_total: _Optional[int] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., estimated_cost_usd: _Optional[float] = ..., unpriced_models: _Optional[_Iterable[str]] = ..., permanent_by_rule: _Optional[_Mapping[str, int]] = ..., active_jobs: _Optional[int] = ..., summary_line: _Optional[str] = ..., state: _Optional[_Union[LedgerState, str]] = ..., pause: _Optional[_Union[LedgerPause, _Mapping]] = ..., spend: _Optional[_Union[LedgerSpend, _Mapping]] = ..., content_etag: _Optional[str] = ..., cost_by_lane: _Optional[_Iterable[_Union[LaneCost, _Mapping]]] = ..., forecast: _Optional[_Union[LedgerForecast, _Mapping]] = ..., result_cache: _Optional[_Union[ResultCacheStats, _Mapping]] = ..., inputs_changed: _Optional[int] = ...) -> None: ...

class ResultCacheStats(_message.Message):
    __slots__ = ("hits", "misses", "saved_usd", "stale")
    HITS_FIELD_NUMBER: _ClassVar[int]
    MISSES_FIELD_NUMBER: _ClassVar[int]
    SAVED_USD_FIELD_NUMBER: _ClassVar[int]
    STALE_FIELD_NUMBER: _ClassVar[int]
    hits: int
    misses: int
    saved_usd: float
    stale: int
    def __init__(self, hits: _Optional[int] = ..., misses: _Optional[int] = ..., saved_usd: _Optional[float] = ..., stale: _Optional[int] = ...) -> None: ...

class LedgerForecast(_message.Message):
    __slots__ = ("deadline", "depth", "turnarounds", "plan", "all_batch", "explanation")
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    TURNAROUNDS_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    ALL_BATCH_FIELD_NUMBER: _ClassVar[int]
    EXPLANATION_FIELD_NUMBER: _ClassVar[int]
    deadline: _timestamp_pb2.Timestamp
    depth: int
    turnarounds: LaneTurnarounds
    plan: ForecastPlan
    all_batch: ForecastPlan
    explanation: str
    def __init__(self, deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., depth: _Optional[int] = ..., turnarounds: _Optional[_Union[LaneTurnarounds, _Mapping]] = ..., plan: _Optional[_Union[ForecastPlan, _Mapping]] = ..., all_batch: _Optional[_Union[ForecastPlan, _Mapping]] = ..., explanation: _Optional[str] = ...) -> None: ...

class ForecastPlan(_message.Message):
    __slots__ = ("finish_time", "in_time", "cost_usd", "rows_by_lane")
    FINISH_TIME_FIELD_NUMBER: _ClassVar[int]
    IN_TIME_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    ROWS_BY_LANE_FIELD_NUMBER: _ClassVar[int]
    finish_time: _timestamp_pb2.Timestamp
    in_time: bool
    cost_usd: float
    rows_by_lane: _containers.RepeatedCompositeFieldContainer[LaneRows]
    def __init__(self, finish_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., in_time: _Optional[bool] = ..., cost_usd: _Optional[float] = ..., rows_by_lane: _Optional[_Iterable[_Union[LaneRows, _Mapping]]] = ...) -> None: ...

class LaneRows(_message.Message):
    __slots__ = ("lane", "rows")
    LANE_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    lane: Lane
    rows: int
    def __init__(self, lane: _Optional[_Union[Lane, str]] = ..., rows: _Optional[int] = ...) -> None: ...

class LaneCost(_message.Message):
    __slots__ = ("lane", "attempts", "usage", "cost_usd")
    LANE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    lane: Lane
    attempts: int
    usage: _common_pb2.Usage
    cost_usd: float
    def __init__(self, lane: _Optional[_Union[Lane, str]] = ..., attempts: _Optional[int] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., cost_usd: _Optional[float] = ...) -> None: ...

class RowKeys(_message.Message):
    __slots__ = ("keys",)
    KEYS_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, keys: _Optional[_Iterable[str]] = ...) -> None: ...

class RedriveRowsRequest(_message.Message):
    __slots__ = ("parent", "keys", "filter", "validate_only", "reason", "include_succeeded")
    PARENT_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    parent: str
    keys: RowKeys
    filter: RowFilter
    validate_only: bool
    reason: str
    include_succeeded: bool
    def __init__(self, parent: _Optional[str] = ..., keys: _Optional[_Union[RowKeys, _Mapping]] = ..., filter: _Optional[_Union[RowFilter, _Mapping]] = ..., validate_only: _Optional[bool] = ..., reason: _Optional[str] = ..., include_succeeded: _Optional[bool] = ...) -> None: ...

class RedriveRowsResponse(_message.Message):
    __slots__ = ("redriven", "unblocked", "skipped", "sample_keys", "reanswered", "dependants_at_risk", "estimated_cost_usd", "at_risk_keys")
    REDRIVEN_FIELD_NUMBER: _ClassVar[int]
    UNBLOCKED_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_KEYS_FIELD_NUMBER: _ClassVar[int]
    REANSWERED_FIELD_NUMBER: _ClassVar[int]
    DEPENDANTS_AT_RISK_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_COST_USD_FIELD_NUMBER: _ClassVar[int]
    AT_RISK_KEYS_FIELD_NUMBER: _ClassVar[int]
    redriven: int
    unblocked: int
    skipped: int
    sample_keys: _containers.RepeatedScalarFieldContainer[str]
    reanswered: int
    dependants_at_risk: int
    estimated_cost_usd: float
    at_risk_keys: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, redriven: _Optional[int] = ..., unblocked: _Optional[int] = ..., skipped: _Optional[int] = ..., sample_keys: _Optional[_Iterable[str]] = ..., reanswered: _Optional[int] = ..., dependants_at_risk: _Optional[int] = ..., estimated_cost_usd: _Optional[float] = ..., at_risk_keys: _Optional[_Iterable[str]] = ...) -> None: ...

class Prompt(_message.Message):
    __slots__ = ("name", "prompt_id", "version", "template", "response_schema", "system_instruction", "sha256", "create_time", "media")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PROMPT_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_INSTRUCTION_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    MEDIA_FIELD_NUMBER: _ClassVar[int]
    name: str
    prompt_id: str
    version: str
    template: str
    response_schema: str
    system_instruction: str
    sha256: str
    create_time: _timestamp_pb2.Timestamp
    media: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., prompt_id: _Optional[str] = ..., version: _Optional[str] = ..., template: _Optional[str] = ..., response_schema: _Optional[str] = ..., system_instruction: _Optional[str] = ..., sha256: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., media: _Optional[_Iterable[str]] = ...) -> None: ...

class RegisterPromptRequest(_message.Message):
    __slots__ = ("prompt_id", "version", "template", "response_schema", "system_instruction", "media")
    PROMPT_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_INSTRUCTION_FIELD_NUMBER: _ClassVar[int]
    MEDIA_FIELD_NUMBER: _ClassVar[int]
    prompt_id: str
    version: str
    template: str
    response_schema: str
    system_instruction: str
    media: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, prompt_id: _Optional[str] = ..., version: _Optional[str] = ..., template: _Optional[str] = ..., response_schema: _Optional[str] = ..., system_instruction: _Optional[str] = ..., media: _Optional[_Iterable[str]] = ...) -> None: ...

class GetPromptRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class CacheRequest(_message.Message):
    __slots__ = ("key", "request")
    KEY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    key: str
    request: str
    def __init__(self, key: _Optional[str] = ..., request: _Optional[str] = ...) -> None: ...

class SettleFromCacheRequest(_message.Message):
    __slots__ = ("claim", "requests")
    CLAIM_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    claim: str
    requests: _containers.RepeatedCompositeFieldContainer[CacheRequest]
    def __init__(self, claim: _Optional[str] = ..., requests: _Optional[_Iterable[_Union[CacheRequest, _Mapping]]] = ...) -> None: ...

class SettleFromCacheResponse(_message.Message):
    __slots__ = ("hits", "misses", "saved_usd")
    HITS_FIELD_NUMBER: _ClassVar[int]
    MISSES_FIELD_NUMBER: _ClassVar[int]
    SAVED_USD_FIELD_NUMBER: _ClassVar[int]
    hits: _containers.RepeatedScalarFieldContainer[str]
    misses: int
    saved_usd: float
    def __init__(self, hits: _Optional[_Iterable[str]] = ..., misses: _Optional[int] = ..., saved_usd: _Optional[float] = ...) -> None: ...

class EstimateFromCacheRequest(_message.Message):
    __slots__ = ("parent", "requests")
    PARENT_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    parent: str
    requests: _containers.RepeatedCompositeFieldContainer[CacheRequest]
    def __init__(self, parent: _Optional[str] = ..., requests: _Optional[_Iterable[_Union[CacheRequest, _Mapping]]] = ...) -> None: ...

class EstimateFromCacheResponse(_message.Message):
    __slots__ = ("hits", "misses", "saved_usd")
    HITS_FIELD_NUMBER: _ClassVar[int]
    MISSES_FIELD_NUMBER: _ClassVar[int]
    SAVED_USD_FIELD_NUMBER: _ClassVar[int]
    hits: _containers.RepeatedCompositeFieldContainer[CacheEstimate]
    misses: int
    saved_usd: float
    def __init__(self, hits: _Optional[_Iterable[_Union[CacheEstimate, _Mapping]]] = ..., misses: _Optional[int] = ..., saved_usd: _Optional[float] = ...) -> None: ...

class CacheEstimate(_message.Message):
    __slots__ = ("key", "cost_usd")
    KEY_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    key: str
    cost_usd: float
    def __init__(self, key: _Optional[str] = ..., cost_usd: _Optional[float] = ...) -> None: ...
