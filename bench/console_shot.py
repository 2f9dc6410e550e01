"""The console attached to a live run in a Textual Pilot (as the console tests drive it):
waits until a step the run reported live is drawn, saves an SVG screenshot, and prints what
the header and the memory panel show as one JSON document.

    python bench/console_shot.py RUN_DIR OUT.svg [--timeout 60]

Part of ``bench/gpu_check.py`` (its ``console`` stage); on a GPU host, the SVG shows the
memory panel over real CUDA figures.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.run.directory import RunDir  # noqa: E402
from memtui.console.app import MemtuiApp  # noqa: E402
from memtui.console.history_view import stored_view  # noqa: E402
from memtui.console.widgets.memory_panel import MemoryPanel  # noqa: E402
from memtui.console.widgets.panel import Panel  # noqa: E402
from memtui.console.widgets.run_header import RunHeader  # noqa: E402

SIZE = (140, 42)  # columns, rows: the full layout, every panel
POLL_S = 0.1


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("svg", type=Path)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for a live step")
    return parser.parse_args()


def text(widget: Panel | RunHeader) -> str:
    """What a panel or the header shows, as plain text (its figures, not its chart)."""
    if isinstance(widget, Panel):
        return str(widget.body.visual)
    return str(widget.visual)


async def shoot(run: RunDir, svg: Path, timeout: float) -> dict[str, object]:
    view = dataclasses.replace(stored_view(run), connection="connecting")
    first = view.sample.step if view.sample else 0
    app = MemtuiApp(run, live=True, view=view)
    async with app.run_test(size=SIZE) as pilot:
        deadline = time.monotonic() + timeout
        # a step newer than the stored history: it came over the live connection
        while not (app.view.connection == "connected" and app.view.sample and app.view.sample.step > first):
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"no live step drawn in {timeout:.0f} s (connection {app.view.connection})"
                )
            await pilot.pause(POLL_S)
        app.main.redraw()
        await pilot.pause()
        app.save_screenshot(filename=svg.name, path=str(svg.parent))
        memory = text(app.query_one(MemoryPanel))
        return {
            "connection": app.view.connection,
            "step": app.view.sample.step if app.view.sample else None,
            "mem_kind": app.view.sample.mem_kind if app.view.sample else None,
            "header": text(app.query_one(RunHeader)).splitlines(),
            "memory_panel": memory.splitlines(),
            "device_used_shown": "device used" in memory and "device used —" not in memory,
        }


def main() -> int:
    args = parse_args()
    found = asyncio.run(shoot(RunDir(args.run_dir), args.svg, args.timeout))
    print(json.dumps(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
