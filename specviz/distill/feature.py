"""A feature draft (EAGLE, Li et al. 2024): a draft of one or a few layers that reads the target's own hidden states.

A token draft must guess the next token from tokens alone; at this size it agrees with the
target's greedy choice about 40% of the time on prompts it never saw. The target's final hidden
state (the final-norm output, what its output layer reads: the *feature* f_p at position p)
already encodes almost everything the target "knows" about the text; the draft here predicts the
*next* feature from it:

    input at position p    u_p = fc([embed(x_p) ; f_{p-1}])           (fc: 2H -> H)
    decoder layer(s)       g_p = norm(layers(u_p | earlier slots))     (its own KV cache)
    prediction             g_p ~ f_p, so logits_p = lm_head(g_p) predict x_{p+1}

The draft shares the target's embedding (frozen, never stored). Its output layer is the target's
own output rows for a vocabulary map (``specviz.models.distilled.MappedHead``, as the token draft's), kept
frozen: the draft predicts the target's features, so the target's projection reads them.

Training (``feature_loss``): soft cross-entropy to the target's top-k distribution plus smooth-L1
regression of g to f, with uniform noise on the input features (EAGLE), over two passes: the
teacher-forced one, and the second draft step, where each slot reads the draft's own first guess
and attends to the first pass's slots before it (HASS, Zhang et al. 2024).

Drafting (``specviz.engine.proposers.FeatureDraft``): the target's verify computes f for every slot it
verifies, so after each step the draft is fed the emitted tokens with their *true* previous
features; its own proposals run on its *predicted* features g and are always discarded at commit.

Data: the target answers the built-in prompts through the engine's regular decoding with
``keep_hidden``; every sample stores its features f_0..f_{P+n-2} (bf16) and the target's top-k
logits at each output position. Shards are ``torch.save`` files, one per batch, resumable. With
``--text``, written text read teacher-forced (``label_text_features``: one forward per batch of
chunks, ~5x the tokens per second of generation) gives samples of the same shape.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from specviz.common import ATOMIC_TEMP, atomic_open, load_tensors, remove_dead_temps
from specviz.distill.data import answer_batches, inverse_map, prompt_batches, sample_record, soft_ce, soft_labels
from specviz.distill.train import cat_labels, init_from_target, label_positions
from specviz.models.distilled import add_feature_input, build_draft, draft_config, fused_input


# =============================================================================================
# Data: the target's outputs, top-k logits and features


def generate_feature_data(target, prompts: list[str], data: Path, name: str, max_new: int, batch_size: int, topk: int,
                          seed: int, worker: int = 0, workers: int = 1, **kwargs) -> None:
    """Answer ``prompts`` in batches into ``data/name-<batch>.pt`` with their features; batches
    already there are skipped. Batches, seeds, greedy/sampled and the deadline are
    ``specviz.distill.data.answer_batches``'s (``kwargs``: greedy_every, deadline, desc)."""
    data.mkdir(parents=True, exist_ok=True)
    remove_dead_temps(data, ATOMIC_TEMP)  # shards a killed worker was writing
    todo = [(j, idx) for j, idx in enumerate(prompt_batches(len(prompts), batch_size))
            if j % workers == worker and not _shard(data, name, j).exists()]
    if not todo:
        return
    for j, idx, temperature, rows, labels, feats in answer_batches(target, prompts, todo, max_new, topk, seed,
                                                                   worker=worker, workers=workers, features=True, **kwargs):
        samples = [{**sample_record(i, r, temperature), "features": f.to(torch.bfloat16),
                    "topk_ids": torch.as_tensor(np.stack([a for a, _ in lab]).astype(np.int32)),
                    "topk_logits": torch.as_tensor(np.stack([b for _, b in lab]))}
                   for i, r, lab, f in zip(idx, rows, labels, feats)]
        _save_shard(data, name, j, samples)


def _shard(data: Path, name: str, j: int) -> Path:
    return data / f"{name}-{j:05d}.pt"


