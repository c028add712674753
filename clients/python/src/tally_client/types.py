"""What tally answers, as Python values: enums for statuses, frozen
dataclasses for rows, attempts, claims, verdicts, ledgers and summaries, JSON
already decoded, times as aware `datetime`s in UTC (None when unset).

Every dataclass built from a message keeps it in `raw` (left out of `repr`
and of comparisons) for the rare field not mapped here. Converting never
calls the server: these are pure functions of the messages."""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from tally_client._proto.tally.v1 import common_pb2, job_pb2, ledger_pb2


class _Named(str, enum.Enum):
    """An enum whose values are the proto names without their prefix
    (`RowStatus.SUCCEEDED == "SUCCEEDED"`), convertible both ways."""

    @classmethod
    def _prefix(cls) -> str:
        raise NotImplementedError

    @classmethod
    def _proto(cls) -> Any:
        raise NotImplementedError

    @property
    def number(self) -> int:
        """The proto enum number."""
        number: int = self._proto().Value(self._prefix() + self.value)
        return number

    @classmethod
    def from_number(cls, number: int) -> Any:
        """The member for a proto enum number; a number this client does not
        know (a newer server) raises ValueError saying so."""
        try:
            name: str = cls._proto().Name(number).removeprefix(cls._prefix())
        except ValueError:
            name = ""
        if name not in cls.__members__:
            raise ValueError(
                f"the server sent {cls.__name__} {number}, unknown to this tally-client "
                "(a newer server?): upgrade tally-client"
            )
        return cls[name]

    @classmethod
    def parse(cls, value: object) -> Any:
        """A member from itself, its name in any case (`"succeeded"`), or its
        proto number; anything else raises ValueError listing the names."""
        if isinstance(value, cls):
            return value
        if isinstance(value, bool):
            pass
        elif isinstance(value, int):
            return cls.from_number(value)
        elif isinstance(value, str):
            name = value.upper().removeprefix(cls._prefix())
            if name in cls.__members__:
                return cls[name]
        names = ", ".join(m.value for m in cls)
        raise ValueError(f"{value!r} is not a {cls.__name__} (one of {names})")

    def __str__(self) -> str:
        return str(self.value)


