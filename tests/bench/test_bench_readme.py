"""bench/ keeps only maintained scripts, each listed with its purpose in bench/README.md; result folders
keep data, not code; and BENCHMARKS.md's current results are what bench/current_results.py makes from
the stored result files."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
import locations

ROOT = locations.ROOT
BENCH = ROOT / "bench"


def listed() -> set[str]:
    """The scripts bench/README.md's table names: rows of the form | `name` | purpose |."""
    rows = re.findall(r"^\| `([\w.-]+\.(?:py|sh))` \| (.+) \|$", (BENCH / "README.md").read_text(), flags=re.M)
    assert all(len(purpose.strip()) > 10 for _, purpose in rows)
    return {name for name, _ in rows}


def current_results():
    spec = importlib.util.spec_from_file_location("current_results", BENCH / "current_results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_script_in_bench_is_listed_with_its_purpose_and_every_listed_one_exists():
    scripts = {p.name for p in BENCH.iterdir() if p.suffix in (".py", ".sh")}
    assert scripts - listed() == set(), "scripts in bench/ that bench/README.md does not list"
    assert listed() - scripts == set(), "bench/README.md lists scripts that are not in bench/"


def test_result_folders_hold_data_not_code():
    code = [p.relative_to(BENCH) for p in (BENCH / "results").rglob("*") if p.suffix in (".py", ".sh")]
    assert code == []


def test_benchmarks_md_opens_on_the_current_results_the_script_makes_from_the_stored_files():
    cr = current_results()
    text = (ROOT / "BENCHMARKS.md").read_text()
    assert cr.current_block(text) == cr.section()
    assert text.index(cr.BEGIN) < text.index("## Contents of the log") < text.index("# The log")


def test_every_current_result_row_names_its_commit_machine_and_command():
    cr = current_results()
    rows = [ln for ln in cr.section().splitlines() if ln.startswith("| ") and "commit" not in ln]
    data = [ln for ln in rows if ln.count("|") > 8]  # the measured tables (the GPU one says there is no result)
    assert len(data) >= 20
    for ln in data:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        assert cells[-1] in cr.COMMANDS and ("AMD EPYC" in cells[-2] or "Intel Xeon" in cells[-2]) and cells[-3], ln
        # command, machine (the CPU boxes results were taken on), commit


def test_a_changed_result_file_changes_the_table(tmp_path, monkeypatch):
    """The numbers come from the files: a copy of the results with one log's summary line edited
    gives that edited ratio in the section."""
    import shutil

    cr = current_results()
    shutil.copytree(cr.RESULTS, tmp_path / "results")
    log = tmp_path / "results" / "vllm-peer-2026-12-01-head" / "peer.log"
    log.write_text(log.read_text().replace("ours / vLLM tokens/s: 1.47x", "ours / vLLM tokens/s: 9.99x"))
    monkeypatch.setattr(cr, "RESULTS", tmp_path / "results")
    assert "**9.99x**" in cr.section() and "**9.99x**" not in (ROOT / "BENCHMARKS.md").read_text()
