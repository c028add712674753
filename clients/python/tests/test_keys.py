"""Key derivation: the vectors shared with the Rust client, and the rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tally_client import canonical_parts, derive_key, validate_key

VECTORS = Path(__file__).resolve().parents[3] / "tests" / "vectors" / "keys.json"


def test_python_derives_every_shared_vector() -> None:
    # Invariant: the same parts give the same key in Python and in Rust
    # (services/core/tests/core/main.rs checks the same file).
    vectors = json.loads(VECTORS.read_text())["vectors"]
    assert len(vectors) >= 10
    for v in vectors:
        key = derive_key(*v["parts"])
        assert key == v["key"], v["parts"]
        validate_key(key)


def test_a_separator_moved_between_parts_changes_the_key() -> None:
    assert derive_key("a:b", "c") != derive_key("a", "b:c")
    assert derive_key("ab", "") != derive_key("a", "b")
    assert canonical_parts("é") == b"2:\xc3\xa9"


@pytest.mark.parametrize("bad", ["", "a" * 257, "has space", "slash/no"])
def test_bad_keys_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        validate_key(bad)
