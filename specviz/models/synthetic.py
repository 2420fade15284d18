"""Random-weight llama-style models of a named shape, for timing only (labelled synthetic everywhere).

``synthetic:NAME`` models have the layer count, widths and vocabulary of a real model (SmolLM2-135M,
Llama-2-7B, llama-160m) and random weights: what a forward costs depends only on the shapes, so a
calibration of one is a real measurement of cost. What they output is meaningless, so acceptance
never comes from them (the Speedup page takes α from its slider). They need nothing from a hub or a
wheel: a host without the packaged model (a bare GPU box) builds them from the config below, and
their tokenizer is a byte-level one built in code (no merges, so a token is a byte; no
end-of-sequence token, so every row runs to max new tokens and steps stay comparable).

    build("llama-7b", "cuda", torch.bfloat16)          # a LoadedModel named "synthetic:llama-7b"
    save("smollm2-135m", "/tmp/x/synthetic-smollm2-135m")  # a local HF directory: a SPEC for the CLI
"""

from __future__ import annotations

from pathlib import Path

import torch

from specviz.common import SpecvizError
from specviz.models.loading import LoadedModel

PREFIX = "synthetic:"

# name -> LlamaConfig fields (the rest are LlamaConfig's defaults). Sources: each model's config.json.
SHAPES = {
    # HuggingFaceTB/SmolLM2-135M-Instruct (the packaged default target)
    "smollm2-135m": dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                         num_attention_heads=9, num_key_value_heads=3, head_dim=64, rope_theta=100000.0,
                         max_position_embeddings=8192, tie_word_embeddings=True),
    # the shipped distilled draft's body (2 layers at the target's width) with its own tied embedding
    "smollm2-draft-2l": dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=2,
                             num_attention_heads=9, num_key_value_heads=3, head_dim=64, rope_theta=100000.0,
                             max_position_embeddings=8192, tie_word_embeddings=True),
    # meta-llama/Llama-2-7b-hf: the target scale of BASS (arXiv 2404.15778) and most batched-speculation papers
    "llama-7b": dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                     num_attention_heads=32, num_key_value_heads=32, rope_theta=10000.0,
                     max_position_embeddings=4096, tie_word_embeddings=False),
    # JackFram/llama-160m: the usual small draft for Llama-2-7B (SpecInfer, arXiv 2305.09781)
    "llama-160m": dict(vocab_size=32000, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                       num_attention_heads=12, num_key_value_heads=12, rope_theta=10000.0,
                       max_position_embeddings=2048, tie_word_embeddings=False),
    # tiny shapes for tests and the GPU script's CPU smoke mode
    "tiny": dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                 tie_word_embeddings=True),
    "tiny-draft": dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                       tie_word_embeddings=True),
}


def is_synthetic(spec: str) -> bool:
    return str(spec).startswith(PREFIX)


def shape_name(spec: str) -> str:
    """``synthetic:llama-7b`` (or ``llama-7b``) -> ``llama-7b``; an unknown shape is one clear line."""
    name = str(spec).removeprefix(PREFIX)
    if name not in SHAPES:
        raise SpecvizError(f"unknown synthetic model {spec!r}: choose one of " + ", ".join(PREFIX + s for s in SHAPES))
    return name


def config(spec: str):
    from transformers import LlamaConfig

    fields = dict(SHAPES[shape_name(spec)])
    theta = fields.pop("rope_theta", 10000.0)
    cfg = LlamaConfig(**fields, rope_theta=theta, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    cfg.rope_parameters = {"rope_theta": theta, "rope_type": "default"}  # transformers 5.x reads this
    return cfg


def tokenizer(vocab_size: int):
    """A byte-level tokenizer with ``vocab_size`` ids: 256 byte tokens, then filler tokens no text
    encodes to (so the embedding and head have the real model's size). No EOS, BOS or chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())  # 256 printable stand-ins for the bytes
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    vocab.update({f"<synthetic_{i}>": i for i in range(len(vocab), vocab_size)})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok)


def build(spec: str, device="cpu", dtype: torch.dtype = torch.float32, seed: int = 0) -> LoadedModel:
    """The model with random weights (N(0, 0.02), transformers' llama init), made directly on
    ``device`` in ``dtype``: a 7B shape never exists in float32 or on the host."""
    from transformers import LlamaForCausalLM

    name = shape_name(spec)
    dev = torch.device(device)
    torch.manual_seed(seed)  # seeds CUDA too
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with dev:
            model = LlamaForCausalLM(config(name))
    finally:
        torch.set_default_dtype(previous)
    model = model.to(dtype).eval()
    model.generation_config.eos_token_id = None
    return LoadedModel(spec=PREFIX + name, name=PREFIX + name, model=model,
                       tokenizer=tokenizer(model.config.vocab_size), device=dev, dtype=dtype)


def save(spec: str, out_dir, seed: int = 0, dtype: torch.dtype = torch.bfloat16) -> Path:
    """Write the model in Hugging Face layout (config, safetensors, tokenizer) to ``out_dir``, a local
    directory any command takes as a model SPEC; a SYNTHETIC file in it says what it is."""
    out = Path(out_dir)
    loaded = build(spec, "cpu", dtype, seed)
    loaded.model.save_pretrained(out)
    loaded.tokenizer.save_pretrained(out)
    (out / "SYNTHETIC").write_text(f"{loaded.name}: random weights (seed {seed}), a byte-level tokenizer; "
                                   "timing only, its outputs and acceptance mean nothing\n")
    return out
