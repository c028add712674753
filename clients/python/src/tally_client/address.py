"""tally's address in the forms tallyctl and tally-worker take:
`host:port` (plaintext unless `tls=True`), `http://host:port` (plaintext)
and `https://host:port` (TLS). IPv6 hosts are bracketed (`[::1]:50051`).
Anything else is refused with the forms it could have been."""

from __future__ import annotations

import ipaddress
import os
import re
import warnings
from dataclasses import dataclass

_HOST_PORT = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):(?P<port>[0-9]{1,5})")


@dataclass(frozen=True)
class Address:
    """Where to connect: `target` is what gRPC dials (`host:port`)."""

    target: str
    tls: bool

    @property
    def url(self) -> str:
        """The `http://`/`https://` form, as tallyctl and tally-worker take it."""
        return f"{'https' if self.tls else 'http'}://{self.target}"

    @property
    def loopback(self) -> bool:
        """Whether it is this machine (`localhost`, 127.0.0.0/8, `::1`)."""
        host = self.target.rsplit(":", 1)[0].strip("[]")
        if host.lower() == "localhost":
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False


def warn_plaintext_token(target: Address, token: str | None) -> None:
    """Warns when a bearer token would cross the network unencrypted: to
    another machine without TLS."""
    if token and not target.tls and not target.loopback:
        warnings.warn(
            f"sending a bearer token to {target.target} without TLS: anyone on the path "
            "can read it and act as you; use https:// (or tls=True)",
            stacklevel=3,
        )


def parse_address(address: str, *, tls: bool = False) -> Address:
    """`host:port`, `http://host:port` or `https://host:port`. `tls=True`
    with an `http://` address is a contradiction and refused."""
    text = address.strip()
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "", text
    scheme = scheme.lower()
    if scheme not in ("", "http", "https"):
        raise ValueError(
            f"tally address {address!r}: unknown scheme {scheme!r} "
            "(use host:port, http://host:port or https://host:port)"
        )
    rest = rest.rstrip("/")
    match = _HOST_PORT.fullmatch(rest)
    if match is None or not 0 < int(match["port"]) < 65536:
        raise ValueError(
            f"tally address {address!r} is not host:port "
            "(use host:port, http://host:port or https://host:port, e.g. 127.0.0.1:50051)"
        )
    if scheme == "http" and tls:
        raise ValueError(f"tally address {address!r} is http:// but tls=True: use https://")
    return Address(rest, tls or scheme == "https")


#: Where tally listens when nothing says otherwise (tallyctl's default too).
DEFAULT_ADDRESS = "127.0.0.1:50051"


def default_address() -> str:
    """`TALLY_SERVER` from the environment (tallyctl reads it too), else
    `127.0.0.1:50051`."""
    return os.environ.get("TALLY_SERVER", "").strip() or DEFAULT_ADDRESS
