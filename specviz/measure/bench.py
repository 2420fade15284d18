"""Interleaved arms: the one loop behind every speed comparison (``python -m specviz bench``,
the sweep's cells, bench/drafts.py and bench/policies.py).

These machines drift 10-50% within minutes, so arms are never timed in separate blocks: every
round runs every arm once, in an order that rotates each round, and each arm's speed is read as
its ratio to the same round's reference (regular decoding). An engine arm runs every prompt once
at its batch size (RunConfig.every_prompt), so B = 1 is not one prompt; the peer arm is
transformers' own generate(assistant_model=...) at batch 1.
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import time
from typing import Callable, Iterator

from specviz.analysis import acceptance
from specviz.analysis.trace import summarize, tokens_per_s
from specviz.models.loading import encode_prompts
from specviz.runconfig import RunConfig
from specviz.run import load_pair, make_proposer, run

# An arm: () -> (tokens/s, the traces of our engine, or None for a peer outside it)
Arm = Callable[[], tuple[float, list[dict] | None]]
WARM_TOKENS = 8  # warm-up length: the first forwards of a shape pay for allocation and kernel choice


@contextlib.contextmanager
def forgetting(proposer) -> Iterator[None]:
    """Whatever a suffix draft's global structure (its own, or a MODEL+suffix hybrid's) learns inside the
    block is forgotten at its end, even on an error: warm-ups and repeated arms leave it as they found it.
    Other drafts learn nothing across requests, and for them this does nothing."""
    corpus = getattr(proposer, "corpus", None)
    start = corpus.snapshot() if corpus is not None else None
    try:
        yield
    finally:
        if corpus is not None:
            corpus.restore(start)


def engine_arm(cfg: RunConfig, target, proposer, on_step: Callable | None = None) -> Arm:
    """Every prompt of ``cfg`` through our engine, in batches of its batch size. A suffix draft's global
    structure starts every call as it was when the arm was made: a request learns from the requests before
    it in the same call, never from the answers of an earlier round; the arms write no corpus file."""
    cfg = dataclasses.replace(cfg, suffix_corpus=None)

    def arm():
        with forgetting(proposer):
            traces = [run(c, target, proposer, on_step=on_step, telemetry=False) for c in cfg.every_prompt()]
        return tokens_per_s(traces), traces
    return arm


def warm_up(cfg: RunConfig, target, proposer, max_new_tokens: int = WARM_TOKENS) -> None:
    """One short run of ``cfg``'s first batch, so its shapes are allocated before timing (what a suffix
    draft learns in it is forgotten)."""
    with forgetting(proposer):
        run(dataclasses.replace(cfg, max_new_tokens=min(max_new_tokens, cfg.max_new_tokens), suffix_corpus=None),
            target, proposer, telemetry=False)


def peer_can_run(proposer) -> bool:
    """transformers' generate() takes a token draft model or prompt lookup, nothing else."""
    return getattr(proposer, "kind", None) in ("model", "ngram")


def peer_generate(target, proposer, cfg: RunConfig) -> float | None:
    """transformers' generate(assistant_model=...) at batch 1 (or prompt lookup for ngram) over
    every prompt of ``cfg``, greedy, k = cfg.draft_length: tokens/s (None for other drafts)."""
    import torch

    kwargs = {"max_new_tokens": cfg.max_new_tokens, "do_sample": False, "num_assistant_tokens": cfg.draft_length,
              "num_assistant_tokens_schedule": "constant", "temperature": None, "top_p": None, "top_k": None}
    if getattr(proposer, "kind", None) == "model":
        kwargs["assistant_model"] = proposer.model
    elif getattr(proposer, "kind", None) == "ngram":
        kwargs["prompt_lookup_num_tokens"] = cfg.draft_length
        kwargs.pop("num_assistant_tokens"), kwargs.pop("num_assistant_tokens_schedule")
    else:
        return None
    tokens, t = 0, 0.0
    for ids in encode_prompts(target.tokenizer, cfg.prompts, cfg.raw_prompt):
        x = torch.tensor([ids], device=target.device)  # [1, prompt_len]
        t0 = time.perf_counter()
        out = target.model.generate(x, attention_mask=torch.ones_like(x), pad_token_id=target.tokenizer.eos_token_id,
                                    **kwargs)  # [1, prompt_len + new]
        t += time.perf_counter() - t0
        tokens += out.shape[1] - x.shape[1]
    return tokens / t


def peer_arm(target, proposer, cfg: RunConfig) -> Arm:
    return lambda: (peer_generate(target, proposer, cfg), None)


def warm_up_peer(target, proposer, cfg: RunConfig) -> None:
    peer_generate(target, proposer, dataclasses.replace(cfg, prompts=cfg.prompts[:1],
                                                        max_new_tokens=min(WARM_TOKENS, cfg.max_new_tokens)))


def acceptance_rate(traces: list[dict]) -> float:
    """The acceptance rate over several traces' summaries (NaN when none drafted: regular decoding)."""
    return acceptance.acceptance_rate(sum(t["summary"]["accepted"] for t in traces),
                                      sum(t["summary"]["drafted"] for t in traces), empty=float("nan"))


