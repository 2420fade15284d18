"""A wider draft head without retraining: the shipped draft's 8,192 trained output rows, plus the
target's own output rows (scaled) for the tokens its map lacks, against the shipped draft.

The shipped map leaves ~10% of free-form target tokens unproposable (bench/vocab_coverage.py). Its
head rows were trained from the target's output rows; the target's rows for the missing tokens live
in the same space, scaled by the least-squares factor that maps the target's rows onto the trained
ones. This asks what coverage alone buys before any training: greedy acceptance at k = 1 in the
engine (specviz.distill.evaluate.eval_acceptance, B = 8, bf16) on the hand-written free-form set and
bench/prompts.txt, both drafts in one process, neither trained on those prompts.

    python bench/wide_head.py [--size 24576] [--max-new-tokens 64]
    python bench/wide_head.py --feature DRAFT OUT [--size 24576]   # a feature draft: its rows are the target's
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
ROOT = Path(__file__).resolve().parents[1]
ASSET = ROOT / "specviz" / "assets" / "draft-SmolLM2-135M-Instruct"


def widened(shipped, target, size: int):
    """A copy of the shipped draft whose map is the shipped one filled up to ``size`` with the lowest
    ids, new rows = s x the target's output rows; returns (draft, s, the new map)."""
    import copy

    from specviz.models.distilled import MappedHead

    old = shipped.model.lm_head
    old_map = old.vocab_map.tolist()
    E = target.model.lm_head.weight.detach().float()  # [V, hidden]
    W = old.weight.detach().float()  # [n_map, hidden] trained
    Em = E[old_map]
    s = float((W * Em).sum() / (Em * Em).sum())  # least squares: W ~ s E[map]
    have = set(old_map)
    new_map = sorted(old_map + [t for t in range(E.shape[0]) if t not in have][: size - len(old_map)])
    rows = torch.stack([W[old_map.index(t)] if t in have else s * E[t] for t in new_map])
    model = copy.copy(shipped.model)  # shares the layers and the embedding; only the head differs
    model._modules = dict(model._modules)  # (a shallow copy shares the module table: keep the shipped head)
    head = MappedHead(E.shape[1], new_map, E.shape[0])
    head.weight.data = rows.to(old.weight.dtype)
    head.vocab_map = head.vocab_map.to(old.weight.device)
    model.lm_head = head
    draft = copy.copy(shipped)
    draft.model, draft.name = model, f"{shipped.name} + {size - len(old_map)} target rows"
    return draft, s, new_map


def widen_feature(src: Path, dst: Path, target, size: int) -> list[int]:
    """A feature draft's copy at ``dst`` whose map is its own filled up to ``size`` with the lowest ids.

    A feature draft's head is the target's own output rows, frozen (specviz.distill.feature): its
    layer predicts the target's next feature, which any of the target's rows can score. So the new
    rows are the target's rows, unscaled, and nothing is retrained. Returns the new map."""
    import shutil

    from safetensors.torch import load_file, save_file

    from specviz.models.distilled import DRAFT_FILE

    meta = json.loads((src / DRAFT_FILE).read_text())
    if meta.get("kind") != "feature":
        raise SystemExit(f"{src} is not a feature draft")
    old_map = meta["vocab_map"]
    have = set(old_map)
    E = target.model.lm_head.weight.detach()  # [V, hidden]
    new_map = sorted(old_map + [t for t in range(E.shape[0]) if t not in have][: size - len(old_map)])
    shutil.copytree(src, dst, dirs_exist_ok=True)
    if meta.get("head") != "from_target":  # older drafts store the rows: check them, store the new ones
        weights = load_file(str(src / "model.safetensors"))
        assert torch.equal(weights["lm_head.weight"].float(), E[old_map].to(torch.bfloat16).float()), "head is not the target's"
        weights["lm_head.weight"] = E[new_map].to(torch.bfloat16).contiguous()  # [size, hidden]
        save_file(weights, str(dst / "model.safetensors"), metadata={"format": "pt"})
    (dst / DRAFT_FILE).write_text(json.dumps({**meta, "vocab_map": new_map}))
    return new_map


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=24576)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--feature", nargs=2, metavar=("DRAFT", "OUT"),
                    help="write OUT: the feature draft DRAFT with its map widened to --size (target rows), then stop")
    a = ap.parse_args()
    if a.feature:
        from specviz.models.loading import get_model

        new_map = widen_feature(Path(a.feature[0]), Path(a.feature[1]), get_model("default", "cpu", "bfloat16"), a.size)
        print(f"{a.feature[1]}: feature draft with a {len(new_map)}-token map")
        return 0

    from specviz.distill.evaluate import eval_acceptance
    from specviz.engine.proposers import ModelDraft
    from specviz.models.distilled import load_distilled_draft
    from specviz.models.loading import get_model
    from specviz.prompts.files import read_prompts
    from specviz.prompts.gen import FREEFORM

    target = get_model("default", "cpu", "bfloat16")
    V = target.model.config.vocab_size
    shipped = load_distilled_draft(ASSET, target)
    wide, s, new_map = widened(shipped, target, a.size)
    sets = {"free-form": list(FREEFORM), "bench/prompts.txt": read_prompts(str(ROOT / "bench" / "prompts.txt"))}
    print(f"# shipped map {len(shipped.model.lm_head.vocab_map)} tokens, widened to {len(new_map)}; s = {s:.3f}")
    print("| prompts | draft | acceptance at k = 1 | tokens outside the map | tokens/s (k = 1) |")
    print("| --- | --- | --- | --- | --- |")
    for name, prompts in sets.items():
        for label, d in (("shipped", shipped), ("widened", wide)):
            cell = eval_acceptance(target, ModelDraft(d, vocab_size=V), prompts, [1], a.max_new_tokens, 8)
            outs = cell[0]["outputs"]
            vmap = set(d.model.lm_head.vocab_map.tolist())
            toks = [t for o in outs for t in o]
            outside = sum(t not in vmap for t in toks) / max(len(toks), 1)
            print(f"| {name} | {label} | {cell[1]['acceptance_rate']:.3f} | {100 * outside:.1f}% | "
                  f"{cell[1]['tokens_per_s']:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
