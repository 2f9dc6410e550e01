#!/usr/bin/env python3
"""A planner command for memtui: lower the learning rate when the smoothed loss stalls.

memtui starts it once (``policy.planner = "command"``, ``policy.planner_command =
["python3", "examples/plateau_planner.py"]``) and, every ``policy.planner_every_steps``
optimizer steps, writes one JSON object (the telemetry summary) and a newline to its
stdin. It must answer each with exactly one line: a JSON object of directive fields to
change, with an optional "rationale" and "evidence", or {} for nothing. Whatever it
answers, memtui's policy still clamps or rejects it (and an operator approves it in
manual mode). Standard library only; run it by hand to try it:

    echo '{"step": 500, "loss_smoothed": 2.3, "effective": {}}' | python3 examples/plateau_planner.py
"""

from __future__ import annotations

import json
import sys

PATIENCE = 4  # ticks without a new best smoothed loss before we suggest a lower LR
MIN_GAIN = 0.005  # a new best must beat the old one by this fraction of it
FACTOR = 0.7  # on the LR multiplier in effect


def main() -> None:
    best: float | None = None
    stalled = 0
    for line in sys.stdin:
        summary = json.loads(line)
        loss = summary.get("loss_smoothed")
        answer: dict[str, object] = {}
        if isinstance(loss, (int, float)):
            if best is None or loss < best * (1 - MIN_GAIN):
                best, stalled = loss, 0
            else:
                stalled += 1
            if stalled >= PATIENCE:
                current = float(summary.get("effective", {}).get("lr_multiplier", 1.0))
                answer = {
                    "lr_multiplier": round(current * FACTOR, 4),
                    "rationale": f"smoothed loss stalled for {stalled} ticks: lower the learning rate",
                    "evidence": [
                        f"smoothed loss {loss:.4g} at step {summary.get('step')}",
                        f"best {best:.4g}, no {MIN_GAIN:.1%} gain for {stalled} ticks",
                    ],
                }
                stalled = 0
        print(json.dumps(answer), flush=True)  # exactly one line per summary


if __name__ == "__main__":
    main()
