"""Model routing agrees with tally_core::provider (its test cases, case for
case): every model has exactly one provider."""

from __future__ import annotations

import pytest

from tally_client.providers import MAX_PROVIDER, is_provider_name, route


@pytest.mark.parametrize(
    ("model", "provider", "name"),
    [
        ("gemini-2.5-flash", "gemini", "gemini-2.5-flash"),
        ("models/gemini-2.5-pro", "gemini", "models/gemini-2.5-pro"),
        ("tunedModels/abc", "gemini", "tunedModels/abc"),
        ("flash", "gemini", "flash"),
        ("gpt-4o-mini", "openai", "gpt-4o-mini"),
        ("o3-mini", "openai", "o3-mini"),
        ("ft:gpt-4o-mini:acme::abc123", "openai", "ft:gpt-4o-mini:acme::abc123"),
        ("claude-sonnet-4-6", "anthropic", "claude-sonnet-4-6"),
        ("openai/gpt-4o", "openai", "gpt-4o"),
        ("gemini/gpt-lookalike", "gemini", "gpt-lookalike"),
        ("vllm/meta-llama/Llama-3.1-8B-Instruct", "vllm", "meta-llama/Llama-3.1-8B-Instruct"),
        ("Meta-Llama/x", "gemini", "Meta-Llama/x"),
        ("vllm/", "gemini", "vllm/"),
    ],
)
def test_every_model_has_one_provider(model: str, provider: str, name: str) -> None:
    r = route(model)
    assert (r.provider, r.model) == (provider, name)


def test_only_plain_names_name_a_provider() -> None:
    assert is_provider_name("vllm")
    assert is_provider_name("together-ai2")
    assert not is_provider_name("Meta-Llama")
    assert not is_provider_name("2fast")
    assert not is_provider_name("")
    assert not is_provider_name("a" * (MAX_PROVIDER + 1))
    assert route("vllm/x").openai_shaped
    assert not route("claude-x").openai_shaped
    assert not route("gemini-2.5-flash").openai_shaped
