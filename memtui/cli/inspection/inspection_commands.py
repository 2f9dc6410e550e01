"""Looking at runs without changing them: ``ls``, ``status``, ``logs``, ``checkpoints`` and
``export``.

Each reads the run directory (its store read-only, so a live run goes on); ``status`` asks
the live supervisor first. With no ``RUN`` they mean the newest live run, else the newest.
Torch-free; imports stay lazy so ``memtui --help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from memtui.cli.arguments import add_run, non_negative_int
from memtui.cli.errors import CliError

if TYPE_CHECKING:
    from engine.domain import RunStatus
    from engine.run.directory import RunDir

NEWEST = "the newest live run, else the newest run"
"""What a left-out ``RUN`` means for these commands."""


# --------------------------------------------------------------------------- parsers


def add_export_parser(sub: Any) -> None:
    export = sub.add_parser(
        "export",
        help="write a run's steps or events as CSV, JSON lines or a TensorBoard run",
        description="Read the run's store (read-only; a live run goes on) and write its step "
        "telemetry and/or events. --format tensorboard writes every step's scalars, every eval "
        "and every event (as text) into the directory --out (needs memtui[tensorboard]).",
    )
    add_run(export, NEWEST)
    export.add_argument(
        "--format", choices=("csv", "jsonl", "tensorboard"), default="csv", help="default csv"
    )
    export.add_argument(
        "--what", choices=("steps", "events", "evals", "all"), default="steps", help="default steps"
    )
    export.add_argument(
        "--out", metavar="PATH", help="file to write (default stdout); a directory for csv --what all"
    )
    export.set_defaults(handler=cmd_export)


def add_ls_parser(sub: Any) -> None:
    ls = sub.add_parser("ls", help="list every run", description="List every run, newest first.")
    ls.add_argument("--json", action="store_true", help="print a JSON list of run statuses")
    ls.set_defaults(handler=cmd_ls)


def add_status_parser(sub: Any) -> None:
    status = sub.add_parser(
        "status",
        help="show one run's status",
        description="Ask the live supervisor; for a run nobody serves, read its store.",
    )
    add_run(status, NEWEST)
    status.add_argument("--json", action="store_true", help="print the RunStatus as JSON")
    status.set_defaults(handler=cmd_status)


def add_logs_parser(sub: Any) -> None:
    logs = sub.add_parser(
        "logs",
        help="print a run's logs: the supervisor's and the trainer's, merged in time order",
        description=(
            "Print the supervisor's and every trainer attempt's log lines merged in time order, "
            "each marked with its log (supervisor, trainer-N); --trainer or --supervisor prints "
            "one log as it is. The hang diagnosis files (every rank's stacks, NCCL flight records) "
            "are named on stderr."
        ),
    )
    add_run(logs, NEWEST)
    which = logs.add_mutually_exclusive_group()
    which.add_argument(
        "--trainer",
        dest="log",
        action="store_const",
        const="trainer",
        help="the newest attempt's trainer log",
    )
    which.add_argument(
        "--supervisor", dest="log", action="store_const", const="supervisor", help="the supervisor log"
    )
    logs.add_argument(
        "-f", "--follow", action="store_true", help="keep printing until the run's supervisor exits"
    )
    logs.add_argument(
        "-n",
        "--lines",
        type=non_negative_int,
        default=40,
        metavar="N",
        help="last lines to print first (default 40)",
    )
    logs.set_defaults(handler=cmd_logs, log="all")


def add_checkpoints_parser(sub: Any) -> None:
    checkpoints = sub.add_parser(
        "checkpoints",
        help="list a run's checkpoints and whether each verifies",
        description="List checkpoints newest first: step, size, age, and the check against the manifest.",
    )
    add_run(checkpoints, NEWEST)
    checkpoints.add_argument("--json", action="store_true", help="print a JSON list")
    checkpoints.add_argument(
        "--quick", action="store_true", help="check sizes only, do not hash (fast for big checkpoints)"
    )
    checkpoints.set_defaults(handler=cmd_checkpoints)


# ------------------------------------------------------------------------ commands


def cmd_ls(args: argparse.Namespace) -> int:
    import time

    from engine.run.directory import list_runs
    from engine.run.reports.status import offline_status

    now = time.time()
    entries = [_listing(offline_status(run), run, now) for run in list_runs()]
    if args.json:
        _print_json([{**status.model_dump(mode="json"), "age_s": age} for status, age in entries])
        return 0
    if not entries:
        print("no runs yet; start one with 'memtui run'", file=sys.stderr)
        return 0
    from memtui.status_report import ls_row, render_table

    print(render_table([ls_row(status, age) for status, age in entries]))
    return 0


def _listing(status: RunStatus, run: RunDir, now: float) -> tuple[RunStatus, float]:
    """A run's status and the seconds since it last did something (newest step, else its start)."""
    return status, max(0.0, now - (status.updated_at or status.started_at or run.created_at()))


