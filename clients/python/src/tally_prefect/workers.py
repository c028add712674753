"""`tally-worker` processes started by a flow, that never outlive it.

The workers are children of a small guard process (`tally_prefect._guard`)
that holds a pipe from the flow: when the flow process dies, however (a
SIGKILL, the out-of-memory killer: no `finally` of the flow runs), the pipe
closes, the guard stops the workers and ends the flow run as Crashed. A
flow that ends normally stops them through the pool (SIGTERM, then SIGKILL
after `stop_timeout`).

Workers hold nothing that matters: one killed at any line leaves its jobs
to be adopted by the next, so stopping them (or losing them with the flow's
host) never loses or resends a row."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

#: Most workers one flow starts.
MAX_WORKERS = 64


class WorkerError(RuntimeError):
    """The workers could not be started, or all of them exited early."""


@dataclass(frozen=True)
class CacheEstimate:
    """What the result cache would answer of a ledger's unclaimed rows
    (`cache_dry_run`)."""

    #: PENDING and RETRYABLE rows of the worker's provider looked at.
    rows: int
    #: Rows the cache would answer, and what their answers cost first.
    hits: int
    saved_usd: float
    #: Rows it would not (sent when claimed).
    misses: int
    #: Rows with dependencies (their requests carry answers not known yet).
    later: int
    #: Rows of another provider's models.
    elsewhere: int


def cache_dry_run(
    binary: str,
    *,
    server: str,
    ledger: str,
    extra_args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    timeout: float = 600.0,
) -> CacheEstimate:
    """Renders the ledger's unclaimed rows as `binary` (a tally-worker, with
    the provider flags it runs with in `extra_args` and its key in `env`)
    would send them and asks tally's result cache which it would answer.
    Nothing is claimed, sent or written. Run it with the worker's token:
    answers are its team's."""
    if not Path(binary).is_file():
        raise FileNotFoundError(f"no tally-worker at {binary}")
    argv = [binary, "--server", server, "--ledger", ledger, *extra_args, "--cache-dry-run"]
    done = subprocess.run(
        argv,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise WorkerError(
            f"tally-worker --cache-dry-run exited with {done.returncode}: "
            f"{(done.stderr or done.stdout)[-2000:]}"
        )
    # The answer is the last line; the log goes before it.
    said = json.loads(lines[-1])
    return CacheEstimate(
        rows=int(said["rows"]),
        hits=int(said["hits"]),
        saved_usd=float(said["saved_usd"]),
        misses=int(said["misses"]),
        later=int(said["later"]),
        elsewhere=int(said["elsewhere"]),
    )


class WorkerPool:
    """`count` workers on one ledger (batch), and one more for each of
    `lanes` (`--lane flex`, ...: a synchronous lane the ledger allows); a
    context manager that stops them when it ends. `server` is tally's
    address as the worker takes it (`http(s)://host:port`)."""

    def __init__(
        self,
        binary: str,
        *,
        server: str,
        ledger: str,
        count: int = 1,
        gemini_base_url: str | None = None,
        extra_args: Sequence[str] = (),
        log_dir: Path | None = None,
        name_prefix: str = "prefect",
        stop_timeout: float = 60.0,
        flow_run_id: str | None = None,
        lanes: Sequence[str] = (),
        media_root: str | None = None,
    ) -> None:
        if not 1 <= count <= MAX_WORKERS:
            raise ValueError(f"workers must be between 1 and {MAX_WORKERS}, got {count}")
        if len(lanes) > len(set(lanes)) or "batch" in lanes:
            raise ValueError(f"lanes are synchronous lanes, each once (not batch), got {lanes}")
        if not Path(binary).is_file():
            raise FileNotFoundError(f"no tally-worker at {binary}")
        args = ["--server", server, "--ledger", ledger, *extra_args]
        if gemini_base_url:
            args += ["--gemini-base-url", gemini_base_url]
        if media_root and not any(
            a == "--media-root" or a.startswith("--media-root=") for a in extra_args
        ):
            # The deployment's own --media-root wins.
            args += ["--media-root", media_root]
        self.ledger = ledger
        self._workers = []
        #: The workers' names (`--worker-name`), in start order.
        self.names: list[str] = []
        lanes_of = [None] * count + list(lanes)
        for i, lane in enumerate(lanes_of):
            name = f"{name_prefix}-{os.getpid()}-{i}" + (f"-{lane}" if lane else "")
            self.names.append(name)
            log = str(log_dir / f"{name}.log") if log_dir is not None else None
            argv = [binary, *args, "--worker-name", name]
            if lane:
                argv += ["--lane", lane]
            self._workers.append({"argv": argv, "log": log})
        self._log_dir = log_dir
        self._stop_timeout = stop_timeout
        self._flow_run_id = flow_run_id
        self._guard: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()
        #: Worker pids, in start order.
        self.pids: list[int] = []
        self._codes: dict[int, int] = {}

    @property
    def guard_pid(self) -> int | None:
        return self._guard.pid if self._guard is not None else None

    def __enter__(self) -> WorkerPool:
        if self._log_dir is not None:
            self._log_dir.mkdir(parents=True, exist_ok=True)
        spec = {
            "workers": self._workers,
            "stop_timeout": self._stop_timeout,
            "flow_run_id": self._flow_run_id,
            "label": f"ledger {self.ledger}",
        }
        self._guard = subprocess.Popen(
            [sys.executable, "-m", "tally_prefect._guard", json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._guard.stdout is not None
        for line in self._guard.stdout:
            event = json.loads(line)
            if "error" in event:
                self.stop()
                raise WorkerError(event["error"])
            self.pids.append(event["pid"])
            if len(self.pids) == len(self._workers):
                break
        if len(self.pids) < len(self._workers):
            self.stop()
            raise WorkerError("the worker guard exited before every worker started")
        threading.Thread(target=self._follow, daemon=True).start()
        return self

    def _follow(self) -> None:
        assert self._guard is not None and self._guard.stdout is not None
        for line in self._guard.stdout:
            event = json.loads(line)
            if "exited" in event:
                with self._lock:
                    self._codes[event["exited"]] = event["code"]

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()

    def failed(self) -> list[str]:
        """Workers that exited with an error, described."""
        with self._lock:
            return [
                f"tally-worker pid {self.pids[i]} exited with {code}"
                for i, code in sorted(self._codes.items())
                if code != 0
            ]

    def alive(self) -> int:
        with self._lock:
            return len(self.pids) - len(self._codes)

    def stop(self) -> None:
        """Stops every worker and waits for them (idempotent)."""
        guard = self._guard
        if guard is None or guard.poll() is not None:
            return
        assert guard.stdin is not None
        try:
            guard.stdin.write("stop\n")
            guard.stdin.close()
        except (BrokenPipeError, ValueError):
            pass
        guard.wait()
