"""Every number's bounds, in one table: the CLI's flags (specviz.checks runs these first in its
pass), a run's configuration (specviz.runconfig.RunConfig.validate) and the pages' sliders
(``SLIDERS``, always inside the table's bounds) all read it, so the same setting means the same
bound and the same one-line message everywhere. No torch: the Streamlit server imports it."""

from __future__ import annotations

import math
import re

from specviz.common import SpecvizError

MAX_ROWS = 65536  # a batch past this is a typo: the prompt list alone would take minutes to build

# dest: (lowest, highest or None). The same flag means the same bound in every subcommand.
INTS = {
    "batch_size": (1, MAX_ROWS), "draft_length": (0, None), "max_new_tokens": (1, None), "seed": (0, 2**63 - 1),
    "show": (0, None), "repeats": (1, None), "k_max": (1, None), "prefix_len": (1, None),
    # distill
    "samples": (1, None), "val_samples": (0, None), "gen_batch_size": (1, MAX_ROWS), "gen_workers": (0, 256),
    "topk": (1, None), "steps": (0, None), "vocab": (1, None), "layers": (1, None), "eval_every": (1, None),
    "eval_prompts": (1, None), "eval_max_new_tokens": (1, None), "cost_rounds": (1, None),
    "cost_prefix_len": (1, None), "threads": (0, 4096),
    "text_tokens": (1, None), "text_chunk_tokens": (2, None), "text_batch_size": (1, MAX_ROWS),  # distill --text
    "requests": (1, None),  # run's request queue (issue 17); None = the batch size
    "tree_width": (1, None), "tree_nodes": (1, None),  # token trees (issue 16)
    "port": (0, 65535), "max_model_len": (16, None), "max_num_seqs": (1, MAX_ROWS),  # vllm serve (issue 20)
    "serve_batch": (1, MAX_ROWS),  # tune
}
# dest: (interval as written in the message, low, low included, high, high included); None = unset is fine
FLOATS = {
    "temperature": ("0 (greedy) or positive", 0.0, True, math.inf, False),
    "top_p": ("in (0, 1]", 0.0, False, 1.0, True),
    "draft_confidence": ("in [0, 1)", 0.0, True, 1.0, False),
    "arrival_rate": ("0 (all queued at the start) or a positive number of requests per second", 0.0, True, math.inf, False),
    "synthetic_acceptance": ("in [0, 1]", 0.0, True, 1.0, True),
    "lr": ("positive", 0.0, False, math.inf, False),
    "weight_decay": ("0 or more", 0.0, True, math.inf, False),
    "gen_budget_min": ("positive minutes", 0.0, False, math.inf, False),
    "time_budget_min": ("positive minutes", 0.0, False, math.inf, False),
    "startup_timeout": ("positive seconds", 0.0, False, math.inf, False),
    # tune: the /metrics window and entered costs
    "window": ("positive seconds", 0.0, False, math.inf, False),
    "target_step_ms": ("positive milliseconds", 0.0, False, math.inf, False),
    "draft_cost_ratio": ("0 or more", 0.0, True, math.inf, False),
    "knee_tokens": ("positive tokens", 0.0, False, math.inf, False),
}
INT_LISTS = {"batch_sizes": 1, "draft_lengths": 1, "eval_ks": 1}  # dest: lowest value


# The pages' controls for a run's settings: (lowest, highest, default, step). What a slider can
# reach is a sensible range for a demo, always inside INTS / FLOATS (tests/test_bounds.py); a default is
# the CLI's (RunConfig's), so the Live page's first run is `specviz run`'s.
SLIDERS = {
    "batch_size": (1, 64, 1, 1),
    "draft_length": (0, 16, 2, 1),
    "max_new_tokens": (1, 512, 64, 1),
    "temperature": (0.0, 2.0, 0.0, 0.05),
    "top_p": (0.05, 1.0, 1.0, 0.05),
    "seed": (0, 2**31 - 1, 0, 1),
    "requests": (0, 4096, 0, 1),  # 0 on the page = one static batch of b (None in the config)
    "arrival_rate": (0.0, 1000.0, 0.0, 0.5),
    "synthetic_acceptance": (0.0, 1.0, 0.8, 0.05),  # the Live page's α by hand (its checkbox turns it on)
}


