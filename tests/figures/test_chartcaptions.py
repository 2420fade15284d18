"""The sentence beside each chart of a run (specviz.figures.chartcaptions): on a hand-made trace whose every
number is worked out by hand below, each sentence names its chart's key number; with nothing drawn
yet it says so. No Streamlit, no model."""

from __future__ import annotations

import pytest

from specviz.analysis.trace import build_trace
from specviz.figures import chartcaptions as cc, charts

# Two rows, k = 3, three steps. Accepted per row-step: row 0: 3, 1, 2; row 1: 0, 2, 3.
PLAN = [[(3, [10, 11, 12, 13]), (0, [29])],
        [(1, [14, 19]), (2, [30, 31, 39])],
        [(2, [40, 41, 49]), (3, [50, 51, 52, 53])]]
# Step times (s): draft 4 ms, verify 20 ms (50 ms in step 1), accept 1 ms, bookkeeping 2 ms:
# 27, 57 and 27 ms a step. Prefill 10 ms, wall 150 ms.
VERIFY = [0.020, 0.050, 0.020]
STARTS = [0.010, 0.040, 0.100]
TELEMETRY = [{"t": 0.0, "util_pct": 50.0, "mem_bytes": 2**30, "source": "psutil"},
             {"t": 0.05, "util_pct": 90.0, "mem_bytes": 1.5 * 2**30, "source": "psutil"},
             {"t": 0.10, "util_pct": 70.0, "mem_bytes": 2**30, "source": "psutil"}]
LABELS = {"psutil": "process CPU % of all cores"}


def plain(sentence: str) -> str:
    """The sentence as read, without its Markdown bold."""
    return sentence.replace("**", "")


def hand_trace(k: int = 3, plan=PLAN) -> dict:
    steps = [{"step": n, "k": k, "batch_size": 2, "t_start": STARTS[n], "t_draft": 0.004, "t_verify": VERIFY[n],
              "t_accept": 0.001, "t_bookkeeping": 0.002,
              "rows": [{"index": i, "active": True, "drafted": k, "accepted": a, "emitted": out,
                        "draft_tokens": out[:a] + [0] * (k - a)} for i, (a, out) in enumerate(rows)]}
             for n, rows in enumerate(plan)]
    seqs = [{"index": i, "prompt": "p", "prompt_token_ids": [1], "finish_reason": "length", "text": None,
             "output_token_ids": [t for rows in plan for t in rows[i][1]]} for i in range(2)]
    cfg = {"batch_size": 2, "draft_length": k, "policy": "fixed", "mode": "speculative"}
    return build_trace(cfg, {}, seqs, steps, TELEMETRY, 0.150, 0.010)


def regular_trace() -> dict:
    """Two rows, three 50 ms steps, one token per row each: 6 tokens by 0.15 s."""
    steps = [{"step": n, "k": 0, "t_start": 0.05 * n, "t_verify": 0.05,
              "rows": [{"index": i, "active": True, "drafted": 0, "accepted": 0, "emitted": [7]} for i in range(2)]}
             for n in range(3)]
    return {"config": {"mode": "regular"}, "steps": steps, "sequences": []}


EMPTY = {"config": {"batch_size": 2, "draft_length": 3}, "steps": [], "sequences": [], "summary": {}}


def test_the_phase_sentence_names_the_largest_phase_and_its_share():
    # verify 20 + 50 + 20 = 90 ms of 150 ms wall = 60%; other = 150 - (10 + 12 + 90 + 3 + 6) = 29 ms = 19%
    assert plain(cc.phases_sentence(hand_trace())) == "Verify took 60% of the wall time (90 ms); other came next with 19%."


def test_the_timeline_sentence_gives_the_mean_step_and_the_slowest_one():
    # steps of 27, 57 and 27 ms: 37.0 ms on average, step 1 the slowest
    assert plain(cc.timeline_sentence(hand_trace())) == ("Each bar is one phase of one step: 3 steps, 37.0 ms per step "
                                                         "on average; the slowest, step 1, took 57.0 ms.")
    assert "the last 2 of 3 steps" in cc.timeline_sentence(hand_trace(), max_steps=2)  # as the chart draws them


def test_the_heatmap_sentence_gives_accepted_tokens_per_row_step_and_the_row_steps_that_accepted_none():
    # cells 3, 0, 1, 2, 2, 3: 11 / 6 = 1.83 on average; one (row 1, step 0) accepted none
    assert plain(cc.heatmap_sentence(hand_trace())) == ("Each cell is one row-step: the 6 row-steps accepted 1.83 "
                                                        "drafted tokens on average (k up to 3); 1 of them accepted none.")


def test_the_heatmap_of_regular_decoding_says_nothing_was_drafted():
    regular = hand_trace(k=0, plan=[[(0, [1]), (0, [2])]])
    assert "k = 0: regular decoding" in cc.heatmap_sentence(regular) and "2 row-steps" in cc.heatmap_sentence(regular)


