"""The page plan of a dataset, made by `tallyctl plan` and read back here.

The allow-list DAG (only pages with a first-pass `{n}.json`, a page
depending on the previous page when that one is eligible, keys
`state:school:year:page` escaped) has one implementation, tallyctl's; the
flow runs it as a subprocess instead of keeping a second copy of its rules
(escaping, duplicate pages, missing images) that could drift. The plan file
is immutable: tallyctl leaves an identical one alone and refuses to replace
a different one, so a re-run after a crash plans the same rows.

The rows are built here exactly as `tallyctl plan --enroll` builds them
(same key, dependency, and payload bytes), so enrolling from Python and
from tallyctl gives the same rows."""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tally_client import rust_json

#: Largest plan file read (a million pages is ~300 MB of JSON; beyond that,
#: split the dataset).
MAX_PLAN_BYTES = 512 * 1024 * 1024
#: The server's payload limit (`tally_core::payload::MAX_PAYLOAD_BYTES`).
MAX_PAYLOAD_BYTES = 1024 * 1024

FirstPass = Literal["content", "path"]


class PlanError(Exception):
    """The dataset cannot be planned, or a plan file cannot be read."""


@dataclass(frozen=True)
class PageNode:
    """One page of the plan."""

    key: str
    state: str
    school: str
    year: str
    page: int
    image_path: str
    filter_json: str
    depends_on: str | None


def unescape_component(text: str) -> str:
    """The inverse of tallyctl's key escaping (`~HH` per UTF-8 byte)."""
    out = bytearray()
    i = 0
    while i < len(text):
        if text[i] == "~":
            hex_ = text[i + 1 : i + 3]
            if len(hex_) != 2 or hex_.upper() != hex_:
                raise PlanError(f"bad escape in key component {text!r}")
            try:
                out.append(int(hex_, 16))
            except ValueError:
                raise PlanError(f"bad escape in key component {text!r}") from None
            i += 3
        else:
            out += text[i].encode("utf-8")
            i += 1
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError:
        raise PlanError(f"key component {text!r} is not UTF-8 once unescaped") from None


def run_tallyctl_plan(
    tallyctl: str,
    *,
    images_root: Path,
    results_root: Path,
    out: Path,
    skip_missing_images: bool = False,
    timeout: float = 3600.0,
) -> dict[str, Any]:
    """Runs `tallyctl plan` (writing `out`, or finding the same plan there)
    and returns its JSON report (`pages`, `groups`, `written`, `warnings`)."""
    args = [
        tallyctl,
        "--json",
        "plan",
        "--images-root",
        str(images_root),
        "--results-root",
        str(results_root),
        "--out",
        str(out),
    ]
    if skip_missing_images:
        args.append("--skip-missing-images")
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise PlanError(f"tallyctl plan failed (exit {done.returncode}): {done.stderr.strip()}")
    try:
        report: dict[str, Any] = json.loads(done.stdout)["plan"]
    except (json.JSONDecodeError, KeyError, TypeError):
        raise PlanError(f"tallyctl plan printed no plan report: {done.stdout[:500]!r}") from None
    return report


#: The version of a ledger's page prompt (`tallyctl prompts page`).
PAGE_PROMPT_VERSION = "pages-v1"


def register_page_prompt(
    tallyctl: str, server_url: str, ledger: str, timeout: float = 120.0
) -> str:
    """Registers (or finds) `ledger`'s page prompt with `tallyctl prompts
    page`, the one `tallyctl plan --enroll` uses when none is named (the
    page image as its media variable `image`), and answers its
    `name@version`. tallyctl holds its text, so both enroll the same rows;
    the token and TLS settings are the environment's (`TALLY_TOKEN`, …)."""
    args = [tallyctl, "--server", server_url, "--json", "prompts", "page", ledger]
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise PlanError(
            f"tallyctl prompts page {ledger} failed (exit {done.returncode}): {done.stderr.strip()}"
        )
    return f"{ledger.removeprefix('ledgers/')}@{PAGE_PROMPT_VERSION}"


def read_plan(path: Path) -> list[PageNode]:
    """The nodes of a plan file, every dependency before its dependants."""
    size = path.stat().st_size
    if size > MAX_PLAN_BYTES:
        raise PlanError(f"{path} is {size} bytes, more than the {MAX_PLAN_BYTES} read")
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise PlanError(f"cannot read plan {path}: {e}") from None
    nodes, deps = value.get("nodes"), value.get("deps")
    if not isinstance(nodes, dict) or not isinstance(deps, dict):
        raise PlanError(f'{path}: a plan has objects "nodes" and "deps"')
    out: dict[str, PageNode] = {}
    for key, node in nodes.items():
        parts = key.split(":")
        if len(parts) != 4 or not parts[3].isdigit():
            raise PlanError(f"{path}: node key {key!r} is not state:school:year:page")
        dep = deps.get(key)
        if dep is not None and dep not in nodes:
            raise PlanError(f"{path}: node {key} depends on {dep}, which is not a node")
        if not isinstance(node, Mapping) or not all(
            isinstance(node.get(f), str) for f in ("image_path", "filter_json")
        ):
            raise PlanError(f"{path}: node {key} needs strings image_path and filter_json")
        state, school, year = (unescape_component(p) for p in parts[:3])
        out[key] = PageNode(
            key, state, school, year, int(parts[3]), node["image_path"], node["filter_json"], dep
        )
    return _dependencies_first(out)


