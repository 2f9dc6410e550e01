"""README.md and the guide under docs/: every link resolves, and every example runs, as far as
a test can run it without a GPU: commands parse with memtui's own parser, the scripts they
name exist, JSON, YAML and Python read as such, and a transcript (``$ memtui ...`` and its
output) prints what the page shows. The TOML examples are loaded as run configs in
``tests/engine/test_run_config.py``."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import shlex
from pathlib import Path

import pytest

from engine.chaos.table import KINDS
from engine.config.reference import config_keys, reference_markdown, written_reference
from engine.directives.planners.reply import parse_reply
from memtui.chaos import kinds_table
from memtui.cli.chaos_command import chaos_words, checked_request
from memtui.cli.errors import CliError
from memtui.cli.main import main
from memtui.cli.parser import build_parser
from tests.doc_pages import GUIDE, README, ROOT, Example, anchors, examples, pages, relative_links
from tests.engine.test_deepspeed_adoption import SEED_ZERO3

SHELL = ("", "sh", "bash", "console", "shell")
FILE_ARGUMENT = re.compile(r"^(?:\S+=\S+ )*(?:python3?|pytest|bash) (?:-\S+ )*([\w./-]+)")
"""A command line that names a script or test file of the repository (env assignments first)."""


def runnable(lang: str) -> list[Example]:
    return [e for page in pages() for e in examples(page) if e.lang in lang.split("|") and not e.not_run]


def command_lines(example: Example) -> list[str]:
    """The example's lines, a `\\` continuation joined, a `$ ` prompt dropped."""
    joined = example.text.replace("\\\n", " ")
    return [line.removeprefix("$ ").strip() for line in joined.splitlines()]


def parse(parser: argparse.ArgumentParser, words: list[str]) -> None:
    """Read ``words`` as ``memtui`` does, up to running the command: a chaos kind's parameters
    are checked against its spec; SystemExit or CliError when refused."""
    args, extras = parser.parse_known_args(words)
    if not getattr(args, "takes_extras", False):
        if extras:
            parser.error(f"unrecognized arguments: {' '.join(extras)}")
        return
    chaos = chaos_words(extras, listing=args.list)
    if not args.list:
        checked_request(str(chaos.kind), chaos.texts)


def test_every_relative_link_names_a_file_and_an_anchor_that_exist() -> None:
    broken = []
    for page in pages():
        for line, target in relative_links(page):
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.name}:{line}: {target}: no such file")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{page.name}:{line}: {target}: no heading with that anchor")
    assert broken == []


def test_readme_leads_to_every_page_of_the_guide() -> None:
    linked = {(README.parent / target.partition("#")[0]).resolve() for _, target in relative_links(README)}
    assert {page.resolve() for page in GUIDE.glob("*.md")} - linked == set()


def test_readme_is_a_first_screen_that_leads_on() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= 120, f"README.md has {lines} lines: the guide's subjects go under docs/"
    assert "## Read on" in README.read_text(encoding="utf-8")


def test_every_not_run_marker_gives_its_reason() -> None:
    marked = [e for page in pages() for e in examples(page) if e.not_run is not None]
    assert marked, "the synopsis of the commands is marked"
    assert all(len(e.not_run or "") > 10 for e in marked)


def test_every_memtui_command_in_an_example_parses() -> None:
    parser = build_parser()
    refused = []
    commands = 0
    for example in runnable("|".join(SHELL)):
        for line in command_lines(example):
            if not line.startswith("memtui ") and line != "memtui":
                continue
            commands += 1
            errors = io.StringIO()
            try:
                with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
                    parse(parser, shlex.split(line, comments=True)[1:])
            except (SystemExit, CliError) as err:
                refused.append(f"{example}: {line}: {errors.getvalue().strip() or err}")
    assert commands >= 20  # the guide is full of them: a scan that misses them all fails here
    assert refused == []


def test_every_script_an_example_runs_exists() -> None:
    named = []
    for example in runnable("|".join(SHELL)):
        for line in command_lines(example):
            found = FILE_ARGUMENT.match(line)
            if found and "/" in found.group(1):
                named.append((example, found.group(1).partition("::")[0]))
    assert named
    assert [f"{e}: {path}" for e, path in named if not (ROOT / path).exists()] == []


def test_json_examples_are_json() -> None:
    documents = runnable("json") + [e for e in runnable("") if e.text.startswith("{")]
    assert len(documents) >= 3
    for example in documents:
        assert isinstance(json.loads(example.text), dict), example


def test_the_deepspeed_json_example_is_the_one_the_trainer_test_trains() -> None:
    """your-model.md says tests/trainer/test_user_deepspeed_json.py trains "exactly the JSON
    above", and the config it gives (tests/engine/test_deepspeed_adoption.py checks that)."""
    (example,) = [e for e in examples(GUIDE / "your-model.md") if e.lang == "json"]
    assert json.loads(example.text) == SEED_ZERO3


def test_the_planner_reply_example_is_read_as_a_suggestion() -> None:
    (example,) = [e for e in examples(GUIDE / "directives.md") if e.text.startswith('{"lr_multiplier"')]
    reply = parse_reply(example.text)
    assert reply.problem is None and reply.values == {"lr_multiplier": 0.7}


def test_the_configuration_page_lists_every_key_as_the_models_declare_it() -> None:
    written = written_reference(GUIDE / "configuration.md")
    assert written == reference_markdown(), "python -m engine.config.reference --write docs/configuration.md"
    assert all(f"| `{key.name}` |" in written and key.meaning for key in config_keys())


def test_the_chaos_page_lists_every_kind_as_the_kinds_declare_it() -> None:
    written = kinds_table.MARKERS.written(GUIDE / "chaos-and-endurance.md")
    assert written == kinds_table.kinds_markdown(), (
        "python -m memtui.chaos.kinds_table --write docs/chaos-and-endurance.md"
    )
    assert all(f"| `{name}` |" in written and model.recovered_when for name, model in KINDS.items())


def test_yaml_examples_are_yaml() -> None:
    yaml = pytest.importorskip("yaml")
    documents = runnable("yaml")
    assert documents
    for example in documents:
        assert isinstance(yaml.safe_load(example.text), dict), example


def test_python_examples_compile() -> None:
    sources = runnable("python")
    assert sources
    for example in sources:
        compile(example.text, str(example), "exec")


def test_transcripts_print_what_the_page_shows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    transcripts = [e for e in runnable("") if e.text.startswith("$ memtui ")]
    assert transcripts, "capacity.md's worked example is a transcript"
    for example in transcripts:
        _write_files_the_page_names(example.page, tmp_path)
        first, *shown = example.text.replace("/tmp/", f"{tmp_path}/").replace("\\\n", " ").splitlines()
        capsys.readouterr()
        assert main(shlex.split(first.removeprefix("$ "))[1:]) == 0, example
        printed = capsys.readouterr().out.splitlines()
        assert [line.rstrip() for line in printed] == [line.rstrip() for line in shown], example


def _write_files_the_page_names(page: Path, tmp_path: Path) -> None:
    """Write each example the page introduces with "`/tmp/PATH` holds:" to tmp_path/PATH."""
    for example in examples(page):
        named = re.search(r"`/tmp/([^`]+)` holds:$", example.before)
        if named:
            (tmp_path / named.group(1)).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / named.group(1)).write_text(example.text)
