"""Which provider runs a model: the same routing as `tally_core::provider`
(the server, the worker and tallyctl route every model this way).

- `{provider}/{model}` names the provider (`openai/gpt-4o`,
  `vllm/meta-llama/Llama-3.1-8B-Instruct`) when the prefix is a plain name
  (a lowercase letter, then lowercase letters, digits and `-`, at most 32);
- `models/…` and `tunedModels/…` are Gemini resource names;
- else the family: `gpt-`, `chatgpt-`, `o1`, `o3`, `o4`, `ft:`, … are
  OpenAI's, `claude-` Anthropic's, and every other name Gemini's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: The APIs a provider can speak; a named OpenAI-compatible server speaks
#: `openai`.
APIS = ("gemini", "openai", "anthropic")
MAX_PROVIDER = 32
_OPENAI_FAMILIES = (
    "gpt-",
    "chatgpt-",
    "o1",
    "o3",
    "o4",
    "ft:",
    "text-embedding-",
    "omni-moderation-",
    "davinci-",
    "babbage-",
    "computer-use-",
    "codex-",
)
_GEMINI_RESOURCES = ("models/", "tunedModels/")
_PROVIDER_NAME = re.compile(r"[a-z][a-z0-9-]*\Z")


def is_provider_name(name: str) -> bool:
    """Whether `name` can name a provider (`vllm`, `together-ai2`)."""
    return len(name) <= MAX_PROVIDER and _PROVIDER_NAME.match(name) is not None


@dataclass(frozen=True)
class Route:
    """A model's provider and its name there."""

    provider: str
    model: str

    @property
    def openai_shaped(self) -> bool:
        """Whether the provider takes OpenAI's request shape: OpenAI, or a
        named server (tally speaks to named servers as OpenAI-shaped)."""
        return self.provider not in ("gemini", "anthropic")

    @property
    def native_format(self) -> str | None:
        """The batch format whose requests rows keep as written here:
        `openai` for an OpenAI-shaped provider, `anthropic` for Anthropic;
        `None` for Gemini, to which lines are converted."""
        if self.provider == "gemini":
            return None
        return "anthropic" if self.provider == "anthropic" else "openai"


def route(model: str) -> Route:
    """The provider that runs `model`, and the model's name there."""
    model = model.strip()
    if model.startswith(_GEMINI_RESOURCES):
        return Route("gemini", model)
    provider, sep, rest = model.partition("/")
    if sep and rest and is_provider_name(provider):
        return Route(provider, rest)
    lower = model.lower()
    if lower.startswith(_OPENAI_FAMILIES):
        return Route("openai", model)
    if lower.startswith("claude-"):
        return Route("anthropic", model)
    return Route("gemini", model)


def provider_of(model: str) -> str:
    """The provider that runs `model`."""
    return route(model).provider
