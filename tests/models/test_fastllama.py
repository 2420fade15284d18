"""Our lean llama forward computes what transformers' forward computes, over the ragged cache."""

import pytest
import torch

from specviz.models import fastllama
from specviz.engine.ragged import RaggedCache, left_pad

from fakes import decode, ragged_prompts, tiny_llama


def _steps(cache: RaggedCache, prompts, vocab, seed=0):
    """Prefill with left padding, then three 3-slot forwards with holes and a rollback: all logits."""
    g = torch.Generator().manual_seed(seed)
    ids, valid = left_pad(prompts, 0, torch.device("cpu"))
    out = [cache.forward(ids, valid)[valid]]  # padding slots' logits are meaningless: compare valid ones
    B = len(prompts)
    for step in range(3):
        ids = torch.randint(1, vocab, (B, 3), generator=g)
        valid = torch.ones(B, 3, dtype=torch.bool)
        valid[0, 2] = False  # row 0 proposed fewer: a hole inside the step
        out.append(cache.forward(ids, valid)[valid])
        keep = torch.tensor([[True, step % 2 == 0, False]] * B)  # reject some slots: holes in the cache
        cache.reject_tail(keep & valid)
        if step == 1:
            cache.compact()
    out.append(cache.forward(ids[:, :1], torch.ones(B, 1, dtype=torch.bool), last_only=True))
    return out


@pytest.mark.parametrize("many", [1, 1000], ids=["fused-attention-kernel", "grouped-matmuls"])
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 0.1)])
def test_lean_forward_matches_transformers_over_a_ragged_cache(dtype, tol, many, monkeypatch):
    monkeypatch.setattr(fastllama, "MANY_QUERIES", many)  # both attention paths, at every step
    loaded = tiny_llama(64, layers=3, dtype=dtype)  # 4 query heads over 2 kv heads: grouped attention
    prompts = ragged_prompts(4, 64)
    lean = RaggedCache(loaded.model)
    assert lean.lean
    monkeypatch.setenv("SPECVIZ_LEAN_FORWARD", "0")
    reference = RaggedCache(loaded.model)
    assert not reference.lean
    for a, b in zip(_steps(lean, prompts, 64), _steps(reference, prompts, 64)):
        assert a.shape == b.shape
        torch.testing.assert_close(a.float(), b.float(), atol=tol, rtol=tol)


def test_fusing_keeps_transformers_forward_unchanged():
    loaded = tiny_llama(64)
    x = torch.randint(0, 64, (2, 7))
    before = loaded.model(x).logits
    fastllama.fuse_projections(loaded.model)
    attn = loaded.model.model.layers[0].self_attn
    assert attn.k_proj.weight.data_ptr() == attn.q_proj.weight.data_ptr() + attn.q_proj.weight.numel() * 4
    torch.testing.assert_close(loaded.model(x).logits, before, atol=0, rtol=0)


def test_refuses_models_it_does_not_compute_exactly(monkeypatch):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=2, attention_bias=True)
    assert not fastllama.supports(LlamaForCausalLM(cfg))
    assert not RaggedCache(LlamaForCausalLM(cfg)).lean
    assert fastllama.supports(tiny_llama(64).model)
    monkeypatch.setenv("SPECVIZ_LEAN_FORWARD", "0")
    assert not RaggedCache(tiny_llama(64).model).lean


def test_greedy_outputs_equal_with_and_without_it(monkeypatch):
    target = tiny_llama(64, layers=2)
    prompts = ragged_prompts(4, 64)
    lean, _ = decode(target, prompts, None, 0, max_new=12)
    monkeypatch.setenv("SPECVIZ_LEAN_FORWARD", "0")
    ref, _ = decode(target, prompts, None, 0, max_new=12)
    assert [r.output for r in lean.rows] == [r.output for r in ref.rows]


