"""Where a flow run's work goes: read from the deployment's environment,
never from run parameters.

Run parameters are whatever the person starting a run typed (Prefect lets
anyone allowed to start a run give custom ones, and stores them). Had the
tally address, the provider's base URL, the binaries or the workers'
arguments been parameters, starting a run would be enough to send
`TALLY_TOKEN` or `GEMINI_API_KEY` to an address of one's choosing, or to run
a program of one's choosing on the flow's host. So they come from the
environment the deployment gives the flow (its work pool's job variables,
set by whoever configures the deployment):

| variable | default | what |
| --- | --- | --- |
| `TALLY_SERVER` | `127.0.0.1:50051` | tally's gRPC address (`host:port` or `http(s)://host:port`) |
| `TALLY_TLS` | off | `1`/`true`: TLS to tally |
| `TALLYCTL_BIN` | `tallyctl` (on `PATH`) | the tallyctl that plans |
| `TALLY_WORKER_BIN` | `tally-worker` on `PATH` | the tally-worker the flow starts |
| `TALLY_WORKER_ARGS` | none | more flags for those workers (shell words) |
| `GEMINI_BASE_URL` | the worker's default | the provider's base URL, for the workers |
| `TALLY_WORKER_LOG_DIR` | none (inherited output) | a log file per worker |

`TALLY_TOKEN` and `GEMINI_API_KEY` are read from the environment as well
(the workers inherit them), never from parameters."""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

#: The run parameters a flow must never take (each names where its value
#: comes from instead): checked by the tests against the flow's signature.
NOT_PARAMETERS = {
    "server": "TALLY_SERVER",
    "tls": "TALLY_TLS",
    "tallyctl": "TALLYCTL_BIN",
    "worker_bin": "TALLY_WORKER_BIN",
    "worker_args": "TALLY_WORKER_ARGS",
    "gemini_base_url": "GEMINI_BASE_URL",
    "worker_log_dir": "TALLY_WORKER_LOG_DIR",
    "token": "TALLY_TOKEN",
}


@dataclass(frozen=True)
class Deployment:
    """The deployment's settings of a flow run (see the module doc)."""

    server: str = "127.0.0.1:50051"
    tls: bool = False
    tallyctl: str = "tallyctl"
    worker_bin: str | None = None
    worker_args: tuple[str, ...] = field(default_factory=tuple)
    gemini_base_url: str | None = None
    worker_log_dir: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Deployment:
        """Reads the settings; a malformed one raises `ValueError` naming
        its variable."""
        env = os.environ if env is None else env

        def get(name: str) -> str | None:
            value = env.get(name, "").strip()
            return value or None

        tls = (get("TALLY_TLS") or "false").lower()
        if tls not in ("1", "true", "yes", "0", "false", "no"):
            raise ValueError(f"TALLY_TLS must be true or false, got {tls!r}")
        try:
            args = tuple(shlex.split(get("TALLY_WORKER_ARGS") or ""))
        except ValueError as e:
            raise ValueError(f"TALLY_WORKER_ARGS is not shell words: {e}") from None
        return cls(
            server=get("TALLY_SERVER") or cls.server,
            tls=tls in ("1", "true", "yes"),
            tallyctl=get("TALLYCTL_BIN") or cls.tallyctl,
            worker_bin=get("TALLY_WORKER_BIN"),
            worker_args=args,
            gemini_base_url=get("GEMINI_BASE_URL"),
            worker_log_dir=get("TALLY_WORKER_LOG_DIR"),
        )
