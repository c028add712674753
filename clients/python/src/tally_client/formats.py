"""Batch files in other tools' formats → tally rows, exactly as
`tallyctl enroll --format openai|anthropic` converts them (both are held to
`tests/vectors/formats.json`). Pure: one line of text in, one converted row
(or the reason it cannot be converted) out.

- `openai`: OpenAI batch input lines (`custom_id`, `method`, `url`, `body`)
  for `/v1/chat/completions`, the format OpenAI, vLLM, SGLang, LiteLLM,
  Together and Groq accept;
- `anthropic`: Anthropic Message Batches requests (`custom_id`, `params`).

Both become a Gemini `GenerateContentRequest` as the row's payload
(messages → `contents`, system → `systemInstruction`, sampling parameters
and `response_format` → `generationConfig`). What cannot be converted
(tools, log probabilities, remote images, unknown fields) is an error of the
line, never silently dropped. A line's model goes with the row when it is a
Gemini model (`gemini-…`, `gemma-…`, optionally `models/…`); any other model
is dropped for the ledger's, and `Converted.dropped_model` says so.

When the ledger's model runs at an OpenAI-shaped provider (OpenAI, or a
named OpenAI-compatible server: `tally_client.providers`), OpenAI lines are
not converted: each row carries its `body` as written, and a line's model
names a model of that provider (empty when it is the ledger's own, else
routed there: `vllm/…`). Anthropic lines for such a ledger are refused."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tally_client import rust_json
from tally_client.keys import validate_key
from tally_client.providers import Route, provider_of, route

BatchFormat = Literal["openai", "anthropic"]
CHAT_COMPLETIONS = "/v1/chat/completions"
MAX_STOP_SEQUENCES = 5
MAX_PAYLOAD_BYTES = 1 << 20
_U64_MAX = 2**64 - 1

_TOOLS = "tools and function calling are not converted"
_LOGPROBS = "Gemini batch output carries no log probabilities"
OPENAI_UNSUPPORTED = {
    "tools": _TOOLS,
    "tool_choice": _TOOLS,
    "parallel_tool_calls": _TOOLS,
    "functions": _TOOLS,
    "function_call": _TOOLS,
    "logprobs": _LOGPROBS,
    "top_logprobs": _LOGPROBS,
    "logit_bias": "Gemini has no logit bias",
    "audio": "audio output is not converted",
    "modalities": "only text output is converted",
    "prediction": "predicted outputs are not converted",
    "reasoning_effort": "map it to thinkingConfig yourself",
}
OPENAI_MESSAGE_UNSUPPORTED = {
    "tool_calls": _TOOLS,
    "function_call": _TOOLS,
    "tool_call_id": _TOOLS,
    "name": "Gemini turns have no participant names",
    "audio": "audio is not converted",
}
_ANTHROPIC_TOOLS = "tools and tool use are not converted"
ANTHROPIC_UNSUPPORTED = {
    "tools": _ANTHROPIC_TOOLS,
    "tool_choice": _ANTHROPIC_TOOLS,
    "thinking": "map it to thinkingConfig yourself",
    "mcp_servers": _ANTHROPIC_TOOLS,
    "container": "code execution is not converted",
}


class FormatError(ValueError):
    """A line that cannot be converted; the message says why."""


@dataclass(frozen=True)
class Converted:
    """One converted line."""

    #: The `custom_id`, checked against tally's key rules.
    key: str
    #: The Gemini request as the payload's JSON text (keys sorted, compact:
    #: the same bytes tallyctl enrolls).
    payload: str
    #: The line's model when it is a Gemini model; empty for the ledger's.
    model: str
    #: The line's model when it was not a Gemini model (and so dropped).
    dropped_model: str | None


def kind_of(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int | float):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "an array"
    return "an object"


def gemini_model(name: str) -> str | None:
    """The Gemini model a name denotes (`models/` stripped), if it is one."""
    bare = name.removeprefix("models/")
    return bare if bare.startswith(("gemini-", "gemma-")) else None


class _Fields:
    """Field-by-field reading of an object: null counts as absent, and
    whatever is left at the end is an error."""

    def __init__(self, fields: dict[str, Any], what: str) -> None:
        self.map = dict(fields)
        self.what = what

    def take(self, name: str) -> Any:
        return self.map.pop(name, None)

    def _typed(self, name: str, check: Callable[[Any], bool], kind: str) -> Any:
        v = self.take(name)
        if v is not None and not check(v):
            raise FormatError(f"{self.what}.{name} must be {kind}, got {kind_of(v)}")
        return v

    def string(self, name: str) -> str | None:
        v: str | None = self._typed(name, lambda v: isinstance(v, str), "a string")
        return v

    def number(self, name: str) -> int | float | None:
        v: int | float | None = self._typed(name, _is_number, "a number")
        return v

    def boolean(self, name: str) -> bool | None:
        v: bool | None = self._typed(name, lambda v: isinstance(v, bool), "a boolean")
        return v

    def count(self, name: str) -> int | None:
        """A whole number of at least 1."""
        v = self.take(name)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= _U64_MAX:
            raise FormatError(
                f"{self.what}.{name} must be a whole number of at least 1, got {rust_json.dumps(v)}"
            )
        return v

    def ignore(self, *names: str) -> None:
        for n in names:
            self.map.pop(n, None)

    def finish(self, unsupported: dict[str, str] | None = None) -> None:
        if not self.map:
            return
        name = min(self.map)  # serde_json's map is ordered by key
        why = (unsupported or {}).get(name)
        if why is not None:
            raise FormatError(f"{self.what}.{name} cannot be converted to a Gemini request ({why})")
        raise FormatError(f"{self.what}.{name} is not a known field")


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _object(v: Any, what: str) -> dict[str, Any]:
    if v is None:
        raise FormatError(f"missing {what}")
    if not isinstance(v, dict):
        raise FormatError(f"{what} must be a JSON object, got {kind_of(v)}")
    return v


class _Request:
    """The Gemini request being built."""

    def __init__(self) -> None:
        self.system: list[dict[str, Any]] = []
        self.contents: list[dict[str, Any]] = []
        self.config: dict[str, Any] = {}

    def turn(self, role: str, parts: list[dict[str, Any]]) -> None:
        self.contents.append({"role": role, "parts": parts})

    def stop(self, stop: Any, what: str) -> None:
        if isinstance(stop, str):
            items = [stop]
        elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
            items = stop
        else:
            raise FormatError(f"{what} must be a string or a list of strings")
        if len(items) > MAX_STOP_SEQUENCES:
            raise FormatError(
                f"{what} has {len(items)} sequences; Gemini accepts at most {MAX_STOP_SEQUENCES}"
            )
        if items:
            self.config["stopSequences"] = items

    def build(self) -> dict[str, Any]:
        if not self.contents:
            raise FormatError("no user or assistant message to send")
        req: dict[str, Any] = {"contents": self.contents}
        if self.system:
            req["systemInstruction"] = {"parts": self.system}
        if self.config:
            req["generationConfig"] = self.config
        return req


def _text_part(text: str, what: str) -> dict[str, Any]:
    if not text:
        raise FormatError(f"{what} is empty")
    return {"text": text}


def _inline_part(mime: str, data: str, what: str) -> dict[str, Any]:
    if not mime.startswith("image/") or not data:
        raise FormatError(f"{what} must be base64 image data with an image/* type")
    return {"inlineData": {"mimeType": mime, "data": data}}


def _data_url(url: str) -> tuple[str, str] | None:
    """`data:image/png;base64,AAAA` → (`image/png`, `AAAA`)."""
    if not url.startswith("data:") or "," not in url:
        return None
    meta, data = url[len("data:") :].split(",", 1)
    if not meta.endswith(";base64"):
        return None
    return meta[: -len(";base64")], data


# ----- OpenAI -----

#: The ledger model `convert` assumes when none is given (a Gemini model:
#: lines are converted).
DEFAULT_LEDGER_MODEL = "gemini-2.5-flash"


def _openai_body(line: dict[str, Any]) -> dict[str, Any]:
    """A line's `body`, once its method and URL are the one endpoint tally
    runs."""
    fields = _Fields(line, "line")
    method = fields.string("method")
    if method is None:
        raise FormatError("missing method (POST)")
    if method != "POST":
        raise FormatError(f"method {rust_json.dumps(method)} is not supported: only POST")
    url = fields.string("url")
    if url is None:
        raise FormatError(f"missing url ({CHAT_COMPLETIONS})")
    if url != CHAT_COMPLETIONS:
        raise FormatError(
            f"url {rust_json.dumps(url)} is not supported: only {CHAT_COMPLETIONS} is converted"
        )
    body_map = _object(fields.take("body"), "body")
    fields.finish()
    return body_map


def _openai_native(line: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The line's `body` as written, for an OpenAI-shaped provider: only
    what no provider takes is refused."""
    body = _openai_body(line)
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise FormatError(f"body.model must be a string, got {kind_of(model)}")
    messages = body.get("messages")
    if messages is None:
        raise FormatError("missing body.messages")
    if not isinstance(messages, list):
        raise FormatError(f"body.messages must be a list, got {kind_of(messages)}")
    if not messages:
        raise FormatError("body.messages is empty")
    if body.get("stream") is True:
        raise FormatError("body.stream must be false: batch answers are not streamed")
    return body, model


