"""Checks that the dashboard and the alert rules use only metrics tally
exports, and that every alert has a promtool unit test that fires it.

    python metrics_check.py REPO_ROOT RULES_OUT

- The exported names are deploy/README.md's "Metrics" table; each of its
  families must also appear as a name in the Rust sources under services/
  or clients/ (so the table cannot list a metric the code lost).
- Every metric a Grafana target or an alert expression names must be in the
  table, with a suffix its type has (`_bucket`/`_sum`/`_count` only for
  histograms).
- RULES_OUT receives the dashboard's queries as recording rules, for
  `promtool check rules` to parse (Grafana's `$__…` variables replaced).
"""

import json
import re
import sys
from pathlib import Path

import yaml

NAME = re.compile(r"\b((?:tally|process)_[a-z0-9_]+)\b")
STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
GRAFANA_VARS = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}


def documented(readme: str) -> dict[str, str]:
    """Sample name to type, from the README's Metrics table."""
    section = readme.split("## Metrics", 1)[1].split("\n## ", 1)[0]
    out = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].startswith("`"):
            continue
        kind = cells[1]
        names = re.findall(r"`([a-z0-9_]+)`", cells[0])
        full = []
        for n in names:
            # `tally_x_in_use`, `_idle`: a suffix shares the first name's stem.
            if n.startswith("_") and full:
                n = full[0].rsplit("_", 2)[0] + n if full[0].endswith("_in_use") else full[0].rsplit("_", 1)[0] + n
            full.append(n)
        for n in full:
            out[n] = kind
    return out


def family(name: str, kind: str) -> str:
    """The family name the code registers (counters and infos without
    their suffix)."""
    for suffix in ("_total", "_info"):
        if name.endswith(suffix) and ("counter" in kind or "info" in kind):
            return name[: -len(suffix)]
    return name


def allowed(docs: dict[str, str]) -> set[str]:
    names = set(docs)
    for n, kind in docs.items():
        if "histogram" in kind:
            names |= {n + s for s in HISTOGRAM_SUFFIXES}
    return names


def metric_names(expr: str) -> set[str]:
    return set(NAME.findall(STRING.sub('""', expr)))


def main(root: Path, rules_out: Path) -> int:
    errors = []
    docs = documented((root / "deploy/README.md").read_text())
    if len(docs) < 20:
        errors.append(f"README Metrics table: only {len(docs)} names parsed")
    sources = "\n".join(
        p.read_text()
        for top in ("services", "clients")
        for p in sorted((root / top).rglob("src/**/*.rs"))
    )
    in_code = set(re.findall(r'"((?:tally|process)_[a-z0-9_]+)"', sources))
    for n, kind in sorted(docs.items()):
        if family(n, kind) not in in_code:
            errors.append(f"README lists {n} ({kind}) but no source under services/ or clients/ names {family(n, kind)!r}")
    ok = allowed(docs)

    used = {}
    dashboard = json.loads((root / "deploy/grafana/tally.json").read_text())
    rules = []
    for panel in dashboard["panels"]:
        for t in panel.get("targets", []):
            expr = t["expr"]
            used.setdefault(f"dashboard panel {panel['id']} ({panel['title']})", set()).update(metric_names(expr))
            for var, value in GRAFANA_VARS.items():
                expr = expr.replace(var, value)
            rules.append({"record": f"dashboard:panel{panel['id']}:{t['refId']}", "expr": expr})
    alerts = yaml.safe_load((root / "deploy/prometheus/alerts.yaml").read_text())
    alert_names = []
    for group in alerts["groups"]:
        for r in group["rules"]:
            alert_names.append(r.get("alert") or r.get("record"))
            used.setdefault(f"alert {alert_names[-1]}", set()).update(metric_names(r["expr"]))
    for where, names in sorted(used.items()):
        for n in sorted(names - ok):
            errors.append(f"{where}: {n} is not an exported metric (deploy/README.md, Metrics)")

    tests = yaml.safe_load((root / "deploy/prometheus/alerts.test.yaml").read_text())
    fired = {
        case["alertname"]
        for t in tests["tests"]
        for case in t.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    for a in alert_names:
        if a not in fired:
            errors.append(f"alert {a}: no test in alerts.test.yaml expects it to fire")

    rules_out.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, sort_keys=False))
    for e in errors:
        print(f"FAIL {e}")
    n_used = len(set().union(*used.values()))
    print(
        f"metrics: {len(docs)} documented, {n_used} used by {len(rules)} dashboard queries"
        f" and {len(alert_names)} alerts, {len(errors)} problems"
    )
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
