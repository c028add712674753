"""The Prefect flow of the design document: plan a page dataset, enroll
it, run tally-workers, follow every provider job as a Prefect task run, and
publish what became of the rows as artifacts.

It is built on the reusable tasks of `tally_prefect.tasks` (`enroll_rows`,
the workers of `tally_workers`, the summary of `run_workers`), plus
what is particular to it: the plan, and a task run per provider job.

tally holds the record state; Prefect runs the flow. Prefect's retries (if
the deployment sets any) re-run the flow, which is safe: planning finds the
same immutable plan, enrolment is idempotent by key (the rows are
ALREADY_PRESENT), and workers never resend a row that is answered or held
by a live claim (they adopt the jobs of dead workers). Row retries are
tally's alone: nothing here retries a row."""

from __future__ import annotations

import queue
import shutil
import threading
from collections.abc import Iterable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import State
from prefect.futures import PrefectFuture, wait
from prefect.states import Failed

from tally_client import Client, Job, TallyError, pb
from tally_prefect import artifacts
from tally_prefect.deployment import Deployment
from tally_prefect.plan import (
    PAYLOAD_FIELDS,
    FirstPass,
    PlanError,
    plan_rows,
    read_plan,
    register_page_prompt,
    run_tallyctl_plan,
)
from tally_prefect.tasks import (
    DEFAULT_DEADLINE_LANES,
    TallyServer,
    enroll_rows,
    publish_summary,
    route_ledger,
    summary_record,
    tally_workers,
)
from tally_prefect.workers import MAX_WORKERS, WorkerError, WorkerPool

#: Largest table published per job (a provider batch can hold 10,000 rows).
MAX_TABLE_ROWS = 5000


@task(name="plan-pages", cache_policy=NO_CACHE)
def plan_pages(
    tallyctl: str, images_root: str, results_root: str, out: str, skip_missing_images: bool
) -> dict[str, Any]:
    """`tallyctl plan`: writes the immutable plan (its directory made if
    missing), or finds the same one."""
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    report = run_tallyctl_plan(
        tallyctl,
        images_root=Path(images_root),
        results_root=Path(results_root),
        out=Path(out),
        skip_missing_images=skip_missing_images,
    )
    logger = get_run_logger()
    for warning in report.get("warnings", []):
        logger.warning("plan: %s", warning)
    logger.info(
        "plan %s: %s pages in %s groups (%s)",
        out,
        report.get("pages"),
        report.get("groups"),
        report.get("written"),
    )
    return report


def enroll_plan(
    ledger: str,
    plan_path: str,
    first_pass: FirstPass,
    prompt: str | None,
    model: str,
    server: TallyServer,
) -> dict[str, int]:
    """Enrolls every page row with the `enroll_rows` task; rows already
    there are not enrolled again. A row that differs from the enrolled one
    (CONFLICT) fails the flow: the plan is immutable once work started."""
    nodes = read_plan(Path(plan_path))
    media_var = page_media_variable(prompt, server) if prompt else None
    rows = plan_rows(nodes, first_pass=first_pass, prompt=prompt, model=model, media_var=media_var)
    try:
        done = enroll_rows.with_options(name="enroll-plan")(ledger, rows, server=server)
    except ValueError as e:
        raise PlanError(
            f"{e} (a different plan, prompt or model? A ledger enrolled before pages "
            "carried their image was enrolled text-only: run it with text_only=True)"
        ) from None
    return {
        "pages": len(nodes),
        "enrolled": done["enrolled"],
        "already_present": done["already_present"],
    }


def page_media_variable(prompt: str, server: TallyServer) -> str | None:
    """The prompt's media variable the page image goes in (as `tallyctl
    plan --enroll --prompt` fills it): its one declared media variable;
    none, and the page is sent by path only, as text."""
    name, sep, version = prompt.partition("@")
    if not (sep and name and version):
        raise PlanError(f"prompt {prompt!r} must look like name@version")
    full = f"prompts/{name}/versions/{version}"
    with server.client() as client:
        found = client.call(client.ledgers.GetPrompt, pb.ledger_pb2.GetPromptRequest(name=full))
    media = list(found.media)
    if len(media) == 1 and media[0] in PAYLOAD_FIELDS:
        raise PlanError(
            f"{full} puts the page image in `{media[0]}`, which is also a field of the "
            f"plan's rows ({', '.join(PAYLOAD_FIELDS)}): the image would replace it; "
            "register a version with another media variable (e.g. media=['image'])"
        )
    if len(media) > 1:
        raise PlanError(
            f"{full} declares {len(media)} media variables ({', '.join(media)}); "
            "a plan fills one, the page image"
        )
    return media[0] if media else None