class RowStatus(_Named):
    """Where a row is. SUCCEEDED never changes again; PERMANENT and BLOCKED
    change only when an operator redrives."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    RETRYABLE = "RETRYABLE"
    SUCCEEDED = "SUCCEEDED"
    PERMANENT = "PERMANENT"
    BLOCKED = "BLOCKED"

    @classmethod
    def _prefix(cls) -> str:
        return "ROW_STATUS_"

    @classmethod
    def _proto(cls) -> Any:
        return common_pb2.RowStatus

    @property
    def is_final(self) -> bool:
        """SUCCEEDED, PERMANENT or BLOCKED: nothing more happens to the row
        unless an operator redrives it."""
        return self in (RowStatus.SUCCEEDED, RowStatus.PERMANENT, RowStatus.BLOCKED)


class Budget(_Named):
    """The attempt budget an attempt was counted against."""

    PROVIDER = "PROVIDER"
    CONTENT = "CONTENT"
    INFRA = "INFRA"

    @classmethod
    def _prefix(cls) -> str:
        return "BUDGET_"

    @classmethod
    def _proto(cls) -> Any:
        return common_pb2.Budget


class Verdict(_Named):
    """What the server decided for one reported row."""

    SUCCEEDED = "SUCCEEDED"
    RETRYABLE = "RETRYABLE"
    PERMANENT = "PERMANENT"
    #: The claim no longer holds the row (lease lost, released): nothing changed.
    STALE = "STALE"
    #: This claim already reported the row: nothing changed.
    DUPLICATE = "DUPLICATE"

    @classmethod
    def _prefix(cls) -> str:
        return "VERDICT_"

    @classmethod
    def _proto(cls) -> Any:
        return ledger_pb2.Verdict


class FailureKind(_Named):
    """What a worker saw when a row failed."""

    #: The provider answered the row with an error.
    PROVIDER_ERROR = "PROVIDER_ERROR"
    #: A response arrived but carries no usable text.
    EMPTY_RESPONSE = "EMPTY_RESPONSE"
    #: A response arrived but does not parse or match the row's schema.
    INVALID_OUTPUT = "INVALID_OUTPUT"
    #: The response or the prompt was blocked.
    BLOCKED = "BLOCKED"
    #: The row was missing from a finished job's output.
    MISSING_FROM_OUTPUT = "MISSING_FROM_OUTPUT"
    #: A file the row references cannot be used, for good (PERMANENT).
    MEDIA_UNREADABLE = "MEDIA_UNREADABLE"
    #: A file the row references could not be read this time (retried).
    MEDIA_UNAVAILABLE = "MEDIA_UNAVAILABLE"
    #: A synchronous call's answer was lost after the provider may have
    #: done the work (a timeout, a cut connection): an attempt.
    ANSWER_LOST = "ANSWER_LOST"

    @classmethod
    def _prefix(cls) -> str:
        return "FAILURE_KIND_"

    @classmethod
    def _proto(cls) -> Any:
        return common_pb2.FailureKind


class LedgerState(_Named):
    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"
    DELETING = "DELETING"

    @classmethod
    def _prefix(cls) -> str:
        return "LEDGER_STATE_"

    @classmethod
    def _proto(cls) -> Any:
        return ledger_pb2.LedgerState


class PauseReason(_Named):
    """Why a ledger is paused."""

    OPERATOR = "OPERATOR"
    SPEND_CAP = "SPEND_CAP"
    QUOTA = "QUOTA"
    BILLING = "BILLING"
    MODEL_DRIFT = "MODEL_DRIFT"
    MODEL = "MODEL"
    REFUSED = "REFUSED"

    @classmethod
    def _prefix(cls) -> str:
        return "LEDGER_PAUSE_REASON_"

    @classmethod
    def _proto(cls) -> Any:
        return ledger_pb2.LedgerPauseReason


class JobState(_Named):
    PREPARING = "PREPARING"
    CREATING = "CREATING"
    SUBMITTED = "SUBMITTED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    EXPIRED = "EXPIRED"
    RECONCILED = "RECONCILED"

    @classmethod
    def _prefix(cls) -> str:
        return "JOB_STATE_"

    @classmethod
    def _proto(cls) -> Any:
        return job_pb2.JobState


def time_of(t: Timestamp, present: bool = True) -> datetime | None:
    """A timestamp as an aware UTC datetime; None when unset."""
    if not present:
        return None
    return datetime.fromtimestamp(t.seconds, tz=timezone.utc).replace(microsecond=t.nanos // 1000)


def decode_json(text: str) -> Any:
    """Stored JSON text as the value it holds; None when empty. Text that
    does not parse (never stored by tally) comes back as the text."""
    if not text:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


@dataclass(frozen=True)
class CacheStats:
    """What the result cache did for a ledger (`Summary.cache`)."""

    #: Rows settled from the cache (no provider call, no cost).
    hits: int = 0
    #: Lookups that found nothing (sent to the provider).
    misses: int = 0
    #: What the cached answers cost when they were first answered.
    saved_usd: float = 0.0
    #: Hits served an answer cached before golden rows saw the model drift.
    stale: int = 0

    @classmethod
    def from_pb(cls, c: ledger_pb2.ResultCacheStats) -> CacheStats:
        return cls(c.hits, c.misses, c.saved_usd, c.stale)


@dataclass(frozen=True)
class Usage:
    """Tokens of one attempt, or summed over attempts."""

    input_tokens: int = 0
    output_tokens: int = 0
    thinking_tokens: int = 0
    cached_tokens: int = 0
    #: Input tokens written to the provider's cache (Anthropic), part of
    #: `input_tokens`, priced as cache writes.
    cache_write_tokens: int = 0

    @classmethod
    def from_pb(cls, u: common_pb2.Usage) -> Usage:
        return cls(
            u.input_tokens,
            u.output_tokens,
            u.thinking_tokens,
            u.cached_tokens,
            u.cache_write_tokens,
        )

    @classmethod
    def coerce(cls, value: Usage | Mapping[str, int] | None) -> Usage | None:
        """A Usage from itself or a mapping of its fields (unknown fields
        refused)."""
        if value is None or isinstance(value, Usage):
            return value
        if not isinstance(value, Mapping):
            raise TypeError(f"usage must be a Usage or a mapping, got {type(value).__name__}")
        unknown = set(value) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(
                f"usage has unknown field(s) {', '.join(sorted(unknown))} "
                f"(known: {', '.join(cls.__dataclass_fields__)})"
            )
        return cls(**value)

    def to_pb(self) -> common_pb2.Usage:
        for name in self.__dataclass_fields__:
            n = getattr(self, name)
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise ValueError(f"usage.{name} must be a non-negative int, got {n!r}")
        return common_pb2.Usage(
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            thinking_tokens=self.thinking_tokens,
            cached_tokens=self.cached_tokens,
            cache_write_tokens=self.cache_write_tokens,
        )


@dataclass(frozen=True)
class AttemptCounts:
    """Attempts per budget, and their sum."""

    provider: int = 0
    content: int = 0
    infra: int = 0
    total: int = 0

    @classmethod
    def from_pb(cls, a: common_pb2.AttemptCounts) -> AttemptCounts:
        return cls(a.provider, a.content, a.infra, a.total)


@dataclass(frozen=True)
class PromptRef:
    """A registered prompt template, `name@version`."""

    name: str
    version: str

    def __str__(self) -> str:
        return f"{self.name}@{self.version}"

    @classmethod
    def from_pb(cls, p: common_pb2.PromptRef, present: bool = True) -> PromptRef | None:
        return cls(p.name, p.version) if present and p.name else None


@dataclass(frozen=True)
class Attempt:
    """One attempt of a row, with where it went and what became of it."""

    number: int
    outcome: RowStatus
    rule: str
    budget: Budget | None
    usage: Usage
    error: str
    claim: str
    job: str
    batch: str
    model: str
    prompt: PromptRef | None
    actor: str
    time: datetime | None

    @classmethod
    def from_pb(cls, a: ledger_pb2.Attempt) -> Attempt:
        return cls(
            number=a.number,
            outcome=RowStatus.from_number(a.outcome),
            rule=a.rule,
            budget=Budget.from_number(a.budget) if a.budget else None,
            usage=Usage.from_pb(a.usage),
            error=a.error,
            claim=a.claim,
            job=a.job,
            batch=a.batch,
            model=a.model,
            prompt=PromptRef.from_pb(a.prompt, a.HasField("prompt")),
            actor=a.actor,
            time=time_of(a.time, a.HasField("time")),
        )


@dataclass(frozen=True)
class DependencyInput:
    """A dependency as a row's prompt used it (`deps.<name>`)."""

    key: str
    #: The name the row gave it ("" for none).
    name: str
    #: Hex SHA-256 of the result the row's latest claim was given.
    used_hash: str
    #: The dependency answered differently after the row used it, and the
    #: row was not asked again (ledger policy `rerun_dependants`).
    changed: bool = False


