"""The ``memtui`` command: start, watch, inspect and stop runs.

::

    memtui                      attach to the newest live run, or start the demo and attach
    memtui run [CONFIG.toml]    start a run (detached supervisor), then attach
    memtui attach [RUN]         open the console (read-only history for a finished run)
    memtui ls | status | logs | stop
    memtui pause [RUN] | unpause [RUN]   hold training at a step boundary / let it go on
    memtui resume [RUN]         start an interrupted run again from its newest verified checkpoint
    memtui checkpoints [RUN]    list checkpoints: step, size, age, verification
    memtui doctor [--json]      check this machine: software, GPUs, host; verdict with reasons
    memtui directives [RUN] | approve ID | reject ID | clamp ID | propose [RUN]   planner directives

Imports are lazy: ``memtui --help`` must not pay for pydantic, textual or the engine.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.config import RunConfig
    from engine.domain import RunStatus
    from engine.run.directory import RunDir

STOP_TIMEOUT_S = 120.0
STOP_POLL_S = 0.25
STOP_GRACE_S = 5.0
"""After a terminal state, how long to wait for the supervisor process to exit."""
OK_ENDINGS = ("stopped", "completed")


class CliError(Exception):
    """A failure reported as one line ``memtui: <message>``; ``code`` is the exit status."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