@dataclasses.dataclass
class ArmResult:
    """One arm over the rounds: one entry per round in each list."""
    tok_s: list[float] = dataclasses.field(default_factory=list)
    ratio: list[float] = dataclasses.field(default_factory=list)  # to the same round's reference arm
    traces: list[list[dict] | None] = dataclasses.field(default_factory=list)

    @property
    def median_tok_s(self) -> float:
        return statistics.median(self.tok_s)

    @property
    def median_ratio(self) -> float:
        return statistics.median(self.ratio)

    @property
    def acceptance(self) -> float | None:
        """Median over rounds of the acceptance rate (None for a peer arm, which has no traces)."""
        if self.traces[-1] is None:
            return None
        return statistics.median(acceptance_rate(t) for t in self.traces)


def interleaved(arms: dict[str, Arm], rounds: int, reference: str = "regular",
                on_round: Callable[[int, dict[str, float]], None] | None = None,
                should_stop: Callable[[], bool] | None = None) -> dict[str, ArmResult]:
    """Run ``rounds`` rounds, each arm once per round in an order that rotates by one each round.
    ``on_round(r, {label: tokens/s})`` after each round; ``should_stop()`` is checked between
    rounds (the rounds done so far are kept)."""
    labels = list(arms)
    results = {lbl: ArmResult() for lbl in labels}
    for r in range(rounds):
        if r and should_stop is not None and should_stop():
            break
        got = {lbl: arms[lbl]() for lbl in labels[r % len(labels):] + labels[: r % len(labels)]}
        for lbl in labels:
            tok_s, traces = got[lbl]
            results[lbl].tok_s.append(tok_s)
            results[lbl].ratio.append(tok_s / got[reference][0])
            results[lbl].traces.append(traces)
        if on_round is not None:
            on_round(r, {lbl: got[lbl][0] for lbl in labels})
    return results


def outputs(traces: list[dict]) -> list[list[int]]:
    return [s["output_token_ids"] for t in traces for s in t["sequences"]]


def same_rows(traces: list[dict], reference: list[dict]) -> list[bool]:
    """Per row: the same output tokens as the reference arm's (greedy exactness)."""
    return [x == y for x, y in zip(outputs(traces), outputs(reference))]


@dataclasses.dataclass
class BenchResult:
    """``python -m specviz bench``: regular vs speculative (vs the transformers peer)."""
    cfg: RunConfig
    target: object
    proposer: object
    peer_proposer: object | None  # None: no peer arm ran
    arms: dict[str, ArmResult]
    summary: dict  # the speculative arm's last round, summarized (acceptance, phase times)
    identical: list[bool] | None  # greedy: per row, speculative output == regular output
    peer_note: str | None = None  # why the peer did not run, when it was asked for

    @property
    def peer_vs_ours(self) -> list[float]:
        """Per round: our speculative tokens/s over the peer's."""
        return [s / p for s, p in zip(self.arms["speculative"].tok_s, self.arms["peer"].tok_s)]


def bench(cfg: RunConfig, repeats: int = 3, peer: bool = True, peer_draft: str | None = None,
          on_step: Callable | None = None, on_round: Callable | None = None) -> BenchResult:
    """Load the pair and run regular, speculative and (at B = 1, greedy) transformers' peer,
    interleaved over ``repeats`` rounds. ``peer_draft``: the peer's draft when it differs from
    ours (transformers cannot run a feature draft)."""
    target, proposer = load_pair(dataclasses.replace(cfg, mode="speculative"))
    reg_cfg = dataclasses.replace(cfg, mode="regular")
    peer_proposer, note = None, None
    if peer and cfg.batch_size == 1 and cfg.temperature == 0:
        peer_proposer = make_proposer(peer_draft, target, cfg.draft_confidence) if peer_draft else proposer
        if not peer_can_run(peer_proposer):
            note = (f"no transformers peer: generate(assistant_model=...) cannot run a "
                    f"{getattr(peer_proposer, 'kind', '?')} draft (give --peer-draft a token draft to compare against)")
            peer_proposer = None
    warm_up(cfg, target, proposer)
    warm_up(reg_cfg, target, None)
    arms = {"regular": engine_arm(reg_cfg, target, None, on_step),
            "speculative": engine_arm(cfg, target, proposer, on_step)}
    if peer_proposer is not None:
        warm_up_peer(target, peer_proposer, cfg)
        arms["peer"] = peer_arm(target, peer_proposer, cfg)
    res = interleaved(arms, repeats, on_round=on_round)
    spec = res["speculative"].traces[-1]
    summary = summarize([st for t in spec for st in t["steps"]], [sq for t in spec for sq in t["sequences"]],
                        sum(t["summary"]["wall_s"] for t in spec), sum(t["summary"]["prefill_s"] for t in spec))
    # synthetic acceptance keeps drafted tokens the target would not emit: no exactness to report
    exact = cfg.temperature == 0 and cfg.synthetic_acceptance is None
    identical = same_rows(spec, res["regular"].traces[-1]) if exact else None
    return BenchResult(cfg, target, proposer, peer_proposer, res, summary, identical, note)
