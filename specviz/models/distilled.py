"""The distilled-draft format: what `python -m specviz distill` writes and how a run loads it.

A distilled draft is a LlamaForCausalLM at the target's width that shares the target's *frozen
input embedding* (never stored) and has an output head over a vocabulary map (the tokens the
target emits most; the rest get logit -inf, so they are never proposed). A feature draft
(EAGLE, ``kind: feature``) adds ``fc``, which fuses a token's embedding with the target's
feature at the previous position (:func:`fused_input`).

Saved layout (Hugging Face style):
    DIR/config.json          LlamaConfig: vocab_size = the target's, tie_word_embeddings = false
    DIR/model.safetensors    the draft's own weights in bf16; lm_head.weight is [n_map, hidden], absent when
                             the head is the target's own output rows for the map (``"head": "from_target"``:
                             a feature draft's frozen head, rebuilt from the target at load)
    DIR/specviz_draft.json   {"format", "target", "embedding": "from_target", "vocab_map": [ids], "kind",
                              "head"...}
    DIR/tokenizer files, report.json, README.md
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import torch
from torch import nn

from specviz.common import SpecvizError
from specviz.models import modelcache, packed
from specviz.models.loading import LoadedModel

DRAFT_FORMAT = "specviz-distilled-draft"
DRAFT_FILE = "specviz_draft.json"
DEFAULT_LAYERS = {"token": 2, "feature": 1}  # distill --layers when not given, per --kind


def draft_depth(kind: str, layers: int | None) -> int:
    """distill's draft depth: --layers as given, else the kind's default."""
    return layers if layers is not None else DEFAULT_LAYERS[kind]


def draft_linear(x: torch.Tensor, weight: torch.Tensor, train) -> torch.Tensor:
    """A draft's own linear (its mapped head, a feature draft's fc): training (autograd on a trainable weight)
    through ``train``, the module's F.linear; decoding through the lean forward's linear, which on a bf16 CPU
    takes oneDNN's packed weight or, where it cannot pack, our kernel (not F.linear's slow bf16 path)."""
    if torch.is_grad_enabled() and weight.requires_grad:
        return train(x)
    return packed.linear(x, weight, packed.enabled(weight))


class MappedHead(nn.Module):
    """Linear(hidden -> n_map) scattered into the full target vocabulary; unmapped tokens = -inf.

    ``forward`` gives [..., V] logits, so the draft plugs into RaggedCache / ModelDraft like any
    causal LM; ``reduced`` gives the [..., n_map] logits training uses.
    """

    def __init__(self, hidden: int, vocab_map: list[int], vocab_size: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(len(vocab_map), hidden))  # [n_map, hidden]
        self.register_buffer("vocab_map", torch.as_tensor(vocab_map, dtype=torch.long), persistent=False)  # [n_map]
        self.vocab_size = vocab_size

    def reduced(self, h: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(h, self.weight)  # [..., n_map]

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        r = draft_linear(h, self.weight, self.reduced)  # [B, T, n_map]
        out = r.new_full((*r.shape[:-1], self.vocab_size), float("-inf"))  # [B, T, V]
        return out.index_copy_(-1, self.vocab_map, r)


def draft_config(target_config, layers: int):
    from transformers import LlamaConfig

    if getattr(target_config, "model_type", None) != "llama":
        raise SpecvizError(f"distill supports llama-style targets (got model_type {target_config.model_type!r})")
    d = target_config.to_dict()
    for key in ("layer_types", "quantization_config", "_name_or_path", "_model_name_or_path", "architectures"):
        d.pop(key, None)
    d.update(num_hidden_layers=layers, tie_word_embeddings=False, architectures=["LlamaForCausalLM"])
    return LlamaConfig(**d)


def build_draft(config, embedding: nn.Embedding, vocab_map: list[int]):
    """A LlamaForCausalLM whose embed_tokens is ``embedding`` (frozen) and lm_head a MappedHead."""
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM(config)
    model.model.embed_tokens = embedding
    embedding.weight.requires_grad_(False)
    model.lm_head = MappedHead(config.hidden_size, vocab_map, config.vocab_size)
    return model


def own_state_dict(draft) -> dict[str, torch.Tensor]:
    """The draft's own weights (everything but the shared embedding), bf16, HF key names."""
    sd = {k: v for k, v in draft.state_dict().items() if not k.startswith("model.embed_tokens.")}
    return {k: v.detach().to(torch.bfloat16).contiguous() for k, v in sd.items()}


