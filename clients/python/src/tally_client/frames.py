"""Rows as tables: `pyarrow.Table` and `pandas.DataFrame`, with the columns
of the Parquet export (`tally_client.export.CSV_COLUMNS`, typed as
`tallyctl export --format parquet` types them: `status` and text as
strings, optional text null when unset, attempts int32, tokens int64,
`update_time` a UTC timestamp), so a page read here and an exported file
read with `pandas.read_parquet` have the same columns.

Optional extras: `pip install 'tally-client[arrow]'` (pyarrow) or
`'tally-client[pandas]'` (pandas and pyarrow)."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterable
from typing import Any, Protocol

from tally_client._proto.tally.v1 import ledger_pb2
from tally_client.export import CSV_COLUMNS
from tally_client.parquet import _columns, schema


class Row(Protocol):
    """What a table is made of: `tally_client.Row` (declared here, so this
    module does not import the types that call it)."""

    @property
    def raw(self) -> ledger_pb2.Row: ...


def rows_to_arrow(rows: Iterable[Row]) -> Any:
    """A `pyarrow.Table` of the rows (payload and result as JSON text)."""
    from tally_client.parquet import _pyarrow

    pa = _pyarrow()
    columns: dict[str, list[Any]] = {name: [] for name in CSV_COLUMNS}
    for row in rows:
        for name, value in _columns(row.raw).items():
            columns[name].append(value)
    return pa.Table.from_pydict(columns, schema=schema())


def rows_to_pandas(rows: Iterable[Row], *, decode_json: bool = False) -> Any:
    """A `pandas.DataFrame` of the rows; with `decode_json`, the `payload`
    and `result` columns hold the decoded values instead of JSON text."""
    if importlib.util.find_spec("pandas") is None:
        raise ImportError("DataFrames need pandas: pip install 'tally-client[pandas]'")
    frame = rows_to_arrow(rows).to_pandas()
    if decode_json:
        for name in ("payload", "result"):
            frame[name] = frame[name].map(lambda text: None if text is None else json.loads(text))
    return frame
