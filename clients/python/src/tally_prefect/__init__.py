"""tally_prefect: the Prefect flow of tally's design (install
`tally-client[prefect]`). Prefect runs the flow; tally holds the record
state. One provider job is one Prefect task run; rows are table artifacts;
the ledger summary is a markdown artifact.

    # The deployment's environment says where the work goes (never run
    # parameters; see tally_prefect.deployment): TALLY_SERVER,
    # TALLY_WORKER_BIN=/usr/local/bin/tally-worker, TALLY_TOKEN, GEMINI_API_KEY…
    from tally_prefect import tally_pages

    tally_pages(
        ledger="curricular-ocr",
        images_root="images_root",
        results_root="first_pass_results",
        plan_path="plans/curricular-2024.json",
        workers=2,
    )
"""

from tally_prefect.deployment import Deployment
from tally_prefect.flow import provider_job, tally_pages
from tally_prefect.plan import PageNode, PlanError, payload, plan_rows, read_plan
from tally_prefect.workers import WorkerPool

__all__ = [
    "Deployment",
    "PageNode",
    "PlanError",
    "WorkerPool",
    "payload",
    "plan_rows",
    "provider_job",
    "read_plan",
    "tally_pages",
]
