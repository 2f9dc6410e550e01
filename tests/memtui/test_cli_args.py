"""Argument and config errors: exit status 2 and one line naming the problem."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memtui import __version__
from memtui.cli.main import main


@pytest.mark.parametrize(
    "argv",
    [
        ["bogus"],
        ["run", "--steps", "zero"],
        ["run", "--steps", "0"],
        ["run", "--preset", "huge"],
        ["logs", "--trainer", "--supervisor"],
        ["logs", "-n", "-3"],
        ["stop", "--timeout", "-1"],
        ["attach", "--theme", "neon"],
        ["ls", "extra"],
    ],
)
def test_argument_errors_exit_2_with_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("memtui") and "error:" in err


@pytest.mark.parametrize(
    "argv", [[], ["run"], ["attach"], ["ls"], ["status"], ["logs"], ["stop"], ["pause"], ["unpause"]]
)
def test_help_everywhere(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([*argv, "--help"])
    assert info.value.code == 0
    assert "usage: memtui" in capsys.readouterr().out


def _subcommands() -> list[str]:
    from memtui.cli.parser import build_parser

    (commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return sorted(commands.choices)


def test_subcommands_are_found_by_introspection() -> None:
    # The test below covers a new subcommand without anyone listing it; if introspection
    # found nothing it would silently run no case, so say what it must find.
    assert {"run", "attach", "ls", "status", "logs", "stop", "doctor"} <= set(_subcommands())


@pytest.mark.parametrize("command", _subcommands())
def test_every_subcommand_has_help_and_refuses_unknown_flags(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    assert f"usage: memtui {command}" in capsys.readouterr().out
    with pytest.raises(SystemExit) as info:
        main([command, "--no-such-flag"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("memtui") and "error:" in err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.strip() == f"memtui {__version__}"


def test_config_error_names_the_key_and_starts_nothing(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "run.toml"
    config.write_text("[train]\nmicro_bach = 4\n")
    assert main(["run", str(config), "--detach"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("memtui: config error:") and "train.micro_bach" in err
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())


def test_missing_config_file_is_a_config_error(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "/nonexistent/run.toml", "--detach"]) == 2
    assert "config error" in capsys.readouterr().err


@pytest.mark.slow
def test_help_loads_nothing_heavy() -> None:
    """``memtui --help`` is quick because it imports neither textual, pydantic, torch nor the
    engine's contract (how quick is not asserted: timings belong in bench/)."""
    code = (
        "import sys, memtui.cli.main\n"
        "try:\n    memtui.cli.main.main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('textual', 'pydantic', 'torch', 'engine.domain') if m in sys.modules]\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "HEAVY []" in done.stderr, done.stderr


@pytest.mark.slow
def test_python_dash_m_memtui_cli_is_the_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "memtui.cli", "--version"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"memtui {__version__}"


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        # no abbreviation: `--step` is not `--steps`, and the near flag is named
        (["run", "--step", "100"], "memtui run: error: unrecognized arguments: --step; did you mean --steps"),
        (["status", "--jsno"], "memtui status: error: unrecognized arguments: --jsno; did you mean --json?"),
        (["ls", "--jso"], "memtui ls: error: unrecognized arguments: --jso; did you mean --json?"),
        (
            ["logs", "--follw=1"],
            "memtui logs: error: unrecognized arguments: --follw=1; did you mean --follow",
        ),
        (["ls", "--zzz"], "memtui ls: error: unrecognized arguments: --zzz (see 'memtui ls --help')"),
        (["--zzz"], "memtui: error: unrecognized arguments: --zzz (see 'memtui --help')"),
    ],
)
def test_an_unknown_flag_names_its_subcommands_help_and_the_near_flag(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.count("\n") == 1, err
    assert err.startswith(says), err
    command = " ".join(["memtui", *argv[:1]]) if not argv[0].startswith("-") else "memtui"
    assert err.rstrip().endswith(f"(see '{command} --help')"), err


RUN_COMMANDS = ["status", "logs", "checkpoints", "oom", "directives", "report", "export", "stop", "resume"]


@pytest.mark.parametrize("command", RUN_COMMANDS)
@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("a" * 300, "a name of 300 bytes (at most 255)"),  # was a 26-line ENAMETOOLONG traceback
        ("x/" + "é" * 200, "a name of 400 bytes (at most 255)"),  # bytes, not characters
        ("run\0id", "no NUL byte"),
    ],
)
def test_a_run_that_cannot_exist_is_one_line_and_exit_2(
    command: str, spec: str, says: str, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command, spec]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("memtui: ") and says in err, err
    assert len(err) < 200, err  # the spec is shortened, not echoed whole
    assert list(home.iterdir()) == []  # nothing made in the home


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (
            ["plan", "--peak-tflops", "inf"],
            "argument --peak-tflops: must be a finite positive number, got inf",
        ),
        (["plan", "--peak-tflops", "nan"], "must be a finite positive number, got nan"),
        (["plan", "--peak-tflops", "-1"], "must be a finite positive number, got -1"),
        (
            ["propose", "x", "--set", "lr_multiplier=0.5", "--rationale", "w" * 100_000],
            "at most 2000 characters",
        ),
    ],
)
def test_values_are_bounded_before_use(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.count("\n") == 1 and says in err, err[:300]
    assert len(err) < 300


def test_a_config_that_is_no_regular_file_is_refused_at_once(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = home / "fifo.toml"
    os.mkfifo(fifo)  # no writer: opening it for reading would wait for one
    binary = home / "binary.toml"
    binary.write_bytes(b'name = "x"\n\xff\xfe')
    huge = home / "huge.toml"
    huge.write_bytes(b"#" * ((1 << 20) + 1))
    for path, says in (
        ("/dev/zero", "/dev/zero: not a regular file"),  # was: read for ever
        (str(fifo), "fifo.toml: not a regular file"),
        (str(home), "Is a directory"),
        (str(binary), "binary.toml: not UTF-8 text (byte 11)"),
        (str(huge), "huge.toml: over 1 MiB, too large for a config file"),
    ):
        assert main(["run", path, "--detach"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and says in err, err
    assert not (home / "runs").exists() or list((home / "runs").iterdir()) == []


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (
            ["run", "--preset", "tinny"],
            "invalid choice: 'tinny' (choose from 'tiny', 'small'); did you mean tiny?",
        ),
        (["run", "--preset", "SMALL"], "did you mean small?"),
        (["export", "--format", "jsnl"], "did you mean jsonl?"),
        (["stauts"], "invalid choice: 'stauts' (choose from "),
        (["run", "--preset", "x" * 500], "invalid choice: 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'..."),
    ],
)
def test_a_value_outside_the_choices_names_the_nearest(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.count("\n") == 1 and says in err, err
    if argv == ["stauts"]:
        assert err.rstrip().endswith("did you mean status? (see 'memtui --help')"), err
