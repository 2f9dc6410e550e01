"""What a run's planners suggested and what the applied suggestions did, from its store.

Counts every proposal by the policy's first verdict (allowed, clamped, rejected) and by
source, then lists each applied directive with its effect (``policy.effect_steps`` steps
after against as many before: loss slope per step, mean tokens/s, fp16 overflows, peak
memory). Reads the store only, so it works on any run, live or ended. Prints one JSON object,
or with ``--text`` one line per figure.

    nice -n 19 memtui run --preset tiny --steps 5000 --set policy.planner='"rules"' \\
        --set policy.approval='"auto"' --detach
    python bench/planner_report.py RUN_DIR [--text]
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

from engine.events import DirectiveApplied, DirectiveEffectMeasured, DirectiveProposed
from engine.run.storage.store import Store


def report(run_dir: Path) -> dict[str, Any]:
    with Store(run_dir / "telemetry.sqlite", readonly=True) as store:
        first: dict[str, Any] = {}
        cursor = 0
        while page := store.decisions(cursor, 1000, None):
            for row_id, decision in page:
                first.setdefault(decision.directive_id, decision)
                cursor = row_id
        events = store.events_since(0)
        last = store.latest_step()
    verdicts = Counter(d.verdict for d in first.values())
    effects = []
    for event in events:
        measured = DirectiveEffectMeasured.of(event)
        if measured is not None:
            view = measured.directive
            effects.append(
                {
                    "id": view.id,
                    "source": view.source,
                    "applied": view.allowed,
                    "evidence": view.evidence,
                    "effect": measured.effect.model_dump(mode="json"),
                    "summary": measured.effect.describe(),
                }
            )
    proposed = [p for e in events if (p := DirectiveProposed.of(e)) is not None]
    applied = {a.directive_id for e in events if (a := DirectiveApplied.of(e)) is not None and a.applied}
    return {
        "run": run_dir.name,
        "steps": last.step if last else 0,
        "suggestions": len(first),
        "by_source": dict(Counter(d.source for d in first.values())),
        "allowed": verdicts.get("allow", 0),
        "clamped": verdicts.get("clamp", 0),
        "rejected": verdicts.get("reject", 0),
        "admitted_at_steps": [p.directive.step for p in proposed],
        "applied": len(applied),
        "measured": len(effects),
        "effects": effects,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--text", action="store_true", help="one line per figure instead of JSON")
    args = parser.parse_args()
    out = report(args.run_dir)
    if not args.text:
        print(json.dumps(out, indent=2))
        return
    print(
        f"{out['run']}: {out['steps']} steps, {out['suggestions']} suggestions "
        f"({out['allowed']} allowed, {out['clamped']} clamped, {out['rejected']} rejected), "
        f"{out['applied']} applied, {out['measured']} measured"
    )
    for e in out["effects"]:
        print(f"  {e['id']} {e['applied']} {e['summary']}")


if __name__ == "__main__":
    main()
