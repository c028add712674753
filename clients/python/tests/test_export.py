"""Export: rows with their results as tally JSONL, OpenAI batch output and
CSV, page by page, resumable from a cursor."""

from __future__ import annotations

import csv
import io
import json
import subprocess
from typing import Any

import pytest
from conftest import workspace_binary

from tally_client import Client, ExportProgress, RowStatus, derive_key, pb
from tally_client.export import ExportFormat

PERMANENT = pb.common_pb2.ROW_STATUS_PERMANENT


def settle(tally: Client, ledger: str) -> tuple[set[str], set[str]]:
    """25 rows: 20 succeed with a result, 5 fail for good (HTTP 400)."""
    keys = [derive_key("export", str(i)) for i in range(25)]
    tally.enroll(ledger, ({"key": k, "payload": {"n": i}} for i, k in enumerate(keys)))
    session = tally.claim(ledger, 25)
    assert session is not None
    with session:
        for i, row in enumerate(session.rows):
            if i < 20:
                session.succeed(row.key, {"answer": row.key[:8], "pi": 3.25})
            else:
                session.fail(row.key, message="bad input", http_code=400, status="INVALID_ARGUMENT")
    by_status: dict[RowStatus, set[str]] = {}
    for listed in tally.rows(ledger):
        by_status.setdefault(listed.status, set()).add(listed.key)
    return by_status[RowStatus.SUCCEEDED], by_status[RowStatus.PERMANENT]


def test_jsonl_openai_and_csv_carry_every_row_once_with_its_result(
    tally: Client, ledger: str
) -> None:
    # Invariant: each format has one record per row, every key exactly once,
    # with status, rule, attempts, usage and the stored result.
    succeeded, permanent = settle(tally, ledger)

    out = io.StringIO()
    done = tally.export_rows(ledger, out, format="jsonl", page_size=6)
    assert (done.rows, done.cursor) == (25, "")
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    assert sorted(r["key"] for r in records) == sorted(succeeded | permanent)
    first = next(r for r in records if r["key"] in succeeded)
    assert first["status"] == "SUCCEEDED"
    assert first["result"] == {"answer": first["key"][:8], "pi": 3.25}
    assert first["attempts"]["total"] == 1 and set(first["usage"]) >= {"input_tokens"}
    bad = next(r for r in records if r["key"] in permanent)
    assert (bad["status"], bad["result"]) == ("PERMANENT", None)
    assert bad["rule"] and bad["last_error"].endswith("bad input")

    out = io.StringIO()
    tally.export_rows(ledger, out, format="openai")
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert sorted(r["custom_id"] for r in lines) == sorted(succeeded | permanent)
    for r in lines:
        assert set(r) == {"id", "custom_id", "response", "error"}
        if r["custom_id"] in succeeded:
            assert r["error"] is None
            assert r["response"]["status_code"] == 200
            body = r["response"]["body"]
            assert body["object"] == "chat.completion"
            assert (
                json.loads(body["choices"][0]["message"]["content"])["answer"]
                == (r["custom_id"][:8])
            )
            assert r["id"] == f"batch_req_{derive_key(ledger, r['custom_id'])[:32]}"
        else:
            assert r["response"] is None
            assert r["error"]["message"].endswith("bad input") and r["error"]["code"]

    out = io.StringIO()
    tally.export_rows(ledger, out, format="csv")
    table = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert len(table) == 25
    assert {r["key"] for r in table} == succeeded | permanent
    ok = next(r for r in table if r["key"] in succeeded)
    assert (ok["status"], ok["attempts_total"]) == ("SUCCEEDED", "1")
    assert json.loads(ok["result"])["pi"] == 3.25


def test_an_interrupted_export_resumes_from_its_cursor_without_duplicates(
    tally: Client, ledger: str
) -> None:
    # Invariant: resuming with the cursor reported after the last written
    # page completes the file with every row exactly once.
    succeeded, permanent = settle(tally, ledger)
    out = io.StringIO()
    cursors: list[str] = []

    def crash_after_two_pages(progress: ExportProgress) -> None:
        cursors.append(progress.cursor)
        if len(cursors) == 2:
            raise KeyboardInterrupt("killed mid-export")

    with pytest.raises(KeyboardInterrupt):
        tally.export_rows(ledger, out, format="csv", page_size=7, on_page=crash_after_two_pages)
    assert len(out.getvalue().splitlines()) == 1 + 14
    rest = tally.export_rows(ledger, out, format="csv", page_size=7, after=cursors[-1])
    assert (rest.rows, rest.cursor) == (11, "")
    table = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert sorted(r["key"] for r in table) == sorted(succeeded | permanent)


