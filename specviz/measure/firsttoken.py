"""Does sampled decoding on a real pair emit the target's distribution? (issue 16: the tree rule at T = 1)

Many rows of one prompt, one new token each, sampled with independent per-row streams: the first
output token of every row must be distributed as p, the target's processed next-token
distribution at the prompt's end, whatever the draft (chain, tree) proposed. ``frequency_check``
compares the counts with n p by a chi-square test over the tokens expected at least
``min_expected`` times (the rest lumped into one bin).

Bound, stated once: a run passes when the p-value is above ``ALPHA`` = 1e-3, so a correct rule
fails one check in a thousand by chance. The same counts compared with the draft's own
distribution q must fail: that shows the check, at this n, can tell apart a rule that leaks the
draft's preferences from one that does not.
"""

from __future__ import annotations

import torch

from specviz.engine.sampling import SamplingParams, process_logits

ALPHA = 1e-3


@torch.inference_mode()
def next_token_probs(model: torch.nn.Module, prompt_ids: list[int], params: SamplingParams,
                     vocab_size: int | None = None) -> torch.Tensor:
    """[V] float64: the processed next-token distribution of ``model`` after ``prompt_ids``
    (a draft's logits are cut or padded with zeros to the target's ``vocab_size``)."""
    dev = next(model.parameters()).device
    logits = model(input_ids=torch.tensor([prompt_ids], device=dev)).logits[0, -1].float()  # [V_model]
    p = process_logits(logits.unsqueeze(0), params)[0].double()  # [V_model]
    if vocab_size is not None and p.numel() != vocab_size:
        p = torch.cat([p, p.new_zeros(max(vocab_size - p.numel(), 0))])[:vocab_size]
    return p


def frequency_check(tokens: list[int], p: torch.Tensor, min_expected: float = 5.0) -> dict:
    """Chi-square of the token counts against n p: {chi2, dof, p_value, tv, n, bins, passed}.

    ``tv`` is the total variation between the empirical frequencies and p; a token p gives no mass
    that was emitted makes the check fail outright (p_value 0)."""
    n = len(tokens)
    counts = torch.bincount(torch.tensor(tokens, dtype=torch.long), minlength=p.numel()).double()  # [V]
    expected = p * n  # [V]
    tv = 0.5 * float((counts / max(n, 1) - p).abs().sum())
    if bool(((expected == 0) & (counts > 0)).any()):
        return {"chi2": float("inf"), "dof": 0, "p_value": 0.0, "tv": tv, "n": n, "bins": 0, "passed": False}
    big = expected >= min_expected  # [V]
    obs = torch.cat([counts[big], counts[~big].sum().reshape(1)])
    exp = torch.cat([expected[big], expected[~big].sum().reshape(1)])
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    chi2 = float(((obs - exp) ** 2 / exp).sum())
    dof = int(keep.sum()) - 1
    p_value = float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                            torch.tensor(chi2 / 2, dtype=torch.float64))) if dof > 0 else 1.0
    return {"chi2": chi2, "dof": dof, "p_value": p_value, "tv": tv, "n": n, "bins": int(keep.sum()),
            "passed": p_value > ALPHA}


def first_tokens(traces: list[dict]) -> tuple[list[int], int]:
    """(every row's first output token, how many of them were draft tokens the rule accepted)."""
    toks, from_draft = [], 0
    for t in traces:
        toks += [s["output_token_ids"][0] for s in t["sequences"] if s["output_token_ids"]]
        first = t["steps"][0]["rows"] if t.get("steps") else []
        from_draft += sum(r["accepted"] > 0 for r in first if r.get("active", True))
    return toks, from_draft
