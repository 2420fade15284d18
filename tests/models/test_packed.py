"""oneDNN-packed bf16 weights (specviz.models.packed) compute what F.linear computes, bit for bit."""

import pytest
import torch

from specviz.models import fastllama, packed

pytestmark = pytest.mark.skipif(not packed.cpu_packs_bf16(),
                                reason="no oneDNN weight packing in this torch build")


def tiny_llama(dtype=torch.bfloat16):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    return LlamaForCausalLM(cfg).to(dtype).eval()


SMOLLM2_SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536), (49152, 576)]  # [out, in]: q|k|v, o, gate|up, down, head


@pytest.mark.parametrize("rows", [1, 5, 8, 40, 64, 200, packed.MAX_ROWS, 440])
def test_a_packed_bf16_linear_equals_f_linear_bit_for_bit_at_every_row_count(rows):
    """SmolLM2-135M's shapes; 440 rows (a B = 8 prefill) is past MAX_ROWS, where the 1536-wide down
    projection's packed kernel rounds differently: that call must take F.linear."""
    torch.manual_seed(rows)
    for out, inp in SMOLLM2_SHAPES:
        w = (torch.randn(out, inp) * 0.05).to(torch.bfloat16)
        x = torch.randn(rows, inp).to(torch.bfloat16)
        assert torch.equal(packed.linear(x, w, True), torch.nn.functional.linear(x, w)), (out, inp)
        x3 = x.view(1, rows, inp)
        assert torch.equal(packed.linear(x3, w, True), torch.nn.functional.linear(x3, w)), (out, inp)


def test_the_packed_copy_is_remade_when_its_weight_changes_in_place():
    w = (torch.randn(32, 16) * 0.1).to(torch.bfloat16)
    x = torch.randn(3, 16).to(torch.bfloat16)
    packed.linear(x, w, True)
    first = w._specviz_packed[1]
    assert packed.pack_of(w) is first  # unchanged weight: the same pack
    with torch.no_grad():
        w.mul_(2)  # an optimizer step would do this
    assert torch.equal(packed.linear(x, w, True), torch.nn.functional.linear(x, w))
    assert w._specviz_packed[1] is not first


def test_fp32_weights_and_the_switch_off_are_never_packed(monkeypatch):
    assert not packed.enabled(torch.zeros(2, 2))
    monkeypatch.setenv("SPECVIZ_PACKED_WEIGHTS", "0")
    assert not packed.enabled(torch.zeros(2, 2, dtype=torch.bfloat16))


@pytest.mark.parametrize("B,T", [(1, 1), (3, 5), (8, 2)])
def test_the_lean_forward_gives_the_same_bf16_logits_packed_and_unpacked(monkeypatch, B, T):
    from transformers import DynamicCache
    model = tiny_llama()
    fastllama.fuse_projections(model)
    ids = torch.randint(0, 512, (B, 12 + T))
    valid = torch.ones(B, 12 + T, dtype=torch.bool)
    valid[0, :3] = False  # a ragged row: left padding
    pos = (valid.long().cumsum(1) - 1).clamp(min=0)

    def logits():
        cache = DynamicCache(config=model.config)
        fastllama.forward(model, ids[:, :12], valid[:, :12], pos[:, :12], cache)  # prefill
        return fastllama.forward(model, ids[:, 12:], valid, pos[:, 12:], cache)  # [B, T, V]

    with_packs = logits()
    assert hasattr(model.model.layers[0]._specviz_qkv, "_specviz_packed")  # the packed path ran
    monkeypatch.setenv("SPECVIZ_PACKED_WEIGHTS", "0")
    assert torch.equal(with_packs, logits())