def _dependencies_first(nodes: dict[str, PageNode]) -> list[PageNode]:
    """Orders nodes so that each one's dependency precedes it (enrolment
    names a dependency only once it exists); a cycle is an error."""
    placed: set[str] = set()
    order: list[PageNode] = []
    for start in nodes:
        chain: list[str] = []
        at: str | None = start
        while at is not None and at not in placed:
            if at in chain:
                raise PlanError(f"dependency cycle through {at}")
            chain.append(at)
            at = nodes[at].depends_on
        for key in reversed(chain):
            placed.add(key)
            order.append(nodes[key])
    return order


#: MIME types of page images by extension (`tally_core::media::mime_from_name`);
#: any other name is taken for JPEG, as tallyctl does.
_IMAGE_TYPES = {
    "png": "image/png",
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "webp": "image/webp",
    "gif": "image/gif",
    "heic": "image/heic",
    "heif": "image/heif",
    "pdf": "application/pdf",
}


def page_media(path: str) -> dict[str, str]:
    """The media reference of a page's image, as tallyctl's planner makes
    it: its path, the SHA-256 of its bytes (so a page whose image changed
    is a CONFLICT on re-enrollment) and its MIME type. The worker reads it
    under its `--media-root`."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 16), b""):
                digest.update(chunk)
    except OSError as e:
        raise PlanError(f"cannot read {path}: {e}") from None
    ext = path.rsplit(".", 1)[-1].lower() if "." in path else ""
    return {
        "uri": path,
        "sha256": digest.hexdigest(),
        "mime_type": _IMAGE_TYPES.get(ext, "image/jpeg"),
    }


#: The fields `payload` writes (tallyctl's planner writes the same): a
#: prompt's media variable may be none of them.
PAYLOAD_FIELDS = ("state", "school", "year", "page", "image_path", "filter_json", "first_pass")


def payload(node: PageNode, first_pass: FirstPass = "content", media_var: str | None = None) -> str:
    """The row payload tallyctl's planner enrolls for `node`: the page's
    identity, both paths, (with `content`) the parsed first-pass JSON and,
    when the prompt declares a media variable, the page image in it."""
    value: dict[str, Any] = {
        "state": node.state,
        "school": node.school,
        "year": node.year,
        "page": node.page,
        "image_path": node.image_path,
        "filter_json": node.filter_json,
    }
    if first_pass == "content":
        try:
            text = Path(node.filter_json).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise PlanError(f"node {node.key}: cannot read {node.filter_json}: {e}") from None
        try:
            value["first_pass"] = rust_json.loads(text)
        except ValueError as e:
            raise PlanError(f"node {node.key}: {node.filter_json} is not JSON: {e}") from None
    if media_var:
        value[media_var] = page_media(node.image_path)
    text = rust_json.dumps(value)
    size = len(text.encode("utf-8"))
    if size > MAX_PAYLOAD_BYTES:
        raise PlanError(
            f"node {node.key}: payload is {size} bytes with the first-pass content "
            f"(limit {MAX_PAYLOAD_BYTES}); use first_pass='path'"
        )
    return text


#: The name a page's prompt reads the page before's answer by
#: (`{{ deps.previous }}`), as tallyctl's planner names it.
PREVIOUS = "previous"


def plan_rows(
    nodes: list[PageNode],
    *,
    first_pass: FirstPass = "content",
    prompt: str | None = None,
    model: str = "",
    media_var: str | None = None,
) -> Iterator[dict[str, Any]]:
    """The rows of the plan, lazily (one first-pass file read at a time);
    with `media_var` (the prompt's one media variable), each page's image
    goes in it, so the page itself reaches the model. A page that depends
    on the page before names it `previous`: its prompt reads that page's
    answer as `deps.previous`."""
    for node in nodes:
        row: dict[str, Any] = {
            "key": node.key,
            # Already canonical, tallyctl's bytes: sent as they are.
            "payload_text": payload(node, first_pass, media_var),
            "depends_on": [node.depends_on] if node.depends_on else [],
            "model": model,
        }
        if node.depends_on:
            # The page before's answer, as `deps.previous` in the prompt.
            row["dependency_names"] = {node.depends_on: PREVIOUS}
        if prompt:
            row["prompt"] = prompt
        yield row
