#!/usr/bin/env bash
# Installs the tools deploy/check.sh uses, from the package registries only:
# the pinned PyPI wheels of requirements.txt into a venv, and promtool from
# Debian's `prometheus` package. Prints the venv's path. Idempotent: a venv
# whose requirements did not change is reused.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
venv="${TALLY_DEPLOY_TOOLS:-$root/target/deploy-tools/venv}"
req="$root/deploy/tools/requirements.txt"

if ! command -v promtool > /dev/null 2>&1; then
    echo "installing promtool (Debian package prometheus)" >&2
    if [ "$(id -u)" -ne 0 ]; then
        echo "promtool is missing: apt-get install prometheus (as root)" >&2
        exit 1
    fi
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >&2
fi

if [ ! -f "$venv/.requirements" ] || ! cmp -s "$req" "$venv/.requirements"; then
    echo "installing deploy tools into $venv" >&2
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$req" >&2
    cp "$req" "$venv/.requirements"
fi
echo "$venv"
