"""``memtui report RUN`` (the endurance report of any run, from its store alone) and
``memtui endure`` (a headless run under scheduled chaos and whole-tree kills, then its report).

The figures are ``engine.run.reports.endurance_report``'s; these commands only print them.
Torch-free; imports stay lazy so ``memtui --help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memtui.cli.arguments import add_run, non_negative_int, positive_int
from memtui.cli.errors import CliError

if TYPE_CHECKING:
    from engine.config.run_config import RunConfig
    from engine.run.directory import RunDir
    from engine.run.reports.endurance_report import EnduranceReport


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
    report.add_argument(
        "--html",
        metavar="PATH",
        help="write one self-contained page to PATH instead: the tables and plots of loss, "
        "tokens/s, memory and loss scale over time, with chaos, restarts, OOMs, rollbacks and "
        "applied directives marked",
    )
    report.set_defaults(handler=cmd_report)


def add_endure_parser(sub: Any) -> None:
    endure = sub.add_parser(
        "endure",
        help="run headless to the end under scheduled chaos and whole-tree kills, then report",
        description="Start a run (detached) with a [chaos] schedule (every kind, weight 1, unless "
        "the config names its own kinds) and a restart on preemption; SIGKILL its whole process "
        "tree --kills times at seeded steps and bring it back as 'memtui resume' does; when it "
        "ends, print its endurance report (and write it to --report). Exit 0 if it completed.",
    )
    endure.add_argument(
        "config", nargs="?", metavar="CONFIG.toml", help="run config (default: the tiny preset)"
    )
    endure.add_argument(
        "--steps", type=positive_int, required=True, metavar="N", help="target optimizer steps"
    )
    endure.add_argument(
        "--chaos-every",
        type=positive_int,
        metavar="M",
        help="mean steps between two injections (default 1000)",
    )
    endure.add_argument("--seed", type=non_negative_int, default=0, metavar="S", help="seeds chaos and kills")
    endure.add_argument(
        "--kills", type=non_negative_int, default=1, metavar="K", help="whole-tree kills (default 1)"
    )
    endure.add_argument("--report", metavar="PATH", help="also write the Markdown report here")
    endure.add_argument("--name", default="endure", help="run name (default endure)")
    endure.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one config key (repeatable), as for 'memtui run'",
    )
    endure.set_defaults(handler=cmd_endure)


def cmd_endure(args: argparse.Namespace) -> int:
    from memtui.cli.runs.endurance_driver import Endurance, kill_steps
    from memtui.cli.runs.lifecycle_commands import start_run

    config = endurance_config(args)
    run = start_run(config)
    kills = kill_steps(args.seed, config.steps, args.kills)
    print(
        f"endurance run {run.run_id}: {config.steps} steps, whole-tree kills after {kills}", file=sys.stderr
    )
    try:
        state = Endurance(run, config.steps, kills, resume=_resume).drive().state
    except CliError as err:  # a resume refused: the report says how far it got
        print(f"memtui: {err}", file=sys.stderr)
        state = None
    except KeyboardInterrupt:
        print(f"interrupted; {run.run_id} goes on unattended (memtui stop to end it)", file=sys.stderr)
        state = None
    report = read_report(run)
    if args.report:
        emit(report, as_json=False, out=Path(args.report))
    emit(report, as_json=False, out=None)
    return 0 if state == "completed" else 1


def endurance_config(args: argparse.Namespace) -> RunConfig:
    """The run's config: the file and ``--set``s, then the chaos schedule and restart policy."""
    from engine.chaos.config import default_kinds
    from engine.config.config_file import ConfigError, load_run_config

    settings = [*args.settings, f"chaos.seed={args.seed}", "restart.on_preemption=true"]
    if args.chaos_every is not None:
        settings.append(f"chaos.every_steps={args.chaos_every}")
    try:
        config = load_run_config(args.config, settings, steps=args.steps, name=args.name)
        if not config.chaos.kinds:
            kinds = [f"chaos.kinds.{kind}={weight:g}" for kind, weight in default_kinds().items()]
            config = load_run_config(args.config, [*settings, *kinds], steps=args.steps, name=args.name)
    except ConfigError as err:
        raise CliError(f"config error: {err}", code=2) from None
    return config


def _resume(run: RunDir) -> None:
    """Bring ``run`` back as ``memtui resume`` does; a refusal ends the endurance run, a run
    already served (its supervisor came back some other way) goes on being driven."""
    from engine.run.launch import AlreadyServed, LaunchError
    from memtui.cli.runs.resumption import ResumeRefused, resume_run

    try:
        pid, plan = resume_run(run, fresh=False)
    except AlreadyServed as err:
        print(f"{err}: driving it on", file=sys.stderr)
        return
    except (ResumeRefused, LaunchError) as err:
        raise CliError(f"{run.run_id}: cannot resume: {err}") from None
    print(f"resumed from step {plan.from_step or 0} (supervisor pid {pid})", file=sys.stderr)


def cmd_report(args: argparse.Namespace) -> int:
    from memtui.cli.resolver import require_run

    run = require_run(args.run, live=False, prefer_live=True)
    if args.html:
        if args.json or args.out:
            raise CliError("--html writes the page alone: leave out --json and --out", code=2)
        _write(read_page(run), Path(args.html), "report page", "--html")
        return 0
    emit(read_report(run), as_json=args.json, out=Path(args.out) if args.out else None)
    return 0


def read_report(run: RunDir) -> EnduranceReport:
    """The report of ``run`` from its store, or a CliError saying why there is none."""
    import sqlite3

    from engine.run.reports.endurance_report import endurance_report
    from engine.run.storage.store import Store, StoreError

    try:
        with Store(run.store, readonly=True) as store:
            return endurance_report(run, store)
    except (StoreError, sqlite3.Error) as err:
        raise CliError(f"{run.run_id}: cannot read its store: {err}", code=2) from None


def read_page(run: RunDir) -> str:
    """``run``'s report page (``memtui.report_page``), or a CliError saying why there is none."""
    import sqlite3

    from engine.run.reports.endurance_report import endurance_report
    from engine.run.storage.store import Store, StoreError
    from memtui.report_page import render_page
    from memtui.run_series import read_series

    try:
        with Store(run.store, readonly=True) as store:
            return render_page(endurance_report(run, store), read_series(store))
    except (StoreError, sqlite3.Error) as err:
        raise CliError(f"{run.run_id}: cannot read its store: {err}", code=2) from None


def emit(report: EnduranceReport, *, as_json: bool, out: Path | None) -> None:
    """Print ``report`` (Markdown or one JSON document) to stdout, or write it to ``out``."""
    import json

    from memtui.endurance_markdown import render_markdown

    text = json.dumps(report.document(), indent=2) + "\n" if as_json else render_markdown(report)
    if out is None:
        sys.stdout.write(text)
        return
    _write(text, out, "report", "--out")


def _write(text: str, out: Path, what: str, option: str) -> None:
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as err:
        raise CliError(f"{option} {out}: {err.strerror or err}") from None
    print(f"{what} written to {out}", file=sys.stderr)
