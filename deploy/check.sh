#!/usr/bin/env bash
# Checks deploy/ the way a platform team would before applying it:
#   1. deploy/k8s/ is the current rendering of the Helm chart; helm lint --strict;
#      the chart's own checks (tools/chart_check.py: no symlink, the values
#      schema refuses a typo, a worker-only release, the monitoring API check,
#      names and pod settings, each provider's worker key and base URL)
#   2. kubernetes-validate --strict on the rendered manifests, Kubernetes 1.28-1.37,
#      and the ServiceMonitor/PrometheusRule against prometheus-operator's CRDs
#   3. Pod Security "restricted" and tally's rules (policy.py, with its self-test)
#   4. promtool check rules, and promtool test rules (a unit test per alert)
#   5. the dashboard's queries parse and name only exported metrics
#   6. hadolint on the Dockerfile
# Tools come from PyPI (pinned, deploy/tools/requirements.txt) and Debian
# (promtool); deploy/tools/install.sh installs them. Called by .ci/run.
set -euo pipefail
deploy="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$deploy")"
venv="$("$deploy/tools/install.sh")"
py="$venv/bin/python"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
passed=0
step() { echo; echo "== $*"; }
ok() { passed=$((passed + 1)); }

step "render: deploy/k8s is the chart's current rendering"
"$py" "$deploy/tools/render.py" "$deploy/helm/tally" "$deploy/helm/k8s-values.yaml" "$tmp/k8s"
if ! diff -ru "$deploy/k8s" "$tmp/k8s" --exclude=README.md; then
    echo "deploy/k8s differs from the chart's rendering: run deploy/render.sh" >&2
    exit 1
fi
"$py" "$deploy/tools/render.py" "$deploy/helm/tally" "$deploy/tools/testdata/values-variant.yaml" "$tmp/variant"
"$py" "$deploy/tools/render.py" "$deploy/helm/tally" "$deploy/tools/testdata/values-worker-only.yaml" "$tmp/worker-only"
echo "deploy/k8s is current ($(ls "$tmp/k8s" | wc -l) files); variant ($(ls "$tmp/variant" | wc -l) files) and worker-only ($(ls "$tmp/worker-only" | wc -l) files) rendered"
"$py" "$deploy/tools/render.py" --lint "$deploy/helm/tally" "$deploy/helm/k8s-values.yaml"
echo "helm lint --strict: no warnings or errors"
(cd "$deploy/tools" && "$py" chart_check.py "$deploy/helm/tally" "$deploy/tools/testdata")
ok

step "kubernetes-validate --strict, Kubernetes 1.28 to 1.37"
for minor in 28 29 30 31 32 33 34 35 36 37; do
    out="$("$venv/bin/kubernetes-validate" --strict -k "1.$minor.0" "$tmp"/k8s/*.yaml "$tmp"/variant/*.yaml "$tmp"/worker-only/*.yaml 2>&1)" || {
        echo "$out"; exit 1; }
    # Custom resources have no Kubernetes schema: crd_validate.py checks them.
    unknown="$(grep '^WARN' <<< "$out" | grep -v 'api version monitoring.coreos.com/v1' || true)"
    if [ -n "$unknown" ]; then echo "$unknown"; exit 1; fi
    echo "1.$minor: $(grep -c '^INFO.*passed' <<< "$out") objects passed"
done
"$py" "$deploy/tools/crd_validate.py" "$tmp/k8s"/*.yaml "$tmp/worker-only"/*.yaml
ok

step "Pod Security restricted and tally's deploy rules"
"$py" "$deploy/tools/policy.py" --self-test
"$py" "$deploy/tools/policy.py" "$tmp/k8s"/*.yaml
"$py" "$deploy/tools/policy.py" "$tmp/variant"/*.yaml
"$py" "$deploy/tools/policy.py" "$tmp/worker-only"/*.yaml
ok

step "promtool check rules / test rules"
promtool --version 2>&1 | head -1
promtool check rules "$deploy/prometheus/alerts.yaml"
(cd "$deploy/prometheus" && promtool test rules alerts.test.yaml)
ok

step "dashboard: queries parse and use exported metrics; every alert tested"
"$py" "$deploy/tools/metrics_check.py" "$root" "$tmp/dashboard-rules.yaml"
promtool check rules "$tmp/dashboard-rules.yaml"
ok

step "hadolint deploy/Dockerfile"
"$venv/bin/hadolint" --version
"$venv/bin/hadolint" --failure-threshold info "$deploy/Dockerfile"
echo "hadolint: no findings"
ok

echo
echo "deploy checks: $passed passed, 0 failed"
