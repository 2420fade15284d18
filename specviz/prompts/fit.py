"""Does a run fit the model's context? Positions past the trained range give garbage, so a prompt
plus its new tokens plus one verify's draft tokens that would pass the context is refused (never
clamped: a clamp would silently change what was asked for)."""

from __future__ import annotations

from specviz.common import SpecvizError

# config keys that hold the trained context, in the order model families use them
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx")


def context_length(config) -> int | None:
    """The context a model was trained for, from its config (a dict or a transformers config); None if unsaid."""
    for key in CONTEXT_KEYS:
        v = config.get(key) if isinstance(config, dict) else getattr(config, key, None)
        if isinstance(v, int) and v > 0:
            return v
    return None


def check_fits(prompt_lengths: list[int], max_new_tokens: int, draft_length: int, context: int | None,
               model: str) -> None:
    """Refuse a run whose longest prompt + max_new_tokens + draft_length positions pass ``context``
    (the last verify feeds up to draft_length tokens past the last output position)."""
    if context is None or not prompt_lengths:
        return
    i = max(range(len(prompt_lengths)), key=prompt_lengths.__getitem__)
    need = prompt_lengths[i] + max_new_tokens + draft_length
    if need > context:
        raise SpecvizError(
            f"prompt {i + 1} is {prompt_lengths[i]} tokens; with --max-new-tokens {max_new_tokens} and drafts of up to "
            f"{draft_length} tokens that needs {need} positions, past the {context}-token context of {model}: "
            "shorten the prompt or lower --max-new-tokens")
