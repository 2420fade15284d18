"""Token trees drafted by a feature draft (EAGLE-2 on an EAGLE draft): every node's probability is
what the draft computes over the context with the target's true features and its own predicted
features along the node's path, step after step (so the cache keeps only true-feature slots), and
greedy tree decoding equals batch-1 greedy over ragged, refilled batches through both forwards."""

import pytest
import torch

from specviz.distill.feature import build_feature_draft
from specviz.engine.proposers import FeatureDraft
from specviz.engine.step import TreeShape
from specviz.models.distilled import DistilledDraft, fused_input
from specviz.run import decoder_for_ids

from fakes import ragged_prompts, reference_greedy, tiny_llama
from test_featdraft import VOCAB, feature_draft, target  # noqa: F401  (target: the shared fixture)


@pytest.fixture(scope="module")
def leaning():
    """(target, draft) where the draft guesses often, so deep nodes get accepted: a tiny target whose
    layers add half as much to the residual (its next token leans on the current one) and a feature
    draft made of those same layers, reading mostly the token and a little of the feature."""
    t = tiny_llama(VOCAB, layers=2, seed=0)
    with torch.no_grad():
        for layer in t.model.model.layers:
            layer.self_attn.o_proj.weight.mul_(0.5)
            layer.mlp.down_proj.weight.mul_(0.5)
    m = build_feature_draft(t.model, list(range(VOCAB)), (0, 1), layers=2).eval()
    H = m.config.hidden_size
    with torch.no_grad():
        m.fc.weight.copy_(torch.cat([torch.eye(H), 0.02 * torch.eye(H)], dim=1))  # u = embed(x) + 0.02 f
    return t, DistilledDraft(spec="leaning", name="leaning", model=m, tokenizer=t.tokenizer, device=t.device,
                             dtype=t.dtype, kind="feature")


@torch.no_grad()
def reference_node_probs(target, draft, context: list[int], tokens: list[int], parents: list[int]) -> list[float]:
    """Each node's draft probability given its parent, recomputed from scratch: the context fed as
    (x_p, f_{p-1}) with the target's features, then the node's ancestors each fed with its parent's
    predicted feature (the root's for depth 1), one full forward (no cache) per node."""
    m = draft.model
    ids = torch.tensor([context])
    f = target.model.model(input_ids=ids).last_hidden_state  # [1, L, H] true features
    prefix = fused_input(m, ids[:, 1:], f[:, :-1])  # [1, L - 1, H] positions 1 .. L - 1

    # per node: the inputs up to and including it, and the draft's predicted feature there (-1: the root)
    u = {-1: prefix}
    g = {-1: m.model(inputs_embeds=prefix).last_hidden_state[:, -1:]}  # [1, 1, H]
    probs = []
    for i, p in enumerate(parents):  # a parent comes before its children
        logits = m.lm_head(g[p])[0, -1]  # the draft's next-token logits after the parent
        probs.append(float(torch.softmax(logits.float(), dim=-1)[tokens[i]]))
        u[i] = torch.cat([u[p], fused_input(m, torch.tensor([[tokens[i]]]), g[p])], dim=1)  # fed with the parent's g
        g[i] = m.model(inputs_embeds=u[i]).last_hidden_state[:, -1:]
    return probs


def test_every_nodes_probability_is_the_drafts_own_over_true_and_predicted_features(target):
    prompts = ragged_prompts(3, VOCAB, seed=11)
    draft = feature_draft(target, layers=2)
    # every candidate kept (W + (k - 1) W^2 = 30): depth-3 and -4 nodes under different parents included
    dec = decoder_for_ids(target, FeatureDraft(draft, vocab_size=VOCAB), prompts, 4, 14, tree=TreeShape(3, 30))
    contexts = [list(p) for p in prompts]
    checked = 0
    for s, step in enumerate(dec.steps()):
        for rec in step.rows:
            tree = rec.tree
            if s < 2 and tree and tree.token:  # the first steps: fresh cache, then after commits
                want = reference_node_probs(target, draft, contexts[rec.index], list(tree.token), list(tree.parent))
                assert list(tree.prob) == pytest.approx(want, abs=2e-5), (s, rec.index)
                checked += len(want)
            contexts[rec.index] += rec.emitted
    assert checked == 2 * 3 * 30


@pytest.mark.parametrize("lean", ["1", "0"])
@pytest.mark.parametrize("B,k,W,N,lanes", [(2, 3, 2, 6, None), (4, 4, 3, 10, None), (5, 2, 4, 5, 3), (3, 1, 3, 3, None)])
def test_feature_tree_decoding_equals_batch_one_greedy(leaning, monkeypatch, lean, B, k, W, N, lanes):
    monkeypatch.setenv("SPECVIZ_LEAN_FORWARD", lean)
    target, draft_model = leaning
    prompts = ragged_prompts(B, VOCAB, seed=B + k)
    if B > 1:
        prompts[-1] = [7]  # a one-token prompt: no feature to draft from at first
    ref = reference_greedy(target, prompts, max_new=12)
    dec = decoder_for_ids(target, FeatureDraft(draft_model, vocab_size=VOCAB), prompts, k, 12, tree=TreeShape(W, N),
                          lanes=lanes)
    steps = [s.to_json() for s in dec.steps()]
    assert [r.output for r in dec.rows] == ref
    assert sum(r["accepted"] for s in steps for r in s["rows"]) > 0  # the trees were used
    if k > 1:
        paths = [r["tree"] for s in steps for r in s["rows"] if r.get("tree") and r["tree"]["path"]]
        assert any(t["depth"][i] > 1 for t in paths for i in t["path"])  # nodes fed predicted features were accepted


def test_a_batch_whose_row_has_nothing_to_draft_from_verifies_no_tree_that_step(target):
    dec = decoder_for_ids(target, FeatureDraft(feature_draft(target), vocab_size=VOCAB), [[7]], 2, 6,
                          tree=TreeShape(2, 4))
    steps = [s.to_json() for s in dec.steps()]
    assert steps[0]["rows"][0]["drafted"] == 0 and steps[1]["rows"][0]["drafted"] == 4
    assert dec.rows[0].output == reference_greedy(target, [[7]], max_new=6)[0]
