"""Every chart function on a small synthetic trace (a tiny engine run) and on edge cases."""

from __future__ import annotations

import plotly.graph_objects as go
import pytest

from specviz.figures import charts, modelcharts, tokentext
from specviz.analysis import explain
from specviz.runconfig import RunConfig
from specviz.analysis.trace import build_trace, sequence_record

from fakes import ScriptedDraft, decode, ragged_prompts, reference_greedy, tiny_llama

V = 64


def make_trace(behaviour=("all", "none", "half"), k=4, max_new=12, telemetry=None) -> dict:
    target = tiny_llama(V)
    prompts = ragged_prompts(len(behaviour), V)
    draft = ScriptedDraft(prompts, reference_greedy(target, prompts, max_new=max_new), list(behaviour), V) if k else None
    dec, steps = decode(target, prompts, draft, k, max_new)
    cfg = RunConfig(batch_size=len(prompts), draft_length=k, mode="speculative" if k else "regular")
    seqs = [sequence_record(r, target.tokenizer) for r in dec.rows]
    samples = telemetry if telemetry is not None else [
        {"t": 0.01 * i, "util_pct": 50.0 + i, "mem_bytes": 2**30, "source": "psutil"} for i in range(5)]
    return build_trace(cfg.to_trace_config(), {}, seqs, steps, samples, 0.5, 0.01)


@pytest.fixture(scope="module")
def trace():
    return make_trace()


@pytest.fixture(scope="module")
def regular_trace():
    return make_trace(k=0, max_new=5)


EMPTY = {"version": 1, "config": {}, "sequences": [], "steps": [], "telemetry": [], "summary": {}}
TRACE_CHARTS = [charts.acceptance_heatmap, charts.acceptance_rate_bars, charts.position_acceptance,
                charts.ragged_lengths, charts.wasted_slots, charts.phase_timeline, charts.phase_totals,
                charts.token_latency, charts.utilization]


@pytest.mark.parametrize("fn", TRACE_CHARTS, ids=lambda f: f.__name__)
def test_every_trace_chart_draws_data_from_a_small_run(fn, trace):
    fig = fn(trace)
    assert isinstance(fig, go.Figure) and len(fig.data) > 0
    fig.to_json()  # serialisable, as Streamlit sends it


@pytest.mark.parametrize("fn", TRACE_CHARTS, ids=lambda f: f.__name__)
def test_every_trace_chart_survives_an_empty_trace(fn):
    fig = fn(EMPTY)
    assert isinstance(fig, go.Figure) and len(fig.data) == 0 and fig.layout.annotations


def test_utilization_without_samples_says_no_samples(trace):
    fig = charts.utilization({**trace, "telemetry": []})
    assert fig.layout.annotations[0].text == "no samples"


def test_token_kinds_follow_the_vocabulary(trace):
    kinds = charts.token_kinds(trace)
    assert set(kinds) == {0, 1, 2}
    # row 0 ("all"): every step accepts k drafts then a bonus token
    assert {k for _, k, _ in kinds[0]} <= {"accepted", "bonus"} and any(k == "bonus" for _, k, _ in kinds[0])
    # row 1 ("none"): nothing accepted, one recovered token per step
    assert {k for _, k, _ in kinds[1]} == {"recovered"}
    # the kinds cover exactly the row's output
    for s in trace["sequences"]:
        assert [t for t, _, _ in kinds[s["index"]]] == s["output_token_ids"]


def test_token_kind_rules():
    assert charts.token_kind(0, accepted=2, drafted=4) == "accepted"
    assert charts.token_kind(2, accepted=2, drafted=4) == "recovered"
    assert charts.token_kind(3, accepted=3, drafted=3) == "bonus"
    assert charts.token_kind(0, accepted=0, drafted=0) == "bonus"


def test_regular_run_tokens_are_bonus_tokens_and_no_fourth_colour_exists(regular_trace):
    """Nothing drafted, nothing to reject: the target's one token per step is the bonus token."""
    assert {k for row in charts.token_kinds(regular_trace).values() for _, k, _ in row} == {"bonus"}
    assert set(charts.KIND_COLORS) == {"accepted", "recovered", "bonus"}


def test_wasted_slots_count_k_minus_accepted_per_active_row(trace):
    fig = charts.wasted_slots(trace)
    used, waste = fig.data[0].y, fig.data[1].y
    for s, u, w in zip(trace["steps"], used, waste):
        active = [r for r in s["rows"] if r["active"]]
        assert w == sum(s["k"] - r["accepted"] for r in active)
        assert u + w == len(active) * (s["k"] + 1)


