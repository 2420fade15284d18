"""The tree rule at T = 1 through the CLI on the real pair keeps the target's distribution (issue 16).

Each arm is `python -m specviz run` (specviz.cli.main, in this process so the pair loads once) over
--rows rows of one prompt, --max-new-tokens 1, temperature 1, fp32, one run per seed. Every row's
first output token is counted and compared with the target's next-token distribution p by
specviz.measure.firsttoken.frequency_check (pass: p-value > 1e-3), and with the draft's q (which
must fail: the check's power). Arms: a token tree (--tree K:W:N), a chain (k = K) and regular
decoding.

    flock /tmp/specviz-cpu.lock .venv/bin/python bench/tree_distribution.py --rows 200 --seeds 0,1,2,3,4
"""

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from specviz.analysis.trace import load_json  # noqa: E402
from specviz.cli import main as cli  # noqa: E402
from specviz.engine.sampling import SamplingParams  # noqa: E402
from specviz.measure.firsttoken import first_tokens, frequency_check, next_token_probs  # noqa: E402
from specviz.models.loading import encode_prompts  # noqa: E402
from specviz.run import get_model, make_proposer  # noqa: E402

PROMPT = "The best thing about living by the sea is"


def arm_args(arm: str, k: int, w: int, n: int) -> list[str]:
    if arm == "tree":
        return ["--draft-length", str(k), "--tree-width", str(w), "--tree-nodes", str(n)]
    if arm == "chain":
        return ["--draft-length", str(k)]
    return ["--mode", "regular"]


def run_arm(arm: str, rows: int, seeds: list[int], prompt: str, tree: tuple[int, int, int], folder: str,
            draft: str = "default") -> list[dict]:
    traces = []
    for seed in seeds:
        out = os.path.join(folder, f"{arm}-{seed}.json")
        code = cli(["run", "--prompt", prompt, "--raw-prompt", "--batch-size", str(rows), "--max-new-tokens", "1",
                    "--temperature", "1", "--dtype", "float32", "--device", "cpu", "--seed", str(seed), "--show", "0",
                    "--out", out, "--draft", draft, *arm_args(arm, *tree)])
        if code:
            raise SystemExit(f"specviz run exited {code} for the {arm} arm")
        traces.append(load_json(out))
    return traces


def distributions(prompt: str, draft_spec: str = "default"):
    """(p of the target, q of the draft) at the prompt's end, T = 1, fp32."""
    target = get_model("default", "cpu", "float32")
    draft = make_proposer(draft_spec, target)
    ids = encode_prompts(target.tokenizer, [prompt], True)[0]
    V = target.model.config.vocab_size
    params = SamplingParams(temperature=1.0)
    return next_token_probs(target.model, ids, params), next_token_probs(draft.model, ids, params, V)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=200)
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--tree", default="3:3:8", help="K:W:N of the tree arm")
    ap.add_argument("--arms", default="tree,chain,regular")
    ap.add_argument("--prompt", default=PROMPT)
    ap.add_argument("--draft", default="default", help="draft SPEC (in fp32 `default` is the target itself in bf16, "
                    "so q is close to p and the check against q has little power; the distilled draft's q is farther)")
    a = ap.parse_args()
    tree = tuple(map(int, a.tree.split(":")))
    seeds = [int(s) for s in a.seeds.split(",")]
    p, q = distributions(a.prompt, a.draft)
    print(f"prompt {a.prompt!r}; target top-5 p: "
          + ", ".join(f"{int(i)}:{float(p[i]):.3f}" for i in p.argsort(descending=True)[:5]))
    print("\n| arm | rows | first tokens from the draft | chi2 / dof vs p | p-value vs p | TV to p | p-value vs q |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        for arm in a.arms.split(","):
            toks, drafted = first_tokens(run_arm(arm, a.rows, seeds, a.prompt, tree, folder, a.draft))
            vs_p, vs_q = frequency_check(toks, p), frequency_check(toks, q)
            label = f"tree {a.tree}" if arm == "tree" else f"chain k={tree[0]}" if arm == "chain" else arm
            print(f"| {label} | {len(toks)} | {drafted} | {vs_p['chi2']:.1f} / {vs_p['dof']} | {vs_p['p_value']:.3f} | "
                  f"{vs_p['tv']:.3f} | {vs_q['p_value']:.2g} |", flush=True)


if __name__ == "__main__":
    main()
