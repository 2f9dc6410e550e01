"""Two Python environments, one user cache: does a trainer of one rebuild the other's DeepSpeed op?

    python bench/op_cache.py --env-b DIR [--cache DIR] [--mode before|after|both] [--rounds N] [--json]

Environment A is this interpreter's (``sys.prefix``); B is ``--env-b``, a virtual environment
made once with (its torch and DeepSpeed then live at B's own paths, as in a second clone's
environment, and the rest comes from A's site-packages)::

    python -m venv /tmp/opc-envB
    SP=/tmp/opc-envB/lib/python3.11/site-packages
    echo "$(python -c 'import site; print(site.getsitepackages()[0])')" > $SP/env-a.pth
    ln -s <A's site-packages>/torch $SP/torch; ln -s <A's site-packages>/deepspeed $SP/deepspeed

Both share one user cache (``XDG_CACHE_HOME=--cache``, emptied first). Each round starts
``memtui run --preset tiny --detach`` with A's interpreter, then with B's, one after the
other, waits for the run's first step and stops it. Per start it records the seconds to the
first step, whether a ``building_op`` phase was said, whether an op was compiled (a
``*.so`` under the cache written during the start) and the sha256 of the ``build.ninja``
it left. ``--mode before``: both use torch's default cache (``TORCH_EXTENSIONS_DIR`` set to
it, as every memtui did before it kept one per environment); ``after``: memtui's default,
one per environment. Run it under ``nice``; each build is minutes on a loaded 2-core machine.

Since the trainer declines DeepSpeed's shared-memory op (inference only; docs/deepspeed.md),
a default run builds nothing in either mode; the figures in docs/install.md were measured
before that, and the per-environment cache now matters for a ``deepspeed_config`` that needs
DeepSpeed's own optimizer op.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIRST_STEP_TIMEOUT_S = 900.0  # a build on a loaded 2-core machine takes minutes
POLL_S = 0.5  # s between two looks at the store


def first_step(store: Path, deadline: float) -> float:
    """Unix time of the run's first stored step, polled until ``deadline``."""
    while time.time() < deadline:
        if store.exists():
            try:
                with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
                    row = db.execute("select min(ts) from steps").fetchone()
                if row and row[0] is not None:
                    return float(row[0])
            except sqlite3.Error:
                pass  # the supervisor is creating it
        time.sleep(POLL_S)
    raise TimeoutError(f"no step in {store} within {FIRST_STEP_TIMEOUT_S:.0f} s")


def phases_said(store: Path) -> list[str]:
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        rows = db.execute("select data from events where type = 'startup_phase' order by seq").fetchall()
    return [json.loads(data)["phase"] for (data,) in rows]


def built_ops(cache: Path) -> dict[str, int]:
    """Every op library under the cache: path -> mtime (ns)."""
    return {str(p): p.stat().st_mtime_ns for p in cache.rglob("*.so")}


def ninja_files(cache: Path) -> dict[str, str]:
    """Every build.ninja under the cache: path -> sha256 (12 hex digits)."""
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest()[:12] for p in cache.rglob("build.ninja")}


def start(python: Path, env: dict[str, str], cache: Path, steps: int) -> dict[str, object]:
    """One ``memtui run --detach`` with ``python`` to its first step, then stopped."""
    home = Path(tempfile.mkdtemp(prefix="mtoc", dir="/tmp"))
    env = dict(env, MEMTUI_HOME=str(home), PYTHONPATH=str(REPO))
    memtui = [str(python), "-m", "memtui.cli"]
    before, began = built_ops(cache), time.time()
    run = [*memtui, "run", "--preset", "tiny", "--steps", str(steps), "--detach"]
    subprocess.run(run, env=env, check=True, capture_output=True)
    (run_dir,) = (home / "runs").iterdir()
    store = run_dir / "telemetry.sqlite"
    try:
        stepped = first_step(store, began + FIRST_STEP_TIMEOUT_S)
        after = built_ops(cache)
        return {
            "to_first_step_s": round(stepped - began, 1),
            "phases": phases_said(store),
            "compiled": sorted(p for p, mtime in after.items() if before.get(p) != mtime),
            "build_ninja": ninja_files(cache),
        }
    finally:
        subprocess.run([*memtui, "stop", str(run_dir)], env=env, capture_output=True)
        shutil.rmtree(home, ignore_errors=True)


def rounds(mode: str, envs: dict[str, Path], cache: Path, count: int, steps: int) -> list[dict[str, object]]:
    """``count`` rounds of one start per environment, in a freshly emptied user cache."""
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k != "TORCH_EXTENSIONS_DIR"}
    env["XDG_CACHE_HOME"] = str(cache)
    if mode == "before":  # torch's own default, shared by every environment of the user
        python = f"py{sys.version_info[0]}{sys.version_info[1]}"
        env["TORCH_EXTENSIONS_DIR"] = str(cache / "torch_extensions" / f"{python}_cpu")
    out = []
    for n in range(1, count + 1):
        for name, prefix in envs.items():
            measured = start(prefix / "bin" / "python", env, cache, steps)
            result = {"mode": mode, "round": n, "env": name, **measured}
            print(json.dumps(result), file=sys.stderr, flush=True)
            out.append(result)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-b", type=Path, required=True, help="the second environment's prefix")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/opc-cache"), help="the shared user cache")
    parser.add_argument("--mode", choices=["before", "after", "both"], default="both")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    envs = {"A": Path(sys.prefix), "B": args.env_b}
    if envs["A"].resolve() == envs["B"].resolve():
        parser.error("--env-b: the same environment as this interpreter's")
    modes = ["before", "after"] if args.mode == "both" else [args.mode]
    results = [r for mode in modes for r in rounds(mode, envs, args.cache, args.rounds, args.steps)]
    if args.json:
        print(json.dumps({"envs": {k: str(v) for k, v in envs.items()}, "starts": results}))
        return 0
    print(f"A = {envs['A']}, B = {envs['B']}, one user cache {args.cache}")
    for r in results:
        building = "building_op" in r["phases"]  # type: ignore[operator]
        compiled = "compiled" if r["compiled"] else "no build"
        print(
            f"{r['mode']:<7} round {r['round']} env {r['env']}: first step {r['to_first_step_s']:>6} s, "
            f"{compiled:<8}, building_op said: {'yes' if building else 'no'}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
