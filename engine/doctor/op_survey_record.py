"""The DeepSpeed op survey kept in the run directory, so that a supervisor started again for
the same run, in the same environment, does not survey again.

The survey (``engine.doctor.deepspeed_ops``) imports torch and DeepSpeed in a child process:
seconds of a core. On a CPU host those seconds are the trainer's: measured on the 2-core
development machine, any other busy process, even at nice 19 or SCHED_IDLE, stretches the
trainer's 45 ms steps to about 1.5 s while it runs. A whole-tree kill brings a new supervisor,
which surveyed again 30 s after its start; now it reads the record its predecessor left.

The record names the environment it describes (``environment_key``: the interpreter, torch's
and DeepSpeed's installed versions, and the variables that choose the accelerator); another
environment, an unreadable record or a survey without an answer is surveyed afresh.
Torch-free: versions come from the packages' metadata.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from importlib import metadata
from pathlib import Path

from pydantic import ValidationError

from engine.doctor.deepspeed_ops import OpSurvey
from engine.run.durable_file import replace_atomically

log = logging.getLogger(__name__)

RECORD_NAME = "op_survey.json"
"""In the run directory."""
ACCELERATOR_VARIABLES = ("DS_ACCELERATOR", "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")
"""What the environment says about which accelerator DeepSpeed and torch see."""


def environment_key() -> dict[str, str | None]:
    """What a survey's answer depends on, as plain strings (None: not installed or not set)."""
    key: dict[str, str | None] = {"python": os.path.realpath(sys.executable)}
    for package in ("torch", "deepspeed"):
        try:
            key[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            key[package] = None
    for name in ACCELERATOR_VARIABLES:
        key[name] = os.environ.get(name)
    return key


def read_record(run_dir: Path, key: dict[str, str | None]) -> OpSurvey | None:
    """The survey recorded for ``key`` in ``run_dir``; None when there is none to trust."""
    try:
        raw = json.loads((run_dir / RECORD_NAME).read_text())
        if raw.get("environment") != key:
            return None
        return OpSurvey.model_validate(raw["survey"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, ValidationError) as err:
        log.warning("ignoring the op survey record in %s: %s", run_dir, err)
        return None


def write_record(run_dir: Path, key: dict[str, str | None], survey: OpSurvey) -> None:
    """Keep ``survey`` for the next supervisor, unless it has no answer (a timeout or a crash
    is worth asking again). A write that fails (a full disk) only costs the next one a survey."""
    if survey.unavailable is not None:
        return
    document = {"environment": key, "survey": survey.model_dump(mode="json")}
    try:
        replace_atomically(run_dir / RECORD_NAME, json.dumps(document, indent=1).encode())
    except OSError as err:
        log.warning("could not keep the op survey in %s: %s", run_dir, err)