def _anthropic_native(line: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The line's `params` as written, for a ledger of an Anthropic model:
    only what no batch takes is refused."""
    fields = _Fields(line, "line")
    params = _object(fields.take("params"), "params")
    fields.finish()
    model = params.get("model")
    if model is not None and not isinstance(model, str):
        raise FormatError(f"params.model must be a string, got {kind_of(model)}")
    messages = params.get("messages")
    if messages is None:
        raise FormatError("missing params.messages")
    if not isinstance(messages, list):
        raise FormatError(f"params.messages must be a list, got {kind_of(messages)}")
    if not messages:
        raise FormatError("params.messages is empty")
    if params.get("stream") is True:
        raise FormatError("params.stream must be false: batch answers are not streamed")
    return params, model


def _row_model(target: Route, model: str | None) -> str:
    """The row model for a native line naming `model`: the ledger's (empty)
    when it names the ledger's own, the name as it is when it routes to the
    ledger's provider, else the name under that provider (`vllm/…`)."""
    if model is None or model == target.model:
        return ""
    if provider_of(model) == target.provider:
        return model
    return f"{target.provider}/{model}"


def _openai(line: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    body = _Fields(_openai_body(line), "body")
    model = body.string("model")
    req = _Request()
    messages = body.take("messages")
    if messages is None:
        raise FormatError("missing body.messages")
    if not isinstance(messages, list):
        raise FormatError(f"body.messages must be a list, got {kind_of(messages)}")
    if not messages:
        raise FormatError("body.messages is empty")
    for i, m in enumerate(messages):
        _openai_message(req, m, i)
    max_tokens, max_completion = body.count("max_tokens"), body.count("max_completion_tokens")
    if max_tokens is not None and max_completion is not None and max_tokens != max_completion:
        raise FormatError(
            f"body.max_tokens ({max_tokens}) and body.max_completion_tokens "
            f"({max_completion}) disagree"
        )
    if max_tokens is not None or max_completion is not None:
        req.config["maxOutputTokens"] = max_tokens if max_tokens is not None else max_completion
    for source, target in [("temperature", "temperature"), ("top_p", "topP")]:
        if (v := body.number(source)) is not None:
            req.config[target] = v
    if (stop := body.take("stop")) is not None:
        req.stop(stop, "body.stop")
    if (n := body.count("n")) is not None:
        req.config["candidateCount"] = n
    for source, target in [
        ("seed", "seed"),
        ("presence_penalty", "presencePenalty"),
        ("frequency_penalty", "frequencyPenalty"),
    ]:
        if (v := body.number(source)) is not None:
            req.config[target] = v
    if (response_format := body.take("response_format")) is not None:
        _openai_response_format(req, response_format)
    if body.boolean("stream") is True:
        raise FormatError("body.stream must be false: batch answers are not streamed")
    body.ignore("user", "metadata", "store", "service_tier")
    body.finish(OPENAI_UNSUPPORTED)
    return req.build(), model


def _openai_message(req: _Request, m: Any, i: int) -> None:
    what = f"messages[{i}]"
    if not isinstance(m, dict):
        raise FormatError(f"{what} must be an object, got {kind_of(m)}")
    fields = _Fields(m, what)
    role = fields.string("role")
    if role is None:
        raise FormatError(f"{what} has no role")
    content = fields.take("content")
    refusal = fields.take("refusal")
    fields.finish(OPENAI_MESSAGE_UNSUPPORTED)
    if refusal is not None:
        raise FormatError(f"{what}.refusal is not converted")
    if content is None:
        raise FormatError(f"{what} has no content")
    if role in ("system", "developer"):
        req.system += _openai_parts(content, what, images=False)
    elif role == "user":
        req.turn("user", _openai_parts(content, what, images=True))
    elif role == "assistant":
        req.turn("model", _openai_parts(content, what, images=False))
    elif role in ("tool", "function"):
        raise FormatError(
            f"{what}: role {rust_json.dumps(role)} cannot be converted "
            "(tools and function calling are not converted)"
        )
    else:
        raise FormatError(f"{what}: unknown role {rust_json.dumps(role)}")


def _openai_parts(content: Any, what: str, *, images: bool) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [_text_part(content, f"{what}.content")]
    if not isinstance(content, list):
        raise FormatError(
            f"{what}.content must be a string or a list of parts, got {kind_of(content)}"
        )
    if not content:
        raise FormatError(f"{what}.content is empty")
    out = []
    for j, item in enumerate(content):
        pwhat = f"{what}.content[{j}]"
        if not isinstance(item, dict):
            raise FormatError(f"{pwhat} must be an object")
        fields = _Fields(item, pwhat)
        kind = fields.string("type") or ""
        if kind == "text":
            text = fields.string("text")
            if text is None:
                raise FormatError(f"{pwhat} has no text")
            part = _text_part(text, f"{pwhat}.text")
        elif kind == "image_url" and images:
            image = _Fields(_object(fields.take("image_url"), pwhat), pwhat)
            url = image.string("url") or ""
            image.ignore("detail")
            image.finish()
            parsed = _data_url(url)
            if parsed is None:
                raise FormatError(
                    f"{pwhat}: only base64 data: URLs are converted "
                    "(Gemini batch requests cannot fetch remote images)"
                )
            part = _inline_part(*parsed, pwhat)
        else:
            raise FormatError(
                f"{pwhat}: part type {rust_json.dumps(kind)} cannot be converted here"
            )
        fields.finish()
        out.append(part)
    return out


def _openai_response_format(req: _Request, response_format: Any) -> None:
    if not isinstance(response_format, dict):
        raise FormatError("body.response_format must be an object")
    fields = _Fields(response_format, "body.response_format")
    kind = fields.string("type") or ""
    if kind == "json_object":
        req.config["responseMimeType"] = "application/json"
    elif kind == "json_schema":
        what = "body.response_format.json_schema"
        spec = _Fields(_object(fields.take("json_schema"), what), what)
        schema = spec.take("schema")
        if schema is None:
            raise FormatError(f"missing {what}.schema")
        if not isinstance(schema, dict):
            raise FormatError(f"{what}.schema must be an object")
        spec.ignore("name", "description", "strict")
        spec.finish()
        req.config["responseMimeType"] = "application/json"
        req.config["responseJsonSchema"] = schema
    elif kind != "text":
        raise FormatError(
            f"body.response_format.type {rust_json.dumps(kind)} "
            "is not one of text, json_object, json_schema"
        )
    fields.finish()


# ----- Anthropic -----


def _anthropic(line: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    fields = _Fields(line, "line")
    params_map = _object(fields.take("params"), "params")
    fields.finish()
    params = _Fields(params_map, "params")
    model = params.string("model")
    req = _Request()
    if (system := params.take("system")) is not None:
        req.system += _anthropic_blocks(system, "params.system", images=False)
    messages = params.take("messages")
    if messages is None:
        raise FormatError("missing params.messages")
    if not isinstance(messages, list):
        raise FormatError(f"params.messages must be a list, got {kind_of(messages)}")
    if not messages:
        raise FormatError("params.messages is empty")
    for i, m in enumerate(messages):
        what = f"messages[{i}]"
        if not isinstance(m, dict):
            raise FormatError(f"{what} must be an object, got {kind_of(m)}")
        message = _Fields(m, what)
        role = message.string("role")
        if role is None:
            raise FormatError(f"{what} has no role")
        content = message.take("content")
        if content is None:
            raise FormatError(f"{what} has no content")
        message.finish()
        if role == "user":
            req.turn("user", _anthropic_blocks(content, what, images=True))
        elif role == "assistant":
            req.turn("model", _anthropic_blocks(content, what, images=False))
        else:
            raise FormatError(f"{what}: unknown role {rust_json.dumps(role)}")
    if (n := params.count("max_tokens")) is not None:
        req.config["maxOutputTokens"] = n
    if (t := params.number("temperature")) is not None:
        req.config["temperature"] = t
    if (p := params.number("top_p")) is not None:
        req.config["topP"] = p
    if (k := params.count("top_k")) is not None:
        req.config["topK"] = k
    if (stop := params.take("stop_sequences")) is not None:
        req.stop(stop, "params.stop_sequences")
    if params.boolean("stream") is True:
        raise FormatError("params.stream must be false: batch answers are not streamed")
    params.ignore("metadata", "service_tier")
    params.finish(ANTHROPIC_UNSUPPORTED)
    return req.build(), model


def _anthropic_blocks(content: Any, what: str, *, images: bool) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [_text_part(content, f"{what}.content")]
    if not isinstance(content, list):
        raise FormatError(
            f"{what} content must be a string or a list of blocks, got {kind_of(content)}"
        )
    if not content:
        raise FormatError(f"{what} content is empty")
    out = []
    for j, item in enumerate(content):
        bwhat = f"{what}.content[{j}]"
        if not isinstance(item, dict):
            raise FormatError(f"{bwhat} must be an object")
        fields = _Fields(item, bwhat)
        kind = fields.string("type") or ""
        if kind == "text":
            text = fields.string("text")
            if text is None:
                raise FormatError(f"{bwhat} has no text")
            part = _text_part(text, f"{bwhat}.text")
        elif kind == "image" and images:
            swhat = f"{bwhat}.source"
            source = _Fields(_object(fields.take("source"), swhat), swhat)
            source_kind = source.string("type") or ""
            if source_kind != "base64":
                raise FormatError(
                    f"{bwhat}: only base64 image sources are converted, "
                    f"not {rust_json.dumps(source_kind)}"
                )
            mime = source.string("media_type") or ""
            data = source.string("data") or ""
            source.finish()
            part = _inline_part(mime, data, bwhat)
        else:
            raise FormatError(
                f"{bwhat}: block type {rust_json.dumps(kind)} cannot be converted here"
            )
        fields.ignore("cache_control", "citations")
        fields.finish()
        out.append(part)
    return out


def convert(format: BatchFormat, text: str, ledger_model: str = DEFAULT_LEDGER_MODEL) -> Converted:
    """Converts one non-blank line for a ledger whose model is
    `ledger_model`; `FormatError` says what is wrong (the caller adds the
    line number)."""
    try:
        line = rust_json.loads(text)
    except ValueError as e:
        raise FormatError(f"not a valid JSON line: {e}") from None
    if not isinstance(line, dict):
        raise FormatError(f"a line must be a JSON object, got {kind_of(line)}")
    if "custom_id" not in line:
        raise FormatError("missing custom_id")
    key = line.pop("custom_id")
    if not isinstance(key, str):
        raise FormatError(f"custom_id must be a string, got {kind_of(key)}")
    try:
        validate_key(key)
    except ValueError as e:
        raise FormatError(
            f"custom_id {rust_json.dumps(key)} is not a valid tally key: {e}"
        ) from None
    if format not in ("openai", "anthropic"):
        raise ValueError(f"format must be openai or anthropic, got {format!r}")
    target = route(ledger_model)
    shape = target.native_format
    native = shape is not None
    if shape is None:
        request, model = _openai(line) if format == "openai" else _anthropic(line)
    elif format == shape:
        request, model = _openai_native(line) if format == "openai" else _anthropic_native(line)
    elif format == "anthropic":
        raise FormatError(
            f"an Anthropic request cannot run at {target.provider} (the ledger's model): "
            "enroll it into a ledger of a Gemini or Anthropic model, or write OpenAI lines"
        )
    else:
        raise FormatError(
            f"an OpenAI request cannot run at {target.provider} (the ledger's model): "
            "enroll it into a ledger of a Gemini or OpenAI model, or write Anthropic lines"
        )
    payload = rust_json.dumps(request)
    if len(payload.encode("utf-8")) > MAX_PAYLOAD_BYTES:
        raise FormatError(
            f"converted request: payload must be at most {MAX_PAYLOAD_BYTES} bytes, "
            f"got {len(payload.encode('utf-8'))}"
        )
    if native:
        return Converted(key, payload, _row_model(target, model), None)
    gemini = gemini_model(model) if model is not None else None
    if model is None:
        return Converted(key, payload, "", None)
    if gemini is not None:
        return Converted(key, payload, gemini, None)
    return Converted(key, payload, "", model)


#: Bad lines listed in a `BatchFileError` (all are counted).
MAX_REPORTED_ERRORS = 20


@dataclass
class BatchFileError(ValueError):
    """A batch file with lines that cannot be enrolled; nothing was sent."""

    path: str
    bad_lines: int
    #: `(line number, reason)`, the first `MAX_REPORTED_ERRORS`.
    errors: list[tuple[int, str]] = field(default_factory=list)

    def __str__(self) -> str:
        shown = "\n".join(f"  line {n}: {why}" for n, why in self.errors)
        more = self.bad_lines - len(self.errors)
        tail = f"\n  … and {more} more" if more > 0 else ""
        return f"{self.path}: {self.bad_lines} lines cannot be enrolled:\n{shown}{tail}"


@dataclass(frozen=True)
class BatchFileCheck:
    """A batch file that converts whole: its row count and the non-Gemini
    models its lines named (dropped for the ledger's model)."""

    rows: int
    dropped_models: frozenset[str]


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    with path.open(encoding="utf-8") as f:
        for number, text in enumerate(f, 1):
            if text.strip():
                yield number, text


def check_batch_file(
    path: str | Path, format: BatchFormat, ledger_model: str = DEFAULT_LEDGER_MODEL
) -> BatchFileCheck:
    """Converts every line of the file (for a ledger of `ledger_model`)
    without keeping them; raises
    `BatchFileError` listing bad lines and repeated `custom_id`s (enrolment
    is idempotent by key, so a repeat would be silently merged)."""
    path = Path(path)
    seen: dict[str, int] = {}
    errors: list[tuple[int, str]] = []
    bad = rows = 0
    dropped: set[str] = set()
    for number, text in _lines(path):
        try:
            row = convert(format, text, ledger_model)
        except FormatError as e:
            bad += 1
            if len(errors) < MAX_REPORTED_ERRORS:
                errors.append((number, str(e)))
            continue
        if row.key in seen:
            bad += 1
            if len(errors) < MAX_REPORTED_ERRORS:
                errors.append((number, f"custom_id {row.key} repeats line {seen[row.key]}"))
            continue
        seen[row.key] = number
        rows += 1
        if row.dropped_model is not None:
            dropped.add(row.dropped_model)
    if bad:
        raise BatchFileError(str(path), bad, errors)
    return BatchFileCheck(rows, frozenset(dropped))


def batch_rows(
    path: str | Path, format: BatchFormat, ledger_model: str = DEFAULT_LEDGER_MODEL
) -> Iterator[dict[str, str]]:
    """The rows of a checked batch file, one line at a time."""
    for number, text in _lines(Path(path)):
        try:
            row = convert(format, text, ledger_model)
        except FormatError as e:
            raise BatchFileError(str(path), 1, [(number, str(e))]) from None
        yield {"key": row.key, "payload_text": row.payload, "model": row.model}
