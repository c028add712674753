"""The official OpenAI SDK's synchronous calls (chat completions and responses,
with `service_tier`), unmodified and with its defaults, against the emulator,
and their async twins."""

from __future__ import annotations

import asyncio
from typing import Literal

import openai
import pytest

from conftest import Emulator

MODEL = "gpt-4o-mini"


def _messages(text: str) -> list[openai.types.chat.ChatCompletionMessageParam]:
    return [{"role": "user", "content": text}]


def test_chat_completion_in_each_tier(client: openai.OpenAI, emulator: Emulator) -> None:
    """A chat completion parses in every tier, names the tier granted and
    carries the provider's request id; the emulator counts each answer."""
    tiers: list[tuple[Literal["flex", "default", "priority"], str]] = [
        ("flex", "flex"),
        ("default", "default"),
        ("priority", "priority"),
    ]
    for tier, granted in tiers:
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=_messages(f"tier {tier}"), service_tier=tier
        )
        completion = raw.parse()
        assert completion.object == "chat.completion"
        assert completion.service_tier == granted
        assert completion.choices[0].message.content
        assert completion.usage is not None and completion.usage.prompt_tokens > 0
        assert raw.request_id and raw.request_id.startswith("req_")
    plain = client.chat.completions.create(model=MODEL, messages=_messages("no tier"))
    assert plain.service_tier == "default"
    answered = emulator.stats()["online"]["answered"]
    assert answered == {"standard": 2, "flex": 1, "priority": 1}


def test_responses_in_the_flex_tier(client: openai.OpenAI) -> None:
    """`responses.create` parses, `output_text` reads, usage is whole, and the
    body validates strictly as the SDK's `Response` (which `create` only
    constructs, so a missing required field would pass unseen)."""
    raw = client.responses.with_raw_response.create(
        model=MODEL, input="say hello", service_tier="flex", max_output_tokens=64
    )
    response = raw.parse()
    strict = openai.types.responses.Response.model_validate(raw.http_response.json())
    assert strict.max_output_tokens == 64
    assert response.object == "response"
    assert response.status == "completed"
    assert response.service_tier == "flex"
    assert response.output_text
    assert response.usage is not None and response.usage.input_tokens > 0


def test_a_json_schema_is_answered_by_an_instance(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model=MODEL,
        messages=_messages("classify this"),
        response_format={
            "type": "json_schema",
            "json_schema": {
                "name": "label",
                "schema": {
                    "type": "object",
                    "properties": {"label": {"type": "string"}},
                    "required": ["label"],
                },
            },
        },
    )
    content = completion.choices[0].message.content
    assert content is not None and '"label"' in content


def test_a_shed_flex_request_is_a_429_the_sdk_retries(
    client: openai.OpenAI, emulator: Emulator
) -> None:
    """Flex capacity unavailable is a 429 (not charged); the SDK's default
    retries take it, and a request shed every time raises RateLimitError."""
    emulator.set_faults({"online": {"shed": {"times": 1, "retry_after_secs": 0}}})
    completion = client.chat.completions.create(
        model=MODEL, messages=_messages("shed once"), service_tier="flex"
    )
    assert completion.service_tier == "flex"
    emulator.set_faults({"online": {"shed": {"every": 1}}})
    with pytest.raises(openai.RateLimitError) as refused:
        client.chat.completions.create(
            model=MODEL, messages=_messages("shed always"), service_tier="flex"
        )
    assert refused.value.code == "resource_unavailable"
    online = emulator.stats()["online"]
    # One shed then answered; then three attempts (two default retries) shed.
    assert online["shed"] == 4
    assert online["answered"] == {"flex": 1}


def test_the_account_rate_limit_is_a_429_with_retry_after(
    client: openai.OpenAI, emulator: Emulator
) -> None:
    """Past the account's RPM the API answers 429 rate_limit_exceeded with
    retry-after; the SDK's retries honour it and give up within its bound."""
    emulator.set_faults({"online": {"limits": {"rpm": 2}}})
    for i in range(2):
        client.chat.completions.create(model=MODEL, messages=_messages(f"within {i}"))
    quick = client.with_options(max_retries=0)
    with pytest.raises(openai.RateLimitError) as refused:
        quick.chat.completions.create(model=MODEL, messages=_messages("over"))
    assert refused.value.code == "rate_limit_exceeded"
    assert int(refused.value.response.headers["retry-after"]) > 0
    assert emulator.stats()["online"]["peak_requests_per_minute"] == 2


def test_a_lost_answer_is_work_done_and_an_error_seen(
    client: openai.OpenAI, emulator: Emulator
) -> None:
    """An answer lost after the work (the connection cut) reaches the SDK as a
    connection error after its retries; the emulator counts the work done."""
    emulator.set_faults({"online": {"lost": {"mode": "drop"}}})
    with pytest.raises(openai.APIConnectionError):
        client.with_options(max_retries=0).chat.completions.create(
            model=MODEL, messages=_messages("lost")
        )
    online = emulator.stats()["online"]
    assert (online["lost"], online["answered"]) == (1, {"standard": 1})


def test_bad_requests_are_refused_as_the_api_refuses_them(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as bad_tier:
        client.chat.completions.create(
            model=MODEL, messages=_messages("x"), extra_body={"service_tier": "cheapest"}
        )
    assert bad_tier.value.param == "service_tier"
    with pytest.raises(openai.NotFoundError) as unknown:
        client.chat.completions.create(model="gpt-9", messages=_messages("x"))
    assert unknown.value.code == "model_not_found"


def test_the_async_client_does_the_same(emulator: Emulator) -> None:
    async def run() -> None:
        client = openai.AsyncOpenAI()
        completion = await client.chat.completions.create(
            model=MODEL, messages=_messages("async"), service_tier="flex"
        )
        assert completion.service_tier == "flex"
        response = await client.responses.create(model=MODEL, input="async responses")
        assert response.output_text
        await client.close()

    asyncio.run(run())
