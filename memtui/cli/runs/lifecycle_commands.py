"""Starting, attaching to, resuming and stopping runs: bare ``memtui``, ``run``, ``attach``,
``resume`` and ``stop``.

A run is its detached supervisor: ``run`` and ``resume`` start one and wait until it serves,
then open the console unless ``--detach``; closing the console leaves the run going. Only
the supervisor they started counts as started: when it left because another serves the run
(several ``resume`` at once), they say ``RUN already served by pid N`` and go on as for a
live run (exit 0, or the console).
``stop`` asks the supervisor to finish the step, checkpoint and exit, waits for it, and
says how it ended: a final save that failed and the newest verified checkpoint included
(``memtui.cli.runs.ending_report``).
Torch-free; imports stay lazy so ``memtui --help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from memtui.cli.arguments import add_bell, add_readonly, add_run, add_theme, positive_float, positive_int
from memtui.cli.errors import CliError

if TYPE_CHECKING:
    from engine.config.run_config import RunConfig
    from engine.domain import RunStatus
    from engine.run.directory import RunDir

STOP_TIMEOUT_S = 120.0
STOP_POLL_S = 0.25
STOP_GRACE_S = 5.0
"""After a terminal state, how long to wait for the supervisor process to exit."""


# --------------------------------------------------------------------------- parsers


def add_run_parser(sub: Any) -> None:
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
    run.add_argument("--steps", type=positive_int, metavar="N", help="target optimizer steps")
    run.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one config key, e.g. --set train.ranks=2 --set memory.budget=0.5 (repeatable)",
    )
    run.add_argument("--name", help="run name (the id is NAME-<timestamp>)")
    add_node_flags(run)
    run.add_argument("--detach", action="store_true", help="start it and return; do not open the console")
    run.add_argument("--json", action="store_true", help="print the started run as JSON")
    add_theme(run)
    add_readonly(run)
    add_bell(run)
    run.set_defaults(handler=cmd_run)


NODE_FLAGS = {
    "nodes": ("train.nodes", "hosts in the run (each runs memtui run with its own --node-rank)"),
    "node_rank": ("train.node_rank", "this host's place in the run, 0 .. nodes-1 (node 0 holds the run)"),
    "rdzv_endpoint": (
        "train.rdzv_endpoint",
        "HOST:PORT on node 0 where the nodes meet (torchrun's rendezvous)",
    ),
    "rdzv_id": (
        "train.rdzv_id",
        "a name every node of the run shares (default: derived from the config and the endpoint)",
    ),
}


def add_node_flags(parser: argparse.ArgumentParser) -> None:
    """``--nodes --node-rank --rdzv-endpoint --rdzv-id``: the same as ``--set train.KEY=...``."""
    for dest, (_, text) in NODE_FLAGS.items():
        kind = str if dest.startswith("rdzv") else int
        parser.add_argument(f"--{dest.replace('_', '-')}", dest=dest, type=kind, help=text)


def node_settings(args: argparse.Namespace) -> list[str]:
    """The node flags given, as ``--set`` texts (strings quoted for TOML)."""
    out = []
    for dest, (key, _) in NODE_FLAGS.items():
        value = getattr(args, dest, None)
        if value is not None:
            out.append(f"{key}={json.dumps(value)}")
    return out


def add_attach_parser(sub: Any) -> None:
    attach = sub.add_parser(
        "attach",
        help="open the console on a run",
        description="Open the console; a finished run opens read-only on its history.",
    )
    add_run(attach, "the newest live run")
    add_theme(attach)
    add_readonly(attach)
    add_bell(attach)
    attach.set_defaults(handler=cmd_attach)


def add_stop_parser(sub: Any) -> None:
    stop = sub.add_parser(
        "stop",
        help="stop a run gracefully and wait for it",
        description=(
            "Ask the supervisor to stop (finish the step, checkpoint, exit) and wait; then say "
            "how it ended, whether the final save failed, and the newest verified checkpoint. "
            "Exit 1 unless the run stopped or completed and its newest save succeeded."
        ),
    )
    add_run(stop, "the newest live run")
    stop.add_argument("--json", action="store_true", help="print how it ended as JSON")
    stop.add_argument(
        "--timeout",
        type=positive_float,
        default=STOP_TIMEOUT_S,
        metavar="S",
        help=f"seconds to wait for the run to end (default {STOP_TIMEOUT_S:g})",
    )
    stop.set_defaults(handler=cmd_stop)


def add_resume_parser(sub: Any) -> None:
    resume = sub.add_parser(
        "resume",
        help="start a run again whose processes are gone, from its newest verified checkpoint",
        description=(
            "Start an interrupted (or stopped, or failed) run again in the same run directory, "
            "with its history, from its newest checkpoint that verifies. Refuses if checkpoints "
            "exist but none verifies, unless --fresh. If another resume got there first, names "
            "the supervisor serving the run and exits 0."
        ),
    )
    add_run(resume, "the newest run")
    resume.add_argument(
        "--fresh",
        action="store_true",
        help="if no checkpoint verifies, start over at step 0 (bad tags are moved to quarantine/)",
    )
    resume.add_argument(
        "--ranks",
        type=positive_int,
        metavar="N",
        help="resume with N ranks on this host (a ZeRO checkpoint written by another number is "
        "converted with DeepSpeed's universal checkpoint first)",
    )
    resume.add_argument("--detach", action="store_true", help="start it and return; do not open the console")
    resume.add_argument("--json", action="store_true", help="print the resumed run as JSON")
    add_theme(resume)
    resume.set_defaults(handler=cmd_resume)


# ---------------------------------------------------------------------- starting


def cmd_default(args: argparse.Namespace) -> int:
    """Bare ``memtui``: attach to the newest live run; else, when the newest run has ended,
    offer to show it (a terminal) or say that a new demo starts instead; else start the demo."""
    from engine.run.directory import list_runs

    runs = list_runs()
    live = next((r for r in runs if r.supervisor_pid() is not None), None)
    if live is None and runs and _show_ended(runs[0]):
        return open_console(runs[0], args.theme, readonly=args.readonly, bell=args.bell)
    if live is None:
        from engine.config.config_file import demo_run_config

        live = start_run(demo_run_config())
        print(f"started the demo run {live.run_id}", file=sys.stderr)
    return open_console(live, args.theme, readonly=args.readonly, bell=args.bell)


def _show_ended(newest: RunDir) -> bool:
    """The newest run has ended: say so; True to show it rather than start a new demo (asked
    on a terminal; elsewhere the demo starts, and the line says how to see the old run)."""
    from engine.run.reports.status import offline_status

    status = offline_status(newest)
    target = f"/{status.target_steps}" if status.target_steps else ""
    print(
        f"the newest run, {newest.run_id}, has ended: {status.state} at step {status.step}{target}",
        file=sys.stderr,
    )
    if not sys.stdin.isatty():
        print(f"starting a new demo run (memtui attach {newest.run_id} shows the ended one)", file=sys.stderr)
        return False
    try:
        answer = input("show it [Enter], or start a new demo run [n]? ").strip().lower()
    except EOFError:
        answer = "n"
    return answer not in ("n", "new")


def cmd_run(args: argparse.Namespace) -> int:
    from engine.config.config_file import ConfigError, load_run_config

    try:
        config = load_run_config(
            args.config,
            [*args.settings, *node_settings(args)],
            preset=args.preset,
            steps=args.steps,
            name=args.name,
        )
    except ConfigError as err:
        raise CliError(f"config error: {err}", code=2) from None
    refuse_unfit(config)
    run = start_run(config)
    _print_started(run, as_json=args.json)
    return 0 if args.detach else open_console(run, args.theme, readonly=args.readonly, bell=args.bell)


def refuse_unfit(config: RunConfig) -> None:
    """Exit 2 naming the key when the config cannot run on the GPUs this host shows
    (``engine.doctor.gpu_fit``: ranks above the visible GPUs, bf16 before Ampere)."""
    from engine.doctor.gpu_fit import fit_problems
    from engine.doctor.package_facts import read_module_constants

    torch_cuda = (read_module_constants("torch", "version.py") or {}).get("cuda")
    problems = fit_problems(config, *_visible_gpus(), torch_cuda=torch_cuda)
    if problems:
        raise CliError("; ".join(problems), code=2)


def _visible_gpus() -> tuple[list[Any], bool]:
    """(the GPUs a trainer here would see, whether NVML showed any); ([], False) without NVML."""
    from engine.doctor.gpu_fit import visible_gpus
    from engine.doctor.nvml_probe import read_once

    seen = read_once(lambda nvml: (visible_gpus(nvml), nvml.device_count() > 0))
    return seen if seen is not None else ([], False)


def start_run(config: RunConfig) -> RunDir:
    """Create the run directory, start its supervisor detached, wait until it serves."""
    from engine.run.directory import RunDir
    from engine.run.launch import AlreadyServed, LaunchError, spawn_supervisor, wait_until_serving

    try:
        run = RunDir.create(config)
    except (OSError, ValueError) as err:
        raise CliError(f"cannot create the run directory: {err}") from None
    pid = spawn_supervisor(run)
    try:
        wait_until_serving(run, pid)
    except AlreadyServed as err:  # a resume of the new run got there first: it is served
        print(err, file=sys.stderr)
    except LaunchError as err:
        raise CliError(f"the run did not start: {err}") from None
    return run


def _print_started(run: RunDir, *, as_json: bool) -> None:
    pid = run.supervisor_pid()
    if as_json:
        print(json.dumps({"run_id": run.run_id, "run_dir": str(run.path), "supervisor_pid": pid}))
    else:
        print(f"started {run.run_id} (supervisor pid {pid})\n  dir {run.path}")


def cmd_resume(args: argparse.Namespace) -> int:
    """Start the run again; "already served" (exit 0) when a concurrent resume's supervisor
    took it first. ``--json``: run_id, run_dir, supervisor_pid (the one serving the run),
    from_step (null when another supervisor resumed it) and already_served."""
    from engine.run.launch import AlreadyServed, LaunchError
    from memtui.cli.resolver import require_run
    from memtui.cli.runs.resumption import ResumeRefused, resume_run

    run = require_run(args.run, live=False)
    served = {"run_id": run.run_id, "run_dir": str(run.path)}
    try:
        pid, plan = resume_run(run, fresh=args.fresh, ranks=args.ranks)
    except ResumeRefused as err:
        raise CliError(f"{run.run_id}: cannot resume: {err}") from None
    except AlreadyServed as err:
        other = {"supervisor_pid": err.owner, "from_step": None, "already_served": True}
        print(json.dumps({**served, **other}, indent=2) if args.json else str(err))
        return 0 if args.detach else open_console(run, args.theme)
    except LaunchError as err:
        raise CliError(f"the run did not start: {err}") from None
    for skipped in plan.skipped:
        print(f"skipping {skipped}", file=sys.stderr)
    where = f"step {plan.from_step}" if plan.from_step is not None else "step 0 (fresh start)"
    if args.json:
        ours = {"supervisor_pid": pid, "from_step": plan.from_step, "already_served": False}
        print(json.dumps({**served, **ours}, indent=2))
    else:
        print(f"resumed {run.run_id} from {where} (supervisor pid {pid})")
    return 0 if args.detach else open_console(run, args.theme)


# ---------------------------------------------------------------------- attaching


def cmd_attach(args: argparse.Namespace) -> int:
    from memtui.cli.resolver import require_run

    run = require_run(args.run, live=args.run is None)
    return open_console(run, args.theme, readonly=args.readonly, bell=args.bell)


def open_console(run: RunDir, theme: str | None, *, readonly: bool = False, bell: bool = False) -> int:
    """Run the console on ``run`` until the operator detaches; the run goes on.

    It opens on the stored history at once; a live run then replays only newer events.
    ``bell`` (or ``MEMTUI_BELL=1``) rings the terminal bell on live warning/critical alerts.
    User theme files that do not validate are named on stderr and left out of the console.
    """
    import dataclasses
    import os

    from engine.cpu_share import CONSOLE_NICE, step_aside
    from memtui.console.app import MemtuiApp
    from memtui.console.history_view import stored_view
    from memtui.theming import DEFAULT_THEME, skipped_themes

    for skipped in skipped_themes():
        print(f"memtui: {skipped}", file=sys.stderr)
    live = run.supervisor_pid() is not None
    view = stored_view(run)
    if live:
        view = dataclasses.replace(view, connection="connecting")
    bell = bell or os.environ.get("MEMTUI_BELL", "").lower() in ("1", "true", "yes", "on")
    app = MemtuiApp(
        run, live=live, view=view, theme_name=theme or DEFAULT_THEME, readonly=readonly, bell=bell
    )
    step_aside(CONSOLE_NICE)  # the trainer's cores come first; the console starts nothing after this
    app.run()
    note = detach_note(run)
    if note:
        print(note)
    return app.return_code or 0


def detach_note(run: RunDir) -> str:
    """After the console: how to come back to a run that goes on; nothing for one that has
    ended or is stopping (as its store says)."""
    from engine.run.reports.status import offline_status

    if offline_status(run).state in ("stopping", "stopped", "completed", "failed", "interrupted"):
        return ""  # "interrupted" too: no supervisor serves it
    return f"detached from {run.run_id}; it goes on — memtui attach {run.run_id} to come back"


# ---------------------------------------------------------------------- stopping


def cmd_stop(args: argparse.Namespace) -> int:
    from engine.wire.protocol import Stop
    from memtui.cli.resolver import require_run
    from memtui.client import EngineRefused, EngineUnavailable, new_request_id, request_once

    run = require_run(args.run, live=args.run is None)
    if run.supervisor_pid() is None:
        return _report_ending(run, _final_status(run), as_json=args.json, already=True)
    try:
        request_once(run.socket, Stop(id=new_request_id(), reason="memtui stop"), timeout=10.0)
    except EngineRefused as err:
        raise CliError(f"{run.run_id}: the supervisor refused to stop: {err.reason}") from None
    except EngineUnavailable:
        pass  # it may be exiting already; the wait below tells
    print(f"stopping {run.run_id} ...", file=sys.stderr)
    return _report_ending(run, _wait_for_ending(run, args.timeout), as_json=args.json)


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
    from engine.run.reports.status import offline_status

    return offline_status(run)


def _report_ending(run: RunDir, status: RunStatus, *, as_json: bool, already: bool = False) -> int:
    from memtui.cli.runs.ending_report import ending_document, ending_lines, exit_code, newest_checkpoint

    newest = newest_checkpoint(run.checkpoints)
    if as_json:
        print(json.dumps({**ending_document(status, newest), "already": already}, indent=2))
    else:
        print("\n".join(ending_lines(status, newest, already=already)))
    return exit_code(status)
