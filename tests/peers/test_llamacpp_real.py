"""The real llama.cpp peer (marker ``llamacpp``; opt in with SPECVIZ_LLAMACPP_TESTS=1 where ``bash setup.sh
--llamacpp`` made .venv-llamacpp): our bf16 weights written as a GGUF by llama.cpp's converter, 2 chat prompts x
8 tokens, greedy, against our engine on the same weights. Where the two first differ, our own logit margin
there (top-1 minus top-2) must be tiny: a float rounding difference between two kernels, not a different model."""

from __future__ import annotations

import os

import pytest

from specviz.peers.ggufs import env_dir
import locations

pytestmark = [
    pytest.mark.llamacpp,
    pytest.mark.skipif(not os.environ.get("SPECVIZ_LLAMACPP_TESTS") or not (env_dir() / "bin" / "python").is_file(),
                       reason="the real llama.cpp test is opt-in: bash setup.sh --llamacpp, then SPECVIZ_LLAMACPP_TESTS=1"),
]

PROMPTS = ["Why is the sky blue? Answer briefly.", "Write a haiku about autumn leaves."]
TOKENS = 8
TIE = 0.25  # logits: a bf16 rounding of the last hidden state moves them by about this much


def test_llama_cpp_decodes_our_bf16_weights_greedily_as_we_do():
    import torch

    from specviz.models.loading import encode_prompts
    from specviz.peers.ggufs import target_gguf
    from specviz.peers.llamacpp import LlamaCppPeer, rates, run_request
    from specviz.run import load_pair, run
    from specviz.runconfig import RunConfig

    cfg = RunConfig(draft="none", mode="regular", prompts=PROMPTS, max_new_tokens=TOKENS, dtype="bfloat16", device="cpu")
    target, _ = load_pair(cfg)
    ids = encode_prompts(target.tokenizer, PROMPTS)
    ours = [run(RunConfig(**{**cfg.__dict__, "prompts": [p]}), target, None, telemetry=False)["sequences"][0]["output_token_ids"]
            for p in PROMPTS]
    gguf = target_gguf("default", target.model.name_or_path, "bf16")
    with LlamaCppPeer() as peer:
        peer.ask({"op": "load", "models": {"bf16": str(gguf)}, "threads": torch.get_num_threads(), "n_ctx": 256})
        ans = peer.ask(run_request("regular", "bf16", None, 0, 2, 1, ids, TOKENS, target.tokenizer.eos_token_id))
    assert all(r > 0 for r in rates(ans))
    for prompt, mine, theirs in zip(ids, ours, (r["output_ids"] for r in ans["requests"])):
        j = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), None)
        if j is None:
            assert mine == theirs
            continue
        with torch.no_grad():  # our logits where they part: the two best must be nearly tied
            logits = target.model(torch.tensor([prompt + mine[:j]])).logits[0, -1].float()
        top = logits.topk(2).values
        margin = float(top[0] - top[1])
        print(f"first difference at token {j}: ours {mine[j]}, llama.cpp {theirs[j]}, our margin {margin:.3f}")
        assert j >= 1 and margin < TIE, (j, margin)


def test_every_mode_runs_with_the_packaged_4_bit_file_as_target_and_draft():
    """The packaged Q4_1 crashed llama.cpp's process on an AMX CPU (its AMX repack); the worker turns
    the repack off there, so regular, lookup, draft and several lanes all answer."""
    from specviz.models.loading import default_gguf_path
    from specviz.peers.llamacpp import LlamaCppPeer, run_request

    prompt = [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365]
    with LlamaCppPeer() as peer:
        info = peer.ask({"op": "load", "models": {"q4_1": str(default_gguf_path())}, "threads": 2, "n_ctx": 128})
        assert info["extra_buffers"] == ("AMX_INT8 = 1" not in info["system"])
        for mode, lanes in (("regular", 1), ("lookup", 1), ("draft", 1), ("regular", 3)):
            ans = peer.ask(run_request(mode, "q4_1", "q4_1", 2, 2, lanes, [prompt] * lanes, 4, None))
            assert [len(r["output_ids"]) for r in ans["requests"]] == [4] * lanes, mode
