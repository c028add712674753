"""Renders the Helm chart deploy/helm/tally with Helm's own engine (the
helm-python-sdk wheel binds Helm's Go SDK; no helm binary is needed).

    python render.py CHART VALUES OUTDIR   one file per template in OUTDIR
    python render.py --lint CHART VALUES   helm lint --strict
    python render.py --notes CHART VALUES  print the rendered NOTES.txt

Values are checked against the chart's values.schema.json first, as `helm
template` and `helm install` do: a value the schema does not declare is an
error. The release is "tally" in namespace "tally", as deploy/README.md
installs it.
"""

import sys
from pathlib import Path

import yaml
from helm_python import chart as helm_chart

RELEASE = "tally"
NAMESPACE = "tally"
HEADER = (
    "# Rendered from deploy/helm/tally by deploy/render.sh (values: {values});\n"
    "# do not edit: change the chart and run deploy/render.sh.\n"
)


def render_all(chart_dir: str, values_file: str) -> dict[str, str]:
    """Every rendered template by path, after the schema check."""
    values = yaml.safe_load(Path(values_file).read_text()) or {}
    loaded = helm_chart.Chart.load(chart_dir)
    loaded.validate_schema(loaded.merge_values(values))
    out: dict[str, str] = loaded.render(
        values=values, name=RELEASE, namespace=NAMESPACE, is_install=True
    )
    return out


def render(chart_dir: str, values_file: str) -> dict[str, str]:
    """Template path (relative to the chart's templates/) to its manifests,
    empty renderings left out."""
    out = render_all(chart_dir, values_file)
    rendered = {}
    for path, text in out.items():
        name = path.split("/templates/", 1)[-1]
        if name.startswith("_") or not name.endswith((".yaml", ".yml")):
            continue
        docs = [d for d in yaml.safe_load_all(text) if d]
        if docs:
            rendered[name] = text.strip() + "\n"
    return rendered


def lint(chart_dir: str, values_file: str) -> int:
    values = yaml.safe_load(Path(values_file).read_text()) or {}
    report = helm_chart.lint(chart_dir, values, strict=True, kube_version="v1.28.0")
    for m in report.get("messages", []):
        print(f"lint: {m}")
    for e in report.get("errors", []):
        print(f"lint error: {e}")
    bad = [m for m in report.get("messages", []) if m.get("severity", 0) >= 2]
    return 1 if bad or report.get("errors") else 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--lint"]:
        return lint(argv[1], argv[2])
    if argv[:1] == ["--notes"]:
        out = render_all(argv[1], argv[2])
        print(next(text for path, text in out.items() if path.endswith("/NOTES.txt")))
        return 0
    chart_dir, values_file, outdir = argv
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.yaml"):
        old.unlink()
    # The values file by name only, so the rendering is the same in every checkout.
    header = HEADER.format(values=f"deploy/helm/{Path(values_file).name}")
    for name, text in sorted(render(chart_dir, values_file).items()):
        (out / name).write_text(header + "---\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