@task(name="provider-job", cache_policy=NO_CACHE)
def provider_job(
    client: Client, ledger: str, job_name: str, done: threading.Event, max_rows: int
) -> dict[str, Any]:
    """One provider batch job, from the moment the flow sees it until it is
    settled; then its rows as a table artifact."""
    done.wait()
    job: pb.job_pb2.Job = client.call(
        client.jobs_stub.GetJob, pb.job_pb2.GetJobRequest(name=job_name)
    )
    rows: list[dict[str, str | int]] = []
    more = False
    for row in client.rows(ledger, in_job=job_name, page_size=min(max_rows, 1000)):
        if len(rows) == max_rows:
            more = True
            break
        rows.append(artifacts.row_record(row))
    create_table_artifact(
        key=artifacts.artifact_key(ledger, "job", job.job_id),
        table=rows,
        description=artifacts.job_description(job, len(rows), more),
    )
    return {
        "job": job.job_id,
        "state": artifacts.job_state_name(job.state),
        "rows": job.counts.rows,
        "succeeded": job.counts.succeeded,
        "retryable": job.counts.retryable,
        "permanent": job.counts.permanent,
    }


def job_settled(job: pb.job_pb2.Job) -> bool:
    """Every row of the job has its outcome (or went back unsent)."""
    j = pb.job_pb2
    return job.state == j.JOB_STATE_RECONCILED or (
        job.state == j.JOB_STATE_CANCELLED and not job.batch
    )


@dataclass
class _Follow:
    futures: list[PrefectFuture[dict[str, Any]]]
    settled: dict[str, threading.Event]

    def settle_all(self) -> None:
        """Lets every job task publish what it knows now."""
        for event in self.settled.values():
            event.set()


def _watch(watcher: Client, ledger: str, events: queue.Queue[object]) -> None:
    try:
        for event in watcher.watch_jobs(ledger, after_sequence=-1):
            events.put(event)
    except TallyError as e:
        events.put(e)


def follow_run(
    follow: _Follow,
    client: Client,
    watcher: Client,
    ledger: str,
    pool: WorkerPool | None,
    *,
    poll_interval: float,
    max_table_rows: int,
) -> None:
    """Follows the ledger's jobs (every one since the first event stored, so
    a re-run sees the jobs of the crashed run) until every row is terminal.
    Each job gets a task run; the ledger summary is re-read whenever the
    event stream goes quiet for `poll_interval`."""
    logger = get_run_logger()
    said: dict[str, str] = {}
    events: queue.Queue[object] = queue.Queue()
    threading.Thread(target=_watch, args=(watcher, ledger, events), daemon=True).start()
    while True:
        try:
            item = events.get(timeout=poll_interval)
        except queue.Empty:
            item = None
        if isinstance(item, TallyError):
            raise item
        if isinstance(item, pb.job_pb2.JobEvent):
            job = item.job
            if job.name not in follow.settled:
                follow.settled[job.name] = threading.Event()
                follow.futures.append(
                    provider_job.with_options(task_run_name=f"job-{job.job_id}").submit(
                        client, ledger, job.name, follow.settled[job.name], max_table_rows
                    )
                )
            if job_settled(job):
                follow.settled[job.name].set()
            if not events.empty():
                continue
        summary = client.summarize(ledger)
        if summary.running:
            open_jobs = client.jobs(ledger, states=OPEN_STATES)
            for line in waiting_lines(open_jobs, pool.names if pool else [], said):
                logger.info("%s", line)
        if artifacts.all_terminal(summary):
            logger.info("every row is terminal: %s", summary.summary_line)
            return
        if pool is not None and pool.alive() == 0:
            raise WorkerError(
                f"every tally-worker exited with rows left ({summary.summary_line}): "
                + ("; ".join(pool.failed()) or "all exited 0")
            )


#: Jobs whose rows are out (at the provider, or being sent).
OPEN_STATES = ["PREPARING", "CREATING", "SUBMITTED", "RUNNING"]


def waiting_lines(jobs: Iterable[Job], own: Sequence[str], said: dict[str, str]) -> list[str]:
    """What the flow waits for, said once per job and holder: each open job
    held by a worker that is not one of this run's (`own`), with the end of
    its lease. `said` remembers what was said."""
    lines = []
    for job in jobs:
        owner = job.raw.owner
        if job.end_time is not None or owner in own or said.get(job.name) == owner:
            continue
        said[job.name] = owner
        until = (
            job.raw.lease_expire_time.ToDatetime().isoformat(timespec="seconds") + "Z"
            if job.raw.HasField("lease_expire_time")
            else "its lease ends"
        )
        lines.append(
            f"waiting for job {job.id} ({job.state.name}), held by {owner} until {until}: "
            "this run's workers adopt it then, or at once if that worker is shown gone "
            "(a process of this host that has ended) or hands it over"
        )
    return lines


