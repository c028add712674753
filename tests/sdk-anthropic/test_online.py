"""The official anthropic SDK's synchronous call (`messages.create`),
unmodified and with its defaults, against the emulator, and its async twin."""

from __future__ import annotations

import asyncio

import anthropic
import pytest
from anthropic.types import TextBlock

from conftest import KEY, Emulator

MODEL = "claude-sonnet-4-6"


def test_a_message_parses_with_its_usage_and_request_id(
    client: anthropic.Anthropic, emulator: Emulator
) -> None:
    raw = client.messages.with_raw_response.create(
        model=MODEL,
        max_tokens=64,
        system="be brief",
        messages=[{"role": "user", "content": "say hello"}],
    )
    message = raw.parse()
    assert message.type == "message" and message.role == "assistant"
    block = message.content[0]
    assert isinstance(block, TextBlock) and block.text
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens > 0
    assert message.usage.service_tier == "standard"
    assert raw.request_id and raw.request_id.startswith("req_")
    assert emulator.stats()["online"]["answered"] == {"standard": 1}


def test_standard_only_is_taken_and_a_row_fault_answers_as_in_a_batch(
    client: anthropic.Anthropic, emulator: Emulator
) -> None:
    emulator.set_faults(
        {"rows": [{"match": {"prompt_contains": "refuse"}, "fault": {"kind": "refusal"}}]}
    )
    message = client.messages.create(
        model=MODEL,
        max_tokens=64,
        service_tier="standard_only",
        messages=[{"role": "user", "content": "please refuse"}],
    )
    assert message.stop_reason == "refusal"


def test_the_account_rate_limit_is_a_429_the_sdk_retries_then_raises(
    client: anthropic.Anthropic, emulator: Emulator
) -> None:
    emulator.set_faults({"online": {"rate_limited": {"retry_after_secs": 0}}})
    with pytest.raises(anthropic.RateLimitError) as limited:
        client.messages.create(
            model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "x"}]
        )
    assert limited.value.response.headers.get("retry-after") is not None
    # The SDK's two default retries, each refused.
    assert emulator.stats()["online"]["rate_limited"] == 3


def test_a_lost_answer_reaches_the_sdk_as_a_connection_error(
    client: anthropic.Anthropic, emulator: Emulator
) -> None:
    emulator.set_faults({"online": {"lost": {"mode": "drop"}}})
    with pytest.raises(anthropic.APIConnectionError):
        client.with_options(max_retries=0).messages.create(
            model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "lost"}]
        )
    online = emulator.stats()["online"]
    assert (online["lost"], online["answered"]) == (1, {"standard": 1})


def test_a_request_without_max_tokens_is_refused(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(
            model=MODEL,
            messages=[{"role": "user", "content": "x"}],
            max_tokens=0,
        )


def test_the_async_client_does_the_same(emulator: Emulator) -> None:
    async def run() -> None:
        client = anthropic.AsyncAnthropic(api_key=KEY, base_url=emulator.base_url)
        message = await client.messages.create(
            model=MODEL, max_tokens=32, messages=[{"role": "user", "content": "async"}]
        )
        assert message.content
        await client.close()

    asyncio.run(run())
