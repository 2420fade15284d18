"""Prompt files: one prompt per line, or JSONL with a "prompt" key."""

from __future__ import annotations

import json
from pathlib import Path

from specviz.common import SpecvizError


def read_prompts(path: str) -> list[str]:
    """One prompt per line, or JSONL with a "prompt" key."""
    p = Path(path)
    if not p.is_file():
        raise SpecvizError(f"prompts file not found: {path}")
    prompts = []
    for n, line in enumerate(p.read_text().splitlines(), 1):
        if not line.strip():
            continue
        if line.lstrip().startswith("{"):
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                raise SpecvizError(f"{path}:{n}: invalid JSON line") from None
            if not isinstance(obj, dict) or "prompt" not in obj:
                raise SpecvizError(f"{path}:{n}: JSONL lines need a \"prompt\" key")
            prompts.append(str(obj["prompt"]))
        else:
            prompts.append(line)
    if not prompts:
        raise SpecvizError(f"prompts file {path} has no prompts")
    return prompts
