"""The official Anthropic SDK, unmodified and with its defaults, against the emulator."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import anthropic
import pytest
from anthropic.types import TextBlock
from anthropic.types.messages import (
    MessageBatch,
    MessageBatchErroredResult,
    MessageBatchIndividualResponse,
    MessageBatchSucceededResult,
)
from anthropic.types.messages.batch_create_params import Request

from conftest import KEY, Emulator, running

MODEL = "claude-sonnet-4-6"


def _requests(ids: list[str], prompt: str = "a prompt") -> list[Request]:
    return [
        {
            "custom_id": custom_id,
            "params": {
                "model": MODEL,
                "max_tokens": 64,
                "messages": [{"role": "user", "content": f"{prompt} {custom_id}"}],
            },
        }
        for custom_id in ids
    ]


def _ended(client: anthropic.Anthropic, batch_id: str) -> MessageBatch:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        batch = client.messages.batches.retrieve(batch_id)
        if batch.processing_status == "ended":
            return batch
        time.sleep(0.02)
    raise AssertionError(f"batch {batch_id} did not end")


def _results(client: anthropic.Anthropic, batch_id: str) -> dict[str, Any]:
    entries: list[MessageBatchIndividualResponse] = list(client.messages.batches.results(batch_id))
    return {entry.custom_id: entry.result for entry in entries}


def _text(result: Any) -> str:
    assert isinstance(result, MessageBatchSucceededResult), result
    block = result.message.content[0]
    assert isinstance(block, TextBlock), block
    return block.text


def test_batch_round_trip(client: anthropic.Anthropic, emulator: Emulator) -> None:
    """Create, poll and read results through the SDK's types."""
    batch = client.messages.batches.create(requests=_requests(["a", "b"]))
    assert batch.id.startswith("msgbatch_")
    assert batch.type == "message_batch"
    assert batch.processing_status == "in_progress"
    assert batch.request_counts.processing == 2
    assert batch.results_url is None
    assert (batch.expires_at - batch.created_at).total_seconds() == 24 * 3600
    done = _ended(client, batch.id)
    assert done.request_counts.succeeded == 2
    assert done.request_counts.processing == 0
    assert done.ended_at is not None
    assert done.results_url == f"{emulator.base_url}/v1/messages/batches/{batch.id}/results"
    results = _results(client, batch.id)
    assert set(results) == {"a", "b"}
    assert results["a"].type == "succeeded"
    assert "a prompt a" in _text(results["a"])
    assert results["a"].message.stop_reason == "end_turn"
    assert results["a"].message.usage.input_tokens > 0
    assert emulator.stats()["models"] == {"a": MODEL, "b": MODEL}


def test_results_before_the_end_are_refused(
    client: anthropic.Anthropic, emulator: Emulator
) -> None:
    """The SDK itself refuses results while results_url is null."""
    emulator.set_faults(
        {"batches": [{"match": {"nth": 1}, "fault": {"kind": "stays_in_progress"}}]}
    )
    batch = client.messages.batches.create(requests=_requests(["a"]))
    with pytest.raises(anthropic.AnthropicError):
        client.messages.batches.results(batch.id)


def test_result_kinds(client: anthropic.Anthropic, emulator: Emulator) -> None:
    """Errored results parse as ErrorResponse; stop reasons, schema answers and bad params."""
    emulator.set_faults(
        {
            "rows": [
                {"match": {"custom_id": "err"}, "fault": {"kind": "errored", "error": "api_error"}},
                {"match": {"custom_id": "cut"}, "fault": {"kind": "max_tokens"}},
                {"match": {"custom_id": "no"}, "fault": {"kind": "refusal"}},
            ]
        }
    )
    requests = _requests(["err", "cut", "no", "json", "zero"])
    requests[3]["params"]["output_config"] = {
        "format": {
            "type": "json_schema",
            "schema": {
                "type": "object",
                "properties": {"label": {"type": "string", "enum": ["x", "y"]}},
                "required": ["label"],
                "additionalProperties": False,
            },
        }
    }
    requests[4]["params"]["max_tokens"] = 0
    batch = client.messages.batches.create(requests=requests)
    done = _ended(client, batch.id)
    assert (done.request_counts.succeeded, done.request_counts.errored) == (3, 2)
    results = _results(client, batch.id)
    errored = results["err"]
    assert isinstance(errored, MessageBatchErroredResult)
    assert errored.error.type == "error"
    assert errored.error.error.type == "api_error"
    assert results["zero"].error.error.type == "invalid_request_error"
    assert results["cut"].message.stop_reason == "max_tokens"
    assert results["no"].message.stop_reason == "refusal"
    assert json.loads(_text(results["json"]))["label"] in ("x", "y")


