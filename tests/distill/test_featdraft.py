"""The feature draft (EAGLE): its cache bookkeeping against a teacher-forced reference, greedy
exactness over ragged batches, the target features the engine hands it, and its data."""

import pytest
import torch

from specviz.models.distilled import DistilledDraft
from specviz.engine.proposers import FeatureDraft
from specviz.distill.feature import build_feature_draft
from specviz.models.distilled import fused_input
from specviz.engine.sampling import SamplingParams

from fakes import decode, ragged_prompts, reference_greedy, tiny_llama

VOCAB = 64


@pytest.fixture(scope="module")
def target():
    return tiny_llama(VOCAB, layers=2, seed=0)


def feature_draft(target, vocab_map=None, seed=1, layers=1) -> DistilledDraft:
    torch.manual_seed(seed)
    vocab_map = vocab_map or list(range(VOCAB))
    model = build_feature_draft(target.model, vocab_map).eval()
    with torch.no_grad():  # random weights that still give the draft's argmax some signal
        model.fc.weight.add_(0.3 * torch.randn_like(model.fc.weight))
    if layers > 1:  # that draft as the first layer, the others small on top: deeper, and it keeps the signal
        deeper = build_feature_draft(target.model, vocab_map, layers=layers).eval()
        deeper.load_state_dict(model.state_dict(), strict=False)
        with torch.no_grad():
            for layer in deeper.model.layers[1:]:
                layer.self_attn.o_proj.weight.mul_(0.1)
                layer.mlp.down_proj.weight.mul_(0.1)
        model = deeper
    return DistilledDraft(spec="tiny-feature", name="tiny-feature", model=model, tokenizer=target.tokenizer,
                          device=target.device, dtype=target.dtype, kind="feature")


@torch.no_grad()
def teacher_forced_proposals(target, draft, context: list[int]) -> list[int]:
    """proposal[n] = the draft's greedy guess for x_n given x_0..x_{n-1} and the target's true features."""
    ids = torch.tensor([context])
    f = target.model.model(input_ids=ids).last_hidden_state  # [1, N, H] final-norm output
    u = fused_input(draft.model, ids[:, 1:], f[:, :-1])  # positions 1..N-1: (x_p, f_{p-1})
    g = draft.model.model(inputs_embeds=u).last_hidden_state
    guesses = draft.model.lm_head(g)[0].argmax(-1).tolist()  # guess for x_{p+1} at position p
    return [None, None] + guesses  # index n: the guess for x_n (made at position n-1 >= 1)


@pytest.mark.parametrize("lean,layers", [("1", 1), ("0", 1), ("1", 2)], ids=["lean", "transformers", "lean-2-layers"])
def test_first_proposal_of_every_step_equals_the_teacher_forced_draft(target, monkeypatch, lean, layers):
    """The cache holds only true-feature slots: every step's first proposal is exactly what the draft
    computes over the whole context with the target's features, whatever was rejected before."""
    monkeypatch.setenv("SPECVIZ_LEAN_FORWARD", lean)
    draft = feature_draft(target, layers=layers)
    prompts = ragged_prompts(4, VOCAB, seed=3)
    dec, steps = decode(target, prompts, FeatureDraft(draft, vocab_size=VOCAB), 3, max_new=20)
    checked = 0
    for row in dec.rows:
        ref = teacher_forced_proposals(target, draft, row.context)
        n = len(row.prompt_ids)
        for s in steps:
            rec = s["rows"][row.index]
            if rec["active"] and rec["draft_tokens"]:
                assert rec["draft_tokens"][0] == ref[n], (row.index, n)
                checked += 1
            n += len(rec["emitted"])
    assert checked > 10


@pytest.mark.parametrize("k,layers", [(1, 1), (2, 1), (4, 1), (2, 2)])
def test_greedy_speculative_equals_regular_over_ragged_rows(target, k, layers):
    prompts = ragged_prompts(5, VOCAB, seed=5) + [[7]]  # a one-token prompt: nothing to draft from at first
    ref = reference_greedy(target, prompts, max_new=18)
    draft = feature_draft(target, layers=layers)
    dec, steps = decode(target, prompts, FeatureDraft(draft, vocab_size=VOCAB), k, max_new=18)
    assert [r.output for r in dec.rows] == ref
    assert sum(r["accepted"] for s in steps for r in s["rows"]) > 0


def test_one_token_prompt_drafts_nothing_until_a_feature_exists(target):
    dec, steps = decode(target, [[7]], FeatureDraft(feature_draft(target), vocab_size=VOCAB), 2, max_new=6)
    assert steps[0]["rows"][0]["drafted"] == 0 and steps[1]["rows"][0]["drafted"] == 2


def test_sampled_proposals_stay_in_the_vocabulary_map(target):
    vmap = list(range(0, VOCAB, 2))
    proposer = FeatureDraft(feature_draft(target, vmap), vocab_size=VOCAB)
    dec, steps = decode(target, ragged_prompts(3, VOCAB), proposer, 3, max_new=12, params=SamplingParams(temperature=1.0))
    proposed = [t for s in steps for r in s["rows"] for t in r["draft_tokens"]]
    assert proposed and set(proposed) <= set(vmap)
    assert all(len(r.output) == 12 for r in dec.rows)