def target_head_rows(target_model, vocab_map) -> torch.Tensor:
    """The target's own output rows for the map: [n_map, hidden], in the target's dtype."""
    out = target_model.get_output_embeddings().weight.detach()  # [V, hidden] (tied: the embedding)
    return out[torch.as_tensor(vocab_map, dtype=torch.long, device=out.device)]  # [n_map, hidden]


def head_is_targets(draft, target_model) -> bool:
    """True when the draft's head is frozen and holds the target's own rows (in bf16, as saved):
    then save_draft leaves it out and the loader rebuilds it from the target."""
    head = draft.lm_head
    if head.weight.requires_grad:
        return False
    rows = target_head_rows(target_model, head.vocab_map.tolist()).to(head.weight.device)
    return torch.equal(head.weight.detach().to(torch.bfloat16), rows.to(torch.bfloat16))


def embedding_fingerprint(embedding: nn.Embedding) -> float:
    """A cheap check that a target's embedding is the one the draft was trained on."""
    return float(embedding.weight.detach()[:512].float().abs().mean())


def save_draft(draft, out: Path, target, vocab_map: list[int], extra: dict | None = None) -> None:
    """Write the draft; a head that is the target's own rows (:func:`head_is_targets`) is not stored.

    The files go into a new folder beside ``out`` that then replaces it whole
    (:func:`specviz.wholefolder.replaced_whole`; the folder's other files, e.g. a distill run's
    data/ and report.json, are kept): a Ctrl-C or crash mid-save leaves the previous draft as it
    was, never new weights beside the old vocabulary map (which would load and draft wrong tokens)."""
    from safetensors.torch import save_file

    import copy

    from specviz.wholefolder import replaced_whole

    config = copy.deepcopy(draft.config)
    config.dtype = torch.bfloat16  # what the safetensors hold, whatever precision training ran in
    from_target = head_is_targets(draft, target.model)
    weights = {k: v for k, v in own_state_dict(draft).items() if not (from_target and k == "lm_head.weight")}
    meta = {"format": DRAFT_FORMAT, "version": 1, "target": target.spec, "target_name": target.name,
            "embedding": "from_target", "embedding_fingerprint": embedding_fingerprint(target.model.get_input_embeddings()),
            "vocab_size": int(draft.config.vocab_size), "vocab_map": [int(t) for t in vocab_map],
            **({"head": "from_target"} if from_target else {}), **(extra or {})}
    with replaced_whole(Path(out)) as new:
        config.to_json_file(new / "config.json")
        save_file(weights, str(new / "model.safetensors"), metadata={"format": "pt"})
        (new / DRAFT_FILE).write_text(json.dumps(meta))
        try:
            target.tokenizer.save_pretrained(new)
        except Exception:  # a tokenizer without save support: the draft still loads from the target's
            pass


def is_distilled_draft(spec: str) -> bool:
    """True for a directory written by :func:`save_draft` (it has a specviz_draft.json)."""
    return (Path(spec).expanduser() / DRAFT_FILE).is_file()


def get_distilled_draft(path, target) -> "DistilledDraft":
    """:func:`load_distilled_draft`, kept in the process's model cache per (directory, its weights'
    mtime, target), and evicted with its target (it borrows the target's embedding)."""
    p = Path(path).expanduser().resolve()
    key = ("distilled", str(p), (p / "model.safetensors").stat().st_mtime_ns if (p / "model.safetensors").exists() else 0,
           id(target.model))
    return modelcache.models.get(key, lambda: load_distilled_draft(path, target), parent=getattr(target, "cache_key", None))


