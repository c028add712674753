"""The official google-genai SDK, unmodified and with its defaults, against
the emulator: every call a batch user makes must succeed (or fail) as it
would against the provider."""

from __future__ import annotations

import io
import json
import time
from typing import Any

import pytest
from google import genai
from google.genai import errors, types

from conftest import Emulator

MODEL = "gemini-2.5-flash"
TERMINAL = {
    "JOB_STATE_SUCCEEDED",
    "JOB_STATE_FAILED",
    "JOB_STATE_CANCELLED",
    "JOB_STATE_EXPIRED",
}


def wait_done(client: genai.Client, name: str, timeout: float = 30.0) -> types.BatchJob:
    """Polls with `batches.get` (as the SDK's docs show) until terminal."""
    deadline = time.monotonic() + timeout
    while True:
        job = client.batches.get(name=name)
        if job.state is not None and job.state.value in TERMINAL:
            return job
        if time.monotonic() > deadline:
            pytest.fail(f"{name} still {job.state} after {timeout}s")
        time.sleep(0.05)


def request_line(key: str, text: str) -> dict[str, Any]:
    return {
        "key": key,
        "request": {"contents": [{"role": "user", "parts": [{"text": text}]}]},
    }


def upload_jsonl(client: genai.Client, lines: list[dict[str, Any]], name: str) -> types.File:
    data = "".join(json.dumps(line) + "\n" for line in lines).encode()
    return client.files.upload(
        file=io.BytesIO(data),
        config=types.UploadFileConfig(display_name=name, mime_type="application/jsonl"),
    )


def test_file_batch_upload_create_get_download(client: genai.Client) -> None:
    keys = [f"row-{i}" for i in range(5)]
    uploaded = upload_jsonl(client, [request_line(k, f"question {k}") for k in keys], "sdk-in")
    assert uploaded.name is not None and uploaded.name.startswith("files/")
    assert uploaded.size_bytes and uploaded.size_bytes > 0

    job = client.batches.create(
        model=MODEL,
        src=uploaded.name,
        config=types.CreateBatchJobConfig(display_name="sdk-file"),
    )
    assert job.name is not None and job.name.startswith("batches/")
    assert job.display_name == "sdk-file"
    assert job.state is not None and job.state.value == "JOB_STATE_PENDING"

    done = wait_done(client, job.name)
    assert done.state is not None and done.state.value == "JOB_STATE_SUCCEEDED"
    assert done.dest is not None and done.dest.file_name is not None
    content = client.files.download(file=done.dest.file_name)
    lines = [json.loads(line) for line in content.decode().splitlines()]
    assert sorted(line["key"] for line in lines) == keys
    for line in lines:
        response = types.GenerateContentResponse.model_validate(line["response"])
        assert response.text
        assert response.usage_metadata is not None
        assert response.usage_metadata.prompt_token_count


def test_inline_batch_returns_inlined_responses_in_order(client: genai.Client) -> None:
    texts = ["first question", "second question", "third question"]
    job = client.batches.create(
        model=MODEL,
        src=[
            types.InlinedRequest(
                contents=[types.Content(role="user", parts=[types.Part(text=t)])],
                metadata={"key": f"k{i}"},
            )
            for i, t in enumerate(texts)
        ],
    )
    assert job.name is not None
    done = wait_done(client, job.name)
    assert done.state is not None and done.state.value == "JOB_STATE_SUCCEEDED"
    assert done.dest is not None and done.dest.inlined_responses is not None
    responses = done.dest.inlined_responses
    assert [r.metadata for r in responses] == [{"key": f"k{i}"} for i in range(3)]
    for r, text in zip(responses, texts, strict=True):
        assert r.response is not None and r.response.text is not None
        assert text in r.response.text


def test_list_pages_through_every_batch(client: genai.Client) -> None:
    created: list[str] = []
    for i in range(5):
        job = client.batches.create(
            model=MODEL,
            src=[types.InlinedRequest(contents="hello")],
            config=types.CreateBatchJobConfig(display_name=f"list-{i}"),
        )
        assert job.name is not None
        created.append(job.name)
    pager = client.batches.list(config=types.ListBatchJobsConfig(page_size=2))
    assert len(pager.page) == 2
    seen = [job.name for job in pager if job.name is not None]
    assert sorted(seen) == sorted(created)
    assert len(seen) == len(set(seen)), "no batch is listed twice across pages"


def test_cancel_a_pending_batch(client: genai.Client, emulator: Emulator) -> None:
    emulator.set_faults(
        {
            "jobs": [
                {
                    "match": {"display_name_contains": "hold"},
                    "fault": {"kind": "stays_pending"},
                    "times": 1,
                }
            ]
        }
    )
    job = client.batches.create(
        model=MODEL,
        src=[types.InlinedRequest(contents="wait")],
        config=types.CreateBatchJobConfig(display_name="hold-me"),
    )
    assert job.name is not None
    client.batches.cancel(name=job.name)
    done = wait_done(client, job.name)
    assert done.state is not None and done.state.value == "JOB_STATE_CANCELLED"


def test_delete_makes_the_batch_unknown(client: genai.Client) -> None:
    job = client.batches.create(model=MODEL, src=[types.InlinedRequest(contents="bye")])
    assert job.name is not None
    client.batches.delete(name=job.name)
    with pytest.raises(errors.ClientError) as caught:
        client.batches.get(name=job.name)
    assert caught.value.code == 404
    assert job.name not in [j.name for j in client.batches.list()]