def test_list_auto_paginates_both_ways(client: anthropic.Anthropic) -> None:
    """Newest first; the SDK's auto-pagination follows after_id and before_id."""
    made = [client.messages.batches.create(requests=_requests([f"r{i}"])).id for i in range(5)]
    newest_first = list(reversed(made))
    assert [b.id for b in client.messages.batches.list(limit=2)] == newest_first
    after = client.messages.batches.list(limit=2, after_id=made[3])
    assert [b.id for b in after] == newest_first[2:]
    before = client.messages.batches.list(limit=2, before_id=made[0])
    # Backward pages come nearest first, each in list order.
    assert [b.id for b in before] == [made[2], made[1], made[4], made[3]]


def test_cancel_and_delete(client: anthropic.Anthropic, emulator: Emulator) -> None:
    """Cancel goes through canceling to ended; only an ended batch can be deleted."""
    emulator.set_faults(
        {"batches": [{"match": {"nth": 1}, "fault": {"kind": "stays_in_progress"}}]}
    )
    batch = client.messages.batches.create(requests=_requests(["a", "b"]))
    with pytest.raises(anthropic.BadRequestError):
        client.messages.batches.delete(batch.id)
    canceling = client.messages.batches.cancel(batch.id)
    assert canceling.processing_status == "canceling"
    assert canceling.cancel_initiated_at is not None
    done = _ended(client, batch.id)
    assert done.request_counts.canceled == 2
    assert {r.type for r in _results(client, batch.id).values()} == {"canceled"}
    deleted = client.messages.batches.delete(batch.id)
    assert (deleted.id, deleted.type) == (batch.id, "message_batch_deleted")
    with pytest.raises(anthropic.NotFoundError):
        client.messages.batches.retrieve(batch.id)


def test_error_classes(client: anthropic.Anthropic, emulator: Emulator) -> None:
    """Auth and not-found errors; a rate limit outlasting the SDK's own retries."""
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(
            api_key="sk-ant-wrong", base_url=emulator.base_url
        ).messages.batches.list()
    with pytest.raises(anthropic.NotFoundError) as missing:
        client.messages.batches.retrieve("msgbatch_nope")
    assert missing.value.response.headers["request-id"].startswith("req_")
    emulator.set_faults({"rate_limit": {"times": 3, "retry_after_secs": 1}})
    with pytest.raises(anthropic.RateLimitError) as caught:
        client.messages.batches.create(requests=_requests(["a"]))
    assert caught.value.response.headers["retry-after"] == "1"
    assert caught.value.response.headers["anthropic-ratelimit-requests-remaining"] == "0"
    stats = emulator.stats()
    assert (stats["create_rejections"], stats["batches_created"]) == (3, 0)


def test_transient_refusals_are_retried(client: anthropic.Anthropic, emulator: Emulator) -> None:
    """A 529 once is retried by the SDK; a lost answer (500) too, making a second batch."""
    emulator.set_faults({"overloaded": {"times": 1}})
    batch = client.messages.batches.create(requests=_requests(["a"]))
    assert batch.processing_status == "in_progress"
    assert emulator.stats()["create_rejections"] == 1
    emulator.set_faults({"create_answer_lost": {"times": 1}})
    client.messages.batches.create(requests=_requests(["b"]))
    stats = emulator.stats()
    assert stats["create_answers_lost"] == 1
    assert len(stats["submissions"]["b"]) == 2


def test_bearer_token_auth(emulator: Emulator) -> None:
    """`auth_token` sends Authorization: Bearer, which the emulator accepts too."""
    client = anthropic.Anthropic(auth_token=KEY, base_url=emulator.base_url)
    assert list(client.messages.batches.list()) == []


def test_async_client(emulator: Emulator) -> None:
    """The async client: create, retrieve until ended, results, list."""

    async def run() -> None:
        client = anthropic.AsyncAnthropic(api_key=KEY, base_url=emulator.base_url)
        batch = await client.messages.batches.create(requests=_requests(["a", "b", "c"]))
        deadline = time.monotonic() + 15
        while (await client.messages.batches.retrieve(batch.id)).processing_status != "ended":
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        results = {
            entry.custom_id: entry.result
            async for entry in await client.messages.batches.results(batch.id)
        }
        assert sorted(results) == ["a", "b", "c"]
        assert "a prompt b" in _text(results["b"])
        assert [b.id async for b in client.messages.batches.list()] == [batch.id]
        await client.close()

    asyncio.run(run())


def test_list_orders_page_every_batch(client: anthropic.Anthropic, emulator: Emulator) -> None:
    """Each `list_order` is paged through whole by the SDK's auto-pagination."""
    # Eight batches: a shuffle (seeded by the run's ids) lands on the
    # creation order or its reverse once in 20,160 runs, not once in 60.
    made = [client.messages.batches.create(requests=_requests([f"r{i}"])).id for i in range(8)]
    emulator.set_faults({"list_order": "oldest_first"})
    assert [b.id for b in client.messages.batches.list(limit=2)] == made
    emulator.set_faults({"list_order": "shuffled"})
    shuffled = [b.id for b in client.messages.batches.list(limit=2)]
    assert sorted(shuffled) == sorted(made)
    assert shuffled not in (made, list(reversed(made)))
    assert [b.id for b in client.messages.batches.list(limit=3)] == shuffled


