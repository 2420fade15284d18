"""Rewrite a feature draft without its stored output rows, which are the target's own (issue 19).

A feature draft's head is frozen at the target's output rows for its map (specviz.distill.feature),
so storing them only copies the target: 4.7M of the two-layer draft's 12.5M parameters. This
checks that the stored rows equal the target's (in bf16, as stored), drops them from
model.safetensors and marks the draft ``"head": "from_target"``; the loader then rebuilds them from
the target (specviz.models.distilled). Every other tensor is written back byte for byte.

    .venv/bin/python bench/head_from_target.py DRAFT_DIR [DRAFT_DIR ...]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def strip_head(draft: Path, target) -> str:
    """Drop the stored head of ``draft`` in place; returns the new model.safetensors' sha256."""
    from safetensors.torch import load_file, save_file

    from specviz.models.distilled import DRAFT_FILE, target_head_rows

    meta = json.loads((draft / DRAFT_FILE).read_text())
    if meta.get("head") == "from_target":
        raise SystemExit(f"{draft}: its head is already the target's (nothing stored)")
    weights = load_file(str(draft / "model.safetensors"))
    rows = target_head_rows(target.model, meta["vocab_map"]).to(torch.bfloat16)  # [n_map, hidden]
    if not torch.equal(weights["lm_head.weight"], rows):
        raise SystemExit(f"{draft}: its head rows are not the target's, so they must stay stored")
    del weights["lm_head.weight"]
    save_file(weights, str(draft / "model.safetensors"), metadata={"format": "pt"})
    (draft / DRAFT_FILE).write_text(json.dumps({**meta, "head": "from_target"}))
    return hashlib.sha256((draft / "model.safetensors").read_bytes()).hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("drafts", nargs="+", type=Path)
    a = ap.parse_args()
    from specviz.models.loading import get_model

    target = get_model("default", "cpu", "bfloat16")
    for d in a.drafts:
        print(f"{d}: head dropped; model.safetensors sha256 {strip_head(d, target)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
