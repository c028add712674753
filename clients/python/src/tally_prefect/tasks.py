"""Prefect tasks for any flow that runs work through tally: enroll rows,
run tally-workers until the ledger is done, wait for it (workers running
elsewhere), export what came out. tally holds every row's state; Prefect
runs the flow. A re-run of a flow built on these tasks (a crash, a Prefect
retry) is safe: enrolment is idempotent by key, workers adopt the jobs of
dead ones instead of resending, exports read what tally holds, and
`deliver_results` hands each new result to a callable once, through a
consumer whose cursor tally keeps.

    from prefect import flow
    from tally_prefect import enroll_rows, export_ledger, run_workers

    @flow
    def nightly(rows: list[dict]) -> dict:
        enroll_rows("reviews-nightly", rows)
        run_workers("reviews-nightly", count=2)
        return export_ledger("reviews-nightly", "out/reviews-nightly.jsonl")

Where tally is and how to reach it comes from a `TallyServer` block (pass
`server=TallyServer.load("prod")`) or, by default, from the environment
(`TALLY_SERVER`, `TALLY_TLS`, `TALLY_TOKEN`); the workers' binary and flags
from the deployment's environment (`tally_prefect.deployment`). None of
these tasks retries rows: that is tally's job."""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.blocks.core import Block
from prefect.cache_policies import NO_CACHE
from pydantic import Field, SecretStr

from tally_client import Client, Delivery, Forecast, RowStatus, Start, Summary
from tally_client.address import parse_address
from tally_client.archive import ArchiveFormat
from tally_client.rows import RowLike
from tally_prefect import artifacts
from tally_prefect.deployment import Deployment
from tally_prefect.workers import WorkerError, WorkerPool


class TallyServer(Block):
    """Where tally is: its address (`host:port` or `http(s)://host:port`),
    TLS, and the bearer token, kept as a secret. Save one per
    environment (`TallyServer(address=..., token=...).save("prod")`) and
    give tasks `server=TallyServer.load("prod")`; tasks without one read
    `TALLY_SERVER`, `TALLY_TLS` and `TALLY_TOKEN`."""

    _block_type_name = "tally server"
    _description = "A tally control plane: its gRPC address, TLS and token."

    address: str = Field(default="127.0.0.1:50051", description="host:port or http(s)://host:port")
    tls: bool = Field(default=False, description="TLS to tally (an https:// address says so too)")
    token: SecretStr | None = Field(default=None, description="the bearer token")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> TallyServer:
        """The server the environment names (a malformed setting raises
        ValueError naming its variable)."""
        import os

        env = os.environ if env is None else env
        deployment = Deployment.from_env(env)
        token = env.get("TALLY_TOKEN", "").strip()
        return cls(
            address=deployment.server,
            tls=deployment.tls,
            token=SecretStr(token) if token else None,
        )

    def client(self) -> Client:
        token = self.token.get_secret_value() if self.token is not None else None
        return Client(self.address, token=token, tls=self.tls)

    @property
    def url(self) -> str:
        """The `http(s)://host:port` form tally-worker and tallyctl take."""
        return parse_address(self.address, tls=self.tls).url


def _server(server: TallyServer | None) -> TallyServer:
    return server if server is not None else TallyServer.from_env()


#: The lanes a deadline routes to when the flow names none: batch, and
#: flex (at the batch price where the provider has it).
DEFAULT_DEADLINE_LANES = ("batch", "flex")
LANES = ("batch", "flex", "standard", "priority")


def parse_deadline(text: str, now: datetime | None = None) -> datetime:
    """A deadline as an RFC 3339 time (`2026-12-07T06:00:00Z`) or a duration
    from now (`10m`, `2h`, `1h30m`, `90s`, `1d`). Raises ValueError saying
    which forms it takes."""
    now = now if now is not None else datetime.now(timezone.utc)
    text = text.strip()
    parts = re.fullmatch(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", text)
    if text and parts is not None and any(parts.groups()):
        d, h, m, sec = (int(g or 0) for g in parts.groups())
        return now + timedelta(days=d, hours=h, minutes=m, seconds=sec)
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"deadline {text!r} is neither an RFC 3339 time (2026-12-07T06:00:00Z) "
            "nor a duration from now (10m, 2h, 1h30m)"
        ) from None
    if at.tzinfo is None:
        raise ValueError(f"deadline {text!r} needs a time zone (Z or +00:00)")
    return at