def test_request_counts_move_while_in_progress(
    client: anthropic.Anthropic, emulator: Emulator
) -> None:
    """With `moving_counts`, an in-progress batch counts requests answered; a cancel keeps them."""
    emulator.set_faults(
        {
            "moving_counts": True,
            "batches": [{"match": {"nth": 1}, "fault": {"kind": "stays_in_progress"}}],
            "rows": [
                {"match": {"custom_id": "b"}, "fault": {"kind": "errored", "error": "api_error"}}
            ],
        }
    )
    batch = client.messages.batches.create(requests=_requests(["a", "b", "c", "d"]))
    assert batch.request_counts.processing == 4
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        running = client.messages.batches.retrieve(batch.id)
        if running.request_counts.processing == 1:
            break
        time.sleep(0.02)
    else:
        raise AssertionError("the counts never moved")
    assert running.processing_status == "in_progress"
    assert (running.request_counts.succeeded, running.request_counts.errored) == (2, 1)
    client.messages.batches.cancel(batch.id)
    done = _ended(client, batch.id)
    counts = done.request_counts
    assert (counts.succeeded, counts.errored, counts.canceled) == (2, 1, 1)


def test_archived_results_are_not_found(client: anthropic.Anthropic, emulator: Emulator) -> None:
    """Past its results' time a batch names `archived_at` and its results are a NotFoundError."""
    emulator.set_faults({"archive_after_ms": 1000})
    batch = client.messages.batches.create(requests=_requests(["a"]))
    done = _ended(client, batch.id)
    assert done.archived_at is None
    assert set(_results(client, batch.id)) == {"a"}
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        archived = client.messages.batches.retrieve(batch.id)
        if archived.archived_at is not None:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the batch was never archived")
    assert archived.archived_at >= archived.created_at
    with pytest.raises(anthropic.NotFoundError):
        client.messages.batches.results(batch.id)


def test_a_spend_cap_is_a_rate_limit_error_naming_its_code(
    client: anthropic.Anthropic, emulator: Emulator
) -> None:
    """Over the monthly spend cap a create is the SDK's RateLimitError (its typed
    EnforcedSpendLimitReachedError) whose body says error.details.error_code, with no
    retry-after; the SDK's own retries (two, by default) meet it too and make nothing. A
    contract's cap is the same; an organization on hold is a BadRequestError, not retried."""
    emulator.set_faults({"spend_limit": {"times": 100}})
    with pytest.raises(anthropic.RateLimitError) as caught:
        client.messages.batches.create(requests=_requests(["a"]))
    capped = caught.value
    assert isinstance(capped, anthropic.EnforcedSpendLimitReachedError)
    assert isinstance(capped.body, dict)
    assert capped.body["error"]["type"] == "rate_limit_error"
    assert capped.body["error"]["details"]["error_code"] == "enforced_spend_limit_reached"
    assert capped.error_code == "enforced_spend_limit_reached"
    assert capped.details is not None
    assert capped.details.error_code == "enforced_spend_limit_reached"
    assert "retry-after" not in capped.response.headers
    stats = emulator.stats()
    assert (stats["create_rejections"], stats["batches_created"]) == (3, 0)
    emulator.set_faults(
        {"spend_limit": {"times": 100, "error_code": "contract_spend_limit_reached"}}
    )
    once = client.with_options(max_retries=0)
    with pytest.raises(anthropic.ContractSpendLimitReachedError) as contract:
        once.messages.batches.create(requests=_requests(["a"]))
    assert contract.value.error_code == "contract_spend_limit_reached"
    emulator.set_faults({"spend_limit": {"times": 100, "error_code": "organization_on_hold"}})
    with pytest.raises(anthropic.BadRequestError) as held:
        client.messages.batches.create(requests=_requests(["a"]))
    assert isinstance(held.value, anthropic.OrganizationOnHoldError)
    assert held.value.error_code == "organization_on_hold"
    stats = emulator.stats()
    assert (stats["create_rejections"], stats["batches_created"]) == (5, 0)


def test_an_unknown_model_errs_per_request_in_the_results(clean_env: None) -> None:
    """A batch naming a model the account cannot use is taken; each such request is
    `errored` with `not_found_error` ("model: NAME") in the results stream the SDK reads,
    beside the requests of a known model, which succeed."""
    with running("--models", MODEL) as emulator:
        client = anthropic.Anthropic(api_key=KEY, base_url=emulator.base_url)
        requests = _requests(["known", "gone-1", "gone-2"])
        for request in requests[1:]:
            request["params"]["model"] = "claude-3-retired"
        batch = client.messages.batches.create(requests=requests)
        assert batch.processing_status == "in_progress"
        done = _ended(client, batch.id)
        assert (done.request_counts.succeeded, done.request_counts.errored) == (1, 2)
        results = _results(client, batch.id)
        assert results["known"].type == "succeeded"
        for custom_id in ("gone-1", "gone-2"):
            gone = results[custom_id]
            assert isinstance(gone, MessageBatchErroredResult), gone
            assert gone.error.error.type == "not_found_error"
            assert gone.error.error.message == "model: claude-3-retired"
