"""``memtui oom [RUN] [--json]``: the OOMs a run recorded (see ``memtui.oom_report``).

Torch-free; imports stay lazy so ``memtui --help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from memtui.cli.arguments import add_run
from memtui.cli.inspection.inspection_commands import NEWEST


def add_parser(sub: Any) -> None:
    oom = sub.add_parser(
        "oom",
        help="list a run's out-of-memory errors: breakdown files and allocator snapshots",
        description="List the OOMs a run recorded in its oom/ directory: step, attempt, micro-batch "
        "before and after, the memory breakdown (JSON) and, on CUDA with memory.history_entries "
        "set, the allocator snapshot with the command that opens it.",
    )
    add_run(oom, NEWEST)
    oom.add_argument("--json", action="store_true", help="print a JSON list (each with its breakdown)")
    oom.set_defaults(handler=cmd_oom)


def cmd_oom(args: argparse.Namespace) -> int:
    from memtui.cli.json_document import print_json
    from memtui.cli.resolver import require_run
    from memtui.oom_report import oom_rows, render_ooms

    run = require_run(args.run, live=False, prefer_live=True)
    rows = oom_rows(run)
    if args.json:
        print_json(rows)
    elif not rows:
        print(f"{run.run_id}: no out-of-memory error recorded", file=sys.stderr)
    else:
        print(render_ooms(rows))
    return 0
