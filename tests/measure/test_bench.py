"""The one interleaved-arms loop (specviz.measure.bench): its rotation, its per-round ratios and
its stop check, on arms that report known speeds (the engine arms run for real in test_cli's
bench tests and test_sweep's sweep)."""

import math

import pytest

from specviz.measure.bench import acceptance_rate, interleaved, same_rows


def scripted_arms(speeds: dict[str, list[float]], calls: list[str]):
    """Arms that return their next scripted tokens/s and record the order they ran in."""
    def arm(label):
        def go():
            calls.append(label)
            return speeds[label][sum(c == label for c in calls) - 1], [{"summary": {"drafted": 4, "accepted": 3}}]
        return go
    return {label: arm(label) for label in speeds}


def test_every_round_runs_every_arm_once_starting_one_arm_later():
    calls = []
    interleaved(scripted_arms({"regular": [1] * 3, "a": [1] * 3, "b": [1] * 3}, calls), rounds=3)
    assert calls == ["regular", "a", "b", "a", "b", "regular", "b", "regular", "a"]


def test_ratios_are_to_the_same_rounds_reference_and_medians_over_rounds():
    res = interleaved(scripted_arms({"regular": [10, 20, 40], "spec": [15, 20, 100]}, []), rounds=3)
    assert res["spec"].ratio == [1.5, 1.0, 2.5]
    assert res["spec"].median_ratio == 1.5  # not 100 / 40 nor median(spec) / median(regular) = 1.0
    assert res["regular"].median_tok_s == 20 and res["regular"].ratio == [1.0, 1.0, 1.0]
    assert res["spec"].acceptance == pytest.approx(0.75)


def test_should_stop_keeps_the_rounds_already_done():
    seen = []
    res = interleaved(scripted_arms({"regular": [1, 2, 3], "spec": [2, 4, 6]}, []), rounds=3,
                      on_round=lambda r, tok_s: seen.append((r, tok_s)), should_stop=lambda: len(seen) == 2)
    assert res["spec"].tok_s == [2, 4] and [r for r, _ in seen] == [0, 1]
    assert seen[1][1] == {"regular": 2, "spec": 4}


def test_a_peer_arm_without_traces_has_no_acceptance():
    res = interleaved({"regular": lambda: (1.0, []), "peer": lambda: (2.0, None)}, rounds=1)
    assert res["peer"].acceptance is None and res["peer"].ratio == [2.0]


def test_same_rows_compares_output_tokens_row_by_row():
    def traces(*rows):
        return [{"sequences": [{"output_token_ids": r} for r in rows]}]
    assert same_rows(traces([1, 2], [3, 4]), traces([1, 2], [3, 5])) == [True, False]


def test_acceptance_rate_is_undefined_without_drafted_tokens():
    assert acceptance_rate([{"summary": {"drafted": 8, "accepted": 2}}, {"summary": {"drafted": 0, "accepted": 0}}]) == 0.25
    assert math.isnan(acceptance_rate([{"summary": {"drafted": 0, "accepted": 0}}]))  # regular decoding


def test_forgetting_restores_a_suffix_corpus_even_when_the_block_raises():
    from types import SimpleNamespace

    from specviz.engine.suffixindex import Corpus
    from specviz.measure.bench import forgetting

    corpus = Corpus()
    corpus.add([1, 2, 3, 4])
    draft = SimpleNamespace(corpus=corpus)
    with forgetting(draft):
        corpus.add([5, 6, 7])
    assert corpus.snapshot() == [[1, 2, 3, 4]]
    with pytest.raises(RuntimeError):
        with forgetting(draft):
            corpus.add([8, 9])
            raise RuntimeError("a warm-up failed")
    assert corpus.snapshot() == [[1, 2, 3, 4]]


def test_forgetting_leaves_a_draft_without_a_corpus_alone():
    from types import SimpleNamespace

    from specviz.measure.bench import forgetting

    draft = SimpleNamespace(name="ngram")
    with forgetting(draft):
        pass
    with forgetting(None):
        pass
    assert vars(draft) == {"name": "ngram"}
