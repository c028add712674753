"""The official OpenAI SDK, unmodified and with its defaults, against the emulator."""

from __future__ import annotations

import io
import itertools
import json
import time
from typing import Any

import openai
import pytest
from openai.types import Batch

from conftest import SECRET, Emulator

MODEL = "gpt-4o-mini"


def _jsonl(rows: list[tuple[str, str]]) -> bytes:
    lines = [
        json.dumps(
            {
                "custom_id": custom_id,
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": MODEL, "messages": [{"role": "user", "content": prompt}]},
            }
        )
        for custom_id, prompt in rows
    ]
    return ("\n".join(lines) + "\n").encode()


def _batch(client: openai.OpenAI, rows: list[tuple[str, str]], **extra: Any) -> Batch:
    upload = client.files.create(file=("in.jsonl", io.BytesIO(_jsonl(rows))), purpose="batch")
    return client.batches.create(
        input_file_id=upload.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        **extra,
    )


def _finished(client: openai.OpenAI, batch_id: str) -> Batch:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        batch = client.batches.retrieve(batch_id)
        if batch.status in ("completed", "failed", "expired", "cancelled"):
            return batch
        time.sleep(0.02)
    raise AssertionError(f"batch {batch_id} did not finish")


def _lines(client: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    text = client.files.content(file_id).text
    return [json.loads(line) for line in text.splitlines() if line]


def test_files_round_trip(client: openai.OpenAI) -> None:
    """A file's object, content, listing and deletion, through the SDK's types."""
    data = _jsonl([("a", "hello")])
    created = client.files.create(file=("in.jsonl", io.BytesIO(data)), purpose="batch")
    assert created.id.startswith("file-")
    assert created.bytes == len(data)
    assert created.purpose == "batch"
    assert client.files.retrieve(created.id).filename == "in.jsonl"
    assert client.files.content(created.id).content == data
    assert [f.id for f in client.files.list(purpose="batch")] == [created.id]
    assert client.files.delete(created.id).deleted
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(created.id)


def test_batch_completes_and_output_reads(client: openai.OpenAI) -> None:
    """A batch completes; its output lines parse; metadata round-trips."""
    batch = _batch(client, [("a", "first"), ("b", "second")], metadata={"job": "j1"})
    assert batch.status == "validating"
    assert batch.metadata == {"job": "j1"}
    done = _finished(client, batch.id)
    assert done.status == "completed"
    assert done.request_counts is not None and done.request_counts.completed == 2
    assert done.usage is not None and done.usage.total_tokens > 0
    lines = {line["custom_id"]: line for line in _lines(client, done.output_file_id)}
    assert set(lines) == {"a", "b"}
    body = lines["a"]["response"]["body"]
    assert body["choices"][0]["message"]["content"]
    completion = openai.types.chat.ChatCompletion.model_validate(body)
    assert completion.choices[0].finish_reason == "stop"


def test_error_file_and_failed_batches(client: openai.OpenAI, emulator: Emulator) -> None:
    """Row errors land in the error file; invalid input fails the batch with errors.data."""
    emulator.set_faults(
        {"rows": [{"match": {"custom_id": "bad"}, "fault": {"kind": "http_error", "status": 500}}]}
    )
    done = _finished(client, _batch(client, [("ok", "x"), ("bad", "y")]).id)
    errors = _lines(client, done.error_file_id)
    assert [e["custom_id"] for e in errors] == ["bad"]
    assert errors[0]["response"]["status_code"] == 500
    upload = client.files.create(
        file=("dup.jsonl", io.BytesIO(_jsonl([("a", "x"), ("a", "y")]))), purpose="batch"
    )
    failed = client.batches.create(
        input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    failed = _finished(client, failed.id)
    assert failed.status == "failed"
    assert failed.errors is not None and failed.errors.data is not None
    assert failed.errors.data[0].code == "duplicate_custom_id"
    assert failed.errors.data[0].line == 2


def test_list_auto_paginates(client: openai.OpenAI) -> None:
    """The SDK's auto-pagination walks every batch once, newest first."""
    made = [_batch(client, [(f"r{i}", "x")]).id for i in range(5)]
    seen = [b.id for b in client.batches.list(limit=2)]
    assert seen == list(reversed(made))


@pytest.mark.parametrize("order", ["newest_first", "oldest_first", "shuffled"])
def test_list_orders_page_every_batch_once(
    client: openai.OpenAI, emulator: Emulator, order: str
) -> None:
    """Under each `list_order` the emulator offers, the SDK's auto-pagination (`after` =
    the last id of each page) sees every batch exactly once, whatever the page size."""
    # Eight batches: a shuffle (seeded by the run's ids) lands on the creation
    # order or its reverse once in 20,160 runs.
    made = [_batch(client, [(f"r{i}", "x")]).id for i in range(8)]
    emulator.set_faults({"list_order": order})
    pages = {limit: [b.id for b in client.batches.list(limit=limit)] for limit in (1, 3, 100)}
    for limit, seen in pages.items():
        assert len(seen) == len(set(seen)) == len(made), (limit, seen)
        assert set(seen) == set(made), (limit, seen)
    assert pages[1] == pages[3] == pages[100], "one order, whatever the page size"
    expected = {"newest_first": list(reversed(made)), "oldest_first": made}
    if order in expected:
        assert pages[100] == expected[order]
    else:
        assert pages[100] not in expected.values()


def test_request_counts_move_while_in_progress(client: openai.OpenAI, emulator: Emulator) -> None:
    """An in-progress batch's request_counts move as its requests finish (completed and
    failed grow, total stays), as the Batch object's fields say. The emulator answers the
    requests evenly over its in-progress time (`--in-progress`) and the last at the end, so
    a batch held in progress (`stays_in_progress`) shows 0 < completed < total at every
    poll once its time has run, whatever the timing; a cancel keeps the answered ones."""
    emulator.set_faults(
        {
            "batches": [{"match": {"nth": 1}, "fault": {"kind": "stays_in_progress"}}],
            "rows": [{"match": {"custom_id": "b"}, "fault": {"kind": "http_error", "status": 500}}],
        }
    )
    batch = _batch(client, [("a", "w"), ("b", "x"), ("c", "y"), ("d", "z")])
    seen: list[tuple[int, int, int]] = []
    deadline = time.monotonic() + 15
    while not seen or seen[-1][1] + seen[-1][2] < 3:
        assert time.monotonic() < deadline, seen
        running = client.batches.retrieve(batch.id)
        if running.status == "in_progress":
            counts = running.request_counts
            assert counts is not None
            seen.append((counts.total, counts.completed, counts.failed))
        time.sleep(0.005)
    for before, after in itertools.pairwise(seen):
        assert before[0] == after[0] and before[1] <= after[1] and before[2] <= after[2], seen
    total, completed, failed = seen[-1]
    assert (total, completed, failed) == (4, 2, 1)
    assert 0 < completed < total
    held = client.batches.retrieve(batch.id)
    assert held.status == "in_progress"
    assert held.request_counts is not None and held.request_counts.completed == 2
    client.batches.cancel(batch.id)
    done = _finished(client, batch.id)
    assert done.status == "cancelled"
    assert done.request_counts is not None
    assert (done.request_counts.completed, done.request_counts.failed) == (2, 2)


def test_cancel(client: openai.OpenAI, emulator: Emulator) -> None:
    """Cancel goes through cancelling to cancelled; a finished batch's cancel is a ConflictError."""
    emulator.set_faults(
        {"batches": [{"match": {"nth": 1}, "fault": {"kind": "stays_in_progress"}}]}
    )
    batch = _batch(client, [("a", "x")])
    cancelling = client.batches.cancel(batch.id)
    assert cancelling.status == "cancelling"
    done = _finished(client, batch.id)
    assert done.status == "cancelled"
    with pytest.raises(openai.ConflictError):
        client.batches.cancel(batch.id)


def test_webhooks_unwrap(client: openai.OpenAI, emulator: Emulator) -> None:
    """The SDK verifies the emulator's signatures and parses its events."""
    batch = _batch(client, [("a", "x")])
    _finished(client, batch.id)
    deadline = time.monotonic() + 15
    while not emulator.hooks.snapshot() and time.monotonic() < deadline:
        time.sleep(0.02)
    headers, body = emulator.hooks.snapshot()[0]
    event = client.webhooks.unwrap(body.decode(), headers, secret=SECRET)
    assert event.type == "batch.completed"
    assert event.data.id == batch.id
    with pytest.raises(openai.InvalidWebhookSignatureError):
        client.webhooks.unwrap(body.decode() + " ", headers, secret=SECRET)


def test_error_classes(client: openai.OpenAI, emulator: Emulator) -> None:
    """Auth, rate-limit (with retry-after, after the SDK's own retries) and not-found errors."""
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(api_key="sk-wrong").batches.list()
    with pytest.raises(openai.NotFoundError):
        client.batches.retrieve("batch_nope")
    emulator.set_faults({"rate_limit": {"times": 3, "retry_after_secs": 1}})
    upload = client.files.create(
        file=("in.jsonl", io.BytesIO(_jsonl([("a", "x")]))), purpose="batch"
    )
    with pytest.raises(openai.RateLimitError) as caught:
        client.batches.create(
            input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
    assert caught.value.response.headers["retry-after"] == "1"
    assert caught.value.code == "rate_limit_exceeded"
    assert emulator.stats()["create_rejections"] == 3


def test_file_not_yet_visible_is_a_bad_request(client: openai.OpenAI, emulator: Emulator) -> None:
    """A create naming a file not yet visible is a BadRequestError naming the file; then it goes."""
    emulator.set_faults({"file_visibility_lag": {"creates": 1}})
    upload = client.files.create(
        file=("in.jsonl", io.BytesIO(_jsonl([("a", "x")]))), purpose="batch"
    )
    with pytest.raises(openai.BadRequestError) as caught:
        client.batches.create(
            input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
    assert upload.id in caught.value.message
    assert caught.value.param == "input_file_id"
    assert client.files.retrieve(upload.id).status == "processed"
    batch = client.batches.create(
        input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    assert _finished(client, batch.id).status == "completed"
    assert emulator.stats()["creates_file_not_visible"] == 1


def test_upload_refusals_raise_the_sdks_errors(client: openai.OpenAI, emulator: Emulator) -> None:
    """A forbidden upload, a full storage and a file too large, each as the SDK raises it."""
    rows = io.BytesIO(_jsonl([("a", "x")]))
    emulator.set_faults({"upload_refused": {"times": 1}})
    with pytest.raises(openai.PermissionDeniedError) as forbidden:
        client.files.create(file=("in.jsonl", rows), purpose="batch")
    assert forbidden.value.code == "unsupported_country_region_territory"
    assert forbidden.value.type == "request_forbidden"
    emulator.set_faults({"storage_limit_bytes": 10})
    with pytest.raises(openai.BadRequestError) as full:
        client.files.create(file=("in.jsonl", io.BytesIO(_jsonl([("a", "x")]))), purpose="batch")
    assert "exceeded your file storage quota" in full.value.message
    emulator.set_faults({"upload_max_bytes": 10})
    with pytest.raises(openai.APIStatusError) as large:
        client.files.create(file=("in.jsonl", io.BytesIO(_jsonl([("a", "x")]))), purpose="batch")
    assert large.value.status_code == 413
    assert "File is too large" in large.value.message
    stats = emulator.stats()
    assert (stats["upload_rejections"], stats["uploads"]) == (3, 0)
    assert list(client.files.list()) == []


def test_files_expire_as_documented(client: openai.OpenAI, emulator: Emulator) -> None:
    """Input files expire in 30 days, outputs per `output_expires_after`; then content is a 404."""
    batch = _batch(
        client,
        [("a", "x")],
        output_expires_after={"anchor": "created_at", "seconds": 3600},
    )
    upload = client.files.retrieve(batch.input_file_id)
    assert upload.expires_at is not None
    assert upload.expires_at - upload.created_at == 30 * 24 * 3600
    done = _finished(client, batch.id)
    assert done.output_file_id is not None
    output = client.files.retrieve(done.output_file_id)
    assert output.expires_at is not None
    assert output.expires_at - output.created_at == 3600
    emulator.set_faults({"output_expiry_ms": 200})
    done = _finished(client, _batch(client, [("b", "y")]).id)
    assert done.output_file_id is not None
    assert _lines(client, done.output_file_id)[0]["custom_id"] == "b"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            client.files.content(done.output_file_id)
        except openai.NotFoundError:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the output file never expired")
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(done.output_file_id)
    assert client.batches.retrieve(done.id).output_file_id == done.output_file_id
