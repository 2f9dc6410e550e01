"""What verifying a checkpoint on resume costs: before (one file after another, every
time), hashed on a thread pool, and with the verification record the seal leaves.

    python bench/resume_verification.py [--preset small] [--rounds 5] [--keep DIR]

Trains the preset for 2 steps through the real ``train()`` (no supervisor) with a save at
step 2, then times ``verify_tag`` on that tag, alternating the modes each round, and
prints the median of each. The files are in the page cache (just written and read back
each round): the figures are hashing, not the disk; a cold cache adds the disk's read time
to the first two modes and nothing to the third. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from engine.checkpoints import manifest
from engine.checkpoints.manifest import Verdict, verify_tag


def make_checkpoint(preset: str, root: Path) -> Path:
    """The tag of a 2-step run of ``preset`` under ``root``."""
    from engine.config.config_file import build_run_config
    from engine.run.directory import RunDir
    from engine.trainer import loop
    from engine.trainer.link import NullLink

    config = build_run_config({"preset": preset, "steps": 2, "checkpoint": {"every_steps": 2}})
    run = RunDir(root)
    run.ensure_layout()
    loop.train(config, run, attempt=1, link=NullLink())
    return run.checkpoints / "global_step2"


def timed(tag: Path, workers: int, record: str) -> tuple[float, Verdict]:
    manifest.HASH_WORKERS = workers
    started = time.perf_counter()
    verdict = verify_tag(tag, 2, "full", record)  # type: ignore[arg-type]
    took = time.perf_counter() - started
    assert verdict.ok, verdict.problem
    return took, verdict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--keep", type=Path, help="use (or leave) the run here instead of a temp dir")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="mtverify", dir="/tmp"))
    tag = root / "checkpoints" / "global_step2"
    try:
        if not tag.is_dir():
            tag = make_checkpoint(args.preset, root)
        parallel = manifest.HASH_WORKERS
        modes = {
            "before: one file after another": (1, "ignore"),
            f"thread pool ({parallel} workers), no record": (parallel, "ignore"),
            "with the seal's verification record": (parallel, "read"),
        }
        times: dict[str, list[float]] = {name: [] for name in modes}
        hashed: dict[str, int] = {}
        for _ in range(args.rounds):
            for name, (workers, record) in modes.items():
                took, verdict = timed(tag, workers, record)
                times[name].append(took)
                hashed[name] = verdict.hashed_bytes
        files = verify_tag(tag, 2, "quick").manifest
        assert files is not None
        print(f"{tag}: {len(files.files)} files, {files.size_bytes / 1e6:.1f} MB; median of {args.rounds}")
        for name, values in times.items():
            median_ms = statistics.median(values) * 1e3
            print(f"  {name:45} {median_ms:9.1f} ms  ({hashed[name] / 1e6:.1f} MB hashed)")
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
