"""The guard between a flow and its tally-workers, so that workers never
outlive the flow that started them, however it ends.

    python -m tally_prefect._guard SPEC

The flow starts this process with a pipe on its stdin, and the guard
starts the workers as its own children. A flow that ends normally writes
`stop`; a flow process that dies (killed, out of memory: no `finally` runs)
closes the pipe with its death, whoever killed it. Either way the guard
stops the workers (SIGTERM, then SIGKILL after the stop timeout: a worker
killed at any line loses nothing, its jobs are adopted) and exits. When the
pipe closed without `stop`, the flow died mid-run: the guard then ends the
flow run as Crashed in Prefect (unless it already ended or is being
cancelled), as Prefect's own runner does for a process it supervises.

SPEC is JSON: `{"workers": [{"argv": [...], "log": path or null}],
"stop_timeout": seconds, "flow_run_id": id or null, "label": text}`. No
secret is in it: the workers inherit the environment (TALLY_TOKEN,
GEMINI_API_KEY). The guard reports on stdout, one JSON object a line:
`{"started": i, "pid": n}`, `{"exited": i, "code": n}`, or
`{"error": text}` when a worker cannot be started (then it stops the
others and exits 1). Workers' own output goes to their log file, else to
the guard's stderr (the flow's)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from typing import IO, Any

#: How often exits are looked for (a supervisor's tick, not a test wait).
TICK = 0.2


def say(event: dict[str, Any]) -> None:
    try:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()
    except (BrokenPipeError, ValueError):
        pass  # the flow is gone; nobody reads this


def start(workers: list[dict[str, Any]]) -> tuple[list[subprocess.Popen[bytes]], list[IO[bytes]]]:
    processes: list[subprocess.Popen[bytes]] = []
    logs: list[IO[bytes]] = []
    for i, worker in enumerate(workers):
        out: IO[bytes] | int = sys.stderr.fileno()
        if worker.get("log"):
            log = open(worker["log"], "ab")  # noqa: SIM115 - closed at the end
            logs.append(log)
            out = log
        try:
            p = subprocess.Popen(
                worker["argv"],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        except OSError as e:
            say({"error": f"cannot start {worker['argv'][0]}: {e}"})
            stop(processes, 5.0, [None] * len(processes))
            sys.exit(1)
        processes.append(p)
        say({"started": i, "pid": p.pid})
    return processes, logs


def reap(processes: list[subprocess.Popen[bytes]], codes: list[int | None]) -> None:
    for i, p in enumerate(processes):
        if codes[i] is None and p.poll() is not None:
            codes[i] = p.returncode
            say({"exited": i, "code": p.returncode})


def stop(processes: list[subprocess.Popen[bytes]], timeout: float, codes: list[int | None]) -> None:
    """SIGTERM to every worker still running, SIGKILL to those left after
    `timeout`."""
    for p in processes:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for p in processes:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    reap(processes, codes)


def mark_crashed(flow_run: str, label: str) -> None:
    """Ends the flow run as Crashed, unless it already ended or is being
    cancelled (then its runner, or the cancellation, has the last word)."""
    try:
        flow_run_id = uuid.UUID(flow_run)
        from prefect.client.orchestration import get_client
        from prefect.client.schemas.objects import StateType
        from prefect.states import Crashed

        with get_client(sync_client=True) as client:
            run = client.read_flow_run(flow_run_id)
            state = run.state
            if state is not None and (
                state.is_final() or state.type in (StateType.CANCELLING, StateType.CANCELLED)
            ):
                return
            client.set_flow_run_state(
                flow_run_id,
                Crashed(
                    message=(
                        f"the flow process died mid-run; its tally-workers ({label}) were "
                        "stopped. Run the flow again to resume: nothing is enrolled or sent twice"
                    )
                ),
            )
    except Exception as e:  # noqa: BLE001 - the guard must still exit
        print(f"tally guard: could not mark flow run {flow_run} Crashed: {e}", file=sys.stderr)


def main() -> int:
    spec = json.loads(sys.argv[1])
    reason: list[str] = []
    done = threading.Event()

    def read_stdin() -> None:
        for line in sys.stdin:
            if line.strip() == "stop":
                reason.append("stop")
                break
        else:
            reason.append("eof")
        done.set()

    def on_signal(signum: int, frame: object) -> None:
        reason.append(f"signal {signum}")
        done.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    processes, logs = start(spec["workers"])
    codes: list[int | None] = [None] * len(processes)
    threading.Thread(target=read_stdin, daemon=True).start()
    while not done.wait(TICK):
        reap(processes, codes)
    stop(processes, float(spec.get("stop_timeout", 60)), codes)
    for log in logs:
        log.close()
    if reason and reason[0] == "eof" and spec.get("flow_run_id"):
        mark_crashed(spec["flow_run_id"], spec.get("label", "tally-worker"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
