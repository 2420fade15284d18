"""Our bf16 kernel for AVX2 CPUs (specviz.models.bf16linear): the fp32 product of the bf16 values, rounded
once; the same bits for a row whatever rows share its call; a model's bf16 logits no further from its fp32
logits than the plain bf16 path's; greedy decoding through it equal to plain greedy per row; compiled
layers call it; off with its switch."""

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


def test_a_rows_result_is_the_same_bits_whatever_rows_share_the_call():
    """Each output is one accumulator over k in order: a B = 8 verify computes what B = 1 decoding does."""
    for out, inp in SMOLLM2_SHAPES:
        x, w = _case(11, out, inp, seed=out)
        together = bf16linear.linear(x, w)  # [11, out]
        for i in (0, 5, 10):
            assert torch.equal(bf16linear.linear(x[i:i + 1], w), together[i:i + 1]), (out, inp, i)
        assert torch.equal(bf16linear.linear(x[3:7], w), together[3:7])


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
        def linear(self, x, w, out=None):
            calls.append(1)
            return built.linear(x, w, out)

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


@pytest.mark.skipif(packed.cpu_packs_bf16(), reason="oneDNN packs bf16 here: the kernel is not the bf16 path")
@pytest.mark.parametrize("kw", [{}, {"lanes": 2}], ids=["chains", "queue"])
def test_bf16_greedy_through_the_kernel_equals_bf16_regular_greedy_per_row(kw):
    """Batch invariance at work: speculative bf16 greedy (ragged verifies) = regular bf16 greedy at B = 1."""
    target = tiny_llama(64, layers=2, dtype=torch.bfloat16)
    draft = perturbed_copy(target, 0.3)
    prompts = ragged_prompts(4, 64, seed=3)
    dec = decoder_for_ids(target, ModelDraft(draft), prompts, 3, 10, **kw)
    [s.to_json() for s in dec.steps()]
    for prompt, row in zip(prompts, dec.rows):
        alone = decoder_for_ids(target, None, [prompt], 0, 10)
        [s.to_json() for s in alone.steps()]
        assert row.output == alone.rows[0].output


@pytest.mark.skipif(packed.cpu_packs_bf16() or compiled.unavailable() is not None,
                    reason="oneDNN packs bf16 here, or no C++ compiler for inductor")
def test_compiled_bf16_layers_call_the_kernel_and_give_the_eager_logits(monkeypatch):
    target = tiny_llama(64, layers=2, dtype=torch.bfloat16)
    prompts = ragged_prompts(3, 64)
    eager = _steps(RaggedCache(target.model, options=ForwardOptions(static_cache=True)), prompts, 64)
    built, mlp_calls = bf16linear.module(), []

    class Counting:  # what the op runs: counts the MLP's gate|up products (a shape only the layers have)
        def linear(self, x, w, out=None):
            mlp_calls.append(tuple(w.shape) == (128, 32))
            return built.linear(x, w, out)

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
