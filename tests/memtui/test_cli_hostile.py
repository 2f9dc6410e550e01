"""Hostile values across every command: one line, exit 2, nothing started, nothing written.

Each case is a command line an attacker, a script gone wrong or a tired operator could type
against a home that holds one stopped run with a store. Every one must be refused by the
CLI itself (argparse types, the run resolver, the directive's and the chaos kind's own
checks) before anything acts: exit 2, a single line on stderr and no traceback, the run's
store byte for byte as it was, and no second run made. ``RUN`` stands for the stored run's
id in the table.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.config.config_file import build_run_config
from engine.run.directory import RunDir
from engine.run.storage.store import Store
from memtui.cli.main import main

RUN_COMMANDS = ["status", "logs", "checkpoints", "oom", "directives", "report", "export", "stop", "resume"]
RUN_COMMANDS += ["pause", "unpause", "doctor"]
BAD_SPECS = [
    "a" * 300,
    "x\0y",
    "",
    " ",
    "/etc/passwd",
    "/nonexistent/run",
    "../" * 40,
    "r" * 256 + "/x",
    "\n",
]
BAD_NUMBERS = ["-1", "nan", "inf", "-inf", "1e400", "9" * 23, "abc", "0x10", "³", ""]
BAD_COUNTS = ["0", *BAD_NUMBERS]  # where at least 1 is needed
NUMBER_FLAGS = [
    ["run", "--detach", "--steps"],
    ["resume", "RUN", "--detach", "--ranks"],
    ["plan", "--gpus"],
    ["plan", "--seq-len"],
    ["endure", "--steps"],
    ["endure", "--kills"],
    ["run", "--detach", "--nodes"],
    ["serve", "RUN", "--port"],
]
FLOAT_FLAGS = [
    ["stop", "RUN", "--timeout"],
    ["plan", "--peak-tflops"],
    ["plan", "--bandwidth"],
    ["plan", "--mfu"],
]
BAD_FLOATS = ["-1", "0", "nan", "inf", "-inf", "1e400", "abc", ""]
BAD_DIRECTIVE_VALUES = [
    "noequals",
    "=1",
    "lr_multiplier=",
    "lr_multiplier=nan",
    "lr_multiplier=Infinity",
    "lr_multiplier=-1",
    "lr_multiplier=1e400",
    "lr_multiplier=true",
    'lr_multiplier="0.5"',
    "micro_batch_size=0",
    "micro_batch_size=-5",
    "micro_batch_size=1.5",
    "micro_batch_size=99999999999999999999",
    "bogus_field=1",
    "x" * 5000 + "=1",
    "micro_batch_size=\0",
]
BAD_CONFIG_SETS = [
    "train.micro_batch=0",
    "train.bogus=1",
    "bogus",
    "=",
    "train.precision=fp8",
    "steps=-1",
    "train.lr=nan",
    "checkpoint.keep=0",
    "a" * 3000 + "=1",
]
BAD_ENDPOINTS = ["nope", "host:", ":1", "host:99999", "host:0", "a" * 300 + ":1", "host:-1", "two words:1"]
BAD_MEMORY = ["12G!", "-1G", "nanG", "0", "1e400G", "abc", ""]


def cases() -> list[list[str]]:
    table: list[list[str]] = [[command, spec] for command in RUN_COMMANDS for spec in BAD_SPECS]
    table += [[*flag, value] for flag in NUMBER_FLAGS for value in BAD_COUNTS]
    table += [[*flag, value] for flag in FLOAT_FLAGS for value in BAD_FLOATS]
    table += [["logs", "RUN", "-n", value] for value in BAD_NUMBERS]
    table += [["propose", "RUN", "--rollback", "global_step10", "--skip-batches", v] for v in BAD_NUMBERS]
    table += [["propose", "RUN", "--set", value] for value in BAD_DIRECTIVE_VALUES]
    table += [["clamp", "RUN", "d-1", "--set", value] for value in BAD_DIRECTIVE_VALUES]
    table += [[command, "--set", value, *detach] for value in BAD_CONFIG_SETS for command, *detach in (
        ("run", "--detach"), ("plan",), ("endure",))]  # fmt: skip
    table += [["doctor", "--rdzv-endpoint", value] for value in BAD_ENDPOINTS]
    table += [
        ["run", "--detach", "--nodes", "2", "--node-rank", "1", "--rdzv-endpoint", value]
        for value in BAD_ENDPOINTS
    ]
    table += [["plan", "--gpu-memory", value] for value in BAD_MEMORY]
    table += [["attach", "RUN", "--theme", value] for value in ("neon", "", "x" * 300)]
    table += [["run", "--detach", "--preset", value] for value in ("huge", "", "TINY")]
    table += [["export", "RUN", "--format", value] for value in ("xml", "")]
    table += [["export", "RUN", "--format", "csv", "--what", "secrets"]]
    table += [
        ["plan", "--interconnect", "carrier-pigeon"],
        ["plan", "--offload", "disk"],
        ["propose", "RUN", "--rationale", "w" * 100_000, "--set", "lr_multiplier=0.5"],
        ["propose", "RUN"],
        ["propose", "RUN", "--reset", "bogus"],
        ["propose", "RUN", "--rollback", "../../etc"],
        ["propose", "RUN", "--rollback", "global_step-1"],
        ["propose", "RUN", "--rollback", "x" * 300],
        ["propose", "RUN", "--skip-batches", "3"],
        ["reject", "RUN", "d-1", "--reason", "r" * 100_000],
        ["approve", "RUN", "\0"],
        ["approve", "RUN", "x" * 300],
        ["approve", "RUN", "../d-1"],
        ["reject", "RUN", "", "--reason", "no"],
        ["run", "/dev/zero", "--detach"],
        ["run", "/nonexistent.toml", "--detach"],
        ["run", "/etc", "--detach"],
        ["run", "--detach", "--name", "x" * 300],
        ["run", "--detach", "--name", "a/b"],
        ["run", "--detach", "--name", "\0"],
        ["run", "--detach", "--step", "100"],
        ["chaos", "RUN", "hang", "--rank", "99"],
        ["chaos", "RUN", "nope"],
        ["chaos", "RUN", "spike", "--factor", "nan"],
        ["chaos", "RUN", "spike", "--factor", "-1"],
        ["chaos", "RUN", "spike", "--factor", "inf"],
        ["serve", "RUN", "--port", "70000"],
    ]
    return table


CASES = cases()


def test_the_table_is_large_and_reaches_every_command() -> None:
    assert len(CASES) >= 150
    from tests.memtui.test_cli_args import _subcommands

    reached = {argv[0] for argv in CASES}
    assert set(_subcommands()) - reached <= {"ls", "prepare"}  # they take no value to abuse


def stored_run(home: Path) -> RunDir:
    run = RunDir.create(build_run_config(name="hostile", steps=100), home)
    with Store(run.store) as store:
        store.append_event("note", message="before")
    return run


@pytest.mark.parametrize(
    "argv", CASES, ids=lambda argv: " ".join(a[:12].replace("\0", "NUL") for a in argv)[:80]
)
def test_a_hostile_value_is_one_line_exit_2_and_changes_nothing(
    argv: list[str], home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = stored_run(home)
    before = run.store.read_bytes()
    argv = [run.run_id if a == "RUN" else a for a in argv]
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    assert code == 2, (code, out[-300:], err[-300:])
    assert err.count("\n") == 1 and "Traceback" not in err, err[-600:]
    assert len(err) < 700, err  # a hostile value is shortened, not echoed whole
    assert run.store.read_bytes() == before and run.supervisor_pid() is None
    assert os.listdir(run.path.parent) == [run.run_id]  # no second run