@task(name="tally-route", cache_policy=NO_CACHE, persist_result=False)
def route_ledger(
    ledger: str,
    deadline: str | datetime,
    lanes: Iterable[str] = DEFAULT_DEADLINE_LANES,
    *,
    server: TallyServer | None = None,
) -> Forecast:
    """Gives `ledger` a deadline and the lanes its rows may take: deep
    chains then go by the cheapest synchronous lane that still finishes
    them in time (tally-server's README, "The critical path"). Returns the
    forecast under the new plan, and logs it: when it finishes, what it
    costs against all-batch, and whether the deadline can be met."""
    at = deadline if isinstance(deadline, datetime) else parse_deadline(deadline)
    lanes = list(lanes)
    unknown = [lane for lane in lanes if lane not in LANES]
    if unknown or not lanes:
        raise ValueError(f"lanes must be some of {', '.join(LANES)}, got {lanes}")
    logger = get_run_logger()
    with _server(server).client() as tally:
        tally.update_ledger(
            ledger,
            {
                "lanes": [f"LANE_{lane.upper()}" for lane in lanes],
                "deadline": at.astimezone(timezone.utc).isoformat().replace("+00:00", "Z"),
            },
        )
        forecast = tally.forecast(ledger)
    logger.info(
        "%s: deadline %s, lanes %s; plan finishes %s for $%.4f (%s), all batch %s for $%.4f: %s",
        ledger,
        at.isoformat(),
        ",".join(lanes),
        forecast.plan.finish_time,
        forecast.plan.cost_usd,
        forecast.plan.rows_by_lane,
        forecast.all_batch.finish_time,
        forecast.all_batch.cost_usd,
        forecast.explanation,
    )
    if not forecast.plan.in_time:
        logger.warning("%s: the deadline cannot be met: %s", ledger, forecast.explanation)
    return forecast


@task(name="tally-enroll", cache_policy=NO_CACHE, persist_result=False)
def enroll_rows(
    ledger: str,
    rows: Iterable[RowLike],
    *,
    policy: Mapping[str, Any] | None = None,
    server: TallyServer | None = None,
    fail_on_conflict: bool = True,
    chunk_size: int = 1000,
) -> dict[str, int]:
    """Enrolls rows (mappings, as `Client.enroll` takes them) into `ledger`,
    created with `policy` if it does not exist (an existing ledger must
    hold what `policy` sets). Rows already there are not enrolled again.
    A row in CONFLICT (its key holds other content) fails the task, naming
    the first keys, unless `fail_on_conflict=False`."""
    logger = get_run_logger()
    with _server(server).client() as tally:
        _, created = tally.get_or_create_ledger(ledger, policy)
        if created:
            logger.info("created ledger %s", ledger)
        done = tally.enroll(
            ledger,
            rows,
            chunk_size=chunk_size,
            on_progress=lambda p: logger.debug("enrolled %d of %d sent", p.enrolled, p.sent),
        )
    logger.info(
        "%s: %d rows enrolled, %d already present, %d in conflict",
        ledger,
        done.enrolled,
        done.already_present,
        done.conflicts,
    )
    if done.conflicts and fail_on_conflict:
        raise ValueError(
            f"{done.conflicts} rows differ from the rows ledger {ledger} holds under the same "
            f"keys (first: {', '.join(done.conflict_keys[:5])}); nothing was changed: enroll "
            "other keys, or redrive or delete the old rows"
        )
    return {
        "sent": done.sent,
        "enrolled": done.enrolled,
        "already_present": done.already_present,
        "conflicts": done.conflicts,
    }


