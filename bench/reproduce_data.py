"""Regenerate the first batches of a distilled draft's training data from its recorded command
and compare them, record for record, with the stored shards (issue 5: the shipped weights are
reproducible by their command).

    python bench/reproduce_data.py --draft specviz/assets/draft-SmolLM2-135M-Instruct \
        --data ~/.cache/specviz/tokdata --batches 4

Batch j's seed and greedy/sampled choice follow j alone (``specviz.distill.data.answer_batches``), so the
first N batches of a fresh run are the first N batches of the full one. Training from the same
data is checked byte for byte in tests/distill/test_distill.py.
"""

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from specviz.distill.data import generate_parallel, read_shards  # noqa: E402
from specviz.prompts.gen import training_prompts  # noqa: E402
from specviz.run import get_model  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--draft", required=True, help="a distilled draft directory (its report.json has the args)")
    ap.add_argument("--data", required=True, help="the data shards the draft was trained on")
    ap.add_argument("--batches", type=int, default=4, help="leading data-generation batches to regenerate")
    a = ap.parse_args()

    args = json.loads((Path(a.draft) / "report.json").read_text())["args"]
    if args.get("gen_budget_min") is not None:
        print("this draft's data generation had a time budget: its shards depend on the machine's speed")
    n = min(args["samples"], a.batches * args["gen_batch_size"])
    prompts = training_prompts(args["samples"], args["seed"])[:n]
    stored = {s["sample"]: s for s in read_shards(Path(a.data).expanduser(), "train")}
    missing = [i for i in range(n) if i not in stored]
    if missing:
        sys.exit(f"{a.data} lacks {len(missing)} of the first {n} training samples (first: {missing[0]}): "
                 f"not this draft's data, or its generation did not finish")
    target = get_model(args["target"], args["device"], args["dtype"])
    with tempfile.TemporaryDirectory() as d:
        generate_parallel(target, args["gen_workers"] or 1, data=Path(d), prompts=prompts, name="train",
                          max_new=args["max_new_tokens"], batch_size=args["gen_batch_size"], topk=args["topk"],
                          seed=args["seed"])
        fresh = {s["sample"]: s for s in read_shards(Path(d), "train")}
    fields = ("prompt", "temperature", "output_ids", "topk_ids", "topk_logits")
    same = [i for i in range(n) if all(np.array_equal(fresh[i][f], stored[i][f]) for f in fields)]
    tokens = sum(len(fresh[i]["output_ids"]) for i in range(n))
    print(f"{len(same)}/{n} samples identical ({tokens} tokens; output ids, top-{args['topk']} ids and logits), "
          f"{sum(fresh[i]['temperature'] > 0 for i in range(n))} of them sampled")
    return 0 if len(same) == n else 1


if __name__ == "__main__":
    sys.exit(main())
