"""The tree rule at T = 1 keeps the target's distribution on the packaged pair, through the CLI (issue 16).

specviz.measure.firsttoken: many rows of one prompt, one token each; the first output tokens must
be distributed as the target's p (chi-square, pass at p-value > 1e-3). The check itself is tested
on draws from known distributions. bench/tree_distribution.py runs more rows and seeds, and shows
the same counts fail against the draft's q."""

import torch

from specviz.measure.firsttoken import ALPHA, first_tokens, frequency_check

PROMPT = "The best thing about living by the sea is"


def draws(p: torch.Tensor, n: int, seed: int) -> list[int]:
    return torch.multinomial(p.float(), n, replacement=True, generator=torch.Generator().manual_seed(seed)).tolist()


def test_the_frequency_check_passes_draws_from_p_and_fails_draws_from_another_distribution():
    p = torch.tensor([0.4, 0.25, 0.15, 0.1, 0.05, 0.03, 0.02, 0.0], dtype=torch.float64)
    q = torch.tensor([0.3, 0.3, 0.15, 0.1, 0.05, 0.05, 0.05, 0.0], dtype=torch.float64)
    passed = sum(frequency_check(draws(p, 2000, s), p)["passed"] for s in range(20))
    assert passed >= 19  # a correct sampler fails with probability ~ALPHA per check
    wrong = frequency_check(draws(q, 2000, 0), p)
    assert not wrong["passed"] and wrong["p_value"] < ALPHA and wrong["tv"] > 0.05
    assert not frequency_check([7], p)["passed"]  # a token p gives no mass fails outright


def test_the_cli_tree_run_at_temperature_1_emits_the_targets_next_token_distribution(tmp_path, monkeypatch):
    from specviz.analysis.trace import load_json
    from specviz.cli import main
    from specviz.engine.sampling import SamplingParams
    from specviz.measure.firsttoken import next_token_probs
    from specviz.models.loading import encode_prompts
    from specviz.run import get_model

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "t.json"
    code = main(["run", "--prompt", PROMPT, "--raw-prompt", "--batch-size", "64", "--max-new-tokens", "1",
                 "--temperature", "1", "--dtype", "float32", "--device", "cpu", "--seed", "3", "--show", "0",
                 "--draft-length", "3", "--tree-width", "3", "--tree-nodes", "8", "--out", str(out)])
    assert code == 0
    trace = load_json(out)
    assert trace["config"]["tree_width"] == 3 and trace["steps"][0]["rows"][0]["tree"]
    toks, from_draft = first_tokens([trace])
    assert len(toks) == 64 and from_draft >= 16  # the tree's nodes were accepted, not only recovered tokens
    target = get_model("default", "cpu", "float32")
    p = next_token_probs(target.model, encode_prompts(target.tokenizer, [PROMPT], True)[0], SamplingParams(1.0))
    check = frequency_check(toks, p)
    assert check["passed"], check
