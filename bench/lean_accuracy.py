"""How far each bf16 forward (ours, transformers') lands from the float32 model, per decode step.

The packaged target, the 8 chat prompts of bench/prompts.txt prefilled, then three decode
forwards (3, 3 and 1 tokens per row) through the RaggedCache; logits compared with the same
steps in float32 through transformers' forward.

    python bench/lean_accuracy.py
"""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from specviz.engine.ragged import RaggedCache, left_pad  # noqa: E402
from specviz.run import encode_prompts, get_model, read_prompts  # noqa: E402


def step_logits(dtype: str, lean: str) -> torch.Tensor:
    os.environ["SPECVIZ_LEAN_FORWARD"] = lean
    target = get_model("default", "cpu", dtype)
    prompts = encode_prompts(target.tokenizer, read_prompts(os.path.join(os.path.dirname(__file__), "prompts.txt")))
    kv = RaggedCache(target.model)
    ids, valid = left_pad(prompts, 0, torch.device("cpu"))
    kv.forward(ids, valid)
    outs = []
    for step in ([28, 253, 1029], [11, 30, 99], [5]):
        s = torch.tensor([step] * len(prompts))
        outs.append(kv.forward(s, torch.ones_like(s, dtype=torch.bool)).float().flatten(0, 1))
    return torch.cat(outs)


def main() -> None:
    ref = step_logits("float32", "0")
    for lean, name in (("0", "transformers' forward"), ("1", "lean forward")):
        x = step_logits("bfloat16", lean)
        d = (x - ref).abs()
        agree = (x.argmax(-1) == ref.argmax(-1)).float().mean()
        print(f"bf16 {name} vs float32: mean |logit diff| {d.mean():.4f}, max {d.max():.3f}, "
              f"top-1 agreement {agree:.3f} over {x.shape[0]} positions")
    os.environ.pop("SPECVIZ_LEAN_FORWARD", None)


if __name__ == "__main__":
    main()