@dataclass(frozen=True)
class Redrive:
    """What a redrive did (or, as a dry run, would do)."""

    #: PERMANENT or BLOCKED rows back to PENDING.
    redriven: int
    #: Their dependants that went from BLOCKED back to PENDING.
    unblocked: int
    #: Rows named or matched that stay as they were.
    skipped: int
    #: SUCCEEDED rows asked again (`include_succeeded`).
    reanswered: int
    #: SUCCEEDED rows whose prompts used their answers, directly or not:
    #: asked again where the ledger re-runs dependants and the answer
    #: they used changes, marked `changed` otherwise.
    dependants_at_risk: int
    #: What asking again costs at the ledger's prices (the dependants at
    #: risk included where the ledger re-runs them).
    estimated_cost_usd: float
    #: Up to 100 of the rows redriven or asked again.
    sample_keys: tuple[str, ...]
    #: Up to 100 of the dependants at risk.
    at_risk_keys: tuple[str, ...]

    @classmethod
    def from_pb(cls, r: ledger_pb2.RedriveRowsResponse) -> Redrive:
        return cls(
            redriven=r.redriven,
            unblocked=r.unblocked,
            skipped=r.skipped,
            reanswered=r.reanswered,
            dependants_at_risk=r.dependants_at_risk,
            estimated_cost_usd=r.estimated_cost_usd,
            sample_keys=tuple(r.sample_keys),
            at_risk_keys=tuple(r.at_risk_keys),
        )


