"""How much of the target's output a draft's vocabulary map covers, and what a wider head costs.

1. The target answers three prompt sets greedily (bf16, B = 8): the hand-written free-form set
   (``specviz.prompts.gen.FREEFORM``), ``bench/prompts.txt`` (chat prompts no draft trained on)
   and 16 held-out templated prompts. The answers are cached in ``--cache``.
2. For each map size N and construction, the share of those answer tokens inside the map:
   - ``shipped``: the shipped draft's map (its own size only);
   - ``ids``: the N lowest token ids (BPE merge order, roughly frequency order);
   - ``shipped+ids``: the shipped map filled up to N with the lowest ids not in it;
   - ``data``: ``build_vocab_map`` over ``--data`` shards (generated + teacher-forced text);
   - ``shipped+data``: the shipped map, then ``--data``'s most frequent, then the lowest ids.
   No construction looks at the answers it is scored on.
3. The cost ratio c = T_draft / T_target of a 2-layer draft with an N-token head (weights from
   the target's layers 0-1 and output rows: the cost does not depend on training), saved and
   loaded as a run loads it, every size timed in each interleaved round.

    python bench/vocab_coverage.py --sizes 8192,16384,24576 [--data DIR] [--cache FILE] [--rounds 3] [--drafts DIR,...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
ROOT = Path(__file__).resolve().parents[1]
ASSET = ROOT / "specviz" / "assets" / "draft-SmolLM2-135M-Instruct"


def answers(target, sets: dict, max_new: int, cache: Path) -> dict:
    from specviz.distill.evaluate import eval_acceptance

    if cache.is_file():
        got = json.loads(cache.read_text())
        if got.get("max_new") == max_new and got.get("prompts") == sets:
            return got["outputs"]
    outputs = {name: eval_acceptance(target, None, prompts, [], max_new, 8)[0]["outputs"] for name, prompts in sets.items()}
    cache.write_text(json.dumps({"max_new": max_new, "prompts": sets, "outputs": outputs}))
    return outputs


def coverage(outputs: list[list[int]], vmap) -> float:
    m = set(vmap)
    toks = [t for o in outputs for t in o]
    return sum(t in m for t in toks) / max(len(toks), 1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="8192,16384,24576")
    ap.add_argument("--data", help="distill data folder: its train-*.jsonl and text-*.jsonl shards build the 'data' maps")
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "specviz-vocab-answers.json"))
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-cost", action="store_true")
    ap.add_argument("--drafts", default="", help="comma-separated distilled drafts whose own maps are scored too")
    a = ap.parse_args()

    import torch

    from specviz.distill.data import build_vocab_map, read_shards
    from specviz.distill.token import build_token_draft
    from specviz.engine.decoder import eos_token_ids
    from specviz.measure.calibrate import time_forward
    from specviz.models.distilled import load_distilled_draft, save_draft
    from specviz.models.loading import get_model
    from specviz.prompts.files import read_prompts
    from specviz.prompts.gen import FREEFORM, heldout_prompts

    torch.set_num_threads(a.threads)
    target = get_model("default", "cpu", "bfloat16")
    V = target.model.config.vocab_size
    eos = sorted(eos_token_ids(target))
    sizes = [int(x) for x in a.sizes.split(",")]
    sets = {"free-form": list(FREEFORM), "bench/prompts.txt": read_prompts(str(ROOT / "bench" / "prompts.txt")),
            "held-out templated": heldout_prompts(16, seed=2)}
    outs = answers(target, sets, a.max_new_tokens, Path(a.cache))
    shipped = json.loads((ASSET / "specviz_draft.json").read_text())["vocab_map"]
    samples = (read_shards(Path(a.data), "train") + read_shards(Path(a.data), "text")) if a.data else []

    def by_ids(n, base=()):
        chosen = list(dict.fromkeys([*eos, *base]))
        seen = set(chosen)
        chosen += [t for t in range(V) if t not in seen][: max(0, n - len(chosen))]
        return sorted(chosen[:max(n, len(base))])

    maps = {("shipped", len(shipped)): shipped}
    for d in filter(None, a.drafts.split(",")):
        vmap = json.loads((Path(d) / "specviz_draft.json").read_text())["vocab_map"]
        maps[(d, len(vmap))] = vmap
    for n in sizes:
        maps[("ids", n)] = by_ids(n)
        maps[("shipped+ids", n)] = by_ids(n, shipped)
        if samples:
            maps[("data", n)] = build_vocab_map(samples, n, V, always=eos)
            if n >= len(shipped):
                maps[("shipped+data", n)] = build_vocab_map(samples, n, V, always=[*eos, *shipped])
    n_tok = {k: sum(map(len, v)) for k, v in outs.items()}
    print(f"answer tokens: {n_tok} (greedy, bf16, {a.max_new_tokens} new); data samples: {len(samples)}")
    print(f"| map | size | " + " | ".join(f"{k} coverage" for k in outs) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in outs) + " |")
    for (name, n), vmap in maps.items():
        print(f"| {name} | {len(vmap)} | " + " | ".join(f"{100 * coverage(o, vmap):.1f}%" for o in outs.values()) + " |")
    if a.no_cost:
        return 0

    drafts = {}
    for n in sizes:
        d = Path(tempfile.mkdtemp(prefix=f"vocab-{n}-"))
        save_draft(build_token_draft(target, by_ids(n, shipped), 2, [0, 1]), d, target, by_ids(n, shipped),
                   extra={"layers": 2, "init_layers": [0, 1]})
        drafts[n] = load_distilled_draft(d, target)
    times = {(b, n): [] for b in (1, 8) for n in ["target", *sizes]}
    for r in range(a.rounds):
        for b in (1, 8):
            times[(b, "target")].append(time_forward(target, b, 1, 128))
            for n in sizes:
                times[(b, n)].append(time_forward(drafts[n], b, 1, 128))
    print(f"\ncost ratio c (median of {a.rounds} interleaved rounds, one-token forwards over a 128-token prefix, "
          f"{a.threads} thread(s)):")
    print("| head size | c at B = 1 | c at B = 8 | draft ms B = 1 | draft ms B = 8 |")
    print("| --- | --- | --- | --- | --- |")
    med = {k: statistics.median(v) for k, v in times.items()}
    for n in sizes:
        print(f"| {n} | {med[(1, n)] / med[(1, 'target')]:.3f} | {med[(8, n)] / med[(8, 'target')]:.3f} | "
              f"{1e3 * med[(1, n)]:.1f} | {1e3 * med[(8, n)]:.1f} |")
    print(f"target ms: B = 1 {1e3 * med[(1, 'target')]:.1f}, B = 8 {1e3 * med[(8, 'target')]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
