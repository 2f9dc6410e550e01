"""Import hygiene, each side in a fresh interpreter: the console never loads torch or
deepspeed; the trainer never loads textual; the supervisor and store stay torch-free."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

FORBIDDEN_IN_CONSOLE = ("torch", "deepspeed")


def modules_after_import(*names: str) -> set[str]:
    code = (
        "import json, sys\n"
        + "".join(f"import {n}\n" for n in names)
        + "print(json.dumps(sorted(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.splitlines()[-1]))


def top_level(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


def existing(*names: str) -> list[str]:
    return [n for n in names if importlib.util.find_spec(n) is not None]


def test_console_loads_no_torch_or_deepspeed() -> None:
    console = (
        "memtui.cli.main",
        "memtui.console.app",
        "memtui.client",
        "memtui.history",
        "memtui.cli.live_status",
        "memtui.theming",
        "memtui.cli.resolver",
        "memtui.cli.run_logs",
        "memtui.status_report",
        "memtui.cli.export",
        "memtui.console.window_reader",
        "memtui.console.history_view",
        "memtui.cli.doctor_report",
    )
    # What the CLI imports lazily on its way (launching, offline status) must be clean too.
    engine_side = existing("engine.run.launch", "engine.run.status", "engine.run.store")
    loaded = top_level(modules_after_import(*console, *engine_side))
    assert not loaded & set(FORBIDDEN_IN_CONSOLE), sorted(loaded & set(FORBIDDEN_IN_CONSOLE))


def test_trainer_loads_no_textual() -> None:
    if not existing("engine.trainer.loop"):
        pytest.skip("engine.trainer.loop not written yet")
    loaded = top_level(modules_after_import("engine.trainer.loop"))
    assert "textual" not in loaded and "memtui" not in loaded


def test_supervisor_side_loads_no_torch() -> None:
    names = existing(
        "engine.supervisor.daemon",
        "engine.run.store",
        "engine.protocol",
        "engine.doctor.examiner",
        "engine.alerts.rules",
        "engine.alerts.watch",
        "engine.doctor.hardware_probe",
        "engine.doctor.nvml_probe",
    )
    loaded = top_level(modules_after_import(*names))
    assert not loaded & set(FORBIDDEN_IN_CONSOLE), names
    assert "textual" not in loaded
