"""One acceptance vocabulary: every acceptance quantity is computed by specviz.analysis.acceptance alone,
read under one name, and the trace summary, the CLI summary, the pages' numbers, the benchmarks' and the
vLLM counters' paths give the same numbers on one hand-made trace.

The source scans are heuristics over names (a division whose numerator names accepted tokens or
successes and whose denominator names drafts, positions tried, steps, rounds, rows or k), strict enough
to catch the duplicates this module replaced."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from locations import ROOT
from specviz.analysis import acceptance

HOME = ROOT / "specviz" / "analysis" / "acceptance.py"
SOURCES = sorted([*(ROOT / "specviz").rglob("*.py"), *(ROOT / "pages").glob("*.py"), *(ROOT / "bench").glob("*.py"),
                  ROOT / "app.py"])
NUMERATOR = {"accepted", "acc", "succ", "successes"}  # name parts of accepted-token counts
DENOMINATOR = {"drafted", "drafts", "draft", "tried", "trials", "tries", "steps", "step", "rounds", "rows", "k"}
# Where a reader reads these numbers: the pages, their helpers, the CLI, and the tables bench/ prints.
USER_FACING = sorted([*(ROOT / "pages").glob("*.py"), *(ROOT / "specviz" / "app").glob("*.py"), ROOT / "app.py",
                      ROOT / "specviz" / "cli.py", ROOT / "specviz" / "analysis" / "summarytext.py",
                      ROOT / "specviz" / "peers" / "bench.py", ROOT / "specviz" / "peers" / "llamacpp.py",
                      ROOT / "specviz" / "peers" / "tune.py", ROOT / "specviz" / "distill" / "report.py",
                      *(ROOT / "bench").glob("*.py")])
# Other names for the defined quantities that have been used: each must not come back.
RETIRED = [r"α fit", r"\balpha fit\b", r"output tokens ?/ ?step", r"\baccept rate\b", r"acceptance ratio",
           r"tok/step", r"\bmean len\b", r"mean acc\. length", r"(?<!mean )acceptance length"]


def _parts(node: ast.AST) -> set[str]:
    """The lower-case name parts (split at _) of every name, attribute and string key under ``node``, but
    constants' (PRIOR_STEPS is a prior's weight, not a count of steps)."""
    out = set()
    for n in ast.walk(node):
        word = (n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute)
                else n.value if isinstance(n, ast.Constant) and isinstance(n.value, str) else "")
        if not word.isupper():
            out.update(p for p in word.lower().split("_") if p)
    return out


def acceptance_divisions(source: str) -> list[int]:
    """The line of every division of an accepted-token count by drafts, positions tried, steps, rows or k."""
    found = []
    tree = ast.parse(source)
    for n in ast.walk(tree):
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div):
            num, den = n.left, n.right
        elif isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Div):
            num, den = n.target, n.value
        else:
            continue
        if _parts(num) & NUMERATOR and _parts(den) & DENOMINATOR:
            found.append(n.lineno)
    return sorted(found)


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(b.body[0].value) for b in ast.walk(tree)
            if isinstance(b, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and b.body and isinstance(b.body[0], ast.Expr) and isinstance(b.body[0].value, ast.Constant)}


def shown_strings(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every string constant in ``path`` but its docstrings (f-strings' literal parts too)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    skip = _docstrings(tree)
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip]


def metric_labels(path: Path) -> list[tuple[int, str]]:
    """(line, literal text) of the label of every ``*.metric(label, ...)`` call (a Streamlit tile)."""
    out = []
    for n in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "metric" and n.args:
            label = n.args[0]
            parts = [label] if isinstance(label, ast.Constant) else [
                v for v in ast.walk(label) if isinstance(v, ast.Constant)]
            out.append((n.lineno, "".join(v.value for v in parts if isinstance(v.value, str))))
    return out


# ---- one home ------------------------------------------------------------------------------------------

def test_the_scan_finds_the_duplicates_it_is_for_and_not_other_divisions():
    dup = ("def rate(accepted, drafted):\n    return accepted / drafted if drafted else None\n"
           "def length(r, rows):\n    return 1 + sum(x['accepted'] for x in r) / len(rows)\n"
           "def alpha(self):\n    return self.successes / self.trials\n"
           "def per_step(s):\n    return s['accept_s'] / s['steps'] + s['t_draft'] / s['k']\n"
           "def calibration(self):\n    return (self.suffix_accepted + 1) / (self.suffix_score + PRIOR_STEPS)\n")
    assert acceptance_divisions(dup) == [2, 4, 6]


def test_no_module_but_the_home_divides_accepted_tokens_by_drafts_or_positions():
    found = [f"{path.relative_to(ROOT)}:{line}" for path in SOURCES if path != HOME
             for line in acceptance_divisions(path.read_text())]
    assert not found, ("acceptance computed outside specviz.analysis.acceptance (call its functions): "
                       + ", ".join(found))


# ---- one name --------------------------------------------------------------------------------------------

def test_no_retired_name_for_an_acceptance_quantity_is_shown():
    found = [f"{path.relative_to(ROOT)}:{line}: {text!r}" for path in USER_FACING for line, text in shown_strings(path)
             if any(re.search(p, text, re.IGNORECASE) for p in RETIRED)]
    assert not found, "use the defined names (specviz.analysis.acceptance.NAMES): " + "; ".join(found)


def test_every_tile_about_acceptance_uses_a_defined_name():
    tiles = [(path, line, label) for path in USER_FACING for line, label in metric_labels(path)
             if re.search(r"accept|α|alpha", label, re.IGNORECASE)]
    assert tiles  # the Live, Server and Speedup pages have such tiles
    bad = [f"{p.relative_to(ROOT)}:{line}: {label!r}" for p, line, label in tiles
           if not any(name in label for name in acceptance.NAMES)]
    assert not bad, "tiles naming acceptance otherwise than acceptance.NAMES: " + "; ".join(bad)


def test_the_sweep_table_names_its_alpha_and_acceptance_rate_by_the_defined_names():
    tree = ast.parse((ROOT / "pages" / "sweep.py").read_text())
    columns = next(n.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
                   and any(isinstance(t, ast.Name) and t.id == "COLUMNS" for t in n.targets))
    labels = {k.value: v for k, v in zip(columns.keys, columns.values)}
    assert ast.unparse(labels["alpha"]) == "tokentext.ALPHA"
    assert labels["acceptance_rate"].value == acceptance.ACCEPTANCE_RATE


def test_the_definitions_shown_beside_the_numbers_name_them_as_the_home_does():
    from specviz.figures import tokentext

    assert tokentext.ALPHA == acceptance.ALPHA
    for name, definition in ((acceptance.ALPHA, tokentext.ALPHA_DEFINITION),
                             (acceptance.ACCEPTANCE_RATE, tokentext.ACCEPTANCE_RATE_DEFINITION),
                             (acceptance.MEAN_ACCEPTANCE_LENGTH, tokentext.MEAN_ACCEPTANCE_LENGTH_DEFINITION),
                             (acceptance.MEAN_ACCEPTANCE_LENGTH, tokentext.MODEL_MEAN_ACCEPTANCE_LENGTH_DEFINITION),
                             (acceptance.ALPHA, tokentext.ALPHA_FROM_MEAN_DEFINITION)):
        assert definition.startswith(f"**{name}")


# ---- one number: every path on one hand-made trace ---------------------------------------------------------
# k = 3, two rows, two steps: (drafted, accepted) = (3, 3) and (3, 0), then (3, 1) and (3, 2).
# accepted 6 of 12 drafted; 4 drafts; positions tried 3 + 1 + 2 + 3 = 9; drafts accepting >= 1, 2, 3: 3, 2, 1.
RATE, LENGTH, ALPHA, PER_POSITION = 6 / 12, 1 + 6 / 4, 6 / 9, [3 / 4, 2 / 4, 1 / 4]
ROWS = [[(3, 3), (3, 0)], [(3, 1), (3, 2)]]


@pytest.fixture(scope="module")
def trace() -> dict:
    from specviz.analysis.trace import build_trace

    steps, outputs = [], {}
    for i, rows in enumerate(ROWS):
        recs = []
        for j, (d, a) in enumerate(rows):
            outputs.setdefault(j, []).extend(range(a + 1))
            recs.append({"index": j, "active": True, "drafted": d, "accepted": a, "emitted": list(range(a + 1))})
        steps.append({"step": i, "k": 3, "t_start": 0.4 * i, "t_draft": 0.1, "t_verify": 0.2, "t_accept": 0.05,
                      "t_bookkeeping": 0.05, "rows": recs})
    seqs = [{"index": j, "prompt": "p", "prompt_token_ids": [1], "output_token_ids": o, "text": "",
             "finish_reason": "length"} for j, o in outputs.items()]
    config = {"mode": "speculative", "target": "t", "draft": "d", "batch_size": 2, "draft_length": 3,
              "device": "cpu", "dtype": "float32"}
    return build_trace(config, {}, seqs, steps, [], 1.0, 0.1)


def test_the_trace_summary_gives_the_hand_counted_numbers(trace):
    s = trace["summary"]
    assert (s["acceptance_rate"], s["mean_acceptance_length"], s["per_position_acceptance"]) == (RATE, LENGTH, PER_POSITION)


def test_the_cli_summary_prints_the_hand_counted_numbers(trace):
    from specviz.analysis.summarytext import run_summary_lines

    lines = {line.rsplit("  ", 1)[0].strip(): line.rsplit(" ", 1)[1] for line in run_summary_lines(trace)}
    assert lines[acceptance.ACCEPTANCE_RATE] == f"{RATE:.3f}"
    assert lines[acceptance.MEAN_ACCEPTANCE_LENGTH] == f"{LENGTH:.3f}"


def test_the_pages_alpha_and_acceptance_rate_are_the_hand_counted_ones(trace):
    from specviz.analysis.acceptstats import acceptance_per_position, position_counts
    from specviz.figures import charts
    from specviz.app import state as appstate

    assert appstate.alpha_from_trace(trace) == ALPHA  # the Live headline's α tile, the Speedup page's slider
    bars = charts.acceptance_rate_bars(trace)
    assert f"all rows {RATE:.2f}" in bars.layout.annotations[0].text
    assert list(bars.data[0].y) == [(3 + 1) / 6, (0 + 2) / 6]  # each row's own acceptance rate
    counts = position_counts(trace["steps"])  # the Speedup page's Recommend panel and `specviz tune`
    assert (counts.alpha, acceptance_per_position(counts)) == (ALPHA, PER_POSITION)


def test_the_benchmarks_give_the_hand_counted_numbers(trace):
    from specviz.measure.bench import acceptance_rate
    from specviz.peers.bench import _ours_acceptance

    assert acceptance_rate([trace]) == RATE
    ours = _ours_acceptance([trace])
    assert (ours["rate"], ours["mean_length"], ours["per_position"]) == (RATE, LENGTH, PER_POSITION)


def test_vllm_counters_of_the_same_drafts_give_the_same_numbers():
    from specviz.analysis.acceptstats import counts_from_vllm
    from specviz.analysis.tune import Acceptance
    from specviz.peers.metrics import Delta

    d = Delta(seconds=1.0, drafts=4.0, draft_tokens=12.0, accepted=6.0, accepted_per_position=(3.0, 2.0, 1.0),
              generation_tokens=10.0, running=2.0, waiting=0.0, has_spec=True)
    assert (d.acceptance_rate, d.mean_acceptance_length, d.acceptance_per_position, d.alpha) == (
        RATE, LENGTH, PER_POSITION, ALPHA)
    assert Acceptance.from_counts(counts_from_vllm(d.drafts, d.accepted_per_position)).alpha == ALPHA  # `tune --metrics`
