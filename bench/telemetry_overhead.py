"""Does the telemetry sampler slow decoding? The same run with the sampler on and off, interleaved.

    python bench/telemetry_overhead.py [--batch-size 8] [--repeats 5]
"""

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from specviz.run import RunConfig, load_pair, run, read_prompts  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--draft", default="ngram")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    a = ap.parse_args()
    cfg = RunConfig(prompts=read_prompts(os.path.join(os.path.dirname(__file__), "prompts.txt")), draft=a.draft,
                    batch_size=a.batch_size, draft_length=4, max_new_tokens=a.max_new_tokens)
    target, proposer = load_pair(cfg)
    run(cfg, target, proposer, telemetry=False)  # warm-up
    res = {True: [], False: []}
    samples = 0
    for _ in range(a.repeats):
        for on in (False, True):
            tr = run(cfg, target, proposer, telemetry=on)
            res[on].append(tr["summary"]["tokens_per_s"])
            samples += len(tr["telemetry"]) if on else 0
    off, on = statistics.median(res[False]), statistics.median(res[True])
    print(f"B={a.batch_size} draft={a.draft} repeats={a.repeats}: sampler off {off:.1f} tok/s, on {on:.1f} tok/s, "
          f"on/off {on / off:.3f} ({samples} samples recorded)")


if __name__ == "__main__":
    main()
