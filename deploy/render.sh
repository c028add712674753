#!/usr/bin/env bash
# Renders the Helm chart into deploy/k8s/ (the plain manifests), with the
# values of deploy/helm/k8s-values.yaml. Run it after changing the chart;
# deploy/check.sh fails while deploy/k8s/ differs from a fresh rendering.
set -euo pipefail
deploy="$(cd "$(dirname "$0")" && pwd)"
venv="$("$deploy/tools/install.sh")"
"$venv/bin/python" "$deploy/tools/render.py" \
    "$deploy/helm/tally" "$deploy/helm/k8s-values.yaml" "$deploy/k8s"
echo "rendered deploy/helm/tally into deploy/k8s/"
