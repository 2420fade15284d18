"""`--policy tree` (issue 16, the policy): a CLI run on the packaged pair in fp32 picks (k, W, N)
per step within the flags' bounds, records each step's pick in the trace, and its greedy output
equals plain greedy at B = 1 (a divergence only at a reported near-tie)."""

import pytest

from specviz.analysis.trace import load_json
from specviz.cli import main
from specviz.measure.correctness import compare
from specviz.run import DEFAULT_DRAFT_DIR

from exact_default import RAGGED_PROMPTS, prompt_ids, references, target  # noqa: E402,F401  (shared fixtures)

PROMPTS = RAGGED_PROMPTS[1:3]
MAX_NEW = 8
NEAR_TIE = 1e-3
pytestmark = pytest.mark.slow  # the real model in fp32


def test_a_cli_run_under_the_tree_policy_equals_plain_greedy_and_records_each_steps_shape(
        target, prompt_ids, references, tmp_path, monkeypatch):
    import specviz.analysis.costs

    # no calibration whatever the cache holds: the policy runs on the illustrative roofline (and says so)
    monkeypatch.setattr(specviz.analysis.costs, "load_calibration", lambda target, proposer: None)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "trace.json"
    with pytest.warns(UserWarning, match="no calibration .* illustrative roofline"):
        code = main(["run", *[a for p in PROMPTS for a in ("--prompt", p)], "--batch-size", "2", "--draft", str(DEFAULT_DRAFT_DIR),
                     "--policy", "tree", "--draft-length", "3", "--tree-width", "3", "--tree-nodes", "8",
                     "--max-new-tokens", str(MAX_NEW), "--dtype", "float32", "--device", "cpu", "--out", str(out)])
    assert code == 0
    trace = load_json(str(out))
    c = trace["config"]
    assert (c["policy"], c["draft_length"], c["tree_width"], c["tree_nodes"]) == ("tree", 3, 3, 8)  # the bounds
    outputs = [s["output_token_ids"] for s in trace["sequences"]]
    for check in compare(target, prompt_ids, outputs, references):
        assert check.exact or check.margin < NEAR_TIE, f"row {check.index} diverges at {check.first_divergence}"
    for s in trace["steps"]:
        assert s["k"] <= 3 and s["tree_width"] <= 3 and s["tree_nodes"] <= 8  # each step's pick, within the bounds
        for r in s["rows"]:
            if r.get("tree"):
                assert len(r["tree"]["token"]) <= s["tree_nodes"] and max(r["tree"]["depth"]) <= s["k"]
                assert max(r["tree"]["rank"]) < s["tree_width"]
    assert any(s["tree_width"] > 1 for s in trace["steps"])  # at B = 2 below the knee it drafts real trees