def test_ragged_lengths_end_at_each_rows_output_length(trace):
    fig = charts.ragged_lengths(trace)
    for line, s in zip(fig.data, trace["sequences"]):
        assert line.y[-1] == len(s["output_token_ids"])


def test_ragged_lengths_of_many_rows_use_one_trace_with_gaps():
    tr = make_trace(behaviour=("none",) * 18, k=0, max_new=2)
    fig = charts.ragged_lengths(tr)
    assert len(fig.data) == 1 and fig.data[0].y.count(None) == 18


def test_heatmap_hover_shows_decoded_emitted_tokens(trace):
    fig = charts.acceptance_heatmap(trace, decode=lambda ids: "".join(f"<{t}>" for t in ids))
    hm = fig.data[0]
    assert len(hm.z) == 3 and len(hm.z[0]) == len(trace["steps"])
    first = trace["steps"][0]["rows"][0]
    assert f"&lt;{first['emitted'][0]}&gt;" in hm.text[0][0] and "accepted" in hm.text[0][0]  # escaped for hover HTML


def test_timeline_has_one_lane_per_phase_starting_at_step_starts(trace):
    fig = charts.phase_timeline(trace)
    lanes = {t.name: t for t in fig.data}
    assert set(charts.PHASES) <= set(lanes)
    assert lanes["draft"].base[0] == pytest.approx(trace["steps"][0]["t_start"] * 1e3)


def test_replay_emits_everything_by_the_end_and_nothing_at_zero(trace):
    assert all(not v for v in charts.tokens_at(trace, -1.0).values())
    end = charts.tokens_at(trace, charts.run_duration(trace))
    assert [end[s["index"]] for s in trace["sequences"]] == [s["output_token_ids"] for s in trace["sequences"]]


def test_token_html_colours_every_kind_and_escapes_text(trace):
    rows = tokentext.token_html(trace, decode=lambda ids: "<b>&")
    assert len(rows) == 3
    assert charts.KIND_COLORS["bonus"] in rows[0][1] and charts.KIND_COLORS["recovered"] in rows[1][1]
    assert "<b>&" not in rows[0][1] and "&lt;b&gt;&amp;" in rows[0][1]


def test_race_and_model_charts(trace, regular_trace):
    fig = charts.race({"speculative": trace, "regular": regular_trace}, until=0.0)
    assert [t.name for t in fig.data] == ["speculative", "regular"]
    fig = modelcharts.speedup_vs_k({1: [1.0, 1.5, 1.7]}, [{"b": 1, "k": 2, "speedup": 1.6}])
    assert fig.data[-1].name == "measured" and fig.layout.xaxis.dtick == 1
    assert len(modelcharts.optimal_k_curve([1, 2, 4], [4, 3, 1]).data) == 1
    hm = modelcharts.bk_heatmap([1, 4], [0, 2], [[1.0, 1.4], [1.0, None]])
    assert hm.data[0].text[1][1] == ""
    rows = [{"index": 0, "match": True, "first_divergence": None, "margin": None, "length": 5},
            {"index": 1, "match": False, "first_divergence": 3, "margin": 0.01, "length": 5}]
    assert list(modelcharts.divergence_chart(rows).data[0].y) == [5, 3]


def test_every_axis_has_a_title_and_integer_quantities_have_integer_ticks(trace):
    for fig in (charts.ragged_lengths(trace), charts.wasted_slots(trace), charts.acceptance_heatmap(trace)):
        assert fig.layout.xaxis.title.text == "step" and fig.layout.xaxis.tickformat == "d"
        assert float(fig.layout.xaxis.dtick).is_integer()
    for fig in (charts.ragged_lengths(trace), charts.wasted_slots(trace)):
        assert fig.layout.yaxis.title.text and fig.layout.yaxis.tickformat == "d"
    for fig in (charts.phase_timeline(trace), charts.phase_totals(trace), charts.token_latency(trace),
                charts.position_acceptance(trace), charts.acceptance_rate_bars(trace)):
        assert fig.layout.xaxis.title.text or fig.layout.yaxis.title.text, fig.layout.title.text
    assert charts.int_ticks(3)["dtick"] == 1 and charts.int_ticks(64)["dtick"] == 10


def test_optimal_k_axis_names_powers_of_two_and_k_is_an_integer():
    fig = modelcharts.optimal_k_curve(list(range(1, 65)), [3] * 20 + [1] * 44)
    assert list(fig.layout.xaxis.tickvals) == [1, 2, 4, 8, 16, 32, 64]
    assert list(fig.layout.xaxis.ticktext) == ["1", "2", "4", "8", "16", "32", "64"]
    assert fig.layout.yaxis.dtick == 1 and fig.layout.yaxis.tickformat == "d"


