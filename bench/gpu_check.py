"""One prepared check of memtui's CUDA path on a bare GPU host, in one call; a CPU mode too.

``--quick`` is the first call on a device: the stages of ``QUICK_PLAN``, most important
first, each under its cap (425 s in all), so that it fits one 8-minute call with margin;
the full check (no ``--quick``) is the second. Every stage, in its order, each with its own
timeout under one overall deadline (default 450 s):
wheels (install the carried wheelhouse into a private target, never downloading),
environment, doctor (``memtui doctor --json``), plan (``memtui plan --json`` for the host's
GPU), the ``tiny`` and ``small`` presets in fp16 and bf16 through ``memtui run`` with
``memtui status --json`` read while live and at the end, real OOMs under a memory budget
(``bench/cuda_oom.py`` at ZeRO 0-2 with ``overlap_comm`` and at ZeRO 3, predicted peak
against measured), the trainer against a bare DeepSpeed loop (``bench/overhead.py``), and
the console attached to a live run in a Textual Pilot, saving an SVG
(``bench/console_shot.py``).

Writes ``gpu_check.json`` (every stage's status, reason, seconds and key figures) and
``gpu_check.log`` (every command's output) into ``--out``, after each stage; exits 1 naming
the first failed stage. ``--cpu`` runs the same stages on the CPU at small sizes (what only
CUDA can do is "skipped: no CUDA"); ``--quick`` takes very few steps (the test suite's
setting). Only the standard library here: everything else runs in child processes, with
the checkout and the installed wheels first on their PYTHONPATH.

    bash bench/gpu_check.sh                      # on the GPU host, wheelhouse/ carried
    python bench/gpu_check.py --cpu --quick --out /tmp/check
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_check_session import Check, StageFailed, StageSkipped  # noqa: E402
from gpu_check_stages import QUICK_PLAN, STAGES  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="run on the CPU at small sizes")
    parser.add_argument("--quick", action="store_true", help="very few steps (the test suite's setting)")
    parser.add_argument(
        "--out", type=Path, help="where the summary and log go (default: $OUT, else a temp dir)"
    )
    parser.add_argument("--wheelhouse", type=Path, help="wheels to install first (bench/gpu_wheels.sh)")
    parser.add_argument("--site", type=Path, default=REPO / ".gpu-site", help="where they are installed")
    parser.add_argument("--deadline-s", type=float, default=450.0, help="all stages together (default 450)")
    parser.add_argument("--only", help="comma-separated stage names to run (default: all)")
    return parser.parse_args(argv)


def out_dir(args: argparse.Namespace) -> Path:
    """--out, else the device host's $OUT, else a fresh temporary directory."""
    if args.out:
        path = args.out
    elif os.environ.get("OUT"):
        path = Path(os.environ["OUT"])
    else:
        path = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def stage_plan(quick: bool, names: list[str]) -> list[tuple[str, float | None]]:
    """(stage, its cap in seconds or None) in the order they run: ``--only``'s stages (with
    ``wheels``, which every other needs), else the quick plan's (``QUICK_PLAN``), else all."""
    if names:
        return [(name, None) for name in STAGES if name in names or name == "wheels"]
    if quick:
        return list(QUICK_PLAN.items())
    return [(name, None) for name in STAGES]


def run_stages(check: Check, names: list[str]) -> None:
    """The planned stages in order; one that fails is recorded and the next goes on, except
    that nothing runs after a failed ``wheels`` or ``environment`` (every later stage needs
    them). Under ``--quick`` each stage stops at its cap."""
    plan = stage_plan(check.quick, names)
    if check.quick and not names:
        left = [name for name in STAGES if name not in QUICK_PLAN]
        caps = ", ".join(f"{name} {cap:.0f} s" for name, cap in plan if cap is not None)
        check.log(f"quick plan: {caps}; the full check adds {', '.join(left)}")
    for name, cap in plan:
        stage = STAGES[name]
        record = check.begin(name)
        started = time.monotonic()
        check.stage_end = None if cap is None else started + cap
        try:
            record["figures"] = stage(check)
            record["status"] = "ok"
        except StageSkipped as skipped:
            record["status"], record["reason"] = "skipped", str(skipped)
        except StageFailed as failed:
            record["status"], record["reason"] = "failed", str(failed)
            record["figures"] = failed.figures
        except Exception as error:  # a bug in the check itself: named, and the rest goes on
            record["status"], record["reason"] = "failed", f"{type(error).__name__}: {error}"
        record["duration_s"] = round(time.monotonic() - started, 2)
        check.log(f"== {name}: {record['status']} {record.get('reason') or ''} ({record['duration_s']} s)")
        check.write_summary()
        if record["status"] == "failed" and name in ("wheels", "environment"):
            break


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = out_dir(args)
    check = Check(args, out, REPO)
    names = [n.strip() for n in args.only.split(",")] if args.only else []
    unknown = sorted(set(names) - set(STAGES))
    if unknown:
        print(f"--only: unknown stage(s) {', '.join(unknown)}; stages: {', '.join(STAGES)}", file=sys.stderr)
        return 2
    try:
        run_stages(check, names)
    finally:
        check.close()
    summary = check.write_summary()
    for record in summary["stages"]:
        reason = record["reason"] or ""
        print(f"{record['name']:<14} {record['status']:<8} {record['duration_s']:>7.1f} s  {reason}")
    print(f"summary: {out / 'gpu_check.json'}")
    if summary["first_failure"]:
        print(f"FAILED: {summary['first_failure']}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