def test_engine_keeps_the_features_it_computes(target):
    """keep_hidden: the prefill's and each verify's final-norm outputs, as a full forward gives them."""
    from specviz.engine.policies import Fixed
    from specviz.engine.decoder import SpecDecoder

    prompt = ragged_prompts(1, VOCAB, seed=9)[0]
    dec = SpecDecoder(target, None, Fixed(0), ["p"], [prompt], SamplingParams(), 4, keep_hidden=True)
    fed = []
    for s, _ in enumerate(dec.steps()):
        if s == 0:
            fed.append(dec.prefill_hidden[0][dec.prefill_valid[0]])
        fed.append(dec.verify_hidden[0])
    got = torch.cat(fed)
    ctx = dec.rows[0].context
    with torch.no_grad():
        want = target.model.model(input_ids=torch.tensor([ctx[:-1]])).last_hidden_state[0]
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_feature_data_lines_up_features_tokens_and_labels(target, tmp_path, monkeypatch):
    import specviz.models.loading as loading  # where distill's encode_chat looks encode_prompts up
    from specviz.distill.feature import feature_tensors, generate_feature_data, read_feature_samples

    # the tiny model has no chat template: prompts become raw ids
    monkeypatch.setattr(loading, "encode_prompts", lambda tok, ps: [[1 + ord(w) % (VOCAB - 1) for w in p.split()] for p in ps])
    generate_feature_data(target, ["a b c", "d e f g h"], tmp_path, "train", max_new=5, batch_size=2, topk=4, seed=0)
    samples = read_feature_samples(tmp_path, "train")
    assert [s["sample"] for s in samples] == [0, 1]
    for s in samples:
        P, n = len(s["prompt_ids"]), len(s["output_ids"])
        assert s["features"].shape == (P + n - 1, target.model.config.hidden_size) and s["topk_ids"].shape == (n, 4)
        # greedy data: the target's top-1 at each output position is the token it emitted
        assert s["topk_ids"][:, 0].tolist() == s["output_ids"]
    t = feature_tensors(samples, list(range(VOCAB)), VOCAB)[0]
    assert len(t["ids"]) == len(t["fin"]) == len(t["ftgt"]) and t["first"] + len(t["p"]) == len(t["ids"])


@pytest.mark.parametrize("layers", [1, 2])
def test_training_forward_is_the_models_forward(target, layers):
    """The first pass of specviz.distill.feature.train_forward (what training differentiates) is exactly the
    function the draft computes at run time (the model's own forward)."""
    from specviz.distill.feature import train_forward

    draft = feature_draft(target, layers=layers).model
    g = torch.Generator().manual_seed(0)
    u = torch.randn(3, 9, draft.config.hidden_size, generator=g)
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[1, 6:] = 0  # right padding
    with torch.no_grad():
        got, _ = train_forward(draft, u, mask)
        want = draft.model(inputs_embeds=u, attention_mask=mask).last_hidden_state
    ok = mask.bool()
    torch.testing.assert_close(got[ok], want[ok], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("layers", [1, 2])
def test_second_pass_sees_first_pass_slots_before_it_and_itself(target, layers):
    """Slot p of the second pass = the model's forward over [first-pass slots < p] + [its own input],
    in every layer."""
    from specviz.distill.feature import train_forward

    draft = feature_draft(target, layers=layers).model
    g = torch.Generator().manual_seed(1)
    u1 = torch.randn(1, 6, draft.config.hidden_size, generator=g)
    u2 = torch.randn(1, 6, draft.config.hidden_size, generator=g)
    mask = torch.ones(1, 6, dtype=torch.long)
    with torch.no_grad():
        _, kv1 = train_forward(draft, u1, mask)
        g2, _ = train_forward(draft, u2, mask, prev_kv=kv1)
        for p in range(6):
            seq = torch.cat([u1[:, :p], u2[:, p:p + 1]], dim=1)
            want = draft.model(inputs_embeds=seq).last_hidden_state[0, -1]
            torch.testing.assert_close(g2[0, p], want, rtol=1e-4, atol=1e-5)


def test_decoding_fuses_the_input_through_the_lean_linear_and_training_through_autograd(monkeypatch):
    """bf16 decoding: fc through packed.linear (on an AVX2 CPU our kernel, not F.linear's slow bf16 path);
    training (autograd on a trainable fc) through the module, so its weight gets a gradient."""
    import types

    from specviz.models import distilled, packed

    H = 32
    torch.manual_seed(0)
    draft = types.SimpleNamespace(model=types.SimpleNamespace(embed_tokens=torch.nn.Embedding(VOCAB, H).bfloat16()),
                                  fc=torch.nn.Linear(2 * H, H, bias=False).bfloat16())
    ids, feats = torch.randint(0, VOCAB, (2, 3)), torch.randn(2, 3, H)  # [B, T], [B, T, H]
    real, calls = packed.linear, []
    monkeypatch.setattr(distilled.packed, "linear", lambda x, w, pk, out=None: calls.append(pk) or real(x, w, pk, out))
    with torch.no_grad():
        u = fused_input(draft, ids, feats)  # [B, T, H]
        x = torch.cat([draft.model.embed_tokens(ids), feats.bfloat16()], dim=-1)
        assert torch.equal(u, real(x, draft.fc.weight, packed.enabled(draft.fc.weight)))
    assert calls == [packed.enabled(draft.fc.weight)]
    fused_input(draft, ids, feats).float().sum().backward()  # autograd on: the module's own forward
    assert calls == [packed.enabled(draft.fc.weight)] and draft.fc.weight.grad is not None
