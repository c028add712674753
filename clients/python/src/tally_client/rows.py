"""A row to enroll, from a mapping, checked and made canonical the way
`tallyctl enroll` reads a line of its file (clients/tallyctl/src/jsonl.rs),
so the same row enrolled from Python and from tallyctl is the same row
(ALREADY_PRESENT), never a CONFLICT. `tests/vectors/enroll.json` at the
repository root holds the cases both are held to.

A row is a mapping with:
- `key`, or `key_parts` (a list of strings) to derive it (`derive_key`);
- `payload`: a JSON object (a mapping), sent canonical: keys sorted, no
  spaces, numbers and escapes as serde_json writes them
  (`tally_client.rust_json`); or `payload_text`, JSON text holding an
  object, sent verbatim (the same bytes every time are the same row);
- `depends_on` (keys) and/or `depends_on_parts` (lists of parts);
- `dependency_names`: a mapping of some of those keys to names the prompt
  reads their results by (`deps.<name>`);
- `prompt`: `"name@version"`, `{"name": …, "version": …}` or a `PromptRef`;
- `model`.

Any other field is refused (a typo'd `depends` is an error, not a row
without dependencies); a field given as None counts as absent."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from tally_client import rust_json
from tally_client._proto.tally.v1 import common_pb2, ledger_pb2
from tally_client.keys import derive_key, validate_key
from tally_client.types import PromptRef

#: The server's payload limit (`tally_core::payload::MAX_PAYLOAD_BYTES`).
MAX_PAYLOAD_BYTES = 1 << 20

FIELDS = (
    "key",
    "key_parts",
    "payload",
    "payload_text",
    "depends_on",
    "depends_on_parts",
    "dependency_names",
    "prompt",
    "model",
)

RowLike = ledger_pb2.RowInput | Mapping[str, Any]


class RowError(ValueError):
    """A row that cannot be enrolled, and why; `index` is its position in
    what was given to `enroll` (None for a single row)."""

    def __init__(self, message: str, index: int | None = None) -> None:
        super().__init__(message if index is None else f"row {index}: {message}")
        self.reason = message
        self.index = index


def canonical_payload(value: Mapping[str, Any]) -> str:
    """The canonical text of a JSON object given as a mapping: tallyctl's
    `payload` bytes. Raises ValueError for anything else."""
    if isinstance(value, str):
        raise ValueError(
            "payload must be a JSON object, got a string "
            "(JSON text goes in payload_text, sent verbatim)"
        )
    if not isinstance(value, Mapping):
        raise ValueError(f"payload must be a JSON object, got {_kind(value)}")
    try:
        # Through JSON text, so tuples become lists and anything that is not
        # JSON (a set, a datetime, NaN) is refused by name.
        parsed = rust_json.loads(json.dumps(value, ensure_ascii=False, allow_nan=False))
    except (TypeError, ValueError) as e:
        raise ValueError(f"payload is not JSON: {e}") from None
    text = rust_json.dumps(parsed)
    _check_size(text)
    return text


def check_payload_text(text: str) -> None:
    """Raises ValueError unless `text` is one JSON object within the size
    limit (what the server requires of a payload)."""
    _check_size(text)
    try:
        value = rust_json.loads(text)
    except ValueError as e:
        raise ValueError(f"payload_text is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise ValueError(f"payload_text must hold a JSON object, got {_kind(value)}")


def _check_size(text: str) -> None:
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError("payload is not valid JSON: a lone surrogate is not Unicode") from None
    if size > MAX_PAYLOAD_BYTES:
        raise ValueError(f"payload must be at most {MAX_PAYLOAD_BYTES} bytes, got {size}")


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def _string(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, got {_kind(value)}")
    return value


def _strings(value: Any, what: str) -> list[str]:
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise ValueError(f"{what} must be a list of strings, got {_kind(value)}")
    return [_string(v, f"{what} entries") for v in value]


def _prompt(value: Any) -> common_pb2.PromptRef:
    if isinstance(value, PromptRef):
        name, version = value.name, value.version
    elif isinstance(value, str):
        name, sep, version = value.partition("@")
        if not (sep and name and version):
            raise ValueError(f"prompt {value!r} must look like name@version")
    elif isinstance(value, Mapping):
        unknown = sorted(set(value) - {"name", "version"})
        if unknown:
            raise ValueError(
                f"prompt: unknown field {unknown[0]!r}, expected one of 'name', 'version'"
            )
        name = _string(value.get("name"), "prompt name")
        version = _string(value.get("version"), "prompt version")
        if not (name and version):
            raise ValueError("prompt needs a name and a version")
    else:
        raise ValueError(f"prompt must be name@version or {{name, version}}, got {_kind(value)}")
    return common_pb2.PromptRef(name=name, version=version)


def _parse(row: Mapping[str, Any]) -> ledger_pb2.RowInput:
    unknown = [f for f in row if f not in FIELDS]
    if unknown:
        expected = ", ".join(repr(f) for f in FIELDS)
        raise ValueError(f"unknown field {unknown[0]!r}, expected one of {expected}")
    given = {k: v for k, v in row.items() if v is not None}
    match given.get("key"), given.get("key_parts"):
        case (str() as key, None):
            pass
        case (None, None):
            raise ValueError("missing key (or key_parts)")
        case (None, parts):
            parts = _strings(parts, "key_parts")
            if not parts:
                raise ValueError("key_parts must not be empty")
            key = derive_key(*parts)
        case (None | str(), _):
            raise ValueError("give key or key_parts, not both")
        case (other, _):
            raise ValueError(f"key must be a string, got {_kind(other)}")
    try:
        validate_key(key)
    except ValueError as e:
        raise ValueError(f"key {key!r}: {e}") from None

    match "payload" in given, "payload_text" in given:
        case (True, False):
            payload = canonical_payload(given["payload"])
        case (False, True):
            # Sent verbatim, but it must hold one object, as the server requires.
            payload = _string(given["payload_text"], "payload_text")
            check_payload_text(payload)
        case (True, True):
            raise ValueError("give payload or payload_text, not both")
        case _:
            raise ValueError("missing payload (or payload_text)")

    depends_on = _strings(given.get("depends_on", []), "depends_on")
    dependency_parts = given.get("depends_on_parts", [])
    if isinstance(dependency_parts, str | bytes) or not isinstance(dependency_parts, Sequence):
        raise ValueError("depends_on_parts must be a list of lists of strings")
    for parts in dependency_parts:
        parts = _strings(parts, "depends_on_parts entries")
        if not parts:
            raise ValueError("depends_on_parts entries must not be empty")
        depends_on.append(derive_key(*parts))
    for d in depends_on:
        try:
            validate_key(d)
        except ValueError as e:
            raise ValueError(f"depends_on {d!r}: {e}") from None
        if d == key:
            raise ValueError(f"row {key!r} depends on itself")

    names = given.get("dependency_names", {})
    if not isinstance(names, Mapping):
        raise ValueError(f"dependency_names must be a mapping of key to name, got {_kind(names)}")
    for d, name in names.items():
        if d not in depends_on:
            raise ValueError(f"dependency_names names {d!r}, which is not in depends_on")
        _dependency_name(_string(name, f"dependency_names[{d!r}]"), d)

    prompt = _prompt(given["prompt"]) if "prompt" in given else None
    model = _string(given.get("model", ""), "model")
    return ledger_pb2.RowInput(
        key=key,
        payload=payload,
        depends_on=depends_on,
        prompt=prompt,
        model=model,
        dependency_names=dict(names),
    )


#: The longest dependency name (`tally_core::deps::MAX_NAME_LEN`).
MAX_DEPENDENCY_NAME = 64


def _dependency_name(name: str, key: str) -> None:
    """Checks a dependency's name as the server does
    (`tally_core::deps::validate_name`)."""
    if len(name) > MAX_DEPENDENCY_NAME:
        raise ValueError(
            f"dependency_names[{key!r}]: is {len(name)} characters; "
            f"the limit is {MAX_DEPENDENCY_NAME}"
        )
    ok = (
        bool(name)
        and name.isascii()
        and (name[0].isalpha() or name[0] == "_")
        and all(c.isalnum() or c == "_" for c in name)
    )
    if not ok:
        raise ValueError(
            f"dependency_names[{key!r}]: {name!r} is not a name: 1-{MAX_DEPENDENCY_NAME} "
            "characters of [A-Za-z0-9_], not starting with a digit"
        )


def row_input(row: RowLike, index: int | None = None) -> ledger_pb2.RowInput:
    """The `RowInput` of a row mapping (see the module doc); a `RowInput`
    message is sent as it is. A bad row raises `RowError` saying why."""
    if isinstance(row, ledger_pb2.RowInput):
        return row
    if not isinstance(row, Mapping):
        raise RowError(f"a row is a mapping, got {_kind(row)}", index)
    try:
        return _parse(row)
    except ValueError as e:
        raise RowError(str(e), index) from None
