#!/usr/bin/env bash
# Build the wheelhouse a bare GPU host lacks, here, on a machine with pip and a network.
#
# The GPU host (see /work/.library/device/README.md) has Python 3.12 on manylinux x86-64
# with torch, nvidia-ml-py, psutil, numpy, ninja, msgpack, einops, py-cpuinfo, tqdm and
# pytest, but neither DeepSpeed nor pydantic, textual, platformdirs, hjson, pytest-asyncio,
# and it cannot download. Everything lands in one ignored folder (default wheelhouse/),
# which `run(command="bash bench/gpu_check.sh", carry=["wheelhouse"])` takes along.
#
#   bash bench/gpu_wheels.sh [DIR]        PYTHON=... picks the pip (default: python3)
#
# Versions are pinned to what $PYTHON has installed (the suite's versions), else the newest.
# DeepSpeed is published as an sdist only: it is built here as a pure-Python wheel with
# DS_BUILD_OPS=0, so its ops are JIT-built on the host (ninja and nvcc are there).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$REPO/wheelhouse}"
PY="${PYTHON:-python3}"
DEEPSPEED_VERSION="0.19.8"
LIMIT_MIB=64  # what one device call carries, working tree included

# Binary (or universal) wheels the host lacks, or has in versions too old for textual 8.
BINARY=(
  pydantic pydantic-core annotated-types typing-inspection typing-extensions
  platformdirs hjson
  textual rich pygments markdown-it-py mdurl mdit-py-plugins linkify-it-py uc-micro-py
  pytest-asyncio pytest-timeout
)

pinned() {  # NAME -> NAME==VERSION as $PY has it, else NAME
  "$PY" - "$1" <<'PYEOF'
import sys
from importlib import metadata
name = sys.argv[1]
try:
    print(f"{name}=={metadata.version(name)}")
except metadata.PackageNotFoundError:
    print(name)
PYEOF
}

mkdir -p "$OUT"
rm -f "$OUT"/*.whl
specs=()
for name in "${BINARY[@]}"; do specs+=("$(pinned "$name")"); done

"$PY" -m pip download --quiet --no-deps --only-binary=:all: \
  --implementation cp --python-version 3.12 \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform any \
  -d "$OUT" "${specs[@]}"

# DeepSpeed: its sdist, built into a py3-none-any wheel (no compiled ops).
DS_BUILD_OPS=0 "$PY" -m pip wheel --quiet --no-deps -w "$OUT" "deepspeed==$DEEPSPEED_VERSION"

# memtui itself, from this checkout (the host can also run it from the carried tree).
build_dir="$(mktemp -d)"
cp -r "$REPO"/{setup.py,pyproject.toml,README.md,engine,memtui,themes} "$build_dir"/
"$PY" -m pip wheel --quiet --no-deps -w "$OUT" "$build_dir"
rm -rf "$build_dir"

echo "wheelhouse: $OUT"
(cd "$OUT" && ls -1 *.whl | while read -r w; do printf '  %8s  %s\n' "$(du -k "$w" | cut -f1)K" "$w"; done)
total_kib=$(du -ck "$OUT"/*.whl | tail -1 | cut -f1)
echo "total: $((total_kib / 1024)) MiB ($total_kib KiB) in $(ls "$OUT"/*.whl | wc -l) wheels"
if (( total_kib > LIMIT_MIB * 1024 )); then
  echo "over the ${LIMIT_MIB} MiB a device call carries" >&2
  exit 1
fi
