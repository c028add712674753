"""tally_prefect: the Prefect flow of tally's design (install
`tally-client[prefect]`). Prefect runs the flow; tally holds the record
state. One provider job is one Prefect task run; rows are table artifacts;
the ledger summary is a markdown artifact.

    from tally_prefect import tally_pages

    tally_pages(
        ledger="curricular-ocr",
        images_root="images_root",
        results_root="first_pass_results",
        plan_path="plans/curricular-2024.json",
        worker_bin="/usr/local/bin/tally-worker",
        workers=2,
    )
"""

from tally_prefect.flow import provider_job, tally_pages
from tally_prefect.plan import PageNode, PlanError, payload, plan_rows, read_plan
from tally_prefect.workers import WorkerPool

__all__ = [
    "PageNode",
    "PlanError",
    "WorkerPool",
    "payload",
    "plan_rows",
    "provider_job",
    "read_plan",
    "tally_pages",
]
