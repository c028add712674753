#!/usr/bin/env python3
"""Smoke-test a running tally server from Python, through grpcio.

Usage:
    pip install -r tests/python/requirements.txt
    python3 tests/python/smoke.py 127.0.0.1:50051

Stubs are generated from the repository's proto/ with grpcio-tools into a
temporary directory at run time, so they always match the checkout. The
script creates a fresh ledger, enrolls three rows, claims them, reports two
successes and one transient failure, then summarizes: it prints the one-line
summary and exits 0 when the counts are what it reported, non-zero (with the
reason on stderr) otherwise. It is not part of `cargo test`.
"""

import importlib.resources
import pathlib
import sys
import tempfile
import uuid

PROTO_ROOT = pathlib.Path(__file__).resolve().parents[2] / "proto"


def generate_stubs(out: pathlib.Path) -> None:
    """Runs protoc (bundled with grpcio-tools) over proto/tally/v1."""
    from grpc_tools import protoc

    well_known = importlib.resources.files("grpc_tools") / "_proto"
    files = sorted(
        str(p.relative_to(PROTO_ROOT)) for p in (PROTO_ROOT / "tally" / "v1").glob("*.proto")
    )
    if not files:
        raise SystemExit(f"no .proto files under {PROTO_ROOT}/tally/v1")
    rc = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"-I{well_known}",
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            *files,
        ]
    )
    if rc != 0:
        raise SystemExit(f"protoc failed with status {rc}")
    sys.path.insert(0, str(out))


def check(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(what)


def smoke(address: str) -> str:
    import grpc
    from google.protobuf import duration_pb2
    from tally.v1 import common_pb2, ledger_pb2, ledger_pb2_grpc

    ledger_id = f"smoke-{uuid.uuid4().hex[:12]}"
    parent = f"ledgers/{ledger_id}"
    with grpc.insecure_channel(address) as channel:
        try:
            grpc.channel_ready_future(channel).result(timeout=10)
        except grpc.FutureTimeoutError:
            raise AssertionError(f"no gRPC server answered at {address} within 10s") from None
        ledgers = ledger_pb2_grpc.LedgerServiceStub(channel)

        ledger = ledgers.CreateLedger(
            ledger_pb2.CreateLedgerRequest(
                ledger_id=ledger_id,
                policy=ledger_pb2.LedgerPolicy(
                    budgets=ledger_pb2.AttemptBudgets(provider=3, content=1, infra=2),
                ),
            ),
            timeout=10,
        )
        check(ledger.name == parent, f"created {ledger.name!r}, wanted {parent!r}")

        keys = ["row-1", "row-2", "row-3"]
        enrolled = ledgers.EnrollRows(
            ledger_pb2.EnrollRowsRequest(
                parent=parent,
                rows=[
                    ledger_pb2.RowInput(key=k, payload=f'{{"text": "{k}"}}') for k in keys
                ],
            ),
            timeout=10,
        )
        check(enrolled.enrolled == 3, f"enrolled {enrolled.enrolled} of 3")

        claimed = ledgers.ClaimRows(
            ledger_pb2.ClaimRowsRequest(
                parent=parent,
                max_rows=10,
                lease=duration_pb2.Duration(seconds=300),
                worker="python-smoke",
                request_id=uuid.uuid4().hex,
            ),
            timeout=10,
        )
        check(claimed.HasField("claim"), "nothing was claimable")
        got = sorted(r.key for r in claimed.rows)
        check(got == keys, f"claimed {got}, wanted {keys}")

        report = ledgers.ReportOutcomes(
            ledger_pb2.ReportOutcomesRequest(
                claim=claimed.claim.name,
                outcomes=[
                    ledger_pb2.RowOutcome(
                        key="row-1",
                        result='{"answer": 1}',
                        usage=common_pb2.Usage(input_tokens=12, output_tokens=3),
                    ),
                    ledger_pb2.RowOutcome(
                        key="row-2",
                        result='{"answer": 2}',
                        usage=common_pb2.Usage(input_tokens=10, output_tokens=4),
                    ),
                    ledger_pb2.RowOutcome(
                        key="row-3",
                        failure=common_pb2.Failure(
                            kind=common_pb2.FAILURE_KIND_PROVIDER_ERROR,
                            http_code=503,
                            message="backend unavailable",
                        ),
                    ),
                ],
            ),
            timeout=10,
        )
        verdicts = [ledger_pb2.Verdict.Name(v.verdict) for v in report.verdicts]
        check(
            verdicts == ["VERDICT_SUCCEEDED", "VERDICT_SUCCEEDED", "VERDICT_RETRYABLE"],
            f"verdicts {verdicts}",
        )

        summary = ledgers.SummarizeLedger(
            ledger_pb2.SummarizeLedgerRequest(name=parent), timeout=10
        )
        counts = (summary.succeeded, summary.retryable, summary.permanent, summary.total)
        check(counts == (2, 1, 0, 3), f"summary counts {counts}")
        check(summary.attempts_total == 3, f"{summary.attempts_total} attempts")
        check(
            summary.usage.input_tokens == 22 and summary.usage.output_tokens == 7,
            f"usage {summary.usage}",
        )
        return summary.summary_line


def main() -> int:
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} HOST:PORT", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="tally-stubs-") as out:
        generate_stubs(pathlib.Path(out))
        try:
            line = smoke(sys.argv[1])
        except AssertionError as e:
            print(f"smoke: FAILED: {e}", file=sys.stderr)
            return 1
        except Exception as e:  # grpc.RpcError and friends
            print(f"smoke: FAILED: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