def test_filters_select_rows_and_a_bad_format_writes_nothing(tally: Client, ledger: str) -> None:
    _, permanent = settle(tally, ledger)
    out = io.StringIO()
    tally.export_rows(ledger, out, statuses=[PERMANENT])
    assert {json.loads(line)["key"] for line in out.getvalue().splitlines()} == permanent
    out = io.StringIO()
    with pytest.raises(ValueError, match="format must be one of"):
        tally.export_rows(ledger, out, format="parquet")  # type: ignore[arg-type]
    assert out.getvalue() == ""


def _succeeded_row(**fields: Any) -> pb.ledger_pb2.Row:
    """`ledgers/l/rows/req-1`, SUCCEEDED, with `fields`."""
    return pb.ledger_pb2.Row(
        name="ledgers/l/rows/req-1",
        key="req-1",
        status=pb.common_pb2.ROW_STATUS_SUCCEEDED,
        **fields,
    )


def test_openai_lines_are_the_ones_tallyctl_writes() -> None:
    # Invariant: the same row gives the same OpenAI output line as tallyctl's
    # (clients/tallyctl/src/export/openai_out.rs, test
    # a_succeeded_row_is_a_chat_completion): a text answer is the content as
    # is, thinking counts as completion tokens, ids hash (ledger, key).
    from google.protobuf.timestamp_pb2 import Timestamp

    from tally_client.export import openai_record

    row = _succeeded_row(
        result='"Hello there"',
        model="gemini-2.5-flash",
        job="ledgers/l/jobs/j1",
        usage=pb.common_pb2.Usage(
            input_tokens=10, output_tokens=5, thinking_tokens=2, cached_tokens=4
        ),
        update_time=Timestamp(seconds=1_700_000_000),
    )
    h = derive_key("l", "req-1")[:32]
    assert openai_record(row) == {
        "id": f"batch_req_{h}",
        "custom_id": "req-1",
        "response": {
            "status_code": 200,
            "request_id": "ledgers/l/jobs/j1",
            "body": {
                "id": f"chatcmpl-{h}",
                "object": "chat.completion",
                "created": 1_700_000_000,
                "model": "gemini-2.5-flash",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "Hello there", "refusal": None},
                        "logprobs": None,
                        "finish_reason": "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": 10,
                    "completion_tokens": 7,
                    "total_tokens": 17,
                    "prompt_tokens_details": {"cached_tokens": 4},
                    "completion_tokens_details": {"reasoning_tokens": 2},
                },
            },
        },
        "error": None,
    }


def test_a_kept_provider_response_is_written_as_it_came() -> None:
    # Invariant: as tallyctl's test a_kept_response_is_written_as_the_provider_wrote_it:
    # a row's kept response (an OpenAI worker keeps the output line's) is the
    # line's response as is; anything but a JSON object falls back to the built body.
    from tally_client.export import openai_record

    row = _succeeded_row(
        result='"hi"',
        response='{"status_code": 200, "request_id": "req_9", "body": {"id": "chatcmpl-real"}}',
    )
    record = openai_record(row)
    assert record["response"] == {
        "status_code": 200,
        "request_id": "req_9",
        "body": {"id": "chatcmpl-real"},
    }
    assert record["custom_id"] == "req-1" and record["error"] is None
    row.response = "[1]"
    assert openai_record(row)["response"]["body"]["object"] == "chat.completion"


@pytest.mark.parametrize("format", ["jsonl", "openai", "csv"])
def test_each_format_is_what_tallyctl_export_writes(
    tally: Client, ledger: str, address: str, format: ExportFormat
) -> None:
    # Invariant: the Python client and `tallyctl export` write the same
    # records for the same rows (CSV byte for byte; JSON lines as objects),
    # so a file from either reads the same downstream.
    settle(tally, ledger)
    out = io.StringIO()
    tally.export_rows(ledger, out, format=format)
    ran = subprocess.run(
        [
            workspace_binary("tallyctl", "TALLYCTL_BIN"),
            "--server",
            f"http://{address}",
            "export",
            ledger,
            "--format",
            format,
        ],
        capture_output=True,
        check=True,
    )
    theirs = ran.stdout.decode()
    if format == "csv":
        assert out.getvalue() == theirs
    else:
        ours = [json.loads(line) for line in out.getvalue().splitlines()]
        assert ours == [json.loads(line) for line in theirs.splitlines()]
