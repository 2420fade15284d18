"""The sentence beside the model's, the sweep's, the correctness checks', the request queue's and the token
tree's charts (specviz.figures.modelcharts, queuecharts, treeview): each states its chart's key number,
worked out by hand from the small inputs below. No Streamlit, no model."""

from __future__ import annotations

from specviz.figures import modelcharts as mc, queuecharts as qc
from specviz.app import treeview as tv


def plain(sentence: str) -> str:
    """The sentence as read, without its Markdown bold."""
    return sentence.replace("**", "")


# ---- the analytic model, the sweep, the correctness checks --------------------------------------------

def test_the_speedup_sentence_names_the_best_k_at_the_chosen_and_the_largest_batch():
    curves = {1: [1.0, 1.5, 1.8, 1.7], 64: [1.0, 0.9, 0.8, 0.7]}
    assert plain(mc.speedup_vs_k_sentence(curves, 1)) == ("At b = 1 the model's best draft length is k = 2, for "
                                                          "1.80x; at b = 64 it is k = 0, for 1.00x.")
    assert plain(mc.speedup_vs_k_sentence(curves, 64)) == "At b = 64 the model's best draft length is k = 0, for 1.00x."


def test_the_best_k_sentence_says_how_k_star_moves_with_the_batch_and_the_measured_best():
    sentence = mc.optimal_k_sentence([1, 2, 4, 64], [4, 4, 3, 1], [{"b": 1, "k": 3, "speedup": 1.4}])
    assert plain(sentence) == ("The model's best draft length k* falls from 4 at b = 1 to 1 at b = 64. "
                               "Measured best: k = 3 at b = 1 (1.40x).")
    assert "stays at 2 from b = 1 to b = 8" in plain(mc.optimal_k_sentence([1, 8], [2, 2]))


def test_the_heatmap_sentence_names_the_best_cell_and_counts_the_cells_below_1x():
    z = [[1.3, 1.5], [0.9, None]]  # b = 4, k = 4 not measured
    assert plain(mc.bk_sentence([1, 4], [2, 4], z, "measured")) == (
        "The best measured cell is 1.50x, at b = 1, k = 4; 1 of 3 cells are below 1x (slower than regular decoding).")
    assert mc.bk_sentence([1], [2], [[None]], "measured") == "No measured cell yet."


def test_the_k_compare_sentence_gives_each_lines_k_star_at_both_ends_with_names_shown_as_text():
    series = {"small &amp; pair": [4, 3, 1], "7B (synthetic)": [6, 5, 2]}  # plotly's names are HTML-escaped
    sentence = mc.k_compare_sentence([1, 2, 64], series)
    assert sentence == (r"At b = 1 the best k is 4 for small \& pair and 6 for 7B \(synthetic\); "
                        r"at b = 64, 1 for small \& pair and 2 for 7B \(synthetic\).")


def test_the_divergence_sentence_counts_identical_rows_and_names_the_earliest_divergence():
    rows = [{"index": 0, "match": True, "first_divergence": None, "margin": None, "length": 8},
            {"index": 1, "match": False, "first_divergence": 5, "margin": 0.002, "length": 8},
            {"index": 2, "match": False, "first_divergence": 3, "margin": 0.5, "length": 8}]
    assert plain(mc.divergence_sentence(rows)) == ("1 of 3 rows are identical to regular decoding; row 2 diverged "
                                                   "earliest, at output token 3 (logit margin 0.5 there).")
    assert plain(mc.divergence_sentence(rows[:1])) == "All 1 rows are identical to regular decoding over their whole output."


def test_the_distribution_sentence_names_the_token_furthest_from_n_p():
    # gaps 2, 5, 3: token 1
    assert plain(mc.distribution_sentence([10, 55, 35], [12.0, 50.0, 38.0])) == (
        "Over 100 rows, the largest gap is token 1: 55 observed against 50.0 expected; every other token is "
        "closer to n·p.")


# ---- a request queue -----------------------------------------------------------------------------------