@flow(name="tally-pages")
def tally_pages(
    ledger: str,
    images_root: str,
    results_root: str,
    plan_path: str,
    workers: int = 1,
    prompt: str | None = None,
    model: str = "",
    first_pass: FirstPass = "content",
    skip_missing_images: bool = False,
    fail_on_permanent: bool = False,
    poll_interval: float = 5.0,
    max_table_rows: int = 1000,
    deadline: str | None = None,
    lanes: list[str] | None = None,
    text_only: bool = False,
) -> dict[str, Any] | State[Any]:
    """Plans the pages of a dataset (`images_root/{state}/{school}/{year}/{n}.jpg`,
    `.jpeg`, `.png`, `.webp`, `.gif` or `.pdf`, allow-listed by
    `results_root/label_to_curricular/…/{n}.json`) into the immutable
    `plan_path` (its directory made if missing), enrolls them into `ledger`
    (created with the default policy if it does not exist), runs `workers`
    tally-workers as children of the flow (0: workers run elsewhere), and
    follows the run until every row is final, each provider job a task run
    with its rows as a table artifact, the ledger summary a markdown
    artifact.

    Where the work goes (tally's address, TLS, the binaries, the workers'
    flags, the provider's base URL) is the deployment's, read from its
    environment ([`tally_prefect.deployment`]), never a run parameter: a
    parameter would let whoever starts a run send the token or the API key
    anywhere, or run any program. The token comes from `TALLY_TOKEN`; the
    workers read `GEMINI_API_KEY`. With `fail_on_permanent`, the flow run
    ends Failed when any row is PERMANENT (after everything is published).

    Each page goes to the model with its image: without a `prompt`, the
    ledger's page prompt (`tallyctl prompts page`: the image as `image`,
    the page's identity in the text) is registered and used, and the
    workers read the images under `images_root` (`--media-root`, unless
    the deployment's worker arguments name one); `text_only` enrolls the
    paths alone, as text. Each page's prompt reads the page before's
    answer as `deps.previous`.
    With a `deadline` (an RFC 3339 time, or a duration from now: `10m`,
    `2h`) the ledger routes the deep part of each book's chain by a
    synchronous lane of `lanes` (default batch and flex) so that the last
    page is done in time, and the flow starts one more worker per
    synchronous lane; the forecast (finish and cost against all-batch, and
    whether the deadline can be met) is logged and returned."""
    if not 1 <= max_table_rows <= MAX_TABLE_ROWS:
        raise ValueError(f"max_table_rows must be between 1 and {MAX_TABLE_ROWS}")
    if poll_interval <= 0:
        raise ValueError("poll_interval must be positive")
    if not 0 <= workers <= MAX_WORKERS:
        raise ValueError(f"workers must be between 0 and {MAX_WORKERS}, got {workers}")
    deployment = Deployment.from_env()
    server = TallyServer.from_env()
    if text_only and prompt is not None:
        raise ValueError("text_only enrolls no prompt: give one or the other")
    tallyctl_path = shutil.which(deployment.tallyctl) or deployment.tallyctl
    # Absolute, so the workers find each page under their --media-root.
    images_root = str(Path(images_root).resolve())
    plan_pages(tallyctl_path, images_root, results_root, plan_path, skip_missing_images)
    if prompt is None and not text_only:
        prompt = register_page_prompt(tallyctl_path, server.url, ledger)
    enrolled = enroll_plan(ledger, plan_path, first_pass, prompt, model, server)
    routed: dict[str, Any] = {}
    run_lanes: list[str] = []
    if deadline is not None:
        run_lanes = list(lanes) if lanes is not None else list(DEFAULT_DEADLINE_LANES)
        forecast = route_ledger(ledger, deadline, run_lanes, server=server)
        routed = {
            "forecast_finish": forecast.plan.finish_time,
            "forecast_in_time": forecast.plan.in_time,
            "forecast_cost_usd": forecast.plan.cost_usd,
            "all_batch_cost_usd": forecast.all_batch.cost_usd,
        }
    elif lanes is not None:
        raise ValueError("lanes are for a deadline: give deadline too")
    follow = _Follow([], {})
    with server.client() as client, server.client() as watcher:
        # The jobs made before this run (a re-run follows them too, but
        # made none of them).
        earlier = {job.name for job in client.jobs(ledger)}
        with ExitStack() as stack:
            pool = None
            if workers:
                pool = stack.enter_context(
                    tally_workers(
                        ledger,
                        workers,
                        server=server,
                        deployment=deployment,
                        lanes=run_lanes,
                        media_root=None if text_only else images_root,
                    )
                )
            # Last in, first out: the job tasks publish what they know
            # even when following failed, then the workers stop.
            stack.callback(wait, follow.futures)
            stack.callback(follow.settle_all)
            follow_run(
                follow,
                client,
                watcher,
                ledger,
                pool,
                poll_interval=poll_interval,
                max_table_rows=max_table_rows,
            )
        summary = client.summarize(ledger)
        made = sum(1 for job in client.jobs(ledger) if job.name not in earlier)
    publish_summary(ledger, summary, len(follow.futures))
    totals = summary_record(summary)
    result = {**enrolled, **totals, **routed, "jobs": made, "jobs_followed": len(follow.futures)}
    if fail_on_permanent and totals["permanent"]:
        return Failed(message=f"{totals['permanent']} rows are PERMANENT: {result}")
    return result