def worker_binary(deployment: Deployment) -> str:
    """The tally-worker to start: TALLY_WORKER_BIN, else `tally-worker` on PATH."""
    found = deployment.worker_bin or shutil.which("tally-worker")
    if found is None:
        raise WorkerError(
            "no tally-worker: set TALLY_WORKER_BIN, or put tally-worker on PATH "
            "(the tally-bin wheel carries it: .ci/release builds it into dist/, then "
            "pip install dist/tally_bin-*.whl; or cargo build -p tally-worker)"
        )
    return found


@contextmanager
def tally_workers(
    ledger: str,
    count: int = 1,
    *,
    server: TallyServer | None = None,
    deployment: Deployment | None = None,
    stop_timeout: float = 60.0,
    lanes: Iterable[str] = (),
    media_root: str | None = None,
) -> Iterator[WorkerPool]:
    """`count` tally-workers on `ledger` while the block runs, and one more
    for each synchronous lane of `lanes` (`flex`, ...), children of the
    flow that die with it (see `tally_prefect.workers`); their binary,
    flags, provider URL and log directory are the deployment's
    (`Deployment.from_env()` unless given). `media_root` is where they read
    rows' media from (`--media-root`), unless the deployment's worker
    arguments name one."""
    from prefect.runtime import flow_run

    deployment = deployment if deployment is not None else Deployment.from_env()
    pool = WorkerPool(
        worker_binary(deployment),
        server=_server(server).url,
        ledger=ledger,
        count=count,
        gemini_base_url=deployment.gemini_base_url,
        extra_args=deployment.worker_args,
        log_dir=Path(deployment.worker_log_dir) if deployment.worker_log_dir else None,
        stop_timeout=stop_timeout,
        flow_run_id=flow_run.id,
        lanes=[lane for lane in lanes if lane != "batch"],
        media_root=media_root,
    )
    with pool:
        yield pool


def wait_until_done(
    tally: Client,
    ledger: str,
    *,
    poll_interval: float,
    timeout: float | None,
    pool: WorkerPool | None = None,
) -> Summary:
    """Reads the ledger's summary every `poll_interval` until every row is
    SUCCEEDED, PERMANENT or BLOCKED and no job is open; raises when `pool`'s
    workers all exited first, or after `timeout` seconds."""
    if poll_interval <= 0:
        raise ValueError("poll_interval must be positive")
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        summary = tally.summarize(ledger)
        if summary.done:
            return summary
        if pool is not None and pool.alive() == 0:
            raise WorkerError(
                f"every tally-worker exited with rows left ({summary.summary_line}): "
                + ("; ".join(pool.failed()) or "all exited 0")
            )
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(
                f"ledger {ledger} is not done after {timeout}s: {summary.summary_line}"
            )
        time.sleep(poll_interval)


def publish_summary(ledger: str, summary: Summary, jobs: int | None = None) -> None:
    """The ledger summary as the markdown artifact `<ledger>-summary`."""
    create_markdown_artifact(
        key=artifacts.artifact_key(ledger, "summary"),
        markdown=artifacts.summary_markdown(ledger, summary, jobs),
        description=summary.summary_line,
    )


def summary_record(summary: Summary) -> dict[str, int]:
    return {
        "total": summary.total,
        "succeeded": summary.succeeded,
        "permanent": summary.permanent,
        "blocked": summary.blocked,
        "attempts": summary.attempts_total,
    }


