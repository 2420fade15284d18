"""Every Server chart says what it shows in a sentence, its numbers from the rows the chart draws."""

from specviz.figures import servercharts as sc

ROWS = [{"t": 1.0, "acceptance_rate": 0.5, "alpha": 0.6, "mean_acceptance_length": 2.0, "throughput": 40.0,
         "running": 2, "waiting": 0, "per_position": [0.7, 0.5, 0.3]},
        {"t": 2.0, "acceptance_rate": None, "alpha": None, "mean_acceptance_length": None, "throughput": 0.0,
         "running": 0, "waiting": 0, "per_position": None},
        {"t": 3.0, "acceptance_rate": 0.4, "alpha": 0.5, "mean_acceptance_length": 1.8, "throughput": 55.5,
         "running": 4, "waiting": 1, "per_position": [0.6, 0.4, 0.2]}]


def test_the_per_position_sentence_gives_the_latest_windows_first_and_last_position():
    assert sc.per_position_sentence(ROWS).startswith(
        "In the latest window (3 s after attaching), 0.60 of drafts had their first token accepted; at position 3, 0.20")
    assert sc.per_position_sentence(ROWS[1:2]).startswith("No per-position counters yet")


def test_the_over_time_sentence_gives_each_lines_latest_value_its_range_and_the_model_line():
    s = sc.over_time_sentence(ROWS, {"acceptance rate": "acceptance_rate", "α": "alpha"}, model={"model α": 0.55})
    assert s == ("Acceptance rate 0.40 in the latest window (0.40-0.50 since attaching); α 0.50 in the latest window "
                 "(0.50-0.60 since attaching); the model α line is 0.55.")
    assert sc.over_time_sentence(ROWS, {"output tokens/s": "throughput"}, digits=1).startswith(
        "Output tokens/s 55.5 in the latest window (0.0-55.5 since attaching)")
    assert sc.over_time_sentence([], {"running": "running"}).startswith("Nothing reported yet")


def test_the_model_comparison_sentence_names_the_position_furthest_from_alpha_to_the_j():
    s = sc.position_vs_model_sentence([0.6, 0.45, 0.4], [0.6, 0.36, 0.216])
    assert s.startswith("Since attaching, the largest gap is at position 3: measured 0.40, the model's α^3 0.22.")
    assert sc.position_vs_model_sentence(None, [0.5]).startswith("No per-position counters on this server")