def queued_trace() -> dict:
    """Two lanes, three requests, 0.1 s steps: requests 0 and 1 hold lanes 0 and 1 for steps 0-1 (0.0-0.2 s),
    request 2 takes lane 0 for steps 2-3 (0.2-0.4 s) while lane 1 stands idle."""
    def row(i, lane, out):
        return {"index": i, "lane": lane, "active": True, "drafted": 1, "accepted": len(out) - 1, "emitted": out}

    plan = [([row(0, 0, [1, 2]), row(1, 1, [3])], 2, 2), ([row(0, 0, [4]), row(1, 1, [5])], 1, 2),
            ([row(2, 0, [6])], 0, 1), ([row(2, 0, [7])], 0, 1)]
    steps = [{"step": n, "k": 1, "t_start": 0.1 * n, "t_draft": 0.1, "rows": rows, "queue_length": waiting,
              "batch_size": busy, "joined": [2] if n == 2 else []} for n, (rows, waiting, busy) in enumerate(plan)]
    seqs = [{"index": i, "finish_reason": "eos", "ttft_s": ttft, "tpot_s": tpot}
            for i, (ttft, tpot) in enumerate([(0.1, 0.01), (0.2, 0.03), (0.3, 0.02)])]
    return {"config": {"batch_size": 2, "requests": 3}, "steps": steps, "sequences": seqs}


def test_the_lane_timeline_sentence_gives_the_share_of_lane_time_idle():
    # busy 0.2 + 0.2 + 0.2 s, idle 0.2 s (lane 1 after request 1): 25%
    assert plain(qc.lane_timeline_sentence(queued_trace())).startswith(
        "3 requests went through 2 lanes; the lanes stood idle 25% of the time")


def test_the_queue_sentence_gives_the_most_requests_waiting_and_the_busy_lanes():
    # waiting 2, 1, 0, 0 (most at step 0, t = 0.00 s); busy 2, 2, 1, 1: 1.5 on average
    assert plain(qc.queue_sentence(queued_trace())) == ("At most 2 requests waited for a lane (at 0.00 s); 1.5 lanes "
                                                        "were busy per step on average.")


def test_the_latency_sentence_gives_the_medians_the_chart_marks():
    # TTFT 100, 200, 300 ms: median 200; time per output token 10, 30, 20 ms: median 20
    assert plain(qc.latency_sentence(queued_trace())) == ("Over 3 finished requests, the median time to first token "
                                                          "was 200 ms; time per output token 20 ms.")
    assert qc.latency_sentence({**queued_trace(), "sequences": []}).startswith("Per-request latencies appear")


# ---- a token tree ----------------------------------------------------------------------------------------

def tree_row(path, emitted):
    # root -> 10 (rank 0) -> 11 ; root -> 20 (rank 1) -> 21 (rank 0), 22 (rank 1) ; root -> 30 (rank 2)
    tree = {"token": [10, 11, 20, 21, 22, 30], "parent": [-1, 0, -1, 2, 2, -1], "depth": [1, 2, 1, 2, 2, 1],
            "prob": [0.5, 0.9, 0.3, 0.6, 0.3, 0.1], "rank": [0, 0, 1, 0, 1, 2], "path": path}
    return {"index": 0, "active": True, "drafted": 6, "accepted": len(path), "emitted": emitted, "tree": tree}


def tree_trace() -> dict:
    rows = [tree_row([2, 4], [20, 22, 7]), tree_row([], [99]), tree_row([0, 1], [10, 11, 5])]
    return {"config": {"mode": "speculative"}, "sequences": [],
            "steps": [{"step": n, "k": 2, "t_start": 0.1 * n, "rows": [r]} for n, r in enumerate(rows)]}


def test_the_tree_sentence_counts_the_drafted_and_accepted_nodes_and_names_the_added_token():
    assert plain(tv.tree_sentence(tree_trace(), 0, 0)) == ("Row 0 at step 0: the draft proposed 6 nodes and the target "
                                                          "accepted 2 of them along one path; then the target added a "
                                                          "bonus token.")
    assert "accepted 0 of them" in tv.tree_sentence(tree_trace(), 0, 1).replace("**", "")
    assert tv.tree_sentence(tree_trace(), 5, 0) == "No tree for this row and step."


def test_the_depth_rank_sentence_gives_the_top_guess_at_depth_1_and_the_weakest_cell():
    # tries at depth 1: every step reaches ranks 0, 1, 2; rank 0 accepted once (step 2), rank 2 never: 0 of 3
    assert plain(tv.depth_rank_sentence(tree_trace())) == ("The top guess at depth 1 was accepted in 1 of 3 tries "
                                                           "(0.33); the lowest rate, 0.00 (0 of 3), was at depth 1, "
                                                           "rank 2.")