def _save_shard(data: Path, name: str, j: int, samples: list[dict]) -> None:
    with atomic_open(_shard(data, name, j)) as f:  # a shard is there whole or not at all, even after a power cut
        torch.save(samples, f)


def label_text_features(target, chunks: list[dict], data, name: str = "text", batch_size: int = 8, topk: int = 32,
                        worker: int = 0, workers: int = 1, desc: str = "text labels", **_) -> None:
    """Written text read teacher-forced (``specviz.distill.text``) as feature samples: per chunk the
    target's top-k at each answer position and its features f_0 .. f_{P+n-2}, one forward per batch
    of chunks, into ``data/name-<batch>.pt`` (the generated shards' format). A batch whose shard is
    there with the same chunks is skipped, so an interrupted run resumes; worker w of W takes
    batches j = w (mod W)."""
    from tqdm import tqdm

    from specviz.distill.text import chunk_record, label_batch

    data = Path(data)
    data.mkdir(parents=True, exist_ok=True)
    remove_dead_temps(data, ATOMIC_TEMP)
    todo = [(j, list(range(i, min(len(chunks), i + batch_size))))
            for j, i in enumerate(range(0, len(chunks), batch_size)) if j % workers == worker]
    todo = [(j, idx) for j, idx in todo if not _same_chunks(_shard(data, name, j), chunks, idx)]
    bar = tqdm(total=sum(len(chunks[i]["output_ids"]) for _, idx in todo for i in idx), desc=desc, unit="tok",
               mininterval=2, disable=worker > 0 or not todo)
    for j, idx in todo:
        samples = [{**chunk_record(i, chunks[i]), "features": f,
                    "topk_ids": torch.as_tensor(top.astype(np.int32)), "topk_logits": torch.as_tensor(vals)}
                   for i, (top, vals, f) in zip(idx, label_batch(target, [chunks[i] for i in idx], topk, features=True))]
        _save_shard(data, name, j, samples)
        bar.update(sum(len(chunks[i]["output_ids"]) for i in idx))
    bar.close()


def _same_chunks(path: Path, chunks: list[dict], idx: list[int]) -> bool:
    if not path.exists():
        return False
    got = [(s["sample"], list(s["output_ids"])) for s in load_tensors(path, "feature shard")]
    return got == [(i, chunks[i]["output_ids"]) for i in idx]


def read_text_features(data, chunks: list[dict], name: str = "text") -> list[dict]:
    """The labelled chunks of this run (index and tokens match), in chunk order."""
    want = {i: list(c["output_ids"]) for i, c in enumerate(chunks)}
    return [s for s in read_feature_samples(Path(data), name) if want.get(s["sample"]) == list(s["output_ids"])]


def read_feature_samples(data: Path, name: str) -> list[dict]:
    """Every sample in ``data/name-*.pt``, ordered by sample index."""
    out = []
    for p in sorted(data.glob(f"{name}-*.pt")):
        for s in load_tensors(p, "feature shard"):
            s["topk_ids"], s["topk_logits"] = s["topk_ids"].numpy().astype(np.int64), s["topk_logits"].numpy().astype(np.float32)
            out.append(s)
    return sorted(out, key=lambda s: s["sample"])


# =============================================================================================
# The draft: fc + one llama layer + final norm, sharing the target's embedding and output rows

def build_feature_draft(target_model, vocab_map: list[int], layer_ids=(), layers: int = 1):
    """A LlamaForCausalLM of ``layers`` layers with ``fc`` (2H -> H, no bias) for the fused input,
    the target's (frozen) embedding and final norm, and a MappedHead holding the target's output
    rows for the map (frozen: the draft predicts the target's features, so the target's own
    projection reads them).

    layer_ids: start layer i from target layer layer_ids[i] (empty: transformers' random init).
    """
    from torch import nn

    tcfg = target_model.config
    config = draft_config(tcfg, layers)
    emb = nn.Embedding.from_pretrained(target_model.get_input_embeddings().weight.detach().float().clone(), freeze=True)
    draft = build_draft(config, emb, vocab_map)
    H = config.hidden_size
    add_feature_input(draft)
    with torch.no_grad():
        # start as "the previous feature plus the token": fc = [I | I] / 2 (+ the default init's noise, scaled down)
        draft.fc.weight.mul_(0.1).add_(torch.cat([torch.eye(H), torch.eye(H)], dim=1) * 0.5)
    init_from_target(draft, target_model, list(layer_ids))
    draft.lm_head.weight.requires_grad_(False)
    draft.float()
    return draft


