#!/usr/bin/env bash
# One call on a bare GPU host: install the carried wheelhouse into a private target (never
# downloading) and run every check of bench/gpu_check.py, writing gpu_check.json, its log and
# the console's SVG into $OUT (or --out DIR). Exit 1 names the first failed stage.
#
#   run(command="bash bench/gpu_check.sh", carry=["wheelhouse"], timeout_s=540)   # on the GPU host
#   bash bench/gpu_check.sh --cpu --quick --out /tmp/check                         # here, no GPU
#
# The wheelhouse comes from bench/gpu_wheels.sh, run on a machine with pip and a network.
# PYTHON picks the interpreter (default python3: on the GPU host, the one holding torch);
# WHEELHOUSE the folder of wheels (default wheelhouse/; installed only where it exists).
set -uo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO" || exit 2
PY="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1
WHEELHOUSE="${WHEELHOUSE:-$REPO/wheelhouse}"
args=("$@")
# The wheelhouse is built for the GPU host's Python (3.12): installed there, not in --cpu mode.
if [[ -d "$WHEELHOUSE" && " $* " != *" --cpu "* ]]; then
  args=(--wheelhouse "$WHEELHOUSE" "${args[@]}")
fi
timeout --kill-after=10 480 "$PY" bench/gpu_check.py "${args[@]}"
status=$?
if (( status == 124 || status == 137 )); then
  echo "FAILED: bench/gpu_check.py passed its 480 s limit (the summary holds the stages it finished)" >&2
fi
exit "$status"