def test_the_rate_sentence_names_the_row_that_accepted_least_with_its_rate():
    # row 0: 6 of 9 drafted = 0.67; row 1: 5 of 9 = 0.56; all rows 11 of 18 = 0.61
    assert plain(cc.rate_sentence(hand_trace())) == ("Row 1 accepted least: acceptance rate 0.56; row 0 most: 0.67 "
                                                     "(all rows 0.61).")


def test_the_lengths_sentence_names_the_longest_and_shortest_row():
    # row 0: 4 + 2 + 3 = 9 output tokens; row 1: 1 + 3 + 4 = 8
    assert plain(cc.lengths_sentence(hand_trace())).startswith(
        "Row 0 is longest with 9 output tokens, row 1 shortest with 8:")


def test_the_slots_sentence_gives_the_share_and_total_of_wasted_slots():
    # 6 row-steps x (k + 1 = 4) = 24 slots verified; wasted k - accepted: 0 + 3 + 2 + 1 + 1 + 0 = 7 = 29%
    assert plain(cc.slots_sentence(hand_trace())) == ("29% of verified slots produced nothing: 7 wasted slots of 24 "
                                                      "verified; the other 17 gave output tokens.")


def test_the_latency_sentence_gives_the_median_token_and_the_slowest_row():
    # row 0: 6.75 ms x 4 (27 / 4), 28.5 x 2 (57 / 2), 9 x 3 (27 / 3): median 9.0
    # row 1: 27 x 1, 19 x 3 (57 / 3), 6.75 x 4: median (6.75 + 19) / 2 = 12.9; all 17 tokens: median 9.0
    assert plain(cc.latency_sentence(hand_trace())).startswith(
        "An output token took 9.0 ms at the median; row 1's were slowest (median 12.9 ms)")


def test_the_position_sentence_gives_the_first_and_the_last_positions_share():
    # first drafted token accepted in 5 of 6 row-steps (83%); all 3 accepted in 2 of 6 (33%)
    assert plain(cc.position_sentence(hand_trace())) == ("Of the row-steps that drafted, 83% had their first drafted "
                                                         "token accepted; of those that drafted 3, 33% had all 3 accepted.")


def test_the_utilization_sentence_gives_the_mean_and_peak_and_the_memory_peak():
    # 50, 90, 70%: 70% on average, 90% at most; memory 1, 1.5, 1 GiB
    assert plain(cc.utilization_sentence(hand_trace(), LABELS)) == (
        "Process CPU % of all cores averaged 70% (peak 90%) over 3 samples; memory peaked at 1.50 GiB.")


def test_the_race_caption_counts_each_runs_tokens_at_its_end_and_at_a_replay_time():
    # speculative: 5, 10, 17 tokens at 0.037, 0.097, 0.127 s; regular: 2, 4, 6 at 0.05, 0.10, 0.15 s
    pair = {"speculative": hand_trace(), "regular": regular_trace()}
    assert cc.race_caption(pair) == "All rows' output tokens: speculative 17 in 0.13 s, regular 6 in 0.15 s."
    assert cc.race_caption(pair, until=0.06) == "Output tokens at 0.06 s: speculative 5, regular 2."


def test_every_sentence_says_so_when_its_chart_has_nothing_yet():
    sentences = [cc.timeline_sentence(EMPTY), cc.phases_sentence(EMPTY), cc.heatmap_sentence(EMPTY),
                 cc.rate_sentence(EMPTY), cc.lengths_sentence(EMPTY), cc.slots_sentence(EMPTY),
                 cc.latency_sentence(EMPTY), cc.position_sentence(EMPTY), cc.utilization_sentence(EMPTY, LABELS)]
    assert all(s.startswith("No ") for s in sentences), sentences


def test_the_live_grid_pairs_each_chart_with_its_own_sentence_in_the_pages_order():
    trace = hand_trace()
    grid = cc.live_grid(trace, None, False, LABELS)
    assert [key for key, _, _ in grid] == ["phase_timeline", "phase_totals", "acceptance_heatmap", "acceptance_rate",
                                           "ragged_lengths", "wasted_slots", "token_latency", "position_acceptance",
                                           "utilization"]
    sentence = {key: s for key, _, s in grid}
    assert sentence["wasted_slots"] == cc.slots_sentence(trace) and sentence["utilization"].startswith("**Process CPU")
    # the chart draws the very numbers its sentence states: 7 wasted slots, 17 that gave output
    wasted = next(fig for key, fig, _ in grid if key == "wasted_slots")
    assert [sum(bar.y) for bar in wasted.data] == [17, 7]
    assert all(any(ch.isdigit() for ch in s) for s in sentence.values())


def test_the_charts_still_draw_the_counts_they_share_with_the_sentences():
    trace = hand_trace()
    heat = charts.acceptance_heatmap(trace).data[0]
    assert [list(row) for row in heat.z] == [[3, 1, 2], [0, 2, 3]]
    lengths = charts.ragged_lengths(trace).data
    assert [list(line.y) for line in lengths] == [[4, 6, 9], [1, 4, 8]]
    box = charts.token_latency(trace).data[0]
    assert len(box.y) == 17 and min(box.y) == pytest.approx(6.75)