def build_feature(target, vocab_map: list[int], layers: int, layer_ids: list[int]):
    """The kind's builder (``specviz.distill.command.KINDS``): ``layers`` layers, from target layers
    ``layer_ids`` or random (``--init-layers random``), fp32 on the target's device (the forward
    runs under bf16 autocast). A deeper draft continued from a shallower one (``--init-from``)
    starts its extra layers as identities (``specviz.distill.train.init_from_draft``)."""
    return build_feature_draft(target.model, vocab_map, layer_ids, layers).to(target.device)


# =============================================================================================
# Training: per sample, draft positions p = 1 .. P+n-2 (inputs x_p and f_{p-1}, targets f_p and,
# at output positions, the target's top-k distribution)


def trainable(s: dict) -> bool:
    """A sample gives feature-draft positions: at least one output token after a prompt of two or more."""
    return len(s["output_ids"]) >= 1 and len(s["prompt_ids"]) >= 2


def feature_tensors(samples, vocab_map: list[int], vocab_size: int) -> list[dict]:
    inv = inverse_map(vocab_map, vocab_size)
    out = []
    for s in filter(trainable, samples):
        n, P = len(s["output_ids"]), len(s["prompt_ids"])
        toks = s["prompt_ids"] + s["output_ids"]
        F = s["features"]  # [P + n - 1, H]: f_0 .. f_{P+n-2}
        M = P + n - 2  # draft positions 1 .. P+n-2
        out.append({"ids": torch.as_tensor(toks[1:M + 1], dtype=torch.long), "fin": F[:M], "ftgt": F[1:M + 1],
                    "first": P - 2, **soft_labels(s["topk_ids"], s["topk_logits"], inv)})
    return out


def collate_features(items: list[dict]):
    B, T, H = len(items), max(len(x["ids"]) for x in items), items[0]["fin"].shape[1]
    ids = torch.zeros(B, T, dtype=torch.long)
    mask = torch.zeros(B, T, dtype=torch.long)
    fin = torch.zeros(B, T, H, dtype=items[0]["fin"].dtype)
    ftgt = torch.zeros(B, T, H, dtype=items[0]["ftgt"].dtype)
    for b, x in enumerate(items):
        L = len(x["ids"])
        ids[b, :L], mask[b, :L], fin[b, :L], ftgt[b, :L] = x["ids"], 1, x["fin"], x["ftgt"]
    return ids, mask, fin, ftgt, *label_positions(items), *cat_labels(items)


REG_WEIGHT = 1.0  # feature regression (smooth L1) next to the soft cross-entropy
# Training adds uniform noise of this half-width to the input features (EAGLE's augmentation): from
# the second draft token on, the draft reads its own predictions, which are never exact.
FEATURE_NOISE = 0.2


TRAIN_STEPS = 2  # 1: teacher-forced only; 2: also the second draft step, on the draft's own first guess