def test_embeddings_batch_inline_and_from_a_file(client: genai.Client) -> None:
    job = client.batches.create_embeddings(
        model="gemini-embedding-001",
        src=types.EmbeddingsBatchJobSource(
            inlined_requests=types.EmbedContentBatch(
                contents=["alpha", "beta"],
                config=types.EmbedContentConfig(output_dimensionality=16),
            )
        ),
    )
    assert job.name is not None
    done = wait_done(client, job.name)
    assert done.state is not None and done.state.value == "JOB_STATE_SUCCEEDED"
    assert done.dest is not None and done.dest.inlined_embed_content_responses is not None
    vectors = [
        r.response.embedding.values
        for r in done.dest.inlined_embed_content_responses
        if r.response and r.response.embedding
    ]
    assert len(vectors) == 2 and all(v is not None and len(v) == 16 for v in vectors)
    assert vectors[0] != vectors[1]

    lines = [
        {"key": "e1", "request": {"content": {"parts": [{"text": "gamma"}]}}},
        {"key": "e2", "request": {"content": {"parts": [{"text": "delta"}]}}},
    ]
    uploaded = upload_jsonl(client, lines, "embed-in")
    assert uploaded.name is not None
    job = client.batches.create_embeddings(
        model="gemini-embedding-001",
        src=types.EmbeddingsBatchJobSource(file_name=uploaded.name),
    )
    assert job.name is not None
    done = wait_done(client, job.name)
    assert done.dest is not None and done.dest.file_name is not None
    out = [
        json.loads(line)
        for line in client.files.download(file=done.dest.file_name).decode().splitlines()
    ]
    assert sorted(line["key"] for line in out) == ["e1", "e2"]
    assert all(line["response"]["embedding"]["values"] for line in out)


def test_files_list_get_and_delete(client: genai.Client) -> None:
    uploaded = upload_jsonl(client, [request_line("a", "x")], "to-delete")
    assert uploaded.name is not None
    assert client.files.get(name=uploaded.name).display_name == "to-delete"
    assert uploaded.name in [f.name for f in client.files.list()]
    client.files.delete(name=uploaded.name)
    with pytest.raises(errors.ClientError):
        client.files.get(name=uploaded.name)
    assert uploaded.name not in [f.name for f in client.files.list()]


def test_a_wrong_key_is_api_key_invalid(emulator: Emulator) -> None:
    wrong = genai.Client(api_key="not-the-key")
    with pytest.raises(errors.ClientError) as caught:
        wrong.batches.get(name="batches/anything")
    assert caught.value.code == 400
    assert caught.value.status == "INVALID_ARGUMENT"
    details = caught.value.details["error"]["details"]
    assert any(d.get("reason") == "API_KEY_INVALID" for d in details)


def test_quota_429_carries_retry_info(client: genai.Client, emulator: Emulator) -> None:
    emulator.set_faults({"create_429": {"times": 1, "retry_after_secs": 9}})
    with pytest.raises(errors.ClientError) as caught:
        client.batches.create(model=MODEL, src=[types.InlinedRequest(contents="q")])
    assert caught.value.code == 429
    details = caught.value.details["error"]["details"]
    retry = [d for d in details if d["@type"].endswith("google.rpc.RetryInfo")]
    assert retry and retry[0]["retryDelay"] == "9s"
    # The next create is accepted.
    job = client.batches.create(model=MODEL, src=[types.InlinedRequest(contents="q")])
    assert job.name is not None


def tiny_png() -> bytes:
    """A 1x1 PNG (a real image, as the SDK would upload one)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    raw = b"\x00\xff\x80\x00"
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def test_an_uploaded_image_and_an_inline_one_reach_the_model(client: genai.Client) -> None:
    import hashlib

    png = tiny_png()
    digest = hashlib.sha256(png).hexdigest()[:16]
    uploaded = client.files.upload(
        file=io.BytesIO(png),
        config=types.UploadFileConfig(display_name="page", mime_type="image/png"),
    )
    assert uploaded.uri is not None and uploaded.mime_type == "image/png"
    by_reference = types.Content(
        role="user",
        parts=[
            types.Part(text="Read this page."),
            types.Part(file_data=types.FileData(file_uri=uploaded.uri, mime_type="image/png")),
        ],
    )
    inline = types.Content(
        role="user",
        parts=[
            types.Part(text="And this one."),
            types.Part.from_bytes(data=png, mime_type="image/png"),
        ],
    )
    job = client.batches.create(
        model=MODEL,
        src=[
            types.InlinedRequest(contents=[by_reference]),
            types.InlinedRequest(contents=[inline]),
        ],
    )
    assert job.name is not None
    done = wait_done(client, job.name)
    assert done.state is not None and done.state.value == "JOB_STATE_SUCCEEDED"
    assert done.dest is not None and done.dest.inlined_responses is not None
    for item in done.dest.inlined_responses:
        assert item.response is not None
        text = item.response.text or ""
        assert f"image/png {len(png)} bytes sha256:{digest}" in text, text

    # A reference to a file the project does not have is refused per row.
    missing = types.Content(
        role="user",
        parts=[
            types.Part(text="Read this page."),
            types.Part(file_data=types.FileData(file_uri="files/none", mime_type="image/png")),
        ],
    )
    job = client.batches.create(model=MODEL, src=[types.InlinedRequest(contents=[missing])])
    assert job.name is not None
    done = wait_done(client, job.name)
    assert done.dest is not None and done.dest.inlined_responses is not None
    (only,) = done.dest.inlined_responses
    assert only.error is not None and only.error.code == 7
