"""``memtui chaos [RUN] KIND [--PARAM VALUE ...]`` and ``memtui chaos --list``: rehearse a
failure in a live run from the shell.

The parameters are the kind's own (``engine.chaos.table``), so the parser cannot know them
in advance: argparse leaves them over, and ``chaos_words`` reads them (``--bytes 1G``,
``--delay-s=0.5``; sizes take K/M/G). Every value is checked against the kind's spec before
the run is even looked up: an unknown kind or parameter, a wrong type or a value out of
bounds is the parser's one-line error naming the field, exit 2, and nothing is sent. A run without a live
supervisor is exit 1; so is the supervisor's refusal (e.g. a kind it does not perform).
``--list`` shows what the run's supervisor advertises, or every kind memtui knows, with a
note saying so, when there is no live run to ask.
Torch-free; imports stay lazy so ``memtui --help`` stays fast.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memtui.cli.errors import CliError

if TYPE_CHECKING:
    from engine.chaos.table import ChaosKindSpec, ChaosRequest
    from engine.run.directory import RunDir

USAGE = "memtui chaos [-h] [--json] [RUN] KIND [--PARAM VALUE ...]\n       memtui chaos --list [--json] [RUN]"
WELCOME_TIMEOUT_S = 5.0


def add_parser(sub: Any) -> None:
    """Register ``chaos`` on ``memtui``'s subparsers."""
    chaos = sub.add_parser(
        "chaos",
        usage=USAGE,
        help="inject a failure into a live run (see --list for the kinds and their parameters)",
        description=(
            "Inject a failure into a live run at its next safe point, to rehearse recovery. "
            "RUN is a run id, a unique prefix of one, or a run directory (default: the newest "
            "live run). Each kind has its own parameters, e.g. 'memtui chaos ballast --bytes 1G "
            "--steps 10' (sizes take K, M, G); left out, they take their defaults. "
            "Exit 2 on a bad kind or value (nothing is sent), 1 when the run is not running "
            "or its supervisor refuses."
        ),
        epilog="'memtui chaos --list' lists the kinds the run performs, with each parameter's "
        "default and bounds.",
    )
    chaos.add_argument(
        "--list", action="store_true", help="list the kinds the run's supervisor performs, and exit"
    )
    chaos.add_argument("--json", action="store_true", help="print one JSON document")
    chaos.set_defaults(handler=cmd_chaos, takes_extras=True, extras=[], parser=chaos)


@dataclass
class ChaosWords:
    """What followed ``memtui chaos``, read from argparse's leftovers."""

    run: str | None = None
    kind: str | None = None
    texts: dict[str, str] = field(default_factory=dict)
    """Parameter name (``-`` read as ``_``) -> the value as typed."""


def chaos_words(words: Sequence[str], *, listing: bool) -> ChaosWords:
    """``[RUN] KIND --param value ...`` (``[RUN]`` alone with ``--list``); CliError (exit 2)
    when they do not fit that shape."""
    plain: list[str] = []
    texts: dict[str, str] = {}
    rest = list(words)
    while rest:
        word = rest.pop(0)
        if not word.startswith("--") or word == "--":
            plain.append(word)
            continue
        name, eq, value = word[2:].partition("=")
        if not eq:
            if not rest:
                raise CliError(f"--{name}: needs a value", code=2)
            value = rest.pop(0)
        key = name.replace("-", "_")
        if key in texts:
            raise CliError(f"--{name}: given twice", code=2)
        texts[key] = value
    if listing:
        if texts or len(plain) > 1:
            raise CliError("--list takes only RUN (no kind, no parameters)", code=2)
        return ChaosWords(run=plain[0] if plain else None)
    if not plain:
        raise CliError("name a chaos kind ('memtui chaos --list' shows them)", code=2)
    if len(plain) > 2:
        raise CliError(f"expected [RUN] KIND, got {' '.join(plain)!r}", code=2)
    run = plain[0] if len(plain) == 2 else None
    return ChaosWords(run=run, kind=plain[-1].replace("-", "_"), texts=texts)


def cmd_chaos(args: argparse.Namespace) -> int:
    """Bad words or values are the parser's usage error (one line, exit 2), as for any command."""
    try:
        words = chaos_words(args.extras, listing=args.list)
        request = None if args.list else checked_request(str(words.kind), words.texts)
    except CliError as err:
        args.parser.error(str(err))
    if request is None:
        return list_kinds(words.run, as_json=args.json)
    return inject(words.run, request, as_json=args.json)


def checked_request(kind: str, texts: dict[str, str]) -> ChaosRequest:
    """The request for ``kind`` from typed-in values, checked by its spec; CliError (exit 2)
    naming the kind or the parameter otherwise."""
    from engine.chaos.table import KINDS, chaos_specs
    from memtui.chaos.chaos_values import ParamError, build_request

    if kind not in KINDS:
        raise CliError(f"unknown chaos kind {kind!r} (choose from {', '.join(KINDS)})", code=2)
    (spec,) = chaos_specs([kind])
    try:
        return build_request(spec, texts)
    except ParamError as err:
        raise CliError(f"chaos {kind}: --{err.field.replace('_', '-')}: {err.message}", code=2) from None