def hybrid_parts(spec: str | None, flag: str = "--draft") -> tuple[str, int] | None:
    """``MODEL+suffix[:D]`` (the hybrid, specviz.engine.hybrid) -> (MODEL, D), D 0 when unsaid (its suffix
    side then drafts the step's k); None for any other draft. A D not from 1 to 64 is refused in one line."""
    m = re.fullmatch(r"(.*)\+suffix(:.*)?", spec or "", re.S)
    if not m:
        return None
    depth = (m.group(2) or ":")[1:]
    if m.group(2) and not (depth.isdigit() and 1 <= int(depth) <= 64):
        raise SpecvizError(f"{flag} MODEL+suffix:D wants the suffix side's depth D from 1 to 64 (got {spec!r})")
    return m.group(1), int(depth or 0)


def draft_reach(draft: str | None, k: int) -> int:
    """The most tokens one step's proposal may hold at draft length k: k, or for MODEL+suffix:D the depth
    D its suffix side may reach where that is more (what a run's context must leave room for)."""
    parts = hybrid_parts(draft)
    return max(k, parts[1]) if k and parts else k


def _name(dest: str) -> str:
    return "top-p" if dest == "top_p" else dest.replace("_", " ")


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


# ---- numbers -----------------------------------------------------------------------------

def check_numbers(a) -> None:
    """Every bounded number ``a`` has (parsed flags or a RunConfig): SpecvizError for the first out of range."""
    for dest, (lo, hi) in INTS.items():
        v = getattr(a, dest, None)
        if v is None:
            continue
        if v < lo:
            raise SpecvizError(f"{_name(dest)} must be {'0 or more' if lo == 0 else f'at least {lo}'} (got {v})")
        if hi is not None and v > hi:
            raise SpecvizError(f"{_name(dest)} must be at most {hi} (got {v})")
    requests, lanes = getattr(a, "requests", None), getattr(a, "batch_size", None)
    if requests is not None and lanes is not None and requests < lanes:
        raise SpecvizError(f"{requests} requests cannot fill {lanes} lanes: give --requests >= --batch-size, "
                           f"or --batch-size {requests}")
    for dest, (said, lo, lo_in, hi, hi_in) in FLOATS.items():
        v = getattr(a, dest, None)
        if v is None:
            continue
        ok = (v >= lo if lo_in else v > lo) and (v <= hi if hi_in else v < hi)  # NaN fails both
        if not ok:
            raise SpecvizError(f"{_name(dest)} must be {said} (got {v})")
    check_synthetic(a)
    for dest, lo in INT_LISTS.items():
        if getattr(a, dest, None) is not None:
            int_list(getattr(a, dest), _flag(dest), lo)


def check_synthetic(a) -> None:
    """Synthetic acceptance draws one decision per drafted position of a chain: a run that drafts
    nothing or drafts trees has no such position (parsed flags or a RunConfig)."""
    if getattr(a, "synthetic_acceptance", None) is None:
        return
    if getattr(a, "mode", "speculative") == "regular" or getattr(a, "draft", "") == "none":
        raise SpecvizError("synthetic acceptance replaces the acceptance of drafted tokens; regular decoding drafts "
                           "none: drop --synthetic-acceptance or give a draft")
    if getattr(a, "tree_width", 1) > 1 or getattr(a, "policy", "") == "tree":
        raise SpecvizError("synthetic acceptance draws one decision per position of a chain; token trees "
                           "(--tree-width > 1, --policy tree) have no single next position: use chains")


def int_list(text: str, flag: str, lo: int = 1) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        vals = None
    if not vals or min(vals) < lo or max(vals) > MAX_ROWS:
        raise SpecvizError(f"{flag} must be comma-separated integers from {lo} to {MAX_ROWS} (got {text!r})")
    return vals