@dataclass(frozen=True)
class Superseded:
    """A result a row had before it was asked again (kept, never
    overwritten): the version it was delivered as, why it was asked again
    (`reanswer` or `dependency_changed`), by whom and when."""

    result_version: int
    result: Any
    rule: str
    reason: str
    actor: str
    supersede_time: datetime | None

    @classmethod
    def from_pb(cls, s: ledger_pb2.SupersededResult) -> Superseded:
        return cls(
            result_version=s.result_version,
            result=decode_json(s.result),
            rule=s.rule,
            reason=s.reason,
            actor=s.actor,
            supersede_time=time_of(s.supersede_time, s.HasField("supersede_time")),
        )


@dataclass(frozen=True)
class Row:
    """A row of a ledger. `payload` and `result` are the decoded JSON (None
    in the basic view, which `rows(..., full=False)` lists, and `result`
    None until the row SUCCEEDED); `payload_text`/`result_text` are the
    stored text, byte for byte. `response` is the provider's own answer the
    result came from, decoded, when the worker kept it (an OpenAI worker
    keeps each output line's `response`), else None."""

    key: str
    status: RowStatus
    payload: Any
    result: Any
    response: Any
    depends_on: tuple[str, ...]
    prompt: PromptRef | None
    model: str
    attempts: AttemptCounts
    rule: str
    last_error: str
    usage: Usage
    claim: str
    job: str
    next_attempt_time: datetime | None
    create_time: datetime | None
    update_time: datetime | None
    unmet_dependencies: int
    #: Every attempt, oldest first (GetRow and the full view).
    history: tuple[Attempt, ...]
    #: Older attempts left out of `history` to keep the answer bounded.
    history_omitted: int
    #: The version of the row's final result (SUCCEEDED and PERMANENT rows;
    #: 0 otherwise): what `consume` hands it out with.
    result_version: int
    #: Its dependencies as its prompt used them, in key order (GetRow and
    #: the full view): the name it gave each, and the SHA-256 of the result
    #: its latest claim was given ("" until claimed).
    inputs: tuple[DependencyInput, ...]
    #: The results it had before it was asked again, newest first, at most
    #: 5 (GetRow only).
    superseded: tuple[Superseded, ...]
    #: `ledgers/{ledger}/rows/{key}`.
    name: str = field(repr=False)
    payload_text: str = field(repr=False)
    result_text: str = field(repr=False)
    raw: ledger_pb2.Row = field(repr=False, compare=False)

    @classmethod
    def from_pb(cls, r: ledger_pb2.Row) -> Row:
        return cls(
            key=r.key,
            status=RowStatus.from_number(r.status),
            payload=decode_json(r.payload),
            result=decode_json(r.result),
            response=decode_json(r.response),
            depends_on=tuple(r.depends_on),
            prompt=PromptRef.from_pb(r.prompt, r.HasField("prompt")),
            model=r.model,
            attempts=AttemptCounts.from_pb(r.attempts),
            rule=r.rule,
            last_error=r.last_error,
            usage=Usage.from_pb(r.usage),
            claim=r.claim,
            job=r.job,
            next_attempt_time=time_of(r.next_attempt_time, r.HasField("next_attempt_time")),
            create_time=time_of(r.create_time, r.HasField("create_time")),
            update_time=time_of(r.update_time, r.HasField("update_time")),
            unmet_dependencies=r.unmet_dependencies,
            history=tuple(Attempt.from_pb(a) for a in r.history),
            history_omitted=r.history_omitted,
            result_version=r.result_version,
            inputs=tuple(DependencyInput(i.key, i.name, i.used_hash, i.changed) for i in r.inputs),
            superseded=tuple(Superseded.from_pb(x) for x in r.superseded),
            name=r.name,
            payload_text=r.payload,
            result_text=r.result,
            raw=r,
        )


