"""Tiny models and scripted proposers the tests build themselves (no weights from a hub)."""

from __future__ import annotations

import types

import torch

from specviz.engine.proposers import Proposal
from specviz.engine.decoder import SpecDecoder
from specviz.engine.policies import Fixed
from specviz.models.loading import LoadedModel
from specviz.engine.sampling import SamplingParams


def tiny_llama(vocab: int = 64, layers: int = 2, seed: int = 0, dtype=torch.float32) -> LoadedModel:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                      tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).to(dtype).eval()
    model.generation_config.eos_token_id = None
    tok = types.SimpleNamespace(eos_token_id=None, decode=lambda ids, **kw: " ".join(map(str, ids)))
    return LoadedModel(spec="tiny", name=f"tiny-llama-{seed}", model=model, tokenizer=tok,
                       device=torch.device("cpu"), dtype=dtype)


def perturbed_copy(loaded: LoadedModel, noise: float, seed: int = 1) -> LoadedModel:
    """A draft that agrees with the target often but not always."""
    import copy

    model = copy.deepcopy(loaded.model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * noise * p.std())
    return LoadedModel(spec="tiny-draft", name="tiny-draft", model=model, tokenizer=loaded.tokenizer,
                       device=loaded.device, dtype=loaded.dtype)


def ragged_prompts(n: int, vocab: int = 64, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lengths = [3 + (7 * i) % 11 for i in range(n)]
    return [torch.randint(1, vocab, (L,), generator=g).tolist() for L in lengths]


def decode(target, prompt_ids, proposer=None, k=0, max_new=16, params=SamplingParams(), eos=None, seed=0):
    dec = SpecDecoder(target, proposer, Fixed(k), [str(p) for p in prompt_ids], prompt_ids, params, max_new, seed)
    if eos is not None:
        dec.eos = {eos}
    steps = [s.to_json() for s in dec.steps()]
    return dec, steps


def reference_greedy(target, prompt_ids, max_new=16, eos=None) -> list[list[int]]:
    """Plain greedy at batch size 1, one prompt at a time."""
    outs = []
    for p in prompt_ids:
        dec, _ = decode(target, [p], None, 0, max_new, eos=eos)
        outs.append(dec.rows[0].output)
    return outs


class ScriptedDraft:
    """Proposes from a known continuation: per row "all" (the reference's next tokens, all
    accepted under greedy), "none" (tokens guaranteed wrong), or "half" (right, then wrong)."""

    kind = "scripted"
    name = "scripted"
    wants_features = False

    def __init__(self, prompts, reference, behaviour, vocab):
        self.rows = list(range(len(prompts)))
        self.prompts, self.reference, self.behaviour, self.vocab = prompts, reference, behaviour, vocab

    def start(self, contexts, features=None):
        pass

    def propose(self, contexts, k, params, u):
        B = len(contexts)
        tokens = torch.full((B, k), -1, dtype=torch.long)
        for b, ctx in enumerate(contexts):
            i = self.rows[b]
            done = len(ctx) - len(self.prompts[i])
            truth = (self.reference[i][done:done + k] + [0] * k)[:k]
            wrong = [(t + 1) % self.vocab for t in truth]
            mode = self.behaviour[i]
            prop = truth if mode == "all" else wrong if mode == "none" else truth[: k // 2] + wrong[k // 2:]
            tokens[b] = torch.tensor(prop)
        return Proposal(tokens, torch.full((B,), k, dtype=torch.long), None)

    def commit(self, num_accepted, emitted, features=None):
        pass

    def select_rows(self, rows):
        self.rows = [self.rows[i] for i in rows.tolist()]

    def add_rows(self, contexts, features=None):
        """Joining requests, told apart by their prompts (a joining row's context is its prompt)."""
        self.rows = self.rows + [next(i for i, p in enumerate(self.prompts) if list(p) == list(c)) for c in contexts]