@task(name="tally-run-workers", cache_policy=NO_CACHE, persist_result=False)
def run_workers(
    ledger: str,
    count: int = 1,
    *,
    server: TallyServer | None = None,
    poll_interval: float = 5.0,
    timeout: float | None = None,
    stop_timeout: float = 60.0,
) -> dict[str, int]:
    """Runs `count` tally-workers on `ledger` until every row is final and
    no job is open, then stops them and publishes the ledger summary
    artifact. The workers are the flow's children and die with it; a
    re-run's workers adopt the jobs the dead ones left. Fails when every
    worker exited with rows left, or after `timeout` seconds."""
    logger = get_run_logger()
    with (
        _server(server).client() as tally,
        tally_workers(ledger, count, server=server, stop_timeout=stop_timeout) as pool,
    ):
        logger.info("%d tally-workers on %s (pids %s)", count, ledger, pool.pids)
        summary = wait_until_done(
            tally, ledger, poll_interval=poll_interval, timeout=timeout, pool=pool
        )
    logger.info("%s is done: %s", ledger, summary.summary_line)
    publish_summary(ledger, summary)
    return summary_record(summary)


@task(name="tally-wait", cache_policy=NO_CACHE, persist_result=False)
def wait_for_ledger(
    ledger: str,
    *,
    server: TallyServer | None = None,
    poll_interval: float = 5.0,
    timeout: float | None = None,
) -> dict[str, int]:
    """Waits until every row of `ledger` is final and no job is open (the
    workers run elsewhere), then publishes the ledger summary artifact."""
    with _server(server).client() as tally:
        summary = wait_until_done(tally, ledger, poll_interval=poll_interval, timeout=timeout)
    get_run_logger().info("%s is done: %s", ledger, summary.summary_line)
    publish_summary(ledger, summary)
    return summary_record(summary)


@task(name="tally-export", cache_policy=NO_CACHE, persist_result=False)
def export_ledger(
    ledger: str,
    path: str,
    *,
    format: ArchiveFormat = "jsonl",
    statuses: Iterable[RowStatus | str] = (),
    server: TallyServer | None = None,
) -> dict[str, Any]:
    """Writes the ledger's rows with their results to the new file `path`
    (`jsonl`, `openai` batch output, `csv` or `parquet`, as `tallyctl
    export`), its directory made if missing; an existing file is refused,
    never overwritten. Returns the path and the number of rows."""
    target = Path(path)
    if target.exists():
        raise FileExistsError(f"{target} exists: an export is always a new file")
    target.parent.mkdir(parents=True, exist_ok=True)
    wanted = list(statuses)
    with _server(server).client() as tally:
        if format == "parquet":
            done = tally.export_parquet(ledger, target, statuses=wanted)
        else:
            with target.open("x", encoding="utf-8", newline="") as out:
                done = tally.export_rows(ledger, out, format=format, statuses=wanted)
    get_run_logger().info("%s: %d rows written to %s", ledger, done.rows, target)
    return {"path": str(target), "rows": done.rows, "format": format}


@task(name="tally-deliver", cache_policy=NO_CACHE, persist_result=False)
def deliver_results(
    ledger: str,
    consumer: str,
    handle: Callable[[Delivery], object],
    *,
    server: TallyServer | None = None,
    start: Start | str = Start.BEGINNING,
    batch: int = 100,
    wait: float = 2.0,
    limit: int | None = None,
) -> dict[str, int]:
    """Hands each of `ledger`'s new results (SUCCEEDED and PERMANENT rows,
    in commit order) to `handle`, once each, through the named consumer
    (made at `start` on first use), and returns when none is left (or after
    `limit`). A result is acknowledged when `handle` returns; when `handle`
    raises, the task fails and that result is given back, to be handed out
    again on the next run, as is any result of a run killed in the middle
    (after its visibility timeout): nothing is skipped, and `handle` may see a result twice, so
    it deduplicates on `result.identity` (ledger, key, version). A result
    whose row was redriven and answered again comes with a higher version.
    Returns how many results were handled and how many were handed out
    before (redeliveries)."""
    logger = get_run_logger()
    handled = 0
    again = 0
    with _server(server).client() as tally:
        with tally.consume(
            ledger, consumer, start=start, batch=batch, wait=wait, until_empty=True, limit=limit
        ) as results:
            for result in results:
                handle(result)
                handled += 1
                again += result.delivery_count > 1
    logger.info("%s: %d results delivered through %s", ledger, handled, consumer)
    return {"delivered": handled, "redelivered": again}
