"""Rows out of tally, with their results, in the formats data people use:
`jsonl` (tally's own shape, the object `tallyctl export --format jsonl` writes),
`openai` (the OpenAI Batch API *output* file: one
`{"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error"}`
per row, the body a `chat.completion`, exactly as `tallyctl export --format
openai` writes it) and `csv`. Parquet is in `tally_client.parquet` (an
optional extra: pyarrow).

Pure: a row in, a record out. `Client.export_rows` does the paging."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

from google.protobuf.timestamp_pb2 import Timestamp

from tally_client._proto.tally.v1 import common_pb2, ledger_pb2
from tally_client.keys import derive_key

ExportFormat = Literal["jsonl", "openai", "csv"]
FORMATS: tuple[ExportFormat, ...] = ("jsonl", "openai", "csv")

#: CSV columns, in order: the columns of `tallyctl export --format csv`
#: (clients/tallyctl/src/export/record.rs), `update_time` last.
CSV_COLUMNS = (
    "key",
    "status",
    "rule",
    "attempts_provider",
    "attempts_content",
    "attempts_infra",
    "attempts_total",
    "input_tokens",
    "output_tokens",
    "thinking_tokens",
    "cached_tokens",
    "model",
    "prompt_name",
    "prompt_version",
    "job",
    "last_error",
    "result",
    "payload",
    "update_time",
)

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _time_text(t: Timestamp, *, micros: bool) -> str:
    """RFC 3339 in UTC with `Z`, to the second (JSON) or microsecond (CSV),
    as tallyctl writes it."""
    at = _EPOCH + timedelta(seconds=t.seconds, microseconds=t.nanos // 1000)
    text = at.isoformat(timespec="microseconds" if micros else "seconds")
    return text.replace("+00:00", "Z")


def status_name(status: int) -> str:
    """`SUCCEEDED` for `ROW_STATUS_SUCCEEDED`."""
    return common_pb2.RowStatus.Name(status).removeprefix("ROW_STATUS_")


def embedded_json(text: str) -> Any:
    """A stored JSON text as the JSON it holds; the text itself when it does
    not parse; None when empty (as tallyctl renders it)."""
    if not text:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def tally_record(row: ledger_pb2.Row) -> dict[str, Any]:
    """tally's shape, the object `tallyctl export --format jsonl` writes (the
    one `tallyctl rows --full --json` prints, without the history)."""
    a, u = row.attempts, row.usage
    prompt = {"name": row.prompt.name, "version": row.prompt.version} if row.prompt.name else None

    def when(field: str) -> str | None:
        return _time_text(getattr(row, field), micros=False) if row.HasField(field) else None

    return {
        "name": row.name,
        "key": row.key,
        "depends_on": list(row.depends_on),
        "unmet_dependencies": row.unmet_dependencies,
        "prompt": prompt,
        "model": row.model,
        "status": status_name(row.status),
        "attempts": {
            "provider": a.provider,
            "content": a.content,
            "infra": a.infra,
            "total": a.total,
        },
        "rule": row.rule,
        "last_error": row.last_error,
        "usage": {
            "input_tokens": u.input_tokens,
            "output_tokens": u.output_tokens,
            "thinking_tokens": u.thinking_tokens,
            "cached_tokens": u.cached_tokens,
            "cache_write_tokens": u.cache_write_tokens,
        },
        "claim": row.claim,
        "job": row.job,
        "next_attempt_time": when("next_attempt_time"),
        "create_time": when("create_time"),
        "update_time": when("update_time"),
        "payload": embedded_json(row.payload),
        "result": embedded_json(row.result),
        "response": embedded_json(row.response),
        "result_version": row.result_version,
        "inputs": [{"key": i.key, "name": i.name, "used_hash": i.used_hash} for i in row.inputs],
    }


def _answer_text(result: str) -> str:
    """The answer text of a stored result: the string itself when the result
    is a JSON string (a text answer), else the result's JSON text."""
    try:
        value = json.loads(result)
    except json.JSONDecodeError:
        return result
    return value if isinstance(value, str) else result


def _kept_response(text: str) -> dict[str, Any] | None:
    """The provider's response kept with a result, when it is a JSON
    object (as `tallyctl export` reads it)."""
    if not text:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def openai_record(row: ledger_pb2.Row) -> dict[str, Any]:
    """A line of an OpenAI batch output file, the same as `tallyctl export
    --format openai` writes: a SUCCEEDED row answers 200 with a
    `chat.completion` body (the answer text as the message content; usage
    with thinking counted as completion tokens, as OpenAI does); any other
    row has no response and an `error` whose code is the rule (or the
    status when no rule decided). Ids are `batch_req_<h>`/`chatcmpl-<h>`,
    `<h>` the first 32 hex digits of the natural key of (ledger, key).
    A row whose worker kept the provider's own response (an OpenAI batch's
    output line) has that response written as the provider wrote it."""
    ledger = row.name.split("/")[1] if row.name.startswith("ledgers/") else ""
    h = derive_key(ledger, row.key)[:32]
    record: dict[str, Any] = {"id": f"batch_req_{h}", "custom_id": row.key}
    if row.status != common_pb2.ROW_STATUS_SUCCEEDED:
        record["response"] = None
        record["error"] = {
            "code": row.rule or status_name(row.status).lower(),
            "message": row.last_error or f"row is {status_name(row.status)}",
        }
        return record
    kept = _kept_response(row.response)
    if kept is not None:
        record["response"] = kept
        record["error"] = None
        return record
    u = row.usage
    completion = u.output_tokens + u.thinking_tokens
    record["response"] = {
        "status_code": 200,
        "request_id": row.job,
        "body": {
            "id": f"chatcmpl-{h}",
            "object": "chat.completion",
            "created": row.update_time.seconds,
            "model": row.model,
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": _answer_text(row.result),
                        "refusal": None,
                    },
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": u.input_tokens,
                "completion_tokens": completion,
                "total_tokens": u.input_tokens + completion,
                "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
                "completion_tokens_details": {"reasoning_tokens": u.thinking_tokens},
            },
        },
    }
    record["error"] = None
    return record


def csv_record(row: ledger_pb2.Row) -> list[str | int]:
    """The CSV cells of a row, in `CSV_COLUMNS` order."""
    a, u = row.attempts, row.usage
    updated = _time_text(row.update_time, micros=True) if row.HasField("update_time") else ""
    return [
        row.key,
        status_name(row.status),
        row.rule,
        a.provider,
        a.content,
        a.infra,
        a.total,
        u.input_tokens,
        u.output_tokens,
        u.thinking_tokens,
        u.cached_tokens,
        row.model,
        row.prompt.name,
        row.prompt.version,
        row.job,
        row.last_error,
        row.result,
        row.payload,
        updated,
    ]


def csv_line(cells: list[str | int] | tuple[str, ...]) -> str:
    """One CSV record, RFC 4180 (CRLF), quoted only where needed, as tallyctl."""
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\r\n").writerow(cells)
    return buffer.getvalue()


def line(row: ledger_pb2.Row, format: ExportFormat) -> str:
    """One row in `format`, newline included."""
    if format == "csv":
        return csv_line(csv_record(row))
    record = tally_record(row) if format == "jsonl" else openai_record(row)
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"
