"""How a joining request's prompt should be prefilled on the rectangular ragged cache (issue 17).

    python bench/join_prefill.py [--dtype bfloat16] [--batch-size 8] [--prompt-tokens 45] [--k 1] [--rounds 5]

Every forward appends the same number of slots to every row (specviz.engine.ragged), so:
  separate  (what the engine does)  the step's verify forward [B, k+1] plus one prefill forward
            of the newcomer alone [1, P];
  mixed     the newcomer's P tokens ride in the verify forward: every row gets P slots, [B, P]
            (the other rows' P - k - 1 extra slots are holes: memory and attention work);
  chunked   the newcomer feeds k+1 prompt tokens per step inside the verify forward, [B, k+1]:
            no extra forward, but its slot emits nothing for ceil(P / (k+1)) steps, which costs
            that many steps x (the step's time / B) of the batch's output.
Each forward is timed over a cached prefix of --prefix-len tokens per row, the arms interleaved
(median of --rounds). Prints seconds per join for each way, and the winner.
"""

import argparse
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from specviz.measure.calibrate import time_forward  # noqa: E402
from specviz.run import get_model  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--prompt-tokens", type=int, default=45)
    ap.add_argument("--k", type=int, default=1)
    ap.add_argument("--prefix-len", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    target = get_model("default", "cpu", a.dtype)
    B, P, w = a.batch_size, a.prompt_tokens, a.k + 1
    shapes = {"step": (B, w), "join alone": (1, P), "mixed step": (B, P)}
    times = {s: [] for s in shapes}
    for r in range(a.rounds):
        order = list(shapes)[r % 3:] + list(shapes)[: r % 3]
        for s in order:
            times[s].append(time_forward(target, *shapes[s], a.prefix_len, repeats=1))
    t = {s: statistics.median(v) for s, v in times.items()}
    separate = t["join alone"]
    mixed = t["mixed step"] - t["step"]
    chunked = math.ceil(P / w) * t["step"] / B
    print(f"default target ({a.dtype}, cpu), B = {B}, verify width k+1 = {w}, prompt {P} tokens, prefix {a.prefix_len}, "
          f"median of {a.rounds} interleaved rounds")
    print(f"forward [B, k+1] {t['step'] * 1e3:.1f} ms, [1, P] {t['join alone'] * 1e3:.1f} ms, "
          f"[B, P] {t['mixed step'] * 1e3:.1f} ms")
    cost = {"separate": separate, "mixed": mixed, "chunked": chunked}
    for name, c in cost.items():
        print(f"  {name:<9} {c * 1e3:7.1f} ms per join")
    print(f"best: {min(cost, key=cost.get)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
