"""JSON text byte-identical to Rust's `serde_json::to_string` of the same
value parsed by `serde_json`: object keys sorted (its map is a `BTreeMap`),
no spaces, strings escaped as serde_json does, floats as its float printer
(`zmij` since serde_json 1.0.154, our Cargo.lock's) writes them (`1e+20`,
`1.5e-7`, `0.00001`), and integers beyond 64 bits turned into floats, the
way serde_json parses them. The flow test has tallyctl enroll the same plan
after Python did and requires no CONFLICT, so a change on either side shows.

Row payloads that tallyctl also makes (the planner's pages, converted
OpenAI/Anthropic batch lines) are this text, so a row enrolled from Python
and from tallyctl is the same row, not a CONFLICT."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

_I64_MIN = -(2**63)
_U64_MAX = 2**64 - 1


def loads(text: str) -> Any:
    """Parses JSON as serde_json does: NaN and Infinity are errors, and so
    is a number too large for a float (`1e400`)."""

    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    def finite(digits: str) -> float:
        value = float(digits)
        if value in (float("inf"), float("-inf")):
            raise ValueError(f"number {digits} is out of range")
        return value

    def integer(digits: str) -> int | float:
        if digits == "-0":
            return -0.0  # serde_json reads `-0` as the float -0.0
        value = int(digits)
        if not _I64_MIN <= value <= _U64_MAX:
            finite(digits)  # serde_json reads it as a float, which must be finite
        return value

    return json.loads(text, parse_constant=refuse, parse_float=finite, parse_int=integer)


def float_text(x: float) -> str:
    """`x` as serde_json writes an f64 (the shortest round-trip digits,
    decimal notation for 1e-5 <= |x| < 1e16, else `d.ddde±n`, the exponent
    signed and without leading zeros)."""
    if x != x or x in (float("inf"), float("-inf")):
        return "null"  # serde_json writes non-finite floats as null
    sign, digits_t, exp = Decimal(repr(x)).normalize().as_tuple()
    assert isinstance(exp, int)
    digits = "".join(map(str, digits_t))
    if digits == "0":
        return "-0.0" if sign else "0.0"
    length = len(digits)
    point = exp + length  # the decimal point's position in the digits
    out = "-" if sign else ""
    if 0 <= exp and point <= 16:
        out += digits + "0" * exp + ".0"
    elif 0 < point <= 16:
        out += digits[:point] + "." + digits[point:]
    elif -5 < point <= 0:
        out += "0." + "0" * -point + digits
    elif length == 1:
        out += f"{digits}e{point - 1:+d}"
    else:
        out += f"{digits[0]}.{digits[1:]}e{point - 1:+d}"
    return out


def dumps(value: Any) -> str:
    """`value` (as `loads` returns it) as serde_json's compact text."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        if _I64_MIN <= value <= _U64_MAX:
            return str(value)
        return float_text(float(value))
    if isinstance(value, float):
        return float_text(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ",".join(dumps(v) for v in value) + "]"
    if isinstance(value, dict):
        items = sorted(value.items())
        return "{" + ",".join(f"{dumps(k)}:{dumps(v)}" for k, v in items) + "}"
    raise TypeError(f"not a JSON value: {type(value).__name__}")
