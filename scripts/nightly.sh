#!/usr/bin/env bash
# The one nightly entry point (CI and by hand): set up (idempotent), then `repro nightly`.
#
#   scripts/nightly.sh                                  # CPU profiles on the cpu-0.32.0 build
#   scripts/nightly.sh --profiles upstream-hisparse384,upstream-offload512 --build nightly@latest
#   scripts/nightly.sh --profiles cpu-tiny --set serve.num-gpu-blocks-override=16 \
#                      --set serve.max-model-len=1920   # a degraded candidate: exits 1
#   scripts/nightly.sh --engine sim                     # the four GLM arms, simulated, gated
#                                                       # exactly against launch/history/
#
# Defaults come from REPRO_NIGHTLY_PROFILES / REPRO_NIGHTLY_BUILD. Every other option is passed
# to `repro nightly` (see `repro nightly --help`). History: results/history.sqlite unless
# REPRO_HISTORY is set. Exit code: 0 ok, 1 regression or failed claim, 2 error.
# REPRO_NIGHTLY_BOOTSTRAP=0 skips scripts/bootstrap.sh (e.g. on a runner set up by other means).
set -euo pipefail
cd "$(dirname "$0")/.."

profiles="${REPRO_NIGHTLY_PROFILES:-cpu-tiny,cpu-tiny-mtp,cpu-tiny-pressure}"
build="${REPRO_NIGHTLY_BUILD:-cpu-0.32.0}"
engine=vllm
given_profiles="${REPRO_NIGHTLY_PROFILES:+1}"
given_build=
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --engine) engine="$2"; shift 2 ;;
        --engine=*) engine="${1#*=}"; shift ;;
        --profiles) profiles="$2"; given_profiles=1; shift 2 ;;
        --profiles=*) profiles="${1#*=}"; given_profiles=1; shift ;;
        --build) build="$2"; given_build=1; shift 2 ;;
        --build=*) build="${1#*=}"; given_build=1; shift ;;
        *) args+=("$1"); shift ;;
    esac
done

if [ "${REPRO_NIGHTLY_BOOTSTRAP:-1}" != "0" ]; then
    # The simulated engine needs only the harness: no vLLM build, no browser.
    if [ "$engine" = sim ]; then export REPRO_BOOTSTRAP_BUILD=0; fi
    ./scripts/bootstrap.sh >&2
fi
repro=.venv/bin/repro
[ -x "$repro" ] || repro=repro

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
if [ "$engine" = sim ]; then
    # Default arms: the four GLM arms (repro nightly --engine sim); --profiles still applies.
    if [ -n "$given_profiles" ]; then args=(--profiles "$profiles" "${args[@]}"); fi
    if [ -n "$given_build" ]; then args=(--build "$build" "${args[@]}"); fi  # refused by repro
    exec "$repro" nightly --engine sim "${args[@]}"
fi
exec "$repro" nightly --engine "$engine" --profiles "$profiles" --build "$build" "${args[@]}"