@dataclass(frozen=True)
class ClaimedRow:
    """A row handed to a worker by a claim: what to run (`payload` decoded),
    on which model and prompt, and the attempts it had before."""

    key: str
    payload: Any
    prompt: PromptRef | None
    model: str
    attempts: AttemptCounts
    payload_text: str = field(repr=False)

    @classmethod
    def from_pb(cls, r: ledger_pb2.ClaimedRow) -> ClaimedRow:
        return cls(
            key=r.key,
            payload=decode_json(r.payload),
            prompt=PromptRef.from_pb(r.prompt, r.HasField("prompt")),
            model=r.model,
            attempts=AttemptCounts.from_pb(r.attempts),
            payload_text=r.payload,
        )


@dataclass(frozen=True)
class RowVerdict:
    """The server's decision on one reported row."""

    key: str
    verdict: Verdict
    rule: str
    budget: Budget | None
    attempts: AttemptCounts
    #: When a RETRYABLE row is claimable again.
    next_attempt_time: datetime | None

    @classmethod
    def from_pb(cls, v: ledger_pb2.RowVerdict) -> RowVerdict:
        return cls(
            key=v.key,
            verdict=Verdict.from_number(v.verdict),
            rule=v.rule,
            budget=Budget.from_number(v.budget) if v.budget else None,
            attempts=AttemptCounts.from_pb(v.attempts),
            next_attempt_time=time_of(v.next_attempt_time, v.HasField("next_attempt_time")),
        )


@dataclass(frozen=True)
class ReportResult:
    """What became of reported rows (summed over the calls of one report)."""

    verdicts: tuple[RowVerdict, ...] = ()
    succeeded: int = 0
    retryable: int = 0
    permanent: int = 0
    stale: int = 0
    duplicate: int = 0

    def __add__(self, other: ReportResult) -> ReportResult:
        return ReportResult(
            self.verdicts + other.verdicts,
            self.succeeded + other.succeeded,
            self.retryable + other.retryable,
            self.permanent + other.permanent,
            self.stale + other.stale,
            self.duplicate + other.duplicate,
        )

    @classmethod
    def from_pb(cls, r: ledger_pb2.ReportOutcomesResponse) -> ReportResult:
        return cls(
            tuple(RowVerdict.from_pb(v) for v in r.verdicts),
            r.succeeded,
            r.retryable,
            r.permanent,
            r.stale,
            r.duplicate,
        )


@dataclass(frozen=True)
class Pause:
    """Why, by whom and since when a ledger is paused."""

    reason: PauseReason
    message: str
    actor: str
    time: datetime | None

    @classmethod
    def from_pb(cls, p: ledger_pb2.LedgerPause, present: bool = True) -> Pause | None:
        if not present or not p.reason:
            return None
        return cls(
            PauseReason.from_number(p.reason),
            p.message,
            p.actor,
            time_of(p.pause_time, p.HasField("pause_time")),
        )