class _Parser(argparse.ArgumentParser):
    """Argument errors as one line and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


# --------------------------------------------------------------------------- parser


def _int_at_least(minimum: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


_positive_int = _int_at_least(1)
_non_negative_int = _int_at_least(0)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _theme(text: str) -> str:
    from memtui.theming import available_themes

    if text not in available_themes():
        raise argparse.ArgumentTypeError(
            f"unknown theme {text!r} (choose from {', '.join(available_themes())})"
        )
    return text


def _add_theme(parser: argparse.ArgumentParser, *, root: bool = False) -> None:
    # Subcommands leave the attribute alone when not given, so `memtui --theme X attach` works.
    parser.add_argument(
        "--theme",
        type=_theme,
        default=None if root else argparse.SUPPRESS,
        metavar="NAME",
        help="console theme: dark (default), light or ansi (the terminal's colours)",
    )


def _add_readonly(parser: argparse.ArgumentParser, *, root: bool = False) -> None:
    parser.add_argument(
        "--readonly",
        action="store_true",
        default=False if root else argparse.SUPPRESS,
        help="watch only: the console hides and refuses every command that changes the run",
    )


def _add_bell(parser: argparse.ArgumentParser, *, root: bool = False) -> None:
    parser.add_argument(
        "--bell",
        action="store_true",
        default=False if root else argparse.SUPPRESS,
        help="ring the terminal bell on warning and critical alerts (or set MEMTUI_BELL=1)",
    )


def _add_run(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument(
        "run",
        nargs="?",
        metavar="RUN",
        help=f"run id, unique prefix of one, or run directory (default: {default})",
    )


def build_parser() -> argparse.ArgumentParser:
    from memtui import __version__

    parser = _Parser(
        prog="memtui",
        description="An operator console for long PyTorch/DeepSpeed training runs.",
        epilog="With no command: attach to the newest live run, or start the tiny demo run and attach.",
    )
    parser.add_argument("--version", action="version", version=f"memtui {__version__}")
    _add_theme(parser, root=True)
    _add_readonly(parser, root=True)
    _add_bell(parser, root=True)
    parser.set_defaults(handler=cmd_default)
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")

    run = sub.add_parser(
        "run",
        help="start a run (detached) and attach the console",
        description="Validate a config, start its supervisor detached, then attach.",
    )
    run.add_argument(
        "config", nargs="?", metavar="CONFIG.toml", help="run config (default: the preset alone)"
    )
    run.add_argument(
        "--preset", choices=("tiny", "small"), help="starting point for model and train settings"
    )
    run.add_argument("--steps", type=_positive_int, metavar="N", help="target optimizer steps")
    run.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one config key, e.g. --set train.ranks=2 --set memory.budget=0.5 (repeatable)",
    )
    run.add_argument("--name", help="run name (the id is NAME-<timestamp>)")
    run.add_argument("--detach", action="store_true", help="start it and return; do not open the console")
    run.add_argument("--json", action="store_true", help="print the started run as JSON")
    _add_theme(run)
    _add_readonly(run)
    _add_bell(run)
    run.set_defaults(handler=cmd_run)

    attach = sub.add_parser(
        "attach",
        help="open the console on a run",
        description="Open the console; a finished run opens read-only on its history.",
    )
    _add_run(attach, "the newest live run")
    _add_theme(attach)
    _add_readonly(attach)
    _add_bell(attach)
    attach.set_defaults(handler=cmd_attach)

    export = sub.add_parser(
        "export",
        help="write a run's steps or events as CSV or JSON lines",
        description="Read the run's store (read-only; a live run goes on) and write its step "
        "telemetry and/or events.",
    )
    _add_run(export, "the newest live run, else the newest run")
    export.add_argument("--format", choices=("csv", "jsonl"), default="csv", help="default csv")
    export.add_argument("--what", choices=("steps", "events", "all"), default="steps", help="default steps")
    export.add_argument(
        "--out", metavar="PATH", help="file to write (default stdout); a directory for csv --what all"
    )
    export.set_defaults(handler=cmd_export)

    ls = sub.add_parser("ls", help="list every run", description="List every run, newest first.")
    ls.add_argument("--json", action="store_true", help="print a JSON list of run statuses")
    ls.set_defaults(handler=cmd_ls)

    status = sub.add_parser(
        "status",
        help="show one run's status",
        description="Ask the live supervisor; for a run nobody serves, read its store.",
    )
    _add_run(status, "the newest live run, else the newest run")
    status.add_argument("--json", action="store_true", help="print the RunStatus as JSON")
    status.set_defaults(handler=cmd_status)

    logs = sub.add_parser(
        "logs",
        help="print a run's log",
        description="Print the newest trainer log (or the supervisor log if there is none).",
    )
    _add_run(logs, "the newest live run, else the newest run")
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
        type=_non_negative_int,
        default=40,
        metavar="N",
        help="last lines to print first (default 40)",
    )
    logs.set_defaults(handler=cmd_logs, log="auto")

    stop = sub.add_parser(
        "stop",
        help="stop a run gracefully and wait for it",
        description="Ask the supervisor to stop (finish the step, checkpoint, exit) and wait.",
    )
    _add_run(stop, "the newest live run")
    stop.add_argument(
        "--timeout",
        type=_positive_float,
        default=STOP_TIMEOUT_S,
        metavar="S",
        help=f"seconds to wait for the run to end (default {STOP_TIMEOUT_S:g})",
    )
    stop.set_defaults(handler=cmd_stop)
    _add_checkpoint_commands(sub)
    _add_doctor_command(sub)
    _add_directive_commands(sub)
    _add_pause_commands(sub)
    return parser


def _add_doctor_command(sub: Any) -> None:
    """``doctor`` (the Doctor issue)."""
    doctor = sub.add_parser(
        "doctor",
        help="check this machine before a run: software, GPUs, host; verdict with reasons",
        description=(
            "The environment doctor: Python, torch and its CUDA build, the driver, DeepSpeed, "
            "GPUs via NVML, host CPU/RAM/disk. Verdict healthy, degraded or unhealthy with "
            "reasons; exit 1 only if unhealthy. No GPU or no NVML is a reason, never an error."
        ),
    )
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.add_argument(
        "--deep",
        action="store_true",
        help="also ask torch whether CUDA works, and DeepSpeed which ops are pre-built or can be "
        "JIT-built here (slower: child processes)",
    )
    doctor.set_defaults(handler=cmd_doctor)


def _add_directive_commands(sub: Any) -> None:
    """``directives``, ``approve``, ``reject``, ``clamp``, ``propose`` (the Directives issue)."""
    from memtui.cli.directive_commands import add_parsers

    add_parsers(sub)


def _add_pause_commands(sub: Any) -> None:
    """``pause`` and ``unpause`` (the Pause issue)."""
    from memtui.cli.pause_commands import add_parsers

    add_parsers(sub)


def _add_checkpoint_commands(sub: Any) -> None:
    """``resume`` and ``checkpoints`` (the Checkpoints issue)."""
    resume = sub.add_parser(
        "resume",
        help="start a run again whose processes are gone, from its newest verified checkpoint",
        description=(
            "Start an interrupted (or stopped, or failed) run again in the same run directory, "
            "with its history, from its newest checkpoint that verifies. Refuses if checkpoints "
            "exist but none verifies, unless --fresh."
        ),
    )
    _add_run(resume, "the newest run")
    resume.add_argument(
        "--fresh",
        action="store_true",
        help="if no checkpoint verifies, start over at step 0 (bad tags are moved to quarantine/)",
    )
    resume.add_argument("--detach", action="store_true", help="start it and return; do not open the console")
    resume.add_argument("--json", action="store_true", help="print the resumed run as JSON")
    _add_theme(resume)
    resume.set_defaults(handler=cmd_resume)

    checkpoints = sub.add_parser(
        "checkpoints",
        help="list a run's checkpoints and whether each verifies",
        description="List checkpoints newest first: step, size, age, and the check against the manifest.",
    )
    _add_run(checkpoints, "the newest live run, else the newest run")
    checkpoints.add_argument("--json", action="store_true", help="print a JSON list")
    checkpoints.add_argument(
        "--quick", action="store_true", help="check sizes only, do not hash (fast for big checkpoints)"
    )
    checkpoints.set_defaults(handler=cmd_checkpoints)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except CliError as err:
        print(f"memtui: {err}", file=sys.stderr)
        return err.code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `memtui status --json | head`: the reader left, not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's exit flush must not raise again
        return 0


# ------------------------------------------------------------------------- commands


def _resolve(spec: str | None, *, live: bool, prefer_live: bool = False) -> RunDir:
    from memtui.cli.resolver import RunNotFound, resolve_run

    try:
        return resolve_run(spec, live=live, prefer_live=prefer_live)
    except RunNotFound as err:
        raise CliError(str(err), code=2 if err.usage else 1) from None


def cmd_default(args: argparse.Namespace) -> int:
    from engine.run.directory import list_runs

    live = next((r for r in list_runs() if r.supervisor_pid() is not None), None)
    if live is None:
        from engine.config_file import build_run_config

        live = _start(build_run_config(preset="tiny"))
        print(f"started the demo run {live.run_id}", file=sys.stderr)
    return open_console(live, args.theme, readonly=args.readonly, bell=args.bell)


def cmd_run(args: argparse.Namespace) -> int:
    from engine.config_file import ConfigError, load_run_config

    try:
        config = load_run_config(
            args.config, args.settings, preset=args.preset, steps=args.steps, name=args.name
        )
    except ConfigError as err:
        raise CliError(f"config error: {err}", code=2) from None
    run = _start(config)
    _print_started(run, as_json=args.json)
    return 0 if args.detach else open_console(run, args.theme, readonly=args.readonly, bell=args.bell)


def _start(config: RunConfig) -> RunDir:
    from engine.run.directory import RunDir
    from engine.run.launch import LaunchError, spawn_supervisor, wait_until_serving

    try:
        run = RunDir.create(config)
    except (OSError, ValueError) as err:
        raise CliError(f"cannot create the run directory: {err}") from None
    pid = spawn_supervisor(run)
    try:
        wait_until_serving(run, pid)
    except LaunchError as err:
        raise CliError(f"the run did not start: {err}") from None
    return run


def _print_started(run: RunDir, *, as_json: bool) -> None:
    pid = run.supervisor_pid()
    if as_json:
        import json

        print(json.dumps({"run_id": run.run_id, "run_dir": str(run.path), "supervisor_pid": pid}))
    else:
        print(f"started {run.run_id} (supervisor pid {pid})\n  dir {run.path}")


def cmd_attach(args: argparse.Namespace) -> int:
    return open_console(
        _resolve(args.run, live=args.run is None), args.theme, readonly=args.readonly, bell=args.bell
    )


def cmd_export(args: argparse.Namespace) -> int:
    from pathlib import Path

    from engine.run.store import StoreError
    from memtui.cli.export import export

    run = _resolve(args.run, live=False, prefer_live=True)
    if not run.store.exists():
        raise CliError(f"{run.run_id}: no telemetry stored yet")
    out = Path(args.out) if args.out else sys.stdout
    try:
        rows = export(run.store, args.format, args.what, out)
    except BrokenPipeError:
        raise  # `memtui export | head`: main() ends quietly
    except (ValueError, StoreError, OSError) as err:
        raise CliError(f"export: {err}", code=2 if isinstance(err, ValueError) else 1) from None
    if args.out:
        print(f"{rows} rows written to {args.out}", file=sys.stderr)
    return 0


def open_console(run: RunDir, theme: str | None, *, readonly: bool = False, bell: bool = False) -> int:
    """Run the console on ``run`` until the operator detaches; the run goes on.

    It opens on the stored history at once; a live run then replays only newer events.
    ``bell`` (or ``MEMTUI_BELL=1``) rings the terminal bell on live warning/critical alerts.
    """
    import dataclasses
    import os

    from memtui.console.app import MemtuiApp
    from memtui.console.history_view import stored_view
    from memtui.theming import DEFAULT_THEME

    live = run.supervisor_pid() is not None
    view = stored_view(run)
    if live:
        view = dataclasses.replace(view, connection="connecting")
    bell = bell or os.environ.get("MEMTUI_BELL", "").lower() in ("1", "true", "yes", "on")
    app = MemtuiApp(
        run, live=live, view=view, theme_name=theme or DEFAULT_THEME, readonly=readonly, bell=bell
    )
    app.run()
    return app.return_code or 0


def cmd_ls(args: argparse.Namespace) -> int:
    import time

    from engine.run.directory import list_runs
    from engine.run.status import offline_status

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

    status = fetch_status(_resolve(args.run, live=False, prefer_live=True))
    if args.json:
        print(status.model_dump_json())
    else:
        from memtui.status_report import render_status

        print(render_status(status, time.time()))
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    from memtui.cli.run_logs import follow, pick_log, tail_lines

    run = _resolve(args.run, live=False, prefer_live=True)
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


def cmd_stop(args: argparse.Namespace) -> int:
    from engine.protocol import Stop
    from memtui.client import EngineRefused, EngineUnavailable, new_request_id, request_once

    run = _resolve(args.run, live=args.run is None)
    if run.supervisor_pid() is None:
        return _report_ending(run, _final_status(run), already=True)
    try:
        request_once(run.socket, Stop(id=new_request_id(), reason="memtui stop"), timeout=10.0)
    except EngineRefused as err:
        raise CliError(f"{run.run_id}: the supervisor refused to stop: {err.reason}") from None
    except EngineUnavailable:
        pass  # it may be exiting already; the wait below tells
    print(f"stopping {run.run_id} ...", file=sys.stderr)
    return _report_ending(run, _wait_for_ending(run, args.timeout))


def _wait_for_ending(run: RunDir, timeout: float) -> RunStatus:
    """Poll until the supervisor exits (or, once the state is terminal, a grace period passes)."""
    import time

    from engine.domain import TERMINAL_STATES
    from memtui.cli.live_status import fetch_status

    deadline = time.monotonic() + timeout
    ended_at: float | None = None
    while True:
        if run.supervisor_pid() is None:
            return _final_status(run)
        status = fetch_status(run)
        now = time.monotonic()
        if status.state in TERMINAL_STATES:
            ended_at = ended_at or now
            if now - ended_at >= STOP_GRACE_S:
                return status
        if now >= deadline:
            raise CliError(f"{run.run_id}: still {status.state} after {timeout:g} s")
        time.sleep(STOP_POLL_S)


def _final_status(run: RunDir) -> RunStatus:
    from engine.run.status import offline_status

    return offline_status(run)


def _report_ending(run: RunDir, status: RunStatus, *, already: bool = False) -> int:
    detail = f" ({status.exit_reason})" if status.exit_reason else ""
    prefix = "was already " if already else ""
    print(f"{run.run_id}: {prefix}{status.state} at step {status.step}{detail}")
    return 0 if status.state in OK_ENDINGS else 1


def cmd_resume(args: argparse.Namespace) -> int:
    from engine.run.launch import LaunchError, spawn_supervisor, wait_until_serving
    from memtui.cli.resumption import ResumeRefused, check_resumable

    run = _resolve(args.run, live=False)
    try:
        plan = check_resumable(run, fresh=args.fresh)
    except ResumeRefused as err:
        raise CliError(f"{run.run_id}: cannot resume: {err}") from None
    for skipped in plan.skipped:
        print(f"skipping {skipped}", file=sys.stderr)
    where = f"step {plan.from_step}" if plan.from_step is not None else "step 0 (fresh start)"
    pid = spawn_supervisor(run, extra_args=["--fresh"] if args.fresh else [])
    try:
        wait_until_serving(run, pid)
    except LaunchError as err:
        raise CliError(f"the run did not start: {err}") from None
    if args.json:
        started = {"run_id": run.run_id, "run_dir": str(run.path), "supervisor_pid": pid}
        _print_json({**started, "from_step": plan.from_step})
    else:
        print(f"resumed {run.run_id} from {where} (supervisor pid {pid})")
    return 0 if args.detach else open_console(run, args.theme)


def cmd_checkpoints(args: argparse.Namespace) -> int:
    import time

    from memtui.checkpoint_report import checkpoint_rows, render_checkpoints

    run = _resolve(args.run, live=False, prefer_live=True)
    rows = checkpoint_rows(run, time.time(), "quick" if args.quick else "full")
    if args.json:
        _print_json(rows)
    elif not rows:
        print(f"{run.run_id}: no checkpoints yet", file=sys.stderr)
    else:
        print(render_checkpoints(rows))
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from memtui.cli.doctor_report import run_doctor

    return run_doctor(as_json=args.json, deep=args.deep)


def _print_json(value: Any) -> None:
    import json

    print(json.dumps(value, indent=2))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