@dataclasses.dataclass
class DistilledDraft(LoadedModel):
    kind: str = "token"  # "token" (ModelDraft) or "feature" (FeatureDraft: specviz.distill.feature)

    @property
    def weight_bytes(self) -> int:
        # A forward reads only B x T rows of the shared embedding, not the whole table.
        emb = self.model.get_input_embeddings().weight
        return super().weight_bytes - emb.numel() * emb.element_size()


def load_distilled_draft(path, target) -> DistilledDraft:
    """Load a distilled draft for a loaded target (whose input embedding it shares)."""
    from safetensors.torch import load_file

    p = Path(path).expanduser()
    try:
        meta = json.loads((p / DRAFT_FILE).read_text())
    except (OSError, ValueError) as e:
        raise SpecvizError(f"{path} is not a distilled draft: cannot read {DRAFT_FILE} ({e})") from None
    if meta.get("format") != DRAFT_FORMAT or meta.get("embedding") != "from_target":
        raise SpecvizError(f"{path}/{DRAFT_FILE}: unknown format {meta.get('format')!r}")
    from transformers import LlamaConfig

    config = LlamaConfig.from_pretrained(p)
    emb = target.model.get_input_embeddings()
    V = target.model.config.vocab_size
    if meta["vocab_size"] != V or emb.weight.shape != (V, config.hidden_size):
        raise SpecvizError(f"draft {path} belongs to a target with vocabulary {meta['vocab_size']} and width "
                           f"{config.hidden_size}; this target has {V} and {emb.weight.shape[1]}")
    fp = embedding_fingerprint(emb)
    if not math.isclose(fp, meta["embedding_fingerprint"], rel_tol=2e-2):
        raise SpecvizError(f"draft {path} was trained for target {meta['target']!r}: this target's embedding differs")
    model = build_draft(config, emb, meta["vocab_map"])
    kind = meta.get("kind", "token")
    if kind == "feature":
        add_feature_input(model)
    elif kind != "token":
        raise SpecvizError(f"{path}/{DRAFT_FILE}: unknown draft kind {kind!r}")
    sd = load_file(str(p / "model.safetensors"))
    head_from_target = meta.get("head") == "from_target"
    if head_from_target:
        with torch.no_grad():
            model.lm_head.weight.copy_(target_head_rows(target.model, meta["vocab_map"]).float())
    missing, unexpected = model.load_state_dict(sd, strict=False)
    rebuilt = ("model.embed_tokens.", *(("lm_head.weight",) if head_from_target else ()))
    missing = [k for k in missing if not k.startswith(rebuilt)]
    if missing or unexpected:
        raise SpecvizError(f"draft {path}: weights do not match its config (missing {missing[:3]}, unexpected {unexpected[:3]})")
    model.to(device=target.device, dtype=target.dtype).eval()
    model.model.embed_tokens = emb  # .to() may have copied it when dtypes differed: share again
    return DistilledDraft(spec=str(path), name=f"{p.name} (distilled{', feature' if kind == 'feature' else ''})",
                          model=model, tokenizer=target.tokenizer, device=target.device, dtype=target.dtype, kind=kind)


def add_feature_input(model) -> None:
    """Give a draft the feature draft's input projection fc: [embed ; feature] (2H) -> H, no bias."""
    H = model.config.hidden_size
    model.fc = nn.Linear(2 * H, H, bias=False)


def fused_input(draft, ids: torch.Tensor, feats: torch.Tensor) -> torch.Tensor:
    """u = fc([embed(ids) ; feats]): [B, T] ids and [B, T, H] previous-position features -> [B, T, H]."""
    e = draft.model.embed_tokens(ids)  # [B, T, H]
    x = torch.cat([e, feats.to(e.dtype)], dim=-1)  # [B, T, 2H]
    return draft_linear(x, draft.fc.weight, draft.fc)  # [B, T, H] (F.linear on bf16: ~1.9 ms of a B = 8 draft step)