def cmd_status(args: argparse.Namespace) -> int:
    import time

    from memtui.cli.live_status import fetch_status
    from memtui.cli.resolver import require_run

    status = fetch_status(require_run(args.run, live=False, prefer_live=True), strict=True)
    if args.json:
        print(status.model_dump_json())
    else:
        from memtui.status_report import render_status

        print(render_status(status, time.time()))
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    from memtui.cli.inspection.run_logs import follow, pick_log, tail_lines
    from memtui.cli.resolver import require_run

    run = require_run(args.run, live=False, prefer_live=True)
    _name_diagnosis(run)
    if args.log == "all":
        return _print_merged_logs(run, args)
    try:
        path = pick_log(run, args.log)
        for line in tail_lines(path, args.lines):
            print(line)
    except OSError as err:
        raise CliError(f"{run.run_id}: {getattr(err, 'strerror', None) or err}") from None
    sys.stdout.flush()
    if args.follow:
        follow(path, sys.stdout, alive=lambda: run.supervisor_pid() is not None)
    return 0


def _name_diagnosis(run: RunDir) -> None:
    """The stack dumps and flight records beside the logs, on stderr (the logs stay on stdout)."""
    from memtui.cli.inspection.run_logs import diagnosis_note

    note = diagnosis_note(run)
    if note:
        print(note, file=sys.stderr)


def _print_merged_logs(run: RunDir, args: argparse.Namespace) -> int:
    from memtui.cli.inspection.merged_logs import follow_merged, merged_tail
    from memtui.cli.inspection.run_logs import tail_lines

    try:
        lines = merged_tail(run, args.lines, tail_lines)
        if not lines and not args.follow and not run.supervisor_log.exists():
            raise FileNotFoundError(f"no log yet in {run.logs}")
        for line in lines:
            print(line)
        sys.stdout.flush()
        if args.follow:
            follow_merged(run, sys.stdout, alive=lambda: run.supervisor_pid() is not None)
    except OSError as err:
        raise CliError(f"{run.run_id}: {getattr(err, 'strerror', None) or err}") from None
    return 0


def cmd_checkpoints(args: argparse.Namespace) -> int:
    import time

    from memtui.checkpoint_report import checkpoint_rows, render_checkpoints
    from memtui.cli.resolver import require_run

    run = require_run(args.run, live=False, prefer_live=True)
    rows = checkpoint_rows(run, time.time(), "quick" if args.quick else "full")
    if args.json:
        _print_json(rows)
    elif not rows:
        print(f"{run.run_id}: no checkpoints yet", file=sys.stderr)
    else:
        print(render_checkpoints(rows))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from pathlib import Path

    from engine.run.storage.store import StoreError
    from memtui.cli.inspection.export import export
    from memtui.cli.resolver import require_run

    run = require_run(args.run, live=False, prefer_live=True)
    if not run.store.exists():
        raise CliError(f"{run.run_id}: no telemetry stored yet")
    if args.format == "tensorboard":
        return _export_tensorboard(run, args.out)
    out = Path(args.out) if args.out else sys.stdout
    try:
        rows = export(run.store, args.format, args.what, out)
    except BrokenPipeError:
        raise  # `memtui export | head`: main() ends quietly
    except (ValueError, StoreError, OSError) as err:
        code = 1 if isinstance(err, OSError) else 2  # 2: a refused value, or a damaged store
        raise CliError(f"export: {err}", code=code) from None
    if args.out:
        print(f"{rows} rows written to {args.out}", file=sys.stderr)
    return 0


def _export_tensorboard(run: RunDir, out: str | None) -> int:
    """``--format tensorboard``: the whole run into the directory ``--out``."""
    from pathlib import Path

    from engine.run.storage.store import StoreError
    from memtui.cli.inspection.tensorboard_export import TensorBoardMissing, export_tensorboard

    if not out:
        raise CliError("--format tensorboard writes a directory: give --out DIRECTORY", code=2)
    try:
        points = export_tensorboard(run.store, Path(out))
    except TensorBoardMissing as err:
        raise CliError(f"export: {err}", code=2) from None
    except FileExistsError as err:
        raise CliError(f"export: {err.args[0]}", code=2) from None
    except (StoreError, OSError) as err:
        raise CliError(f"export: {err}", code=2 if isinstance(err, StoreError) else 1) from None
    print(f"{points} points written to {out} (tensorboard --logdir {out})", file=sys.stderr)
    return 0


def _print_json(value: Any) -> None:
    from memtui.cli.json_document import print_json

    print_json(value)