def test_bk_heatmap_colour_bar_says_what_the_colour_is():
    hm = modelcharts.bk_heatmap([1], [0, 2], [[1.0, 1.2]])
    assert "speedup" in hm.data[0].colorbar.title.text


def test_ragged_rows_get_distinct_colours(trace):
    colours = [line.line.color for line in charts.ragged_lengths(trace).data]
    assert len(set(colours)) == len(colours) == 3
    assert len(set(charts.ROW_COLORS)) == len(charts.ROW_COLORS)


def test_titles_sit_below_the_toolbar_band_so_it_does_not_cover_them(trace):
    for fn in TRACE_CHARTS:
        layout = fn(trace).layout
        assert layout.title.yref == "container" and layout.title.pad.t >= 28, fn.__name__
        assert layout.margin.t >= layout.title.pad.t + 30, fn.__name__  # the title's band fits above the plot


def test_phase_totals_chart_shows_every_phase_as_share_of_wall(trace):
    bars = charts.phase_totals(trace).data[0]
    tot = explain.phase_totals(trace)
    assert list(bars.y) == ["prefill", "draft", "verify", "accept", "bookkeeping", "other"]
    assert list(bars.x) == pytest.approx([tot[p]["pct"] for p in bars.y])


def test_special_tokens_show_as_a_marker_not_raw_text():
    tr = {"sequences": [{"index": 0, "finish_reason": "eos"}],
          "steps": [{"step": 0, "k": 0, "rows": [{"index": 0, "active": True, "drafted": 0, "accepted": 0,
                                                   "emitted": [1, 2]}]}]}
    (_, h), = tokentext.token_html(tr, decode=lambda ids: {1: "Hi", 2: "<|im_end|>"}[ids[0]])
    assert "Hi" in h and "⟨end of turn⟩" in h and "<|im_end|>" not in h.replace('title="special token &lt;|im_end|&gt;"', "")


def test_legend_defines_every_coloured_role_and_output():
    legend = tokentext.legend_html()
    for kind, sentence in tokentext.DEFINITIONS.items():
        assert kind in legend and sentence in legend
    assert "target" not in charts.KIND_COLORS


def test_step_html_marks_accepted_rejected_thrown_away_and_recovered():
    tr = {"steps": [{"step": 3, "k": 3, "rows": [{"index": 0, "active": True, "drafted": 3, "accepted": 1,
                                                   "emitted": [10, 99], "draft_tokens": [10, 11, 12]}]}]}
    h = tokentext.step_html(explain.step_detail(tr, 0, 0), decode=lambda ids: f"t{ids[0]}")
    assert h.index("t10") < h.index("t11") < h.index("t12")
    assert "rejected" in h and "thrown away" in h and "recovered" in h and "t99" in h
    assert "rejected draft position 2" in h


def test_heatmap_hover_and_replay_text_show_special_tokens_as_markers(trace):
    assert charts.visible("Hi.<|im_end|>") == "Hi.⟨end of turn⟩"
    fig = charts.acceptance_heatmap(trace, decode=lambda ids: "x<|im_end|>")
    assert "⟨end of turn⟩" in fig.data[0].text[0][0] and "im_end" not in fig.data[0].text[0][0]


def test_drop_down_options_fit_a_narrow_column():
    from specviz.prompts.sets import PROMPT_SETS

    assert [tokentext.short_label(o) for o in PROMPT_SETS] == ["chat questions", "code completion",
                                                                "summarize / rewrite", "edit code", "rewrite text",
                                                                "reformat data", "repeated answers"]


def test_exactness_text_names_each_divergence_with_its_margin():
    text = tokentext.exactness_text({"identical": 2, "rows": 4, "diverged": [{"row": 0, "position": 47, "margin": 0.125},
                                                                            {"row": 3, "position": 13, "margin": None}]},
                                    "bfloat16")
    assert text.startswith("**Output identical to regular decoding: 2/4 rows.**")
    assert "row 0 from token 47 (regular top-1 − top-2 logit margin 0.125); row 3 from token 13." in text
    # why a bf16 run may differ, in numbers a newcomer can check, and how to see it exact
    assert "a logit near 20 is stored in steps of 0.125" in text and "Choose float32" in text


