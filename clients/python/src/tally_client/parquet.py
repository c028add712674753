"""Rows out as Parquet, the file `tallyctl export --format parquet` writes:
the CSV columns typed (text as UTF-8 strings, optional text null when unset,
attempts int32, tokens int64, `update_time` a UTC timestamp in
microseconds), Snappy-compressed, in row groups of at most `ROW_GROUP_ROWS`
rows or about `ROW_GROUP_BYTES` bytes of text, so memory stays bounded at any
ledger size.

Needs pyarrow: `pip install 'tally-client[parquet]'`. Pure but for the
writer: `Client.export_parquet` does the paging."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tally_client._proto.tally.v1 import ledger_pb2
from tally_client.export import CSV_COLUMNS, status_name

if TYPE_CHECKING:
    import pyarrow as pa

#: Most rows in one row group (as tallyctl).
ROW_GROUP_ROWS = 100_000
#: A row group is closed once its text reaches about this many bytes.
ROW_GROUP_BYTES = 64 * 1024 * 1024

#: The text columns that are null when empty, in CSV order.
OPTIONAL_TEXT = (
    "rule",
    "model",
    "prompt_name",
    "prompt_version",
    "job",
    "last_error",
    "result",
    "payload",
)
_INT32 = ("attempts_provider", "attempts_content", "attempts_infra", "attempts_total")
_INT64 = ("input_tokens", "output_tokens", "thinking_tokens", "cached_tokens")


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            "Parquet export needs pyarrow: pip install 'tally-client[parquet]'"
        ) from e
    return pyarrow


def schema() -> pa.Schema:
    """The columns of `CSV_COLUMNS`, typed; `key`, `status`, attempts and
    tokens are required, the rest nullable."""
    arrow = _pyarrow()
    fields = []
    for name in CSV_COLUMNS:
        if name in _INT32:
            fields.append(arrow.field(name, arrow.int32(), nullable=False))
        elif name in _INT64:
            fields.append(arrow.field(name, arrow.int64(), nullable=False))
        elif name == "update_time":
            fields.append(arrow.field(name, arrow.timestamp("us", tz="UTC")))
        else:
            fields.append(arrow.field(name, arrow.string(), nullable=name in OPTIONAL_TEXT))
    built: pa.Schema = arrow.schema(fields)
    return built


def _columns(row: ledger_pb2.Row) -> dict[str, Any]:
    a, u = row.attempts, row.usage
    text = {
        "rule": row.rule,
        "model": row.model,
        "prompt_name": row.prompt.name,
        "prompt_version": row.prompt.version,
        "job": row.job,
        "last_error": row.last_error,
        "result": row.result,
        "payload": row.payload,
    }
    micros = (
        row.update_time.seconds * 1_000_000 + row.update_time.nanos // 1000
        if row.HasField("update_time")
        else None
    )
    return {
        "key": row.key,
        "status": status_name(row.status),
        "attempts_provider": a.provider,
        "attempts_content": a.content,
        "attempts_infra": a.infra,
        "attempts_total": a.total,
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "thinking_tokens": u.thinking_tokens,
        "cached_tokens": u.cached_tokens,
        **{k: (v or None) for k, v in text.items()},
        "update_time": micros,
    }


class ParquetWriter:
    """Buffers rows into row groups and writes them to `path` (a new file;
    use as a context manager so the footer is written)."""

    def __init__(self, path: str | Path) -> None:
        pa = _pyarrow()
        self._pa = pa
        self._schema = schema()
        self._writer = pa.parquet.ParquetWriter(
            str(path), self._schema, compression="snappy", version="2.6"
        )
        self._group: dict[str, list[Any]] = {name: [] for name in CSV_COLUMNS}
        self._rows = 0
        self._bytes = 0

    def write(self, rows: Iterable[ledger_pb2.Row]) -> None:
        for row in rows:
            for name, value in _columns(row).items():
                self._group[name].append(value)
            self._rows += 1
            self._bytes += row.ByteSize()
            if self._rows >= ROW_GROUP_ROWS or self._bytes >= ROW_GROUP_BYTES:
                self.flush()

    def flush(self) -> None:
        """Writes the buffered rows as one row group."""
        if self._rows == 0:
            return
        table = self._pa.Table.from_pydict(self._group, schema=self._schema)
        self._writer.write_table(table, row_group_size=self._rows)
        self._group = {name: [] for name in CSV_COLUMNS}
        self._rows = self._bytes = 0

    def close(self) -> None:
        self.flush()
        self._writer.close()

    def __enter__(self) -> ParquetWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
