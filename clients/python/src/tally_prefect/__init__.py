"""tally_prefect: Prefect tasks for flows that run work through tally
(install `tally-client[prefect]`), and the page-OCR flow of tally's design
built on them. Prefect runs the flow; tally holds the record state.

    from prefect import flow
    from tally_prefect import enroll_rows, export_ledger, run_workers

    @flow
    def nightly(rows: list[dict]) -> dict:
        enroll_rows("reviews-nightly", rows)        # idempotent by key
        run_workers("reviews-nightly", count=2)      # children of the flow, until done
        return export_ledger("reviews-nightly", "out/reviews-nightly.jsonl")

The tasks (`tally_prefect.tasks`): `enroll_rows`, `run_workers`,
`wait_for_ledger`, `export_ledger`, `deliver_results` (each new result to
a callable, once, through a consumer), `route_ledger` (a deadline: deep
chains go by a synchronous lane); `tally_workers` is the context
manager `run_workers` uses, for flows that do more while workers run;
`TallyServer` is a block naming a tally server. The page flow is
`tally_pages`.
"""

from tally_prefect.deployment import Deployment
from tally_prefect.flow import provider_job, tally_pages
from tally_prefect.plan import PageNode, PlanError, payload, plan_rows, read_plan
from tally_prefect.tasks import (
    TallyServer,
    deliver_results,
    enroll_rows,
    export_ledger,
    route_ledger,
    run_workers,
    tally_workers,
    wait_for_ledger,
)
from tally_prefect.workers import CacheEstimate, WorkerError, WorkerPool, cache_dry_run

__all__ = [
    "CacheEstimate",
    "Deployment",
    "PageNode",
    "PlanError",
    "TallyServer",
    "WorkerError",
    "WorkerPool",
    "cache_dry_run",
    "deliver_results",
    "enroll_rows",
    "export_ledger",
    "payload",
    "plan_rows",
    "provider_job",
    "read_plan",
    "route_ledger",
    "run_workers",
    "tally_pages",
    "tally_workers",
    "wait_for_ledger",
]
