"""docs/cli.md and the README match the parser: every flag they name exists in the subcommand it is
named for, and every flag of every subcommand is documented in docs/cli.md (walking argparse)."""

from __future__ import annotations

import argparse
import re

import pytest

from specviz.checks.parser import build_parser
import locations

ROOT = locations.ROOT
CLI_MD = ROOT / "docs" / "cli.md"
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*(?:\.[a-zA-Z]+)*")  # with Streamlit's --section.option
# a command line in a document: `specviz SUB ...` or `python -m specviz SUB ...`, up to the end of its code span or line
COMMAND = re.compile(r"(?:python -m specviz|(?<![\w.-])specviz) (run|bench|calibrate|sweep|distill|vllm|tune)\b([^`\n]*)")
RUN_LIKE = ("run", "bench", "calibrate", "sweep")
# Flags of other programs the README names (setup.sh, Streamlit), never specviz's.
OTHER_TOOLS = {"--browser", "--vllm", "--llamacpp", "--server.address", "--server.allowedHosts", "--dist"}  # setup.sh, streamlit, pytest-xdist


def flags_of() -> dict[str, set[str]]:
    p = build_parser()
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    return {cmd: {s for act in sp._actions if act.help is not argparse.SUPPRESS  # former names: not in --help
                  for s in act.option_strings if s.startswith("--")}
            for cmd, sp in sub.choices.items()}


def sections(text: str) -> dict[str, str]:
    """The document's '## ' sections by heading."""
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def table_flags(section: str) -> set[str]:
    """The flags that head a table row: `| `--flag ...` | ...`."""
    return {m.group(1) for m in re.finditer(r"^\| `(--[a-z][a-z0-9-]*)", section, flags=re.M)}


def shared_rows(section: str) -> dict[str, set[str]]:
    """The shared run-flag tables: flag -> the commands whose column has a tick."""
    out = {}
    for line in section.splitlines():
        m = re.match(r"^\| `(--[a-z][a-z0-9-]*)[^|]*\|[^|]*\|(.*)$", line)
        if m:
            cells = [c.strip() for c in m.group(2).split("|")][:len(RUN_LIKE)]
            out[m.group(1)] = {cmd for cmd, cell in zip(RUN_LIKE, cells) if cell == "✓"}
    return out


def joined(text: str) -> str:
    """Shell lines continued with a backslash, joined."""
    return re.sub(r"\\\n\s*", " ", text)


def documented() -> dict[str, set[str]]:
    secs = sections(CLI_MD.read_text())
    shared = shared_rows(secs["Shared run flags"])
    out = {}
    for cmd in flags_of():
        own = table_flags(secs[f"`specviz {cmd}`"])
        out[cmd] = own | {flag for flag, cmds in shared.items() if cmd in cmds}
    return out


def test_every_flag_of_every_subcommand_is_documented_in_cli_md_and_nothing_more():
    parsed, docs = flags_of(), documented()
    for cmd in parsed:
        assert parsed[cmd] - docs[cmd] - {"--help"} == set(), f"{cmd}: flags docs/cli.md does not list"
        assert docs[cmd] - parsed[cmd] == set(), f"{cmd}: flags docs/cli.md lists that `specviz {cmd}` lacks"


def test_every_flag_a_subcommand_section_names_is_that_subcommands():
    parsed, secs = flags_of(), sections(CLI_MD.read_text())
    for cmd in parsed:
        named = set(FLAG.findall(secs[f"`specviz {cmd}`"]))
        assert named - parsed[cmd] - OTHER_TOOLS == set(), f"the `specviz {cmd}` section names flags it lacks"


def test_every_flag_cli_md_names_outside_the_other_engines_table_exists():
    every = set().union(*flags_of().values())
    secs = sections(CLI_MD.read_text())
    for title, body in secs.items():
        if title == "The same settings in other engines":
            body = body.split("\n|", 1)[0]  # its prose names ours; its table names vLLM's, SGLang's...
        assert set(FLAG.findall(body)) - every - OTHER_TOOLS == set(), f"docs/cli.md, section {title!r}"


@pytest.mark.parametrize("doc", ["README.md", *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))])
def test_every_specviz_command_in_the_docs_uses_only_its_subcommands_flags(doc):
    parsed = flags_of()
    text = joined((ROOT / doc).read_text())
    commands = COMMAND.findall(text)
    for cmd, rest in commands:
        assert set(FLAG.findall(rest)) - parsed[cmd] == set(), f"{doc}: `specviz {cmd}{rest}`"


def test_every_flag_the_readme_names_is_a_specviz_flag_or_another_tools():
    every = set().union(*flags_of().values())
    named = set(FLAG.findall((ROOT / "README.md").read_text()))
    assert named - every - OTHER_TOOLS == set()


def test_the_readme_and_cli_md_show_commands_at_all():
    """The checks above pass vacuously on documents without commands: these have some."""
    assert len(COMMAND.findall(joined((ROOT / "README.md").read_text()))) >= 2
    assert {cmd for cmd, _ in COMMAND.findall(joined(CLI_MD.read_text()))} == set(flags_of())


def test_help_answers_without_importing_torch_or_transformers():
    """`specviz --help` and every subcommand's help build the parser only: no torch, no transformers."""
    import subprocess
    import sys

    probe = ("import sys; from specviz.cli import main\n"
             "for argv in ([], ['run'], ['bench'], ['sweep'], ['calibrate'], ['distill'], ['vllm'], ['tune']):\n"
             "    assert main([*argv, '--help']) == 0\n"
             "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_distills_kind_choices_are_the_kinds_it_can_build():
    from specviz.checks.distillflags import DRAFT_KINDS
    from specviz.distill.command import KINDS

    assert DRAFT_KINDS == list(KINDS)
