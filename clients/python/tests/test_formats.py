"""OpenAI and Anthropic batch lines → rows, held to the vectors tallyctl
checks too (`tests/vectors/formats.json`), and enrolment of such a file."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from tally_client import BatchFileError, Client, FormatError
from tally_client.formats import convert

VECTORS = Path(
    os.environ.get("TALLY_FORMATS_VECTORS")
    or Path(__file__).resolve().parents[3] / "tests" / "vectors" / "formats.json"
)


def cases() -> list[dict[str, Any]]:
    if not VECTORS.is_file():
        return []
    loaded: list[dict[str, Any]] = json.loads(VECTORS.read_text())["cases"]
    return loaded


@pytest.mark.skipif(
    not VECTORS.is_file(),
    reason=f"{VECTORS} is absent (it comes with tallyctl's enroll --format; "
    "set TALLY_FORMATS_VECTORS to another copy)",
)
@pytest.mark.parametrize("case", cases(), ids=lambda c: str(c["name"]))
def test_python_converts_every_shared_vector_as_tallyctl_does(case: dict[str, Any]) -> None:
    # Invariant: a line converts to the same row (key, model, payload) or is
    # refused for the same reason in Python and in tallyctl.
    text = case.get("line_text") or json.dumps(case["line"], separators=(",", ":"))
    ledger_model = case.get("ledger_model", "gemini-2.5-flash")
    if "expect" in case:
        row = convert(case["format"], text, ledger_model)
        expect = case["expect"]
        assert (row.key, row.model, row.dropped_model) == (
            expect["key"],
            expect["model"],
            expect["dropped_model"],
        )
        assert json.loads(row.payload) == expect["payload"]
        assert row.payload == json.dumps(
            expect["payload"], sort_keys=True, separators=(",", ":"), ensure_ascii=False
        ), "canonical text: keys sorted, compact"
    else:
        with pytest.raises(FormatError) as caught:
            convert(case["format"], text, ledger_model)
        assert case["error"] in str(caught.value)


def openai_line(custom_id: str, text: str) -> str:
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}]}
    line = {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}
    return json.dumps(line) + "\n"


def test_a_batch_file_with_a_bad_line_or_a_repeated_id_enrolls_nothing(
    tally: Client, ledger: str, tmp_path: Path
) -> None:
    # Invariant: a file is enrolled whole or not at all, and repeated
    # custom_ids are reported, not merged.
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        openai_line("a", "x") + "\n" + openai_line("b", "y") + openai_line("a", "z") + "{oops\n"
    )
    with pytest.raises(BatchFileError) as caught:
        tally.enroll_file(ledger, bad, format="openai")
    error = caught.value
    assert error.bad_lines == 2
    assert error.errors[0] == (4, "custom_id a repeats line 1")
    assert error.errors[1][0] == 5 and "not a valid JSON line" in error.errors[1][1]
    assert tally.summarize(ledger).total == 0, "nothing enrolled"

    good = tmp_path / "good.jsonl"
    good.write_text("".join(openai_line(f"req-{i}", f"question {i}") for i in range(30)))
    first = tally.enroll_file(ledger, good, format="openai", chunk_size=7)
    assert (first.sent, first.enrolled) == (30, 30)
    again = tally.enroll_file(ledger, good, format="openai")
    assert (again.enrolled, again.already_present, again.conflicts) == (0, 30, 0)
    row = next(r for r in tally.rows(ledger, full=True) if r.key == "req-3")
    assert row.payload == {"contents": [{"role": "user", "parts": [{"text": "question 3"}]}]}
    ledger_model = tally.get_ledger(ledger).policy.model
    assert row.model == ledger_model, "gpt-4o-mini is dropped for the ledger's model"


def test_an_openai_ledger_keeps_openai_lines_as_written(tally: Client, tmp_path: Path) -> None:
    # Invariant: for a ledger whose model runs at OpenAI, enroll_file keeps
    # each line's body as the row's payload (nothing converted to Gemini,
    # nothing dropped), and a line naming another OpenAI model keeps it.
    ledger = f"py-openai-{uuid.uuid4().hex[:12]}"
    tally.create_ledger(ledger, {"model": "gpt-4o-mini"})
    body = {
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": "hi"}],
        "logprobs": True,
        "response_format": {"type": "json_object"},
    }
    line = {"custom_id": "n-1", "method": "POST", "url": "/v1/chat/completions", "body": body}
    batch = tmp_path / "native.jsonl"
    batch.write_text(json.dumps(line) + "\n" + openai_line("n-2", "plain"))
    assert tally.enroll_file(ledger, batch, format="openai").enrolled == 2
    rows = {r.key: r for r in tally.rows(ledger, full=True)}
    assert rows["n-1"].payload == body
    assert rows["n-1"].model == "gpt-4o"
    assert rows["n-2"].model == "gpt-4o-mini"
    assert rows["n-2"].payload["messages"] == [{"role": "user", "content": "plain"}]
