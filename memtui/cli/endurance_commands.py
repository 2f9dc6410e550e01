"""``memtui report RUN`` (the endurance report of any run, from its store alone) and
``memtui endure`` (a headless run under scheduled chaos and whole-tree kills, then its report).

The figures are ``engine.run.endurance_report``'s; these commands only print them.
Torch-free; imports stay lazy so ``memtui --help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memtui.cli.arguments import add_run
from memtui.cli.errors import CliError

if TYPE_CHECKING:
    from engine.run.directory import RunDir
    from engine.run.endurance_report import EnduranceReport


def add_report_parser(sub: Any) -> None:
    report = sub.add_parser(
        "report",
        help="a run's endurance report: steps sustained, throughput, OOMs, chaos, resumes",
        description="Compute the endurance report of a run (live, stopped or long gone) from its "
        "store alone, read-only. Markdown by default.",
    )
    add_run(report, "the newest run")
    report.add_argument("--json", action="store_true", help="print one JSON document")
    report.add_argument("--out", metavar="PATH", help="write it to PATH instead of stdout")
    report.set_defaults(handler=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    from memtui.cli.resolver import require_run

    run = require_run(args.run, live=False, prefer_live=True)
    emit(read_report(run), as_json=args.json, out=Path(args.out) if args.out else None)
    return 0


def read_report(run: RunDir) -> EnduranceReport:
    """The report of ``run`` from its store, or a CliError saying why there is none."""
    import sqlite3

    from engine.run.endurance_report import endurance_report
    from engine.run.store import Store, StoreError

    try:
        with Store(run.store, readonly=True) as store:
            return endurance_report(run, store)
    except (StoreError, sqlite3.Error) as err:
        raise CliError(f"{run.run_id}: cannot read its store: {err}") from None


def emit(report: EnduranceReport, *, as_json: bool, out: Path | None) -> None:
    """Print ``report`` (Markdown or one JSON document) to stdout, or write it to ``out``."""
    import json

    from memtui.endurance_markdown import render_markdown

    text = json.dumps(report.document(), indent=2) + "\n" if as_json else render_markdown(report)
    if out is None:
        sys.stdout.write(text)
        return
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as err:
        raise CliError(f"--out {out}: {err.strerror or err}") from None
    print(f"report written to {out}", file=sys.stderr)
