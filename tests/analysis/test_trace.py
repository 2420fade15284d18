"""Trace metrics are pure functions of the step records; exports round-trip."""

import json

import pytest

from specviz.analysis.trace import build_trace, export_tables, load_json, save_json, summarize, to_chrome_trace


def make_dummy(per_step: list[list[tuple[int, int]]], k: int = 3) -> tuple[list[dict], list[dict]]:
    """Steps from (drafted, accepted) per row; each row emits accepted + 1 tokens."""
    steps, outputs = [], {}
    t = 0.0
    for i, rows in enumerate(per_step):
        recs = []
        for j, (d, a) in enumerate(rows):
            em = list(range(a + 1))
            outputs.setdefault(j, []).extend(em)
            recs.append({"index": j, "active": True, "drafted": d, "accepted": a, "emitted": em})
        steps.append({"step": i, "k": k, "t_start": t, "t_draft": 0.1, "t_verify": 0.2, "t_accept": 0.05,
                      "t_bookkeeping": 0.05, "rows": recs})
        t += 0.4
    seqs = [{"index": j, "prompt": "p", "prompt_token_ids": [1], "output_token_ids": o, "text": "",
             "finish_reason": "length"} for j, o in outputs.items()]
    return steps, seqs


def test_summary_metrics_by_hand():
    steps, seqs = make_dummy([[(3, 3), (3, 0)], [(3, 1), (3, 2)]])
    s = summarize(steps, seqs, wall_s=1.0, prefill_s=0.1)
    assert s["tokens"] == 4 + 1 + 2 + 3
    assert s["acceptance_rate"] == pytest.approx(6 / 12)
    assert s["mean_acceptance_length"] == pytest.approx(10 / 4)  # 1 + accepted / row-steps
    assert s["system_efficiency"] == pytest.approx(10 / 16)  # output / (row-steps x (k+1))
    assert s["per_position_acceptance"] == pytest.approx([3 / 4, 2 / 4, 1 / 4])
    # overhead: decode time not spent drafting, verifying or accepting
    assert s["overhead_frac"] == pytest.approx((0.9 - 2 * 0.35) / 1.0)
    assert s["wasted_slots"] == 6


def test_regular_decoding_has_no_acceptance():
    steps, seqs = make_dummy([[(0, 0)], [(0, 0)]], k=0)
    s = summarize(steps, seqs, 1.0, 0.0)
    assert s["acceptance_rate"] is None and s["mean_acceptance_length"] == 1.0 and s["system_efficiency"] == 1.0


def test_exports(tmp_path):
    steps, seqs = make_dummy([[(3, 3), (3, 0)], [(3, 1), (3, 2)]])
    trace = build_trace({"mode": "speculative"}, {"device": "cpu"}, seqs, steps, [{"t": 0.1, "util_pct": 50}], 1.0, 0.1)
    save_json(trace, tmp_path / "t.json")
    assert load_json(tmp_path / "t.json") == json.loads(json.dumps(trace))
    for fmt in ("csv", "parquet"):
        paths = export_tables(trace, tmp_path / fmt, fmt)
        assert {p.stem for p in paths} == {"sequences", "steps", "rows", "telemetry"}
    import pandas as pd

    rows = pd.read_csv(tmp_path / "csv" / "rows.csv")
    assert len(rows) == 4 and rows["accepted"].sum() == 6
    chrome = to_chrome_trace(trace)
    spans = [e for e in chrome["traceEvents"] if e["ph"] == "X"]
    assert {e["name"].split()[0] for e in spans} == {"prefill", "draft", "verify", "accept", "bookkeeping"}
    verify = [e for e in spans if e["name"].startswith("verify")]
    assert verify[1]["ts"] == pytest.approx((0.4 + 0.1) * 1e6)


def test_the_live_pages_csv_zip_holds_every_table_of_the_trace():
    import io
    import zipfile

    import pandas as pd

    from specviz.app.upload import trace_csv_zip

    steps, seqs = make_dummy([[(3, 3), (3, 0)], [(3, 1), (3, 2)]])
    trace = build_trace({"mode": "speculative"}, {"device": "cpu"}, seqs, steps, [{"t": 0.1, "util_pct": 50}], 1.0, 0.1)
    with zipfile.ZipFile(io.BytesIO(trace_csv_zip(trace))) as z:
        assert sorted(z.namelist()) == ["rows.csv", "sequences.csv", "steps.csv", "telemetry.csv"]
        rows = pd.read_csv(z.open("rows.csv"))
    assert len(rows) == 4 and rows["accepted"].sum() == 6


def test_load_rejects_what_is_not_a_trace(tmp_path):
    with pytest.raises(ValueError, match="invalid JSON"):
        load_json("{nope")
    with pytest.raises(ValueError, match="missing"):
        load_json('{"version": 1}')
    with pytest.raises(ValueError, match="unsupported trace version"):
        load_json('{"version": 99, "config": {}, "sequences": [], "steps": [], "summary": {}}')
