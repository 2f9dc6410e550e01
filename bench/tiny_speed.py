"""Steps/s and loss of a preset run through the real ``train()`` (no supervisor).

    python bench/tiny_speed.py [--steps 2000] [--preset tiny] [--set train.lr=3e-3 ...]

Prints steps/s (median and mean of the step times after 20 steps, and wall clock including
start-up), the training loss at step 1 and at the quarter marks (also averaged over the 50
steps up to each), and the first step whose loss fell below --target (default 2.6 nats/byte).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from engine.config.config_file import build_run_config
from engine.run.directory import RunDir
from engine.trainer import loop
from engine.trainer.link import NullLink


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="tiny", choices=["tiny", "small"])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--target", type=float, default=2.6, help="loss to reach, nats/byte (default 2.6)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, e.g. train.precision=fp32 (value parsed as JSON if it can be)",
    )
    return parser.parse_args()


def overrides(pairs: list[str]) -> dict[str, Any]:
    raw: dict[str, Any] = {}
    for pair in pairs:
        key, _, text = pair.partition("=")
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = text
        *parents, leaf = key.split(".")
        node = raw
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return raw


def main() -> None:
    args = parse_args()
    raw = {
        "preset": args.preset,
        "steps": args.steps,
        "checkpoint": {"every_steps": 0},
        **overrides(args.set),
    }
    config = build_run_config(raw)
    run = RunDir(Path(tempfile.mkdtemp(prefix="mtbench", dir="/tmp")))
    run.ensure_layout()
    link = NullLink(record=True)
    started = time.perf_counter()
    outcome = loop.train(config, run, attempt=1, link=link)
    wall = time.perf_counter() - started

    samples = [m.sample for m in link.sent or [] if m.kind == "step"]  # type: ignore[attr-defined]
    times = [s.step_time_s for s in samples[20:]]
    print(
        f"{outcome}: {len(samples)} steps, {config.train.precision}, zero {config.train.zero_stage}, "
        f"micro {config.train.micro_batch} x gas {samples[-1].grad_accum}, params "
        f"{next(m for m in link.sent if getattr(m, 'type', '') == 'trainer_started').data['params']:,}"
    )  # type: ignore[union-attr]
    print(
        f"steps/s: median {1 / statistics.median(times):.1f}, mean {len(times) / sum(times):.1f}, "
        f"wall clock incl. start-up {len(samples) / wall:.1f} ({wall:.1f} s)"
    )
    # The loss at step 1, then at the quarter marks ending on the last step (2,000 steps:
    # 500, 1000, 1500, 2000), each also as the mean of the 50 steps up to it (nats/byte).
    print(f"  loss, step 1: {samples[0].loss:.3f}")
    stride = max(50, len(samples) // 4)
    for end in sorted({*range(len(samples), 49, -stride)}):
        window = [s.loss for s in samples[end - 50 : end]]
        print(
            f"  loss, step {end}: {samples[end - 1].loss:.3f}; "
            f"mean of steps {end - 49}-{end}: {sum(window) / len(window):.3f}"
        )
    below = next((s.step for s in samples if s.loss < args.target), None)
    print(
        f"first step with loss < {args.target}: {below}; last-50 mean at step {samples[-1].step}: "
        f"{sum(s.loss for s in samples[-50:]) / min(50, len(samples)):.3f}"
    )


if __name__ == "__main__":
    main()
