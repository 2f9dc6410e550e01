"""Which run a command means: a run id, a unique prefix of one, or a run directory.

With no spec, ``live=True`` picks the newest run whose supervisor is alive (stop, attach);
``prefer_live=True`` the same, or the newest run of all when none is alive (status, logs,
export, checkpoints: an older live run is what the operator asks about, not a newer
finished one); and
``live=False`` alone the newest run of all (resume). Errors name the choices.
``require_run`` is what the commands call: the same choice, failing as a ``CliError``.
"""

from __future__ import annotations

import os
from pathlib import Path

from engine.run.directory import RunDir, list_runs, runs_root
from memtui.cli.errors import CliError

LISTED_CHOICES = 8
"""Run ids quoted in an error message."""


class RunNotFound(LookupError):
    """No run, or no single run, matches; ``usage`` is True when the spec itself was wrong."""

    def __init__(self, message: str, *, usage: bool = False) -> None:
        super().__init__(message)
        self.usage = usage


NAME_MAX = 255
"""Bytes in one path component (Linux's NAME_MAX): a longer run id cannot exist on disk."""


def resolve_run(
    spec: str | None, *, live: bool, home: Path | None = None, prefer_live: bool = False
) -> RunDir:
    if spec is not None:
        _check_spec(spec)
        try:
            if _looks_like_path(spec):
                return _run_at(Path(spec))
        except OSError as err:  # a loop of links, a directory we may not read
            raise RunNotFound(
                f"{_shown(spec)} cannot be read as a run directory: {err.strerror}", usage=True
            ) from None
    runs = list_runs(home)
    if spec is None:
        return _newest(runs, live=live, prefer_live=prefer_live, home=home)
    exact = [r for r in runs if r.run_id == spec]
    if exact:
        return exact[0]
    matches = [r for r in runs if r.run_id.startswith(spec)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise RunNotFound(f"no run matches {spec!r} in {runs_root(home)}{_choices(runs)}", usage=True)
    raise RunNotFound(
        f"{spec!r} matches {len(matches)} runs, give more of the id{_choices(matches)}", usage=True
    )


def require_run(spec: str | None, *, live: bool, prefer_live: bool = False) -> RunDir:
    """``resolve_run`` for a command: ``RunNotFound`` becomes a ``CliError`` (exit 2 when the
    spec itself was wrong, 1 when there is simply no such run)."""
    try:
        return resolve_run(spec, live=live, prefer_live=prefer_live)
    except RunNotFound as err:
        raise CliError(str(err), code=2 if err.usage else 1) from None


def _check_spec(spec: str) -> None:
    """Refuse what cannot name a run before it reaches the file system (where a component over
    NAME_MAX raises ENAMETOOLONG and a NUL byte ValueError), and an empty or blank one, which
    every run id starts with (it would pick one for you)."""
    if not spec.strip():
        raise RunNotFound("an empty RUN names no run (leave RUN out for the newest run)", usage=True)
    if "\0" in spec:
        raise RunNotFound("a run id or directory has no NUL byte in it", usage=True)
    longest = max(len(os.fsencode(part)) for part in spec.split("/"))
    if longest > NAME_MAX:
        raise RunNotFound(
            f"{_shown(spec)} is not a run id or directory: a name of {longest} bytes (at most {NAME_MAX})",
            usage=True,
        )


def _shown(spec: str) -> str:
    """``spec`` quoted for one line of an error: at most 60 characters of it."""
    return repr(spec) if len(spec) <= 60 else repr(spec[:57]) + "..."


def _looks_like_path(spec: str) -> bool:
    return "/" in spec or spec in (".", "..") or (Path(spec) / "run.json").is_file()


def _run_at(path: Path) -> RunDir:
    if not (path / "run.json").is_file():
        raise RunNotFound(f"{path} is not a run directory (no run.json)", usage=True)
    return RunDir(path.resolve())


def _newest(runs: list[RunDir], *, live: bool, prefer_live: bool, home: Path | None) -> RunDir:
    if not runs:
        raise RunNotFound(f"no runs in {runs_root(home)}; start one with 'memtui run'")
    if not (live or prefer_live):
        return runs[0]
    alive = [r for r in runs if r.supervisor_pid() is not None]
    if not alive and prefer_live:
        return runs[0]
    if not alive:
        raise RunNotFound(f"no live run; name one of the finished runs{_choices(runs)}")
    return alive[0]


def _choices(runs: list[RunDir]) -> str:
    if not runs:
        return ""
    names = ", ".join(r.run_id for r in runs[:LISTED_CHOICES])
    more = f" and {len(runs) - LISTED_CHOICES} more" if len(runs) > LISTED_CHOICES else ""
    return f" (runs: {names}{more})"
