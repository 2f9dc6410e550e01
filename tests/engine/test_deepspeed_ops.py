"""DeepSpeed's op compatibility (``ds_report``'s "compatible") in the doctor: the child's
answer parsed, its failures as reasons, the findings, and one real survey on this machine."""

from __future__ import annotations

import asyncio
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from engine.config.config_file import build_run_config
from engine.config.deepspeed_config import build_deepspeed_config, required_ops
from engine.doctor import examiner as doctor_module
from engine.doctor.deepspeed_ops import (
    OpStatus,
    OpSurvey,
    parse_survey,
    survey_ops,
    survey_ops_async,
)
from engine.doctor.examiner import EnvironmentDoctor, op_fields, required_ops_of
from engine.doctor.findings import judge, verdict_of
from engine.doctor.report_text import render_report
from engine.hardware_report import HardwareSnapshot, SoftwareReport
from engine.run.directory import RunDir, pid_alive
from tests.waiting import until, wait_for

pytestmark = pytest.mark.timeout(120)

ANSWER = {
    "accelerator": "cpu",
    "ninja": True,
    "ops": {
        "cpu_adam": {"installed": False, "compatible": True},
        "async_io": {"installed": False, "compatible": False, "reason": "libaio not found"},
        "fused_adam": {"installed": True, "compatible": True},
    },
}
NO_GPU = HardwareSnapshot(ts=0.0, nvml="NVML: Driver Not Loaded")


def fake_python(tmp_path: Path, body: str) -> str:
    """An executable that stands in for ``python -m engine.doctor.deepspeed_ops``."""
    path = tmp_path / "fake-python"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def software(
    survey: OpSurvey, required: list[str] | None = None, compiler: str | None = "/usr/bin/c++"
) -> SoftwareReport:
    gone: dict[str, str] = {}
    fields = op_fields(survey, gone)
    return SoftwareReport(
        python="3.11",
        torch="2.4",
        deepspeed="0.19",
        cxx_compiler=compiler,
        deepspeed_ops_required=required or [],
        unavailable=gone,
        **fields,
    )


# ----------------------------------------------------------------- parsing (pure)


def test_the_answer_is_the_last_json_line_after_whatever_deepspeed_printed() -> None:
    stdout = "[WARNING] Setting accelerator to CPU\n{not json\n" + json.dumps(ANSWER) + "\n"
    survey = parse_survey(0, stdout, "")
    assert survey.unavailable is None
    assert survey.ops["cpu_adam"] == OpStatus(installed=False, compatible=True)
    assert survey.ops["async_io"].reason == "libaio not found"


def test_garbage_is_unavailable_with_stderr_s_last_line() -> None:
    survey = parse_survey(0, 'hello\n{"ops": 3}\n', "first\nlast words\n")
    assert survey.ops == {}
    assert survey.unavailable == "op check printed no answer: last words"


def test_a_non_zero_exit_is_unavailable_even_with_an_answer() -> None:
    survey = parse_survey(1, json.dumps(ANSWER), "Traceback...\nImportError: libcudart.so.12\n")
    assert survey.unavailable == "op check exited with status 1: ImportError: libcudart.so.12"


HANGS = "sleep 1000 & echo $! > {pids}; echo $$ >> {pids}; exec sleep 1000"
"""A child that never answers and has started a child of its own (like a compiler): it writes
both pids. Were it waited for rather than killed, the test would fail at its timeout."""


