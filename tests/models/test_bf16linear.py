"""Our bf16 kernels for AVX2 CPUs (specviz.models.bf16linear): the fp32 product of the bf16 values, rounded
once; the same bits for a row whatever rows share its call; a model's bf16 logits no further from its fp32
logits than the plain bf16 path's; greedy decoding through it equal to plain greedy per row; compiled
layers call it; off with its switch; the fused norm, silu(gate) * up, rotary and attention of the lean
forward within one bf16 step of the eager ops (rotary the same bits) and batch invariant too."""

import pytest
import torch

from specviz.engine.proposers import ModelDraft
from specviz.engine.ragged import RaggedCache
from specviz.models import bf16linear, compiled, packed
from specviz.models.forwardoptions import ForwardOptions
from specviz.run import decoder_for_ids

from fakes import perturbed_copy, ragged_prompts, tiny_llama
from test_fastllama import _steps

pytestmark = pytest.mark.skipif(not bf16linear.available(), reason="no AVX2 CPU or no C++ build tools here")

SMOLLM2_SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536), (49152, 576)]  # [out, in]


def _case(rows, out, inp, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(out, inp, generator=g) * 0.05).to(torch.bfloat16)  # [out, in]
    x = torch.randn(rows, inp, generator=g).to(torch.bfloat16)  # [rows, in]
    return x, w


@pytest.mark.parametrize("rows", [1, 2, 3, 13, 104])
def test_the_kernel_is_the_fp32_product_of_the_bf16_values_rounded_once(rows):
    for out, inp in SMOLLM2_SHAPES[:4] + [(37, 64)]:  # 37: rows left over after the register blocks
        x, w = _case(rows, out, inp, seed=rows)
        exact = x.double() @ w.double().T  # [rows, out]
        y = bf16linear.linear(x, w)
        assert y.dtype == torch.bfloat16 and y.shape == (rows, out)
        # one bf16 rounding (half an ulp: 2^-9 relative) on top of an fp32 sum's error
        assert torch.all((y.double() - exact).abs() <= exact.abs() * 2 ** -8 + 1e-3 * inp ** 0.5 * 2 ** -8), (out, inp)
        y32 = bf16linear.linear(x.float(), w)  # fp32 in, fp32 out: no rounding to bf16
        assert y32.dtype == torch.float32
        torch.testing.assert_close(y32.double(), exact, rtol=1e-5, atol=1e-4)


