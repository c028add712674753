"""`tally-worker` processes started by the flow, and stopped when it ends.

Workers hold nothing that matters: one killed at any line leaves its jobs
to be adopted by the next, so stopping them (or losing them with the flow's
host) never loses or resends a row."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

#: Most workers one flow starts.
MAX_WORKERS = 64


class WorkerPool:
    """`count` workers on one ledger; a context manager that stops them
    (SIGTERM, then SIGKILL after `stop_timeout`) when it ends."""

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
    ) -> None:
        if not 1 <= count <= MAX_WORKERS:
            raise ValueError(f"workers must be between 1 and {MAX_WORKERS}, got {count}")
        if not Path(binary).is_file():
            raise FileNotFoundError(f"no tally-worker at {binary}")
        self._binary = binary
        self._args = ["--server", server, "--ledger", ledger, *extra_args]
        if gemini_base_url:
            self._args += ["--gemini-base-url", gemini_base_url]
        self._count = count
        self._log_dir = log_dir
        self._prefix = name_prefix
        self._stop_timeout = stop_timeout
        self.processes: list[subprocess.Popen[bytes]] = []
        self._logs: list[IO[bytes]] = []

    def __enter__(self) -> WorkerPool:
        try:
            for i in range(self._count):
                name = f"{self._prefix}-{os.getpid()}-{i}"
                out: IO[bytes] | None = None
                if self._log_dir is not None:
                    self._log_dir.mkdir(parents=True, exist_ok=True)
                    out = open(self._log_dir / f"{name}.log", "ab")  # noqa: SIM115
                    self._logs.append(out)
                self.processes.append(
                    subprocess.Popen(
                        [self._binary, *self._args, "--worker-name", name],
                        stdout=out,
                        stderr=subprocess.STDOUT if out else None,
                    )
                )
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()

    def failed(self) -> list[str]:
        """Workers that exited with an error, described."""
        return [
            f"tally-worker pid {p.pid} exited with {p.returncode}"
            for p in self.processes
            if p.poll() not in (None, 0)
        ]

    def alive(self) -> int:
        return sum(p.poll() is None for p in self.processes)

    def stop(self) -> None:
        for p in self.processes:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.processes:
            try:
                p.wait(timeout=self._stop_timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for log in self._logs:
            log.close()
        self._logs.clear()