@dataclass(frozen=True)
class Purge:
    """How far a deleted ledger's purge has come."""

    rows_total: int | None
    rows_purged: int
    forced: bool
    claims_expired: int
    jobs_abandoned: int

    @classmethod
    def from_pb(cls, p: ledger_pb2.LedgerPurge, present: bool = True) -> Purge | None:
        if not present:
            return None
        return cls(
            p.rows_total if p.HasField("rows_total") else None,
            p.rows_purged,
            p.forced,
            p.claims_expired,
            p.jobs_abandoned,
        )


@dataclass(frozen=True)
class Ledger:
    """A ledger. `policy` is the message with every default resolved (its
    fields are documented in `proto/tally/v1/ledger.proto`)."""

    id: str
    state: LedgerState
    policy: ledger_pb2.LedgerPolicy = field(repr=False)
    etag: str
    create_time: datetime | None
    update_time: datetime | None
    #: PAUSED only.
    pause: Pause | None
    #: DELETING only.
    purge: Purge | None
    delete_time: datetime | None
    #: `ledgers/{id}`.
    name: str = field(repr=False)
    raw: ledger_pb2.Ledger = field(repr=False, compare=False)

    @classmethod
    def from_pb(cls, ledger: ledger_pb2.Ledger) -> Ledger:
        return cls(
            id=ledger.name.removeprefix("ledgers/"),
            state=LedgerState.from_number(ledger.state),
            policy=ledger.policy,
            etag=ledger.etag,
            create_time=time_of(ledger.create_time, ledger.HasField("create_time")),
            update_time=time_of(ledger.update_time, ledger.HasField("update_time")),
            pause=Pause.from_pb(ledger.pause, ledger.HasField("pause")),
            purge=Purge.from_pb(ledger.purge, ledger.HasField("purge")),
            delete_time=time_of(ledger.delete_time, ledger.HasField("delete_time")),
            name=ledger.name,
            raw=ledger,
        )


@dataclass(frozen=True)
class Job:
    """One provider batch job of a ledger: the provider and model its rows
    run at, its state, and its rows' counts so far."""

    id: str
    state: JobState
    provider: str
    model: str
    #: The provider's batch name (empty until it was created).
    batch: str
    rows: int
    succeeded: int
    retryable: int
    permanent: int
    create_time: datetime | None
    end_time: datetime | None
    #: `ledgers/{id}/jobs/{job}`.
    name: str = field(repr=False)
    raw: job_pb2.Job = field(repr=False, compare=False)

    @classmethod
    def from_pb(cls, job: job_pb2.Job) -> Job:
        return cls(
            id=job.job_id,
            state=JobState.from_number(job.state),
            provider=job.provider,
            model=job.model,
            batch=job.batch,
            rows=job.counts.rows,
            succeeded=job.counts.succeeded,
            retryable=job.counts.retryable,
            permanent=job.counts.permanent,
            create_time=time_of(job.create_time, job.HasField("create_time")),
            end_time=time_of(job.end_time, job.HasField("end_time")),
            name=job.name,
            raw=job,
        )


