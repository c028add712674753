"""What the flow shows in the Prefect UI, built from tally's answers (pure:
no calls here). One table per provider job (its rows: key, status, rule,
attempts, error) and one markdown summary of the ledger."""

from __future__ import annotations

import re
from collections.abc import Iterable

from tally_client import Row, Summary, pb

#: Characters of `last_error` shown in a table cell.
MAX_ERROR_CHARS = 500

_NOT_KEY = re.compile(r"[^a-z0-9-]+")


def artifact_key(*parts: str) -> str:
    """A Prefect artifact key (lower-case letters, digits and dashes)."""
    return _NOT_KEY.sub("-", "-".join(parts).lower()).strip("-")


def job_state_name(state: int) -> str:
    return pb.job_pb2.JobState.Name(state).removeprefix("JOB_STATE_")


def row_record(row: Row) -> dict[str, str | int]:
    """One table line: what became of the row, as of the moment the job's
    table is published (when the job is settled). A job's table lists every
    row the job was made with (`RowFilter.in_job`); a row already claimed
    again by then is in this table and the next job's, with its state then
    and every attempt counted."""
    error = row.last_error
    if len(error) > MAX_ERROR_CHARS:
        error = error[:MAX_ERROR_CHARS] + "…"
    return {
        "key": row.key,
        "status": row.status.value,
        "rule": row.rule,
        "attempts": row.attempts.total,
        "error": error,
    }


def job_description(job: pb.job_pb2.Job, shown: int, more: bool) -> str:
    """The markdown above a job's table."""
    state = job_state_name(job.state)
    if job.final_state:
        state += f" (batch {job_state_name(job.final_state)})"
    text = f"**{job.job_id}** · batch `{job.batch or '-'}` · {state} · {job.summary or '-'}"
    if job.error:
        text += f"\n\nerror: {job.error}"
    if job.adoptions:
        text += f"\n\nadopted {job.adoptions} time(s)"
    if more:
        text += f"\n\nfirst {shown} rows shown (of {job.counts.rows})"
    return text


def summary_markdown(ledger: str, summary: Summary, jobs: int | None = None) -> str:
    """The ledger's summary: counts by status, attempts by budget, tokens,
    cost, PERMANENT rows by rule."""
    s = summary
    lines = [
        f"# Ledger `{ledger}`",
        "",
        f"`{s.summary_line}`",
        "",
        "| status | rows |",
        "| --- | ---: |",
    ]
    for name, count in [
        ("SUCCEEDED", s.succeeded),
        ("PERMANENT", s.permanent),
        ("BLOCKED", s.blocked),
        ("RETRYABLE", s.retryable),
        ("RUNNING", s.running),
        ("PENDING", s.pending),
        ("total", s.total),
    ]:
        lines.append(f"| {name} | {count} |")
    lines += [
        "",
        "| attempts | provider | content | infra | total |",
        "| --- | ---: | ---: | ---: | ---: |",
        f"| | {s.attempts_provider} | {s.attempts_content} | {s.attempts_infra} "
        f"| {s.attempts_total} |",
        "",
        f"Tokens: {s.usage.input_tokens} in, {s.usage.output_tokens} out, "
        f"{s.usage.thinking_tokens} thinking, {s.usage.cached_tokens} cached. "
        f"Estimated cost: ${s.estimated_cost_usd:.4f}"
        + (f" (unpriced: {', '.join(s.unpriced_models)})" if s.unpriced_models else "")
        + ".",
        "",
        (f"Provider jobs followed by this flow run: {jobs}; " if jobs is not None else "")
        + f"jobs active now: {s.active_jobs}.",
    ]
    if s.permanent_by_rule:
        lines += ["", "## PERMANENT rows by rule", "", "| rule | rows |", "| --- | ---: |"]
        lines += [f"| {rule} | {n} |" for rule, n in sorted(s.permanent_by_rule.items())]
    return "\n".join(lines) + "\n"


def all_terminal(summary: Summary) -> bool:
    """Every row SUCCEEDED, PERMANENT or BLOCKED, and no job still open."""
    return summary.done


def table(rows: Iterable[Row]) -> list[dict[str, str | int]]:
    return [row_record(r) for r in rows]