def test_the_packed_weight_copy_gives_the_plain_layouts_bits_at_any_row_count(monkeypatch):
    built = bf16linear.module()
    for out, inp in SMOLLM2_SHAPES[:4]:
        x, w = _case(5, out, inp, seed=out)
        p = bf16linear.pack_of(w)
        assert p.shape == (out // 8, inp // 8, 8, 8) and bf16linear.pack_of(w) is p  # made once
        for rows in (1, 2, 5):
            assert torch.equal(built.linear(x[:rows], p, None, None, True), built.linear(x[:rows], w, None, None, False))
        h = torch.randn(1, out).to(torch.bfloat16)
        assert torch.equal(built.linear(x[:1], p, None, h, True), h + built.linear(x[:1], w, None, None, False))
    w.add_(1)  # an in-place change: the copy is made again
    assert not torch.equal(bf16linear.pack_of(w), p)
    monkeypatch.setenv("SPECVIZ_BF16_REPACK", "0")
    assert torch.equal(bf16linear.linear(x[:1], w), built.linear(x[:1], w, None, None, False))


def test_a_rows_result_is_the_same_bits_whatever_rows_share_the_call():
    """Each output is one accumulator over k in order: a B = 8 verify computes what B = 1 decoding does."""
    for out, inp in SMOLLM2_SHAPES:
        x, w = _case(11, out, inp, seed=out)
        together = bf16linear.linear(x, w)  # [11, out]
        for i in (0, 5, 10):
            assert torch.equal(bf16linear.linear(x[i:i + 1], w), together[i:i + 1]), (out, inp, i)
        assert torch.equal(bf16linear.linear(x[3:7], w), together[3:7])
        for rows in range(2, 11):  # every way the register blocks (4, 2 and 1 rows) split a call
            assert torch.equal(bf16linear.linear(x[:rows], w), together[:rows]), (out, inp, rows)


def test_a_call_of_more_rows_than_one_pass_gives_each_row_the_bits_of_a_short_call():
    """A long prompt's prefill goes over the weights in passes of x that stay in cache (X_PASS_BYTES: 340 rows
    at in = 1536, 908 at 576): rows in every pass, and the last pass's remainder, get the bits of short calls."""
    for out, inp in ((576, 1536), (64, 576)):
        x, w = _case(1000, out, inp, seed=inp)
        res = torch.randn(1000, out).to(torch.bfloat16)
        together = bf16linear.linear(x, w, residual=res)  # [1000, out]
        pieces = torch.cat([bf16linear.linear(x[i:i + 13], w, residual=res[i:i + 13]) for i in range(0, 1000, 13)])
        assert torch.equal(together, pieces), (out, inp)
        for i in (0, 339, 340, 907, 908, 999):  # either side of a pass's edge
            assert torch.equal(bf16linear.linear(x[i:i + 1], w, residual=res[i:i + 1]), together[i:i + 1]), (out, inp, i)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_a_residual_added_in_the_kernel_gives_the_bits_of_adding_it_after(dtype):
    for rows in (1, 3):
        x, w = _case(rows, 576, 1536, seed=rows)
        h = torch.randn(rows, 576).to(dtype)  # [rows, out]
        assert torch.equal(bf16linear.linear(x.to(dtype), w, residual=h), h + bf16linear.linear(x.to(dtype), w))


def test_leading_dimensions_are_kept_and_strided_inputs_accepted():
    x, w = _case(6, 64, 96)
    x3 = x.view(2, 3, 96)
    assert torch.equal(bf16linear.linear(x3, w), bf16linear.linear(x, w).view(2, 3, 64))
    wide = torch.cat([x, x], dim=1)[:, :96]  # not contiguous
    assert torch.equal(bf16linear.linear(wide, w), bf16linear.linear(x, w))


def test_shapes_the_kernel_cannot_take_go_to_f_linear():
    assert not bf16linear.fits(torch.zeros(2, 12, dtype=torch.bfloat16), torch.zeros(4, 12, dtype=torch.bfloat16))
    assert not bf16linear.fits(torch.zeros(2, 16), torch.zeros(4, 16))  # fp32 weights
    if not packed.cpu_packs_bf16():
        x, w = torch.randn(3, 12).to(torch.bfloat16), torch.randn(5, 12).to(torch.bfloat16)
        assert torch.equal(packed.linear(x, w, True), torch.nn.functional.linear(x, w))


@pytest.mark.skipif(packed.cpu_packs_bf16(), reason="oneDNN packs bf16 here: the kernel is not the bf16 path")
def test_the_switch_turns_the_kernel_off(monkeypatch):
    w = torch.zeros(8, 16, dtype=torch.bfloat16)
    assert packed.enabled(w)
    monkeypatch.setenv("SPECVIZ_BF16_KERNEL", "0")
    assert not packed.enabled(w)


@pytest.mark.skipif(packed.cpu_packs_bf16(), reason="oneDNN packs bf16 here: the kernel is not the bf16 path")
def test_bf16_logits_through_the_kernel_are_as_close_to_fp32_as_the_plain_bf16_paths(monkeypatch):
    """The lean forward over ragged steps, rollback and compaction: a bf16 model (hidden 256, sums long
    enough for rounding to show) against the same bf16 values in fp32, with the kernel and with F.linear
    (SPECVIZ_BF16_KERNEL=0)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=768, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    half = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    ref = LlamaForCausalLM(cfg).eval()
    ref.load_state_dict({k: v.float() for k, v in half.state_dict().items()})
    prompts = ragged_prompts(4, 512)
    built, calls = bf16linear.module(), []

    class Counting:
        def linear(self, x, w, out=None, res=None, packed=False):
            calls.append(1)
            return built.linear(x, w, out, res, packed)

        def __getattr__(self, name):  # the fused elementwise steps, uncounted
            return getattr(built, name)

    def logits(model):
        return torch.cat([x.reshape(-1).float() for x in _steps(RaggedCache(model), prompts, 512)])

    exact = logits(ref)
    monkeypatch.setattr(bf16linear, "module", Counting)
    kernel = logits(half)
    assert calls  # the kernel ran
    monkeypatch.setenv("SPECVIZ_BF16_KERNEL", "0")
    plain = logits(half)
    err_kernel, err_plain = (kernel - exact).abs().mean().item(), (plain - exact).abs().mean().item()
    assert err_kernel <= 1.25 * err_plain, (err_kernel, err_plain)


def _ulps(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """How many bf16 steps apart two bf16 tensors of one sign are (elementwise)."""
    return (a.view(torch.int16).int() - b.view(torch.int16).int()).abs()


@pytest.mark.parametrize("rows", [1, 3, 24])
def test_fused_elementwise_steps_give_the_eager_ops_bits(rows):
    """RMSNorm and silu(gate) * up within one bf16 step of the eager ops (their fp32 sum and exp differ from
    torch's in the last fp32 bits), nearly always the same bits; rotary exactly the same bits."""
    import torch.nn.functional as F

    from specviz.models import fastllama

    g = torch.Generator().manual_seed(rows)
    x = (torch.randn(rows, 576, generator=g) * 3).to(torch.bfloat16)  # [rows, hidden]
    norm = torch.nn.Module()
    norm.weight, norm.variance_epsilon = (torch.rand(576, generator=g) + 0.5).to(torch.bfloat16), 1e-5
    a, b = fastllama._rms_norm(x, norm), bf16linear.rms_norm(x, norm.weight, 1e-5)
    assert _ulps(a, b).max() <= 1 and (a == b).float().mean() > 0.99
    gate_up = (torch.randn(rows, 3072, generator=g) * 4).to(torch.bfloat16)  # [rows, 2 * intermediate]
    gate, up = gate_up.chunk(2, dim=-1)
    a, b = F.silu(gate) * up, bf16linear.silu_mul(gate_up)
    assert _ulps(a, b).max() <= 1 and (a == b).float().mean() > 0.99
    qkv = torch.randn(rows, 15, 64, generator=g).to(torch.bfloat16)  # [rows, 9 + 3 + 3 heads, d]
    cos, sin = (torch.randn(rows, 1, 64, generator=g).to(torch.bfloat16) for _ in range(2))
    assert torch.equal(fastllama._rotate(qkv[:, :12], cos, sin), fastllama._rotate_qk(qkv, cos, sin, 12, True))


@pytest.mark.parametrize("d", [64, 16])  # 64: the head size compiled in; 16: any other multiple of 8
@pytest.mark.parametrize("B,T,L", [(1, 1, 37), (3, 3, 100), (2, 15, 64)])
def test_fused_attention_is_within_one_bf16_step_of_the_eager_path_and_batch_invariant(B, T, L, d):
    from specviz.models import fastllama

    g = torch.Generator().manual_seed(L)
    H, Hkv = 9, 3
    q = torch.randn(B, T, H, d, generator=g).to(torch.bfloat16).transpose(1, 2)  # [B, H, T, d], strided
    k, v = (torch.randn(B, Hkv, L, d, generator=g).to(torch.bfloat16) for _ in range(2))  # [B, Hkv, L, d]
    valid = torch.rand(B, L, generator=g) > 0.2  # holes: left padding, rolled-back slots
    valid[:, -T:] = True
    allowed = fastllama.visible(valid, T).unsqueeze(1)  # [B, 1, T, L]
    eager = fastllama._attention(q, k, v, allowed, d ** -0.5, H // Hkv)
    fused = fastllama._attention(q, k, v, allowed, d ** -0.5, H // Hkv, fused=True)
    assert fused.shape == eager.shape == (B, T, H * d)
    assert _ulps(fused, eager).max() <= 1 and (fused == eager).float().mean() > 0.99
    alone = fastllama._attention(q[-1:], k[-1:], v[-1:], allowed[-1:], d ** -0.5, H // Hkv, fused=True)
    assert torch.equal(alone, fused[-1:])


@pytest.mark.parametrize("d", [64, 16])
def test_fused_attention_gives_a_query_the_same_bits_with_masked_slots_anywhere_in_the_cache(d):
    """A speculative row's cache holds holes (rolled-back drafts, another row's longer prompt) where a regular
    row's has none: the query over the same visible keys must come out the same, and the same as alone (T = 1)."""
    from specviz.models import fastllama

    g = torch.Generator().manual_seed(d)
    # a sum in another order moves an fp32 result by an ulp or so, which changes its bf16 rounding about once
    # in 2^16 outputs: enough outputs (B H T d = 262k at d = 64) that an order depending on the holes shows
    B, H, Hkv, L, T = 16, 32, 8, 200, 8
    q = torch.randn(B, H, T, d, generator=g).to(torch.bfloat16)  # [B, H, T, d]
    k, v = (torch.randn(B, Hkv, L, d, generator=g).to(torch.bfloat16) for _ in range(2))  # [B, Hkv, L, d]
    plain = bf16linear.attention(q, k, v, fastllama.visible(torch.ones(B, L, dtype=torch.bool), T), d ** -0.5)
    for holes in ([0], [3, 4, 5], [10, 17, 31, 32, 33], list(range(0, 190, 3))):
        keep = torch.ones(L + len(holes), dtype=torch.bool)
        keep[[h + i for i, h in enumerate(holes)]] = False  # a masked slot before original slot h
        k2, v2 = (torch.zeros(B, Hkv, L + len(holes), d, dtype=torch.bfloat16) for _ in range(2))
        k2[:, :, keep], v2[:, :, keep] = k, v
        k2[:, :, ~keep], v2[:, :, ~keep] = 7.0, -7.0  # masked: never read into the result
        holey = bf16linear.attention(q, k2, v2, fastllama.visible(keep.expand(B, -1), T), d ** -0.5)
        assert torch.equal(holey, plain), holes
    first = bf16linear.attention(q[:, :, :1], k[:, :, :L - T + 1], v[:, :, :L - T + 1],
                                 fastllama.visible(torch.ones(B, L - T + 1, dtype=torch.bool), 1), d ** -0.5)
    assert torch.equal(first[:, 0], plain[:, 0])


def test_fused_elementwise_steps_give_a_row_the_same_bits_whatever_rows_share_the_call():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(11, 576, generator=g).to(torch.bfloat16)
    w = torch.rand(576, generator=g).to(torch.bfloat16)
    gate_up = torch.randn(11, 3072, generator=g).to(torch.bfloat16)
    for i in (0, 10):
        assert torch.equal(bf16linear.rms_norm(x[i:i + 1], w, 1e-5), bf16linear.rms_norm(x, w, 1e-5)[i:i + 1])
        assert torch.equal(bf16linear.silu_mul(gate_up[i:i + 1]), bf16linear.silu_mul(gate_up)[i:i + 1])


def _llama_d16(dtype=torch.bfloat16):
    """tiny_llama with 16-wide heads: the smallest the fused rotary takes (fakes.tiny_llama's are 8 wide)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from specviz.models.loading import LoadedModel

    loaded = tiny_llama(64, layers=2, dtype=dtype)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=4096, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).to(dtype).eval()
    model.generation_config.eos_token_id = None
    return LoadedModel(spec="tiny", name="tiny-llama-d16", model=model, tokenizer=loaded.tokenizer,
                       device=torch.device("cpu"), dtype=dtype)


def _count_decoder_calls(monkeypatch) -> list:
    """bf16linear.decoder, still run, with one entry appended to the returned list per call."""
    calls, decoder = [], bf16linear.decoder
    monkeypatch.setattr(bf16linear, "decoder", lambda *a: calls.append(1) or decoder(*a))
    return calls


@pytest.mark.skipif(packed.cpu_packs_bf16(), reason="oneDNN packs bf16 here: the kernel is not the bf16 path")
@pytest.mark.parametrize("cache_kind", ["dynamic", "static"])
@pytest.mark.parametrize("B,T", [(1, 1), (3, 5), (8, 2)])
def test_the_decoder_in_one_call_gives_the_op_by_op_bits_and_the_same_cache(monkeypatch, B, T, cache_kind):
    """bf16linear.decoder chains the fused ops over every layer in C++: the logits, and the cache the next
    forward reads, equal the op-by-op fused path's, over a DynamicCache and over the static cache."""
    from transformers import DynamicCache

    from specviz.models import fastllama, statickv

    model = _llama_d16().model
    fastllama.fuse_projections(model)
    g = torch.Generator().manual_seed(B * 10 + T)
    ids = torch.randint(0, 64, (B, 20 + 2 * T), generator=g)
    valid = torch.ones(B, 20 + 2 * T, dtype=torch.bool)
    valid[0, :3] = False  # a ragged row: left padding
    pos = (valid.long().cumsum(1) - 1).clamp(min=0)

    def logits():  # a prefill (20 slots: op by op), then two forwards of T slots
        spans = ((0, 20), (20, 20 + T), (20 + T, 20 + 2 * T))
        if cache_kind == "static":
            kv = statickv.StaticKV(model)
            outs = [kv.forward(model, ids[:, s:e], valid[:, :e], pos[:, s:e]) for s, e in spans]
        else:
            cache = DynamicCache(config=model.config)
            outs = [fastllama.forward(model, ids[:, s:e], valid[:, :e], pos[:, s:e], cache) for s, e in spans]
        return torch.cat(outs[1:], 1)  # [B, 2T, V]

    calls = _count_decoder_calls(monkeypatch)
    one_call = logits()
    assert len(calls) == 2  # each T-slot forward's layers ran in one call (the 20-slot prefill op by op)
    monkeypatch.setattr(bf16linear, "decoder_fits", lambda *a: False)
    assert torch.equal(one_call, logits())


@pytest.mark.skipif(packed.cpu_packs_bf16(), reason="oneDNN packs bf16 here: the kernel is not the bf16 path")
def test_the_decoder_reads_weights_changed_in_place_and_layers_fused_anew(monkeypatch):
    """The decoder keeps its weight list between forwards: a weight changed in place (an optimizer step, a
    state-dict load) and layers fused anew after a dtype round trip are still what the next forward reads."""
    from transformers import DynamicCache

    from specviz.models import fastllama

    model = _llama_d16().model
    fastllama.fuse_projections(model)
    ids = torch.randint(0, 64, (1, 1), generator=torch.Generator().manual_seed(2))
    valid, pos = torch.ones(1, 1, dtype=torch.bool), torch.zeros(1, 1, dtype=torch.long)

    fits = bf16linear.decoder_fits

    def logits(op_by_op=False):
        monkeypatch.setattr(bf16linear, "decoder_fits", (lambda *a: False) if op_by_op else fits)
        return fastllama.forward(model, ids, valid, pos, DynamicCache(config=model.config))

    calls = _count_decoder_calls(monkeypatch)
    before = logits()
    with torch.no_grad():
        model.model.layers[1].mlp.down_proj.weight.mul_(-1.5)
    changed = logits()
    assert not torch.equal(before, changed) and torch.equal(changed, logits(op_by_op=True))
    model.float().to(torch.bfloat16)  # new weight tensors everywhere
    fastllama.fuse_projections(model)
    with torch.no_grad():
        model.model.layers[0].self_attn.o_proj.weight.mul_(0.5)
    assert torch.equal(logits(), logits(op_by_op=True))
    assert len(calls) == 3  # before, changed and the fused-anew forward went through the decoder


@pytest.mark.skipif(packed.cpu_packs_bf16(), reason="oneDNN packs bf16 here: the kernel is not the bf16 path")
def test_a_cache_the_decoder_does_not_know_runs_op_by_op_with_the_same_logits(monkeypatch):
    """A DynamicCache whose layers are not plain DynamicLayers (sliding, offloaded, a future transformers) is not
    grown behind its back: the forward runs op by op, with the decoder's logits."""
    from transformers import DynamicCache

    from specviz.models import fastllama

    model = _llama_d16().model
    fastllama.fuse_projections(model)
    ids = torch.randint(0, 64, (2, 3), generator=torch.Generator().manual_seed(3))
    valid, pos = torch.ones(2, 3, dtype=torch.bool), torch.arange(3).expand(2, 3)
    one_call = fastllama.forward(model, ids, valid, pos, DynamicCache(config=model.config))
    calls = _count_decoder_calls(monkeypatch)
    monkeypatch.setattr(fastllama, "_dynamic_layers", lambda cache, n: None)
    cache = DynamicCache(config=model.config)
    assert torch.equal(fastllama.forward(model, ids, valid, pos, cache), one_call)
    assert not calls and cache.get_seq_length() == 3


@pytest.mark.skipif(packed.cpu_packs_bf16(), reason="oneDNN packs bf16 here: the kernel is not the bf16 path")
def test_the_decoder_grows_a_fresh_dynamic_cache_as_its_update_would(monkeypatch):
    """A forward of a few slots into an empty DynamicCache (a short prompt's prefill) goes through the one-call
    decoder and leaves each layer initialised with exactly the new slots, as DynamicLayer.update would."""
    from transformers import DynamicCache

    from specviz.models import fastllama

    model = _llama_d16().model
    fastllama.fuse_projections(model)
    ids = torch.randint(0, 64, (2, 4), generator=torch.Generator().manual_seed(1))
    valid = torch.ones(2, 4, dtype=torch.bool)
    pos = torch.arange(4).expand(2, 4)
    cache = DynamicCache(config=model.config)
    calls = _count_decoder_calls(monkeypatch)
    fastllama.forward(model, ids, valid, pos, cache)
    assert calls and cache.get_seq_length() == 4
    assert all(c.is_initialized and c.keys.shape == (2, 2, 4, 16) for c in cache.layers)
    cache.crop(-1)  # the RaggedCache's other operations still work on it
    assert cache.get_seq_length() == 3


@pytest.mark.skipif(packed.cpu_packs_bf16(), reason="oneDNN packs bf16 here: the kernel is not the bf16 path")
@pytest.mark.parametrize("kw", [{}, {"lanes": 2}], ids=["chains", "queue"])
@pytest.mark.parametrize("heads", ["d8", "d16-fused"])
def test_bf16_greedy_through_the_kernel_equals_bf16_regular_greedy_per_row(kw, heads, monkeypatch):
    """Batch invariance at work: speculative bf16 greedy (ragged verifies) = regular bf16 greedy at B = 1,
    with the linears alone through the kernel (8-wide heads) and with the fused elementwise steps too."""
    target = tiny_llama(64, layers=2, dtype=torch.bfloat16) if heads == "d8" else _llama_d16()
    calls = _count_decoder_calls(monkeypatch)
    draft = perturbed_copy(target, 0.3)
    prompts = ragged_prompts(4, 64, seed=3)
    dec = decoder_for_ids(target, ModelDraft(draft), prompts, 3, 10, **kw)
    [s.to_json() for s in dec.steps()]
    for prompt, row in zip(prompts, dec.rows):
        alone = decoder_for_ids(target, None, [prompt], 0, 10)
        [s.to_json() for s in alone.steps()]
        assert row.output == alone.rows[0].output
    assert bool(calls) == (heads == "d16-fused")


@pytest.mark.skipif(packed.cpu_packs_bf16() or compiled.unavailable() is not None,
                    reason="oneDNN packs bf16 here, or no C++ compiler for inductor")
def test_compiled_bf16_layers_call_the_kernel_and_give_the_eager_logits(monkeypatch):
    target = tiny_llama(64, layers=2, dtype=torch.bfloat16)
    prompts = ragged_prompts(3, 64)
    eager = _steps(RaggedCache(target.model, options=ForwardOptions(static_cache=True)), prompts, 64)
    built, mlp_calls = bf16linear.module(), []

    class Counting:  # what the op runs: counts the MLP's gate|up products (a shape only the layers have)
        def linear(self, x, w, out=None, res=None, packed=False):
            mlp_calls.append(tuple(w.shape) == (128, 32))
            return built.linear(x, w, out, res, packed)

        def __getattr__(self, name):
            return getattr(built, name)

    monkeypatch.setattr(bf16linear, "module", Counting)
    fast = RaggedCache(target.model, options=ForwardOptions(compile=True))
    for a, b in zip(_steps(fast, prompts, 64), eager):
        torch.testing.assert_close(a.float(), b.float(), atol=2e-2, rtol=2e-2)
    assert compiled.compiler().failed is None and len(fast.cache.runner) > 0  # the layers ran compiled
    assert any(mlp_calls)  # and called the kernel from the compiled graph


def test_dtype_auto_picks_bf16_where_the_kernel_is_the_bf16_path_and_float32_when_it_is_off(monkeypatch):
    from pathlib import Path

    from specviz.models.loading import resolve_dtype

    if packed.cpu_packs_bf16() or "avx512_bf16" in Path("/proc/cpuinfo").read_text():
        pytest.skip("oneDNN packs bf16 here: the kernel is not this CPU's bf16 path")
    cpu = torch.device("cpu")
    assert resolve_dtype("auto", cpu) == torch.bfloat16
    monkeypatch.setenv("SPECVIZ_BF16_KERNEL", "0")  # bf16 would run through F.linear: slower than fp32 here
    assert resolve_dtype("auto", cpu) == torch.float32
    monkeypatch.setenv("SPECVIZ_BF16_KERNEL", "1")
    monkeypatch.setenv("SPECVIZ_PACKED_WEIGHTS", "0")
    assert resolve_dtype("auto", cpu) == torch.float32
    assert resolve_dtype("float32", cpu) == torch.float32  # an explicit dtype is kept
