"""The token draft: a small LlamaForCausalLM on tokens alone (``distill --kind token``, the default).

At the target's width, its first ``--layers`` layers start as target layers (``--init-layers``),
it shares the target's frozen input embedding and has an output head over the vocabulary map
(``specviz.models.distilled``). Its data are JSONL shards (``specviz.distill.data``); it trains
on soft cross-entropy to the target's top-k distribution over the map.
"""

from __future__ import annotations

import torch
from torch import nn

from specviz.distill.data import inverse_map, soft_ce, soft_labels
from specviz.distill.train import cat_labels, init_from_target, label_positions
from specviz.models.distilled import build_draft, draft_config


def build_token_draft(target, vocab_map: list[int], layers: int, layer_ids: list[int]):
    """The draft in fp32 on the target's device (the forward runs under bf16 autocast), started
    from target layers ``layer_ids``."""
    config = draft_config(target.model.config, layers)
    emb_w = target.model.get_input_embeddings().weight.detach().float()  # frozen, as the target's dtype rounds it
    draft = build_draft(config, nn.Embedding.from_pretrained(emb_w.clone(), freeze=True), vocab_map)
    draft.float().to(target.device)  # fp32 master weights
    init_from_target(draft, target.model, layer_ids)
    return draft


def token_tensors(samples, vocab_map: list[int], vocab_size: int) -> list[dict]:
    """Per sample: inputs (prompt + outputs but the last), label positions, soft labels on the map."""
    inv = inverse_map(vocab_map, vocab_size)
    out = []
    for s in samples:
        n = len(s["output_ids"])
        if n == 0:
            continue
        P = len(s["prompt_ids"])
        ids = torch.as_tensor(s["prompt_ids"] + s["output_ids"][:-1], dtype=torch.long)  # [P + n - 1]
        out.append({"ids": ids, "first": P - 1, **soft_labels(s["topk_ids"], s["topk_logits"], inv)})
    return out


def collate_tokens(items: list[dict]):
    T = max(len(x["ids"]) for x in items)
    ids = torch.zeros(len(items), T, dtype=torch.long)
    mask = torch.zeros(len(items), T, dtype=torch.long)
    for b, x in enumerate(items):
        L = len(x["ids"])
        ids[b, :L], mask[b, :L] = x["ids"], 1  # right padding: positions 0..L-1 stay right
    return ids, mask, *label_positions(items), *cat_labels(items)


def token_loss(draft, batch, autocast: bool):
    device = draft.lm_head.weight.device
    ids, mask, rows, cols, idx, p, w, top1 = (x.to(device) for x in batch)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
        h = draft.model(input_ids=ids, attention_mask=mask).last_hidden_state  # [B, T, hidden]
        z = draft.lm_head.reduced(h[rows, cols])  # [N, n_map] only labelled positions
    return soft_ce(z, idx, p, w, top1)