def _two_prefilled(model, prompts) -> tuple[RaggedCache, RaggedCache]:
    """Two caches over the same left-padded prefill, for two ways of running the steps after it."""
    caches = RaggedCache(model), RaggedCache(model)
    ids, valid = left_pad(prompts, 0, torch.device("cpu"))
    for kv in caches:
        kv.forward(ids, valid, last_only=True)
    return caches


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_logits_into_a_reused_buffer_are_the_fresh_logits_bit_for_bit(dtype, monkeypatch):
    """The decoder's verify writes logits into one buffer its cache reuses (reuse_logits): the same
    numbers as the output layer's own fresh tensor, at every width, and earlier results are not kept."""
    monkeypatch.setattr("specviz.models.packed.FRESH_BYTES", 0)  # bf16: the packed head's fresh logits never fit
    loaded = tiny_llama(64, layers=2, dtype=dtype)
    prompts = ragged_prompts(3, 64)
    fresh, reused = _two_prefilled(loaded.model, prompts)
    g = torch.Generator().manual_seed(1)
    for T in (3, 1, 4, 2):  # the buffer is a view of one storage that grows and shrinks with the width
        ids = torch.randint(1, 64, (3, T), generator=g)
        valid = torch.ones(3, T, dtype=torch.bool)
        a = fresh.forward(ids, valid)
        b = reused.forward(ids, valid, reuse_logits=True)
        assert b.shape == a.shape == (3, T, 64) and torch.equal(a, b)
        assert b.data_ptr() == reused._logits_store.data_ptr()  # it did go into the buffer


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("reuse", [False, True], ids=["fresh-logits", "reused-buffer"])
def test_skipping_the_holes_gives_the_same_logits_at_every_valid_slot_and_the_same_cache(dtype, reuse, monkeypatch):
    """``slots``: per-token work on the valid new slots only (a verify whose rows proposed different
    numbers of tokens). Its logits at valid slots, and the keys and values every later step reads,
    are those of the full forward (fp32: to rounding; the greedy choice is the same)."""
    calls = []
    inner = fastllama._forward_slots
    monkeypatch.setattr(fastllama, "_forward_slots", lambda *a, **k: calls.append(a[5].numel()) or inner(*a, **k))
    loaded = tiny_llama(64, layers=3, dtype=dtype)
    prompts = ragged_prompts(4, 64)
    full, skip = _two_prefilled(loaded.model, prompts)
    g = torch.Generator().manual_seed(2)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    for n in ([0, 3, 1, 0], [2, 0, 0, 3], [3, 3, 3, 0]):  # proposals per row: holes past 1 + n
        ids = torch.randint(1, 64, (4, 4), generator=g)
        valid = torch.arange(4)[None, :] < torch.tensor(n)[:, None] + 1  # [B, T]
        flat = [b * 4 + t for b, c in enumerate(n) for t in range(c + 1)]
        a = full.forward(ids, valid, reuse_logits=reuse)
        b = skip.forward(ids, valid, reuse_logits=reuse, slots=flat)
        torch.testing.assert_close(b[valid].float(), a[valid].float(), atol=tol, rtol=tol)
        assert torch.equal(b[valid].argmax(-1), a[valid].argmax(-1))
        keep = valid & (torch.arange(4)[None, :] < 2)  # a rollback: holes left in the cache
        full.reject_tail(keep)
        skip.reject_tail(keep)
    probe = torch.randint(1, 64, (4, 1), generator=g)  # the next step reads every kept key and value
    one = torch.ones(4, 1, dtype=torch.bool)
    torch.testing.assert_close(skip.forward(probe, one).float(), full.forward(probe, one).float(), atol=tol, rtol=tol)
    assert calls == [8, 9, 13]  # the valid slots of each step, and only those steps


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_keeping_the_hidden_states_gives_the_same_logits_bit_for_bit(dtype, monkeypatch):
    """A feature draft's target keeps its hidden states; its logits come from the same output layer (in
    bf16 on the CPU: the packed weight or our kernel, not F.linear), so they are the plain forward's."""
    heads = []
    inner = fastllama._head
    monkeypatch.setattr(fastllama, "_head", lambda *a, **k: heads.append(1) or inner(*a, **k))
    loaded = tiny_llama(64, layers=2, dtype=dtype)
    prompts = ragged_prompts(4, 64)
    plain, keeping = RaggedCache(loaded.model), RaggedCache(loaded.model, keep_hidden=True)
    plain_logits = _steps(plain, prompts, 64)
    plain_heads, heads[:] = len(heads), []
    for a, b in zip(plain_logits, _steps(keeping, prompts, 64)):
        torch.testing.assert_close(a, b, atol=0, rtol=0)
    assert keeping.hidden is not None and plain.hidden is None
    assert len(heads) == plain_heads > 0  # every forward's logits through the one output layer
