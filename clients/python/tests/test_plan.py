"""Reading a plan file back (pure; the flow test checks the rows against
tallyctl's own enrolment)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tally_client.rust_json import dumps, float_text
from tally_prefect import PlanError, payload, read_plan
from tally_prefect.plan import unescape_component


def write(tmp_path: Path, nodes: dict[str, object], deps: dict[str, object]) -> Path:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"nodes": nodes, "deps": deps}))
    return path


def node(n: int) -> dict[str, str]:
    return {"image_path": f"/i/{n}.jpg", "filter_json": f"/r/{n}.json"}


def test_nodes_come_back_unescaped_with_every_dependency_first(tmp_path: Path) -> None:
    # Invariant: enrolment order puts a dependency before its dependants,
    # whatever order the file lists them in.
    k = "New~20York:O~27Neil:2024:{}"
    plan = write(
        tmp_path,
        {k.format(3): node(3), k.format(2): node(2), k.format(1): node(1)},
        {k.format(3): k.format(2), k.format(2): k.format(1), k.format(1): None},
    )
    nodes = read_plan(plan)
    assert [n.page for n in nodes] == [1, 2, 3]
    assert (nodes[0].state, nodes[0].school, nodes[0].year) == ("New York", "O'Neil", "2024")
    assert nodes[2].depends_on == k.format(2)
    assert json.loads(payload(nodes[0], "path")) == {
        "state": "New York",
        "school": "O'Neil",
        "year": "2024",
        "page": 1,
        "image_path": "/i/1.jpg",
        "filter_json": "/r/1.json",
    }


@pytest.mark.parametrize(
    ("nodes", "deps", "message"),
    [
        ({"a:b:c": node(1)}, {"a:b:c": None}, "not state:school:year:page"),
        ({"a:b:c:1": node(1)}, {"a:b:c:1": "a:b:c:9"}, "which is not a node"),
        ({"a:b:c:1": {"image_path": 1}}, {"a:b:c:1": None}, "needs strings"),
        (
            {"a:b:c:1": node(1), "a:b:c:2": node(2)},
            {"a:b:c:1": "a:b:c:2", "a:b:c:2": "a:b:c:1"},
            "dependency cycle",
        ),
    ],
)
def test_a_bad_plan_file_is_refused_with_the_reason(
    tmp_path: Path, nodes: dict[str, object], deps: dict[str, object], message: str
) -> None:
    with pytest.raises(PlanError, match=message):
        read_plan(write(tmp_path, nodes, deps))


def test_escapes_round_trip_and_bad_ones_are_refused() -> None:
    assert unescape_component("S~C3~A3o~20Paulo") == "São Paulo"
    for bad in ["~2", "~zz", "~2a", "~FF"]:
        with pytest.raises(PlanError):
            unescape_component(bad)


def test_json_text_follows_serde_json() -> None:
    # The forms serde_json 1.0.154 writes (zmij): keys sorted, no spaces,
    # signed exponents outside 1e-5..1e16, `.0` on whole floats.
    assert dumps({"b": [1, 2.0], "a": "é\u0001"}) == '{"a":"é\\u0001","b":[1,2.0]}'
    assert [float_text(x) for x in (1.5e20, 1e-7, 1.25e-5, 1e15, 0.1, -0.0)] == [
        "1.5e+20",
        "1e-7",
        "0.0000125",
        "1000000000000000.0",
        "0.1",
        "-0.0",
    ]
    assert dumps(2**70) == "1.1805916207174113e+21"