@pytest.mark.slow
def test_a_child_that_hangs_is_killed_at_the_timeout(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    # 3 s: time enough for the shell to start and write the pids on a loaded machine.
    survey = survey_ops(timeout_s=3, python=fake_python(tmp_path, HANGS.format(pids=pids)))
    assert survey.unavailable == "op check did not answer within 3 s"
    grandchild, child = (int(line) for line in pids.read_text().split())
    assert not pid_alive(child)  # killed
    # Its process group went with it (an orphan is reaped by init, a moment later).
    wait_for(lambda: not pid_alive(grandchild), timeout=30, what=f"the child's own child {grandchild} to die")


@pytest.mark.slow
def test_a_crashing_child_and_one_that_cannot_start(tmp_path: Path) -> None:
    crash = survey_ops(python=fake_python(tmp_path, "echo 'Segmentation fault' >&2; exit 139"))
    assert crash.unavailable == "op check exited with status 139: Segmentation fault"
    missing = survey_ops(python=str(tmp_path / "no-such-python"))
    assert missing.unavailable is not None and missing.unavailable.startswith("op check could not start")


@pytest.mark.slow
async def test_async_survey_times_out_and_parses(tmp_path: Path) -> None:
    hang = await survey_ops_async(timeout_s=0.5, python=fake_python(tmp_path, "exec sleep 1000"))
    assert hang.unavailable == "op check did not answer within 0.5 s"
    answer = json.dumps(ANSWER).replace("'", "'\\''")
    good = await survey_ops_async(python=fake_python(tmp_path, f"echo noise; echo '{answer}'"))
    assert good.unavailable is None and set(good.ops) == {"cpu_adam", "async_io", "fused_adam"}


@pytest.mark.slow
async def test_cancelling_the_async_survey_kills_its_child(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    task = asyncio.ensure_future(survey_ops_async(python=fake_python(tmp_path, HANGS.format(pids=pids))))
    await until(
        lambda: len(pids.read_text().split()) == 2, what="the child to start", ignoring=(FileNotFoundError,)
    )
    grandchild, child = (int(line) for line in pids.read_text().split())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task  # killed, not waited for: it would sleep 1000 s
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)  # killed and reaped
    await until(lambda: not pid_alive(grandchild), what=f"the child's own child {grandchild} to die")


# ------------------------------------------------------------ what the run needs


def test_memtui_s_default_optimizer_needs_no_op() -> None:
    # torch_adam: torch's own AdamW, so an op that cannot be built never degrades a default run.
    assert required_ops(build_deepspeed_config(build_run_config())) == []


@pytest.mark.parametrize(
    ("user", "ops"),
    [
        ({"optimizer": {"type": "Adam", "params": {"torch_adam": False}}}, ["fused_adam"]),
        (
            {
                "optimizer": {"type": "AdamW", "params": {"torch_adam": False}},
                "zero_optimization": {"offload_optimizer": {"device": "cpu"}},
            },
            ["cpu_adam"],
        ),
        ({"optimizer": {"type": "Lion", "params": {}}}, ["fused_lion"]),
        ({"optimizer": {"type": "SGD", "params": {}}}, []),
    ],
)
def test_a_user_s_deepspeed_optimizer_needs_its_op(user: dict[str, Any], ops: list[str]) -> None:
    assert required_ops(build_deepspeed_config(build_run_config(deepspeed_config=user))) == ops


def test_required_ops_of_a_run_directory(home: Path) -> None:
    assert required_ops_of(None) == [] and required_ops_of(home) == []
    user = {"optimizer": {"type": "Adam", "params": {"torch_adam": False}}}
    run = RunDir.create(build_run_config(deepspeed_config=user), home=home)
    assert required_ops_of(run.path) == ["fused_adam"]


# ------------------------------------------------------------------------ findings


def test_an_incompatible_op_nobody_needs_is_information() -> None:
    sw = software(OpSurvey.model_validate(ANSWER))
    assert sw.deepspeed_compatible == {"cpu_adam": True, "async_io": False, "fused_adam": True}
    assert sw.deepspeed_op_notes == {"async_io": "libaio not found"}
    found = [f for f in judge(sw, NO_GPU) if "DeepSpeed op" in f.message]
    assert [(f.level, f.message) for f in found] == [
        ("info", "DeepSpeed ops that cannot be JIT-built here: async_io")
    ]
    text = render_report(_report(sw))
    assert "needed by the run: none (torch's own optimizer)" in text
    assert "async_io: cannot be built (libaio not found)" in text


def test_an_op_to_build_with_no_compiler_degrades_without_the_deep_survey() -> None:
    plain = SoftwareReport(python="3.11", torch="2.4", deepspeed="0.19", deepspeed_ops_required=["cpu_adam"])
    assert plain.deepspeed_compatible == {}  # no --deep: the op survey did not run
    (finding,) = [f for f in judge(plain, NO_GPU) if "cpu_adam" in f.message]
    assert finding.level == "degraded"
    assert finding.message == (
        "DeepSpeed op cpu_adam (this run's optimizer) must be built and there is no C++ compiler: "
        "install one (Debian/Ubuntu: apt install g++) or use memtui's default AdamW"
    )
    prebuilt = plain.model_copy(update={"deepspeed_ops": {"cpu_adam": True}})
    assert [f for f in judge(prebuilt, NO_GPU) if "cpu_adam" in f.message] == []  # nothing to build
    default = plain.model_copy(update={"deepspeed_ops_required": []})
    assert [f for f in judge(default, NO_GPU) if "compiler" in f.message] == []  # a default run needs none


def test_an_op_the_run_needs_that_cannot_be_built_degrades() -> None:
    survey = OpSurvey.model_validate(ANSWER)
    survey.ops["cpu_adam"] = OpStatus(installed=False, compatible=False, reason="no C++ compiler")
    findings = judge(software(survey, ["cpu_adam"]), NO_GPU)
    bad = [f for f in findings if "cpu_adam" in f.message]
    assert [(f.level, f.message) for f in bad] == [
        ("degraded", "DeepSpeed op cpu_adam (this run's optimizer) cannot be built: no C++ compiler")
    ]
    # pre-built needs no compiler; a missing ninja stops a JIT build; an unknown op is missing
    assert [f for f in judge(software(survey, ["fused_adam"]), NO_GPU) if "fused_adam" in f.message] == []
    no_ninja = OpSurvey.model_validate({**ANSWER, "ninja": False})
    assert "DeepSpeed op cpu_adam (this run's optimizer) cannot be built: ninja is missing" in [
        f.message for f in judge(software(no_ninja, ["cpu_adam"]), NO_GPU) if f.level == "degraded"
    ]
    assert (
        "DeepSpeed op cpu_lion (this run's optimizer) cannot be built: DeepSpeed has no cpu_lion op "
        "for this accelerator" in [f.message for f in judge(software(survey, ["cpu_lion"]), NO_GPU)]
    )


def test_no_answer_is_a_reason_never_a_verdict() -> None:
    sw = software(OpSurvey(unavailable="op check did not answer within 60 s"))
    assert sw.unavailable == {"deepspeed_op_check": "op check did not answer within 60 s"}
    found = [f for f in judge(sw, NO_GPU) if "DeepSpeed op" in f.message]
    assert [(f.level, f.message) for f in found] == [
        ("info", "DeepSpeed op compatibility unavailable (op check did not answer within 60 s)")
    ]
    assert "compatibility unavailable (op check did not answer within 60 s)" in render_report(_report(sw))


def _report(sw: SoftwareReport) -> Any:
    from engine.hardware_report import DoctorReport

    findings = judge(sw, NO_GPU)
    return DoctorReport(ts=0.0, verdict=verdict_of(findings), findings=findings, software=sw, hardware=NO_GPU)


def test_the_doctor_surveys_once_and_only_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def fake_survey() -> OpSurvey:
        calls.append(1)
        return OpSurvey.model_validate(ANSWER)

    monkeypatch.setattr(doctor_module, "survey_ops", fake_survey)
    EnvironmentDoctor(None, run_dir=tmp_path).examine()
    assert calls == []  # the plain doctor stays a blink
    deep = EnvironmentDoctor(None, run_dir=tmp_path, check_ops=True)
    first, second = deep.examine(), deep.examine()
    assert calls == [1]  # kept: the ops do not change under a run
    assert first.software.deepspeed_compatible == second.software.deepspeed_compatible
    assert second.software.deepspeed_compatible["async_io"] is False


# ------------------------------------------------------------- the real DeepSpeed


@pytest.mark.deepspeed
def test_the_real_survey_lists_cpu_adam_on_this_machine() -> None:
    survey = survey_ops()
    assert survey.unavailable is None, survey.unavailable
    assert survey.accelerator is not None
    assert "cpu_adam" in survey.ops
    assert all(isinstance(op.compatible, bool) for op in survey.ops.values())
