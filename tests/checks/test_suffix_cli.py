"""The suffix draft from the command line: `--draft suffix`, a built-in `--prompt-set`, and a global
structure kept in `--suffix-corpus FILE` from one run to the next (loaded if the file exists, saved whole
at the end), so the second run of a request accepts more than the first."""

import json

import pytest

from specviz.checks.parser import build_parser
from specviz.prompts.sets import prompt_set


def test_a_prompt_set_adds_its_prompts_after_the_given_ones():
    from specviz.cli import _config

    a = build_parser().parse_args(["run", "--prompt", "hi", "--prompt-set", "reformat-data", "--draft", "suffix",
                                   "--suffix-corpus", "c.json"])
    cfg = _config(a)
    assert cfg.prompts == ["hi"] + prompt_set("reformat-data") and cfg.draft == "suffix"
    assert cfg.suffix_corpus == "c.json" and cfg.to_trace_config()["suffix_corpus"] == "c.json"


@pytest.mark.slow  # the real model in fp32, two short runs
def test_a_saved_corpus_makes_the_second_run_of_a_request_accept_more(tmp_path, monkeypatch):
    from specviz.analysis.trace import load_json
    from specviz.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    corpus = tmp_path / "corpus.json"
    runs = []
    for i in range(2):
        out = tmp_path / f"t{i}.json"
        code = main(["run", "--prompt", "Write a haiku about autumn leaves.", "--draft", "suffix", "--draft-length", "4",
                     "--max-new-tokens", "16", "--dtype", "float32", "--device", "cpu", "--show", "0",
                     "--suffix-corpus", str(corpus), "--out", str(out)])
        assert code == 0
        runs.append(load_json(out))
        assert len(json.loads(corpus.read_text())["requests"]) == i + 1  # each run added its request
    first, second = (t["summary"] for t in runs)
    assert runs[0]["sequences"][0]["output_token_ids"] == runs[1]["sequences"][0]["output_token_ids"]  # greedy
    assert second["accepted"] > first["accepted"] and second["steps"] < first["steps"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary file left behind


def test_every_bench_round_starts_from_the_same_global_structure(monkeypatch):
    """bench's arms and warm-up forget what a suffix draft learnt in them, so no round drafts from the
    answers an earlier round memorised; within a round, each request still learns from the ones before."""
    from specviz.engine.suffix import SuffixDraft
    from specviz.measure import bench
    from specviz.runconfig import RunConfig

    draft = SuffixDraft()
    draft.corpus.add([1, 2, 3])  # loaded before the bench
    seen = []

    def fake_run(cfg, target, proposer, on_step=None, telemetry=True):
        seen.append((proposer.corpus.snapshot(), cfg.suffix_corpus))
        proposer.corpus.add([7, 8, 9])  # what the run's finished request teaches it
        return {"summary": {"tokens": 1, "wall_s": 1.0}}

    monkeypatch.setattr(bench, "run", fake_run)
    cfg = RunConfig(prompts=["a", "b"], draft="suffix", suffix_corpus="corpus.json")
    bench.warm_up(cfg, None, draft)
    arm = bench.engine_arm(cfg, None, draft)
    arm(), arm()
    assert [s for s, _ in seen] == [[[1, 2, 3]]] + [[[1, 2, 3]], [[1, 2, 3], [7, 8, 9]]] * 2
    assert {path for _, path in seen} == {None}  # no arm or warm-up writes the corpus file
