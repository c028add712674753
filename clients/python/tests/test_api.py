"""The client's pure parts: addresses, exceptions, enums and policies (no
server)."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from tally_client import (
    AlreadyExists,
    Budget,
    FailedPrecondition,
    FailureKind,
    JobState,
    Ledger,
    LedgerState,
    PauseReason,
    RowStatus,
    TallyError,
    Verdict,
    parse_address,
    pb,
)
from tally_client._calls import (
    existing_ledger,
    policy_differences,
    policy_message,
    update_request,
)
from tally_client.errors import error_class


@pytest.mark.parametrize(
    ("given", "target", "tls"),
    [
        ("127.0.0.1:50051", "127.0.0.1:50051", False),
        ("http://tally.internal:50051", "tally.internal:50051", False),
        ("https://tally.example.com:443/", "tally.example.com:443", True),
        ("HTTPS://tally:8443", "tally:8443", True),
        ("[::1]:50051", "[::1]:50051", False),
        ("http://[::1]:50051", "[::1]:50051", False),
    ],
)
def test_addresses_in_tallyctls_forms(given: str, target: str, tls: bool) -> None:
    address = parse_address(given)
    assert (address.target, address.tls) == (target, tls)
    assert parse_address(address.url) == address


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("grpc://tally:50051", "unknown scheme 'grpc'"),
        ("tally", "is not host:port"),
        ("http://tally", "is not host:port"),
        ("tally:0", "is not host:port"),
        ("tally:99999", "is not host:port"),
        ("http://tally:50051/v1", "is not host:port"),
    ],
)
def test_a_bad_address_is_refused_with_the_forms_it_could_be(given: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        parse_address(given)
    assert "host:port, http://host:port or https://host:port" in str(caught.value)


def test_http_with_tls_is_a_contradiction() -> None:
    with pytest.raises(ValueError, match="use https://"):
        parse_address("http://tally:50051", tls=True)
    assert parse_address("tally:443", tls=True).tls


def test_every_status_code_has_its_own_exception_class() -> None:
    # Invariant: a caller can catch any refusal by its code's class, and no
    # two codes share one.
    codes = [c for c in grpc.StatusCode if c != grpc.StatusCode.OK]
    classes = [error_class(c) for c in codes]
    assert len(set(classes)) == len(codes)
    for code, cls in zip(codes, classes, strict=True):
        assert issubclass(cls, TallyError) and cls is not TallyError, code
        words = code.name.split("_")
        assert cls.__name__.lower() == "".join(words).lower(), (code, cls)


@pytest.mark.parametrize(
    ("enum", "proto", "prefix"),
    [
        (RowStatus, pb.common_pb2.RowStatus, "ROW_STATUS_"),
        (Budget, pb.common_pb2.Budget, "BUDGET_"),
        (FailureKind, pb.common_pb2.FailureKind, "FAILURE_KIND_"),
        (Verdict, pb.ledger_pb2.Verdict, "VERDICT_"),
        (LedgerState, pb.ledger_pb2.LedgerState, "LEDGER_STATE_"),
        (PauseReason, pb.ledger_pb2.LedgerPauseReason, "LEDGER_PAUSE_REASON_"),
        (JobState, pb.job_pb2.JobState, "JOB_STATE_"),
    ],
)
def test_enums_cover_every_proto_value(enum: Any, proto: Any, prefix: str) -> None:
    # Invariant: a value the proto gains is a test failure here, not a
    # ValueError in a user's loop.
    names = [n for n in proto.keys() if not n.endswith("_UNSPECIFIED")]
    assert sorted(m.value for m in enum) == sorted(n.removeprefix(prefix) for n in names)
    for name in names:
        member = enum.from_number(proto.Value(name))
        assert member.number == proto.Value(name)
        assert enum.parse(name.removeprefix(prefix).lower()) is member


def test_an_unknown_enum_number_says_to_upgrade() -> None:
    with pytest.raises(ValueError, match="upgrade tally-client"):
        RowStatus.from_number(99)
    with pytest.raises(ValueError, match="one of PENDING"):
        RowStatus.parse("DONE")


def test_policy_from_json_form_and_its_differences() -> None:
    asked = policy_message({"budgets": {"provider": 3}, "lease": "600s", "model": "m"})
    assert asked is not None
    stored = pb.ledger_pb2.LedgerPolicy()
    stored.CopyFrom(asked)
    stored.budgets.content = 1  # a default the ask did not set
    stored.max_active_jobs = 4
    assert policy_differences(asked, stored) == []
    stored.budgets.provider = 4
    stored.lease.seconds = 1800
    assert policy_differences(asked, stored) == [
        "budgets.provider is 4, asked 3",
        'lease is "1800s", asked "600s"',
    ]
    with pytest.raises(ValueError, match="budgetz"):
        policy_message({"budgetz": {}})
    assert issubclass(AlreadyExists, TallyError)


def test_an_update_names_only_the_nested_fields_given() -> None:
    # Invariant: an update of one backoff or batch-fill field sends that
    # field's path alone, so the server keeps the others.
    req = update_request(
        "night",
        {"backoff": {"initial": "5s"}, "batchFill": {"maxWait": "0s"}, "lease": "60s"},
        "",
    )
    assert sorted(req.update_mask.paths) == [
        "policy.backoff.initial",
        "policy.batch_fill.max_wait",
        "policy.lease",
    ]


def test_get_or_create_refuses_a_ledger_being_deleted() -> None:
    deleting = Ledger.from_pb(
        pb.ledger_pb2.Ledger(name="ledgers/x", state=pb.ledger_pb2.LEDGER_STATE_DELETING)
    )
    with pytest.raises(FailedPrecondition, match="being deleted") as caught:
        existing_ledger("x", deleting, None)
    assert caught.value.reason == "LEDGER_DELETING"
    active = Ledger.from_pb(
        pb.ledger_pb2.Ledger(name="ledgers/x", state=pb.ledger_pb2.LEDGER_STATE_ACTIVE)
    )
    assert existing_ledger("x", active, None) is active


def test_a_token_over_plaintext_to_another_machine_warns() -> None:
    # Invariant: a bearer token that would cross the network unencrypted is
    # warned about; to this machine, or over TLS, it is not.
    import warnings

    from tally_client import Client

    with pytest.warns(UserWarning, match="without TLS"):
        Client("10.1.2.3:50051", token="secret").close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for quiet in ("127.0.0.1:50051", "localhost:50051", "[::1]:50051", "https://tally:443"):
            Client(quiet, token="secret").close()
        Client("10.1.2.3:50051").close()