@dataclass(frozen=True)
class Summary:
    """A ledger's counts by status, attempts by budget, tokens and cost."""

    ledger: str
    state: LedgerState
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
    usage: Usage
    estimated_cost_usd: float
    unpriced_models: tuple[str, ...]
    #: PERMANENT rows by the rule that made them so.
    permanent_by_rule: dict[str, int]
    #: Jobs not yet RECONCILED.
    active_jobs: int
    #: `succeeded=… retryable=… permanent=… blocked=… pending=… running=…`.
    summary_line: str
    pause: Pause | None
    #: The result cache's hits, misses and savings for this ledger.
    cache: CacheStats
    #: SUCCEEDED rows answered from a dependency result that has changed
    #: since (see ledger policy `rerun_dependants`).
    inputs_changed: int
    #: Pass to `delete_ledger(content_etag=…)` to refuse a delete after changes.
    content_etag: str = field(repr=False)
    raw: ledger_pb2.LedgerSummary = field(repr=False, compare=False)

    @property
    def done(self) -> bool:
        """Every row SUCCEEDED, PERMANENT or BLOCKED, and no job still open."""
        final = self.succeeded + self.permanent + self.blocked
        return final == self.total and self.active_jobs == 0

    @classmethod
    def from_pb(cls, s: ledger_pb2.LedgerSummary) -> Summary:
        return cls(
            ledger=s.ledger,
            state=LedgerState.from_number(s.state) if s.state else LedgerState.ACTIVE,
            total=s.total,
            pending=s.pending,
            running=s.running,
            retryable=s.retryable,
            succeeded=s.succeeded,
            permanent=s.permanent,
            blocked=s.blocked,
            attempts_provider=s.attempts_provider,
            attempts_content=s.attempts_content,
            attempts_infra=s.attempts_infra,
            attempts_total=s.attempts_total,
            usage=Usage.from_pb(s.usage),
            estimated_cost_usd=s.estimated_cost_usd,
            unpriced_models=tuple(s.unpriced_models),
            permanent_by_rule=dict(s.permanent_by_rule),
            active_jobs=s.active_jobs,
            summary_line=s.summary_line,
            pause=Pause.from_pb(s.pause, s.HasField("pause")),
            cache=CacheStats.from_pb(s.result_cache),
            inputs_changed=s.inputs_changed,
            content_etag=s.content_etag,
            raw=s,
        )


def lane_name(lane: int) -> str:
    """A `Lane` number as its short name (`batch`, `flex`, ...)."""
    return ledger_pb2.Lane.Name(lane).removeprefix("LANE_").lower()


@dataclass(frozen=True)
class ForecastPlan:
    """When the unfinished rows finish under one routing, and their cost."""

    finish_time: datetime | None
    #: Within the ledger's deadline (always, without one).
    in_time: bool
    cost_usd: float
    #: Rows each lane takes (`{"batch": 90, "flex": 30}`).
    rows_by_lane: dict[str, int]

    @classmethod
    def from_pb(cls, p: ledger_pb2.ForecastPlan) -> ForecastPlan:
        return cls(
            finish_time=time_of(p.finish_time, p.HasField("finish_time")),
            in_time=p.in_time,
            cost_usd=p.cost_usd,
            rows_by_lane={lane_name(r.lane): r.rows for r in p.rows_by_lane},
        )


@dataclass(frozen=True)
class Forecast:
    """A ledger's forecast (`Client.forecast`): its deepest chain, the
    finish and cost under the current plan (routed by the deadline) and
    under all-batch, and why the plan is what it is."""

    deadline: datetime | None
    #: The longest chain of unfinished rows, in links.
    depth: int
    plan: ForecastPlan
    all_batch: ForecastPlan
    explanation: str
    raw: ledger_pb2.LedgerForecast = field(repr=False, compare=False)

    @classmethod
    def from_pb(cls, f: ledger_pb2.LedgerForecast) -> Forecast:
        return cls(
            deadline=time_of(f.deadline, f.HasField("deadline")),
            depth=f.depth,
            plan=ForecastPlan.from_pb(f.plan),
            all_batch=ForecastPlan.from_pb(f.all_batch),
            explanation=f.explanation,
            raw=f,
        )


@dataclass(frozen=True)
class RowPage:
    """One page of a listing and the cursor after it (`""` after the last
    page). `to_arrow()` and `to_pandas()` make a table of it (optional
    extras: `tally-client[arrow]`, `tally-client[pandas]`)."""

    rows: list[Row]
    cursor: str

    def __iter__(self) -> Any:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def to_arrow(self) -> Any:
        """The page as a `pyarrow.Table` with the columns of the Parquet
        export (`tally_client.frames`)."""
        from tally_client.frames import rows_to_arrow

        return rows_to_arrow(self.rows)

    def to_pandas(self, *, decode_json: bool = False) -> Any:
        """The page as a `pandas.DataFrame` (see `tally_client.frames`)."""
        from tally_client.frames import rows_to_pandas

        return rows_to_pandas(self.rows, decode_json=decode_json)
