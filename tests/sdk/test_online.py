"""The official google-genai SDK's synchronous call (`generate_content`, with
`service_tier`), unmodified and with its defaults, against the emulator, and
its async twin."""

from __future__ import annotations

import asyncio

import pytest
from google import genai
from google.genai import errors, types

from conftest import Emulator

MODEL = "gemini-2.5-flash"


def test_generate_content_in_each_tier(client: genai.Client, emulator: Emulator) -> None:
    """An answer parses in every tier; the header names the tier granted;
    the emulator counts each answer by its tier."""
    for tier in (types.ServiceTier.FLEX, types.ServiceTier.STANDARD, types.ServiceTier.PRIORITY):
        response = client.models.generate_content(
            model=MODEL,
            contents=f"tier {tier.value}",
            config=types.GenerateContentConfig(service_tier=tier),
        )
        assert response.text
        assert response.usage_metadata is not None
        assert (response.usage_metadata.prompt_token_count or 0) > 0
        assert response.response_id
        assert response.sdk_http_response is not None
        headers = response.sdk_http_response.headers or {}
        assert headers.get("x-gemini-service-tier") == tier.value
    plain = client.models.generate_content(model=MODEL, contents="no tier")
    assert plain.text
    answered = emulator.stats()["online"]["answered"]
    assert answered == {"standard": 2, "flex": 1, "priority": 1}


def test_a_json_schema_is_answered_by_an_instance(client: genai.Client) -> None:
    response = client.models.generate_content(
        model=MODEL,
        contents="label this",
        config=types.GenerateContentConfig(
            response_mime_type="application/json",
            response_json_schema={
                "type": "object",
                "properties": {"label": {"type": "string"}},
                "required": ["label"],
            },
        ),
    )
    assert response.text is not None and '"label"' in response.text


def test_a_shed_flex_request_is_a_503_without_fallback(
    client: genai.Client, emulator: Emulator
) -> None:
    """Flex capacity unavailable answers 503 (the SDK does not retry by
    default); nothing is answered in another tier."""
    emulator.set_faults({"online": {"shed": {"every": 1}}})
    with pytest.raises(errors.ServerError) as shed:
        client.models.generate_content(
            model=MODEL,
            contents="shed",
            config=types.GenerateContentConfig(service_tier=types.ServiceTier.FLEX),
        )
    assert shed.value.code == 503
    online = emulator.stats()["online"]
    assert (online["shed"], online["answered"]) == (1, {})


def test_the_account_rate_limit_is_a_429_with_retry_info(
    client: genai.Client, emulator: Emulator
) -> None:
    emulator.set_faults({"online": {"limits": {"rpm": 1}}})
    client.models.generate_content(model=MODEL, contents="within")
    with pytest.raises(errors.ClientError) as limited:
        client.models.generate_content(model=MODEL, contents="over")
    assert limited.value.code == 429
    assert limited.value.status == "RESOURCE_EXHAUSTED"
    details = (limited.value.details or {}).get("error", {}).get("details", [])
    assert any(d.get("@type", "").endswith("RetryInfo") for d in details)


def test_a_row_fault_is_the_answer_it_would_be_in_a_batch(
    client: genai.Client, emulator: Emulator
) -> None:
    emulator.set_faults(
        {"rows": [{"match": {"prompt_contains": "unsafe"}, "fault": {"kind": "safety"}}]}
    )
    response = client.models.generate_content(model=MODEL, contents="unsafe words")
    assert response.candidates is not None
    assert response.candidates[0].finish_reason == types.FinishReason.SAFETY


def test_an_unknown_model_is_a_404(client: genai.Client) -> None:
    with pytest.raises(errors.ClientError) as unknown:
        client.models.generate_content(model="gemini-9-nonexistent", contents="x")
    assert unknown.value.code == 404


def test_the_async_client_does_the_same(emulator: Emulator) -> None:
    async def run() -> None:
        client = genai.Client()
        response = await client.aio.models.generate_content(
            model=MODEL,
            contents="async",
            config=types.GenerateContentConfig(service_tier=types.ServiceTier.FLEX),
        )
        assert response.text

    asyncio.run(run())


def test_an_inline_image_is_read_and_a_missing_file_refused(
    client: genai.Client, emulator: Emulator
) -> None:
    """The synchronous call reads a request's media as a batch line's are:
    an inline image is seen (its SHA-256 counted), and a file part naming
    no uploaded file is refused as the provider refuses it."""
    import hashlib

    image = b"\xff\xd8\xff\xe0 a page"
    response = client.models.generate_content(
        model=MODEL,
        contents=[
            types.Part.from_text(text="transcribe the page"),
            types.Part.from_bytes(data=image, mime_type="image/jpeg"),
        ],
    )
    assert response.text
    seen = [h for hashes in emulator.stats()["media"].values() for h in hashes]
    assert hashlib.sha256(image).hexdigest() in seen
    with pytest.raises(errors.ClientError) as refused:
        client.models.generate_content(
            model=MODEL,
            contents=[
                types.Part.from_text(text="transcribe"),
                types.Part.from_uri(
                    file_uri=f"{emulator.base_url}/v1beta/files/missing",
                    mime_type="image/jpeg",
                ),
            ],
        )
    assert refused.value.code in (400, 403)
