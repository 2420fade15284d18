"""Prompt files: one prompt per line, or JSONL with a "prompt" key.

Every way a file can be wrong ends in one SpecvizError sentence naming the file (and the line,
for a bad JSONL line), never an OSError or UnicodeDecodeError.
"""

from __future__ import annotations

import json
from pathlib import Path

from specviz.common import MissingResource, SpecvizError

MAX_PROMPTS_BYTES = 64 * 2**20  # a prompts file is text a person wrote or a script made; 64 MiB is far past either


def _read_text(path: str) -> str:
    p = Path(path).expanduser()
    if not p.exists():
        raise MissingResource(f"prompts file not found: {path}")
    if p.is_dir():
        raise SpecvizError(f"prompts file {path} is a directory: give a file with one prompt per line (or JSONL)")
    if not p.is_file():
        raise SpecvizError(f"prompts file {path} is not a regular file (a pipe or device cannot be read twice)")
    try:
        size = p.stat().st_size
        if size > MAX_PROMPTS_BYTES:
            raise SpecvizError(f"prompts file {path} is {size / 2**20:.0f} MiB: more than the "
                               f"{MAX_PROMPTS_BYTES // 2**20} MiB a prompts file may hold")
        data = p.read_bytes()
    except OSError as e:
        raise SpecvizError(f"cannot read prompts file {path}: {e.strerror or e}") from None
    if b"\x00" in data:  # valid UTF-8, but no text editor writes NUL: a binary file or a damaged one
        line = data.count(b"\n", 0, data.index(b"\x00")) + 1
        raise SpecvizError(f"prompts file {path} holds NUL bytes (line {line}): it is not a text file")
    try:
        return data.decode("utf-8-sig")  # a BOM from a Windows editor is not part of the first prompt
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise SpecvizError(f"prompts file {path} is not UTF-8 text (byte 0x{data[e.start]:02x} on line {line}): "
                           "save it as UTF-8") from None


def parse_prompts(text: str, where: str = "prompts") -> list[str]:
    """The prompts in ``text`` (one per non-blank line; a line starting with '{' is a JSON object
    with a "prompt" string). ``where`` names the source in messages."""
    prompts = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if line.lstrip().startswith("{"):
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise SpecvizError(f"{where}:{n}: invalid JSON ({e.msg}, column {e.colno})") from None
            if not isinstance(obj, dict) or "prompt" not in obj:
                raise SpecvizError(f"{where}:{n}: JSONL lines need a \"prompt\" key")
            if not isinstance(obj["prompt"], str):
                raise SpecvizError(f"{where}:{n}: \"prompt\" must be a string (got {type(obj['prompt']).__name__})")
            if not obj["prompt"].strip():
                raise SpecvizError(f"{where}:{n}: the prompt is empty")
            prompts.append(obj["prompt"])
        else:
            prompts.append(line)
    return prompts


def read_prompts(path: str) -> list[str]:
    """One prompt per line, or JSONL with a "prompt" key."""
    prompts = parse_prompts(_read_text(path), path)
    if not prompts:
        raise SpecvizError(f"prompts file {path} has no prompts")
    return prompts