def test_draft_text_for_an_ngram_and_for_the_targets_own_weights():
    assert "prompt lookup" in tokentext.draft_text({"draft_name": "ngram"}, 0.01)
    same = tokentext.draft_text({"draft_name": "x", "draft_layers": 30, "draft_params": 135e6,
                                 "target_params": 135e6}, 0.5)
    assert "the target's own weights (30 layers, 135M parameters)" in same


def test_draft_text_reads_as_a_sentence_before_the_cost_ratio_is_measured():
    for cfg in ({"draft": "default"}, {"draft_name": "ngram"}, {"draft_name": "x", "draft_layers": 2, "draft_params": 2e6}):
        text = tokentext.draft_text(cfg, None)
        assert text.endswith(".") and "; ." not in text and ";." not in text


def test_side_by_side_heatmaps_share_one_colour_scale_centred_on_regular_speed():
    measured, predicted = [[0.5, 2.8]], [[0.9, 1.3]]
    lo, hi = modelcharts.speedup_range(measured, predicted)
    assert (lo, hi) == pytest.approx((-0.8, 2.8))  # symmetric about 1.0, wide enough for 2.8
    a = modelcharts.bk_heatmap([1], [2, 4], measured, zrange=(lo, hi)).data[0]
    b = modelcharts.bk_heatmap([1], [2, 4], predicted, zrange=(lo, hi)).data[0]
    assert (a.zmin, a.zmax) == (b.zmin, b.zmax) == (lo, hi)  # the same speedup is the same colour in both


def test_a_measured_slowdown_is_not_a_best_draft_length():
    best = modelcharts.best_measured([{"b": 2, "k": 2, "speedup": 0.84}, {"b": 1, "k": 2, "speedup": 1.2},
                                      {"b": 1, "k": 4, "speedup": 1.1}])
    assert best == [{"b": 1, "k": 2, "speedup": 1.2}, {"b": 2, "k": 0, "speedup": 1.0}]


def test_batch_sizes_with_the_same_predicted_curve_share_one_line_and_legend_entry():
    fig = modelcharts.speedup_vs_k({1: [1.0, 1.5], 2: [1.0, 1.5], 4: [1.0, 1.5], 32: [1.0, 1.1]},
                                   [{"b": 2, "k": 1, "speedup": 0.84}])
    names = [t.name for t in fig.data]
    assert names == ["b=1, 2, 4 (model)", "b=32 (model)", "measured"]
    assert list(fig.data[-1].text) == ["b=2"]  # the measured point says which batch size it is


def test_the_text_note_names_the_targets_size_and_says_answers_can_be_wrong():
    assert "a 135M-parameter model" in tokentext.model_note({"target_params": 134_515_008})
    assert "the target model" in tokentext.model_note({}) and "can be wrong" in tokentext.model_note({})


def test_a_run_on_a_busy_machine_says_so_and_an_idle_one_says_nothing():
    from specviz.app.headline import machine_busy

    idle, busy = {"host_load": {"other_cores": 0.1, "cpus": 2}}, {"host_load": {"other_cores": 1.2, "cpus": 2}}
    assert machine_busy(idle, idle) is None and machine_busy({}, None) is None
    said = machine_busy(idle, busy)
    assert said == "other processes kept 1.2 of 2 cores busy during the regular run", said


def test_the_suffix_drafts_line_says_what_it_learnt_from_earlier_runs():
    first = tokentext.draft_text({"draft_name": "suffix", "suffix_corpus_tokens": 0, "suffix_corpus_requests": 0}, None)
    later = tokentext.draft_text({"draft_name": "suffix", "suffix_corpus_tokens": 1234, "suffix_corpus_requests": 4}, None)
    assert "knew nothing from earlier runs" in first
    assert "started knowing 1,234 tokens from 4 earlier requests" in later


def test_the_race_says_who_finished_first_and_draws_the_two_runs_in_different_colours():
    def run(end):
        return {"steps": [{"t_start": 0.0, "t_prefill": 0.0, "t_draft": 0.0, "t_verify": end, "t_accept": 0.0,
                           "t_bookkeeping": 0.0, "rows": []}]}

    said = charts.race_sentence(run(1.5), run(2.0))
    assert said.startswith("**Speculative decoding finished first**, at 1.50 s, 0.50 s before regular decoding (2.00 s)")
    assert "one after the other on this machine" in said
    assert charts.race_sentence(run(3.0), run(2.0)).startswith("**Regular decoding finished first**")
    fig = charts.race({"speculative": run(1.5), "regular": run(2.0)})
    assert len({tr.line.color for tr in fig.data}) == 2
