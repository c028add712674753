"""Row keys derived from the natural-key parts of what a row processes.

Identical to the Rust client's `tally_core::keys::derive_key`: each part is
encoded as `<byte length>:<utf-8 bytes>`, the encodings are concatenated and
the key is the hex SHA-256 of that (64 characters). Length prefixes make the
encoding unambiguous: `("a:b", "c")` and `("a", "b:c")` give different keys.
`tests/vectors/keys.json` at the repository root is checked by both clients.
"""

from __future__ import annotations

import hashlib
import re

MAX_KEY_LEN = 256
_KEY = re.compile(r"[A-Za-z0-9._:@+=~-]+")


def canonical_parts(*parts: str) -> bytes:
    """The unambiguous encoding of `parts` that keys are hashed from."""
    out = bytearray()
    for part in parts:
        data = part.encode("utf-8")
        out += str(len(data)).encode("ascii") + b":" + data
    return bytes(out)


def derive_key(*parts: str) -> str:
    """The idempotency key of natural-key parts (never of when, or which try)."""
    return hashlib.sha256(canonical_parts(*parts)).hexdigest()


def validate_key(key: str) -> None:
    """Raises ValueError unless `key` is 1-256 characters of [A-Za-z0-9._:@+=~-]."""
    if not key:
        raise ValueError("key must not be empty")
    if len(key) > MAX_KEY_LEN:
        raise ValueError(f"key must be at most {MAX_KEY_LEN} characters, got {len(key)}")
    if not _KEY.fullmatch(key):
        bad = next(c for c in key if not _KEY.fullmatch(c))
        raise ValueError(f"key may only contain [A-Za-z0-9._:@+=~-], found {bad!r}")
