"""Rows to enroll: the vectors shared with tallyctl, and the rules only a
Python caller can break (pure: no server)."""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest

from tally_client import PromptRef, RowError, row_input, rust_json

VECTORS = Path(__file__).resolve().parents[3] / "tests" / "vectors" / "enroll.json"


def described(row: Any) -> dict[str, Any]:
    prompt = f"{row.prompt.name}@{row.prompt.version}" if row.HasField("prompt") else None
    out = {
        "key": row.key,
        "payload": row.payload,
        "depends_on": list(row.depends_on),
        "prompt": prompt,
        "model": row.model,
    }
    if row.dependency_names:
        out["dependency_names"] = dict(row.dependency_names)
    return out


def test_every_enroll_vector_gives_tallyctls_row_or_its_refusal() -> None:
    # Invariant: a row enrolled from Python is byte for byte the row
    # tallyctl enrolls from the same line (clients/tallyctl/src/jsonl.rs
    # checks the same file), so enrolling from both is ALREADY_PRESENT.
    cases = json.loads(VECTORS.read_text())["cases"]
    assert len(cases) >= 30
    failures = []
    for case in cases:
        try:
            # Read as tallyctl reads the line (a number out of range is
            # refused there already).
            mapping = rust_json.loads(case["line_text"])
            got: dict[str, Any] | str = described(row_input(mapping))
        except ValueError as e:  # RowError is a ValueError
            got = str(e)
        if "expect" in case:
            if got != case["expect"]:
                failures.append(f"{case['name']}: got {got!r}")
        elif not isinstance(got, str):
            failures.append(f"{case['name']}: accepted as {got}")
        elif case["error"].lower() not in got.lower():
            failures.append(f"{case['name']}: {got!r} lacks {case['error']!r}")
    assert not failures, "\n".join(failures)


def test_a_payload_is_canonical_whatever_python_holds_it_in() -> None:
    # Invariant: the same JSON object is the same payload bytes, however it
    # was built (key order, tuples for arrays, OrderedDict).
    a = row_input({"key": "k", "payload": {"b": (1, 2.0), "a": {"y": None, "x": "é"}}})
    b = row_input(
        {"key": "k", "payload": OrderedDict([("a", {"x": "é", "y": None}), ("b", [1, 2.0])])}
    )
    assert a.payload == b.payload == '{"a":{"x":"é","y":null},"b":[1,2.0]}'


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"key": "k", "payload": {"x": float("nan")}}, "not JSON"),
        ({"key": "k", "payload": {"x": {1, 2}}}, "not JSON"),
        ({"key": "k", "payload": json.dumps({"a": 1})}, "payload_text"),
        ({"key": "k", "payload": {}, "depends_on": "other"}, "list of strings"),
        ({"key": "k", "payload": {"x": "y" * (1 << 20)}}, "at most 1048576 bytes"),
        ({"key": "k", "payload": {}, "Key": "k2"}, "unknown field 'Key'"),
    ],
)
def test_python_values_that_are_no_row_are_refused_with_the_reason(
    row: dict[str, Any], message: str
) -> None:
    with pytest.raises(RowError, match=message):
        row_input(row)


def test_none_is_absent_and_a_prompt_ref_is_a_prompt() -> None:
    r = row_input(
        {
            "key": "k",
            "payload": {},
            "prompt": PromptRef("p", "v1"),
            "model": None,
            "depends_on": None,
        }
    )
    assert (r.prompt.name, r.prompt.version, r.model, list(r.depends_on)) == ("p", "v1", "", [])
    assert not row_input({"key": "k", "payload": {}, "prompt": None}).HasField("prompt")
