"""Where a run lives on disk: ``$MEMTUI_HOME/runs/<run-id>/``.

::

    run.json              the RunConfig as validated (plus run_id, created_at)
    engine.sock           the supervisor's socket (0600; the run dir is 0700)
    supervisor.lock       locked (flock) by the one supervisor serving the run; names its pid
    supervisor.pid        pid of the live supervisor (removed when it ends)
    telemetry.sqlite      steps, events, run state (WAL)
    checkpoints/          DeepSpeed tags
    logs/supervisor.log   logs/trainer-<attempt>.log
    stacks/  flight/      a quiet trainer's stacks per rank, NCCL flight records (stack_files)
    spool/                trainer-<attempt>.ndjson: what a trainer said after its supervisor
                          died, taken in (then removed) by the next supervisor

Private by default: every directory is 0700 and every file 0600. The CLI creates the run
directory so; the supervisor and the trainer set ``PRIVATE_UMASK`` first thing, so all they
(and DeepSpeed, SQLite, the logs) create is private too, and a mistaken ``chmod`` of the
home exposes no telemetry, log or checkpoint.

Torch-free: the console reads it to list runs that no supervisor serves any more.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from engine.config.config_file import ConfigError, describe_validation
from engine.config.run_config import RunConfig
from engine.run.durable_file import replace_atomically

SOCKET_PATH_MAX = 107  # sun_path is 108 bytes on Linux, NUL included
PRIVATE_UMASK = 0o077
"""The supervisor's and the trainer's umask: files 0600, directories 0700."""
PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def memtui_home() -> Path:
    """``$MEMTUI_HOME``, else the platform's user state dir (``~/.local/state/memtui``)."""
    env = os.environ.get("MEMTUI_HOME")
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_state_dir("memtui"))


def runs_root(home: Path | None = None) -> Path:
    return (home or memtui_home()) / "runs"


@dataclass(frozen=True)
class RunDir:
    """Paths of one run; creating it is ``RunDir.create``."""

    path: Path

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def config_file(self) -> Path:
        return self.path / "run.json"

    @property
    def socket(self) -> Path:
        return self.path / "engine.sock"

    @property
    def lock_file(self) -> Path:
        """Held by the supervisor that serves the run, for its life (``engine.run.ownership``)."""
        return self.path / "supervisor.lock"

    @property
    def pid_file(self) -> Path:
        return self.path / "supervisor.pid"

    @property
    def store(self) -> Path:
        return self.path / "telemetry.sqlite"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def logs(self) -> Path:
        return self.path / "logs"

    @property
    def supervisor_log(self) -> Path:
        return self.logs / "supervisor.log"

    def trainer_log(self, attempt: int) -> Path:
        return self.logs / f"trainer-{attempt}.log"

    @property
    def token_cache(self) -> Path:
        """Tokenized datasets (``[hf]``), shared by the runs of one home: ``HOME/cache/tokens``."""
        return self.path.parent.parent / "cache" / "tokens"

    @property
    def geometry_file(self) -> Path:
        """``memory.json``: the micro-batch an attempt that ran out of memory left for the next.
        In the shared checkpoint directory when ``checkpoints/`` links to one (several nodes):
        a rank on any node may write it, and every node's ranks must read the same size."""
        shared = self.checkpoints.is_symlink()
        return (self.checkpoints if shared else self.path) / "memory.json"

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def create(cls, config: RunConfig, home: Path | None = None) -> RunDir:
        """Make a fresh run directory (0700) and write ``run.json``."""
        root = runs_root(home)
        root.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for _ in range(100):
            run_id = f"{config.name}-{stamp}-{secrets.token_hex(2)}"
            path = root / run_id
            try:
                path.mkdir(mode=PRIVATE_DIR)
                break
            except FileExistsError:
                continue
        else:  # pragma: no cover - 100 collisions of 16 random bits in one second
            raise RuntimeError("could not pick a unique run id")
        run = cls(path)
        if len(os.fsencode(run.socket)) > SOCKET_PATH_MAX:
            raise ValueError(
                f"socket path {run.socket} is longer than {SOCKET_PATH_MAX} bytes; "
                "set MEMTUI_HOME to a shorter directory"
            )
        if config.checkpoint.dir:
            run.link_checkpoints(Path(config.checkpoint.dir))
        run.ensure_layout()
        run.write_config(config)
        return run

    def link_checkpoints(self, shared: Path) -> None:
        """Make ``checkpoints/`` a link to ``shared`` (created if missing): a directory every
        node reaches, so every rank writes its shards where node 0 seals them. Everything
        that reads ``RunDir.checkpoints`` follows the link."""
        target = shared.expanduser().resolve()
        target.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
        self.checkpoints.symlink_to(target, target_is_directory=True)

    def ensure_layout(self) -> None:
        """Create the subdirectories and tighten their permissions to 0700 (idempotent)."""
        for directory in (self.path, self.checkpoints, self.logs):
            directory.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
            os.chmod(directory, PRIVATE_DIR)

    def write_config(self, config: RunConfig, created_at: float | None = None) -> None:
        """``run.json``: the run id, when it was created (now unless given) and its config."""
        stamp = time.time() if created_at is None else created_at
        doc = {"run_id": self.run_id, "created_at": stamp, "config": config.model_dump(mode="json")}
        replace_atomically(self.config_file, (json.dumps(doc, indent=2) + "\n").encode("utf-8"))

    def read_config(self) -> RunConfig:
        """``run.json``'s config, validated; a ``ConfigError`` naming the problem if it cannot
        be read or does not validate (the file, its JSON, the key or field at fault)."""
        where = self.config_file
        try:
            doc = json.loads(where.read_text(encoding="utf-8"))
        except OSError as err:
            raise ConfigError(f"{where}: {err.strerror or err}") from None
        except ValueError as err:
            raise ConfigError(f"{where}: not valid JSON: {err}") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("config"), dict):
            raise ConfigError(f'{where}: no "config" object')
        try:
            return RunConfig.model_validate(doc["config"])
        except ValidationError as err:
            raise ConfigError(f"{where}: {describe_validation(err)}") from None

    def created_at(self) -> float:
        try:
            return float(json.loads(self.config_file.read_text(encoding="utf-8"))["created_at"])
        except (OSError, ValueError, KeyError):
            return self.path.stat().st_mtime

    def supervisor_pid(self) -> int | None:
        """The pid in ``supervisor.pid`` if that process is alive, else None."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if pid_alive(pid) else None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    # A zombie is not alive for us (our own exited child not yet reaped).
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def list_runs(home: Path | None = None) -> list[RunDir]:
    """Every run directory, newest first."""
    root = runs_root(home)
    if not root.is_dir():
        return []
    runs = [RunDir(p) for p in root.iterdir() if (p / "run.json").is_file()]
    return sorted(runs, key=lambda r: r.created_at(), reverse=True)
