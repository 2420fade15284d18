"""A raced Live run warms both sides up, untimed, before the timed runs (specviz.device.devicejobs), and what a
suffix draft learns in the warm-up is forgotten."""

import dataclasses

from specviz.device import devicejobs
from specviz.engine.suffix import SuffixDraft
from specviz.measure.bench import WARM_TOKENS
from specviz.runconfig import RunConfig


def test_a_race_warms_up_both_sides_on_its_first_batch_and_forgets_what_the_warm_up_taught():
    cfg = RunConfig(target="default", draft="suffix", prompts=["a", "b", "c"], batch_size=2, max_new_tokens=64,
                    requests=9, suffix_corpus="corpus.bin")
    draft = SuffixDraft()
    draft.corpus.add([1, 2, 3, 4])  # learnt in an earlier run of the session
    before = draft.corpus.snapshot()
    calls = []

    def runner(c, target, proposer):
        calls.append((c, proposer))
        if proposer is not None:
            proposer.corpus.add([9, 9, 9])  # the warm-up's own answers
        yield None, None

    devicejobs._warm_up(runner, cfg, object(), draft)
    assert [(c.mode, p) for c, p in calls] == [(cfg.mode, draft), ("regular", None)]
    for c, _ in calls:
        assert c.prompts == ["a", "b"] and c.requests is None and c.max_new_tokens == WARM_TOKENS
        assert c.suffix_corpus is None  # reads and writes no corpus file
        assert dataclasses.replace(c, mode=cfg.mode, prompts=cfg.prompts, requests=9, max_new_tokens=64,
                                   suffix_corpus="corpus.bin") == cfg  # nothing else differs
    assert draft.corpus.snapshot() == before
