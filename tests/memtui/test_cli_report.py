"""``memtui report``: the endurance report of a stored run as Markdown, as JSON, to a file,
and a clear error for a run with no store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.config.config_file import build_run_config
from engine.events import ChaosInjected, ChaosRecovered
from engine.run.directory import RunDir
from engine.run.storage.store import Store
from memtui.cli.main import main
from tests.fakes.run_script import make_sample


def _stored_run(home: Path) -> RunDir:
    run = RunDir.create(build_run_config(name="endure", steps=100), home)
    with Store(run.store) as store:
        for step in range(1, 11):
            store.add_step(make_sample(step))
        injected = ChaosInjected(chaos_id="c1", kind="kill", source="schedule", step=5)
        store.append_event(injected.event_type, data=injected.model_dump(mode="json"))
        verdict = ChaosRecovered(chaos_id="c1", kind="kill", recovered=True, seconds=2.0, step=6)
        store.append_event(verdict.event_type, data=verdict.model_dump(mode="json"))
        store.update_meta(state="stopped", attempt=1)
    return run


def test_markdown_names_the_figures(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _stored_run(home)
    assert main(["report", run.run_id]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"# Endurance report: endure ({run.run_id})")
    assert "| steps sustained / target | 10 / 100 |" in text
    assert "| kill | 1 | 1 | 0 | 0 |" in text


def test_json_to_a_file(home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _stored_run(home)
    out = tmp_path / "report.json"
    assert main(["report", run.run_id, "--json", "--out", str(out)]) == 0
    assert capsys.readouterr().out == ""
    doc = json.loads(out.read_text())
    assert doc["steps_sustained"] == 10 and doc["chaos"]["kill"]["recovered"] == 1
    assert doc["fatal_ooms"] == 0 and doc["resume_success"] is None


def test_a_run_without_a_store_is_a_clear_error(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = RunDir.create(build_run_config(name="new", steps=9), home)
    assert main(["report", run.run_id]) != 0
    err = capsys.readouterr().err
    assert run.run_id in err and "store" in err