def _refuse_outside_ranks(run: RunDir, request: ChaosRequest) -> None:
    """A rank past the run's own (its config says how many) is a refused value, exit 2,
    whether or not a supervisor serves the run."""
    from engine.chaos.kind import rank_outside
    from engine.config.config_file import ConfigError

    try:
        train = run.read_config().train
    except (ConfigError, OSError):
        return  # the supervisor, if any, judges it
    outside = rank_outside(request, train.ranks * train.nodes)
    if outside is not None:
        raise CliError(f"chaos {request.kind}: {outside}", code=2)


def inject(run_spec: str | None, request: ChaosRequest, *, as_json: bool) -> int:
    """Send ``Chaos(request)`` to the run's supervisor; print the chaos id and what happens."""
    from engine.wire.protocol import Chaos
    from memtui.chaos.chaos_phrases import depends_on_the_run, what_happens
    from memtui.chaos.chaos_values import request_values
    from memtui.cli.json_document import print_json
    from memtui.cli.resolver import require_run
    from memtui.client import EngineRefused, EngineUnavailable, new_request_id, request_once
    from memtui.run_facts import run_facts

    run = require_run(run_spec, live=run_spec is None)
    _refuse_outside_ranks(run, request)
    if run.supervisor_pid() is None:
        raise CliError(f"{run.run_id}: the run is not running (no supervisor to inject chaos into)")
    facts = run_facts(run) if depends_on_the_run(request.kind) else None  # as the run is before it
    try:
        ok = request_once(run.socket, Chaos(id=new_request_id(), request=request), timeout=10.0)
    except EngineRefused as err:
        raise CliError(f"{run.run_id}: the supervisor refused: {err.reason}") from None
    except EngineUnavailable as err:
        raise CliError(f"{run.run_id}: {err}") from None
    values = request_values(request)
    doing = what_happens(request.kind, values, facts)
    if as_json:
        print_json({"run_id": run.run_id, **ok.result, "kind": request.kind, "params": values, "what": doing})
    else:
        print(f"{run.run_id}: chaos {ok.result.get('chaos_id', '?')} injected: {doing}")
    return 0


# ------------------------------------------------------------------ --list


def list_kinds(run_spec: str | None, *, as_json: bool) -> int:
    """The kinds the run's supervisor advertises, or every kind with a note saying why."""
    from memtui.cli.json_document import print_json

    run_id, specs, note = offered_kinds(run_spec)
    if as_json:
        print_json(
            {
                "run_id": run_id,
                "advertised": note is None,
                "note": note,
                "kinds": [s.model_dump(mode="json") for s in specs],
            }
        )
        return 0
    print(f"{run_id}: the chaos kinds its supervisor performs" if note is None else f"note: {note}")
    for spec in specs:
        print(kind_lines(spec))
    if note is None and not specs:
        print("  (none)")
    return 0


def offered_kinds(run_spec: str | None) -> tuple[str | None, list[ChaosKindSpec], str | None]:
    """``(run id, kinds, note)``: a live supervisor's Welcome (note None), else every kind."""
    from engine.chaos.table import chaos_specs
    from memtui.cli.resolver import RunNotFound, require_run, resolve_run
    from memtui.client import EngineRefused, EngineUnavailable, welcome_once

    every = chaos_specs()
    if run_spec is None:
        try:
            run = resolve_run(None, live=True)
        except RunNotFound:
            return None, every, "no live run: every kind memtui knows (a run performs those it advertises)"
    else:
        run = require_run(run_spec, live=False)
    if run.supervisor_pid() is None:
        return run.run_id, every, f"{run.run_id} is not running: every kind memtui knows"
    try:
        welcome = welcome_once(run.socket, timeout=WELCOME_TIMEOUT_S)
    except (EngineUnavailable, EngineRefused, OSError) as err:
        note = f"{run.run_id}: its supervisor did not answer ({err}): every kind memtui knows"
        return run.run_id, every, note
    return run.run_id, list(welcome.chaos), None


def kind_lines(spec: ChaosKindSpec) -> str:
    """``kind  title (by the performer)`` then one indented line per parameter."""
    from memtui.chaos.chaos_values import describe_bounds, format_value

    lines = [f"  {spec.kind:<20} {spec.title} (by the {spec.performer})"]
    for param in spec.params:
        flag = f"--{param.name.replace('_', '-')} {format_value(param, param.default)}"
        lines.append(f"      {flag:<18} {describe_bounds(param)}: {param.help.replace('``', '')}")
    return "\n".join(lines)