def train_forward(draft, u: torch.Tensor, mask: torch.Tensor, prev_kv=None):
    """The draft's layers and final norm over right-padded inputs u [B, T, H] (mask [B, T]), with
    autograd: (g [B, T, H], per layer (keys, values) per query head).

    prev_kv None: causal attention, the same function as the model's own forward. With
    ``prev_kv`` from that first pass, the query at slot p sees, in every layer, the first pass's
    keys at slots < p and its own: the second draft step, where the cache holds true-feature
    slots and the newest slot was fed the draft's guess (as HASS trains it, Zhang et al. 2024).
    """
    inner = draft.model
    B, T, _ = u.shape
    cos, sin = inner.rotary_emb(u, torch.arange(T, device=u.device).unsqueeze(0).expand(B, T))
    slot = torch.arange(T, device=u.device)
    key_ok = mask.bool()[:, None, None, :]  # [B, 1, 1, T]
    if prev_kv is None:
        allowed = (slot[None, :] <= slot[:, None]) & key_ok  # [B, 1, T, T] causal
    else:
        allowed = (slot[None, :] < slot[:, None]) & key_ok  # [B, 1, T, T] strictly earlier first-pass slots
    h, kvs = u, []
    for i, layer in enumerate(inner.layers):
        h, kv = _layer_forward(layer, h, cos, sin, allowed, None if prev_kv is None else prev_kv[i])
        kvs.append(kv)
    return inner.norm(h), kvs


def _layer_forward(layer, h: torch.Tensor, cos, sin, allowed: torch.Tensor, prev_kv):
    """One llama decoder layer over h [B, T, H]; with ``prev_kv`` each slot attends to those keys
    where ``allowed`` and to its own key (the second pass). Returns (h, (keys, values))."""
    import torch.nn.functional as F
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    attn = layer.self_attn
    B, T, _ = h.shape
    x = layer.input_layernorm(h)
    shape = (B, T, -1, attn.head_dim)
    q = attn.q_proj(x).view(shape).transpose(1, 2)  # [B, nh, T, d]
    k = attn.k_proj(x).view(shape).transpose(1, 2)  # [B, nkv, T, d]
    v = attn.v_proj(x).view(shape).transpose(1, 2)
    q, k = apply_rotary_pos_emb(q, k, cos, sin)
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)  # [B, nh, T, d]
    if prev_kv is None:
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=attn.scaling)
    else:
        k1, v1 = prev_kv
        s_prev = torch.matmul(q, k1.transpose(-1, -2)).float() * attn.scaling  # [B, nh, T, T]
        s_self = (q * k).sum(-1, keepdim=True).float() * attn.scaling  # [B, nh, T, 1]
        probs = torch.softmax(torch.cat([s_prev.masked_fill(~allowed, float("-inf")), s_self], dim=-1), dim=-1)
        o = torch.matmul(probs[..., :T].to(v1.dtype), v1) + probs[..., T:].to(v.dtype) * v
    h = h + attn.o_proj(o.transpose(1, 2).reshape(B, T, -1))
    h = h + layer.mlp(layer.post_attention_layernorm(h))
    return h, (k, v)


def feature_loss(draft, batch, autocast: bool):
    device = draft.fc.weight.device
    ids, mask, fin, ftgt, rows, cols, idx, p, w, top1 = (x.to(device) for x in batch)
    if draft.training and FEATURE_NOISE:
        fin = fin.float() + (torch.rand(fin.shape, device=device) * 2 - 1) * FEATURE_NOISE
    m = mask.bool()

    def step_loss(g):
        z = draft.lm_head.reduced(g[rows, cols])  # [N, n_map] only labelled positions
        ce, agree, count = soft_ce(z, idx, p, w, top1)
        reg = torch.nn.functional.smooth_l1_loss(g[m].float(), ftgt[m].float())
        return ce + REG_WEIGHT * reg, agree, count

    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
        g1, kv1 = train_forward(draft, fused_input(draft, ids, fin), mask)
        loss, agree, count = step_loss(g1)
        if TRAIN_STEPS >= 2 and draft.training:
            guess = torch.cat([fin[:, :1].to(g1.dtype), g1[:, :-1].detach()], dim=1)  # slot p reads g1 at p-1
            g2, _ = train_forward(draft, fused_input(draft, ids, guess), mask, prev_kv=kv1)
            loss = (loss + step_loss(g2)[0]) / 2
    return loss, agree, count
