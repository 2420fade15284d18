"""`specviz run --synthetic-acceptance ALPHA` on the packaged default model: the summary and the trace
say the text is not the target's, and alpha = 1 keeps every drafted token."""

from __future__ import annotations

from specviz.analysis.trace import load_json
from specviz.cli import main


def test_run_with_synthetic_acceptance_labels_its_summary_and_trace(tmp_path, capsys):
    out = tmp_path / "trace.json"
    code = main(["run", "--prompt", "Say hi.", "--draft", "ngram", "--draft-length", "3", "--max-new-tokens", "12",
                 "--device", "cpu", "--synthetic-acceptance", "1", "--out", str(out)])
    assert code == 0
    assert "synthetic acceptance (alpha = 1): not the target's text" in capsys.readouterr().out
    trace = load_json(out)
    assert trace["config"]["synthetic_acceptance"] == 1.0
    rows = [r for s in trace["steps"] for r in s["rows"] if r["active"] and r["drafted"]]
    assert rows and all(r["accepted"] == r["drafted"] for r in rows)
