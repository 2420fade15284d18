"""One run, end to end: validate the config, load the pair, encode prompts, drive the engine,
and assemble the trace. Shared by the CLI, the app and the benchmarks."""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import torch

from specviz.engine.policies import COST_AWARE, UNCALIBRATED, make_policy
from specviz.models.distilled import get_distilled_draft, is_distilled_draft
from specviz.engine.proposers import FeatureDraft, ModelDraft, NgramDraft, reach
from specviz.engine.suffix import SuffixDraft
from specviz.engine.hybrid import SUFFIX_FACTOR, HybridDraft
from specviz.engine.decoder import SpecDecoder
from specviz.bounds import hybrid_parts
from specviz.common import SpecvizError
from specviz.models.devicemap import placement
from specviz.models.forwardoptions import ForwardOptions
from specviz.models.loading import (check_tokenizers_agree, check_vocab_fits, encode_prompts, get_model, resolve_device,
                                    resolve_dtype)
from specviz.engine.sampling import SamplingParams
from specviz.analysis.trace import TraceBuilder, sequence_record
from specviz.records import Step
from specviz.prompts.files import read_prompts  # noqa: F401  (re-exported for the CLI)
from specviz.prompts.fit import check_fits, context_length

def trace_config(cfg: RunConfig, target=None, proposer=None) -> dict:
    """The trace's "config": the run's settings (RunConfig.to_trace_config) and what the loaded
    pair adds: the resolved device and dtype, the models' names, layers and sizes."""
    d = cfg.to_trace_config()
    if proposer is None:  # regular decoding (a race's partner too) drafts nothing: the real rule, the target's text
        d.pop("synthetic_acceptance", None)
    if cfg.device_map != "none" and target is not None and getattr(target, "device_map", None):
        d["device_map"] = placement(target.device_map)
    if target is not None:
        d["dtype"] = str(target.dtype).removeprefix("torch.")
        d["device"] = str(target.device)
        d["target_name"] = target.name
        d.update({f"target_{k}": v for k, v in _model_facts(target).items()})
    if proposer is not None:
        d["draft_name"] = proposer.name
        if hasattr(proposer, "corpus"):  # a suffix draft's global structure (or a hybrid's): what it held at the start
            d["suffix_corpus_tokens"] = proposer.corpus.tokens
            d["suffix_corpus_requests"] = proposer.corpus.requests
        d.update({f"draft_{k}": v for k, v in _model_facts(getattr(proposer, "loaded", None), target).items()})
    return d


def _model_facts(loaded, shares_with=None) -> dict:
    """Layers and parameters of a loaded model, for the page's "what is this draft" line;
    ``own_params`` leaves out tensors it shares with ``shares_with`` (a distilled draft reuses
    the target's embedding)."""
    if loaded is None or not hasattr(loaded, "model"):
        return {}
    layers = getattr(getattr(loaded.model, "config", None), "num_hidden_layers", None)
    shared = {p.data_ptr() for p in shares_with.model.parameters()} if shares_with is not None else set()
    own = sum(p.numel() for p in loaded.model.parameters() if p.data_ptr() not in shared)
    return {"layers": layers, "params": loaded.num_params, "own_params": own}


# The distilled draft shipped for the packaged target (specviz distill on an H200; its README has
# the command, data and held-out metrics).
DEFAULT_DRAFT_DIR = Path(__file__).resolve().parent / "assets" / "draft-SmolLM2-135M-Instruct"
# A feature draft (EAGLE-style) for the packaged target: accepts more on free-form chat, not the default
# (its README says why)
FEATURE_DRAFT_DIR = DEFAULT_DRAFT_DIR.parent / "feature-draft-SmolLM2-135M-Instruct"
# The same with a second layer and a 24,576-token map, trained on natural prompts and Python docs: accepts most
# on free-form chat (0.52 at k = 1) and covers 98.6% of its tokens, but its wider head costs more than that
# returns on this CPU (its README), so not `default`
FEATURE2_DRAFT_DIR = DEFAULT_DRAFT_DIR.parent / "feature-draft-2l-SmolLM2-135M-Instruct"


def resolve_draft_spec(draft: str, target) -> str:
    """`default` draft: the best cheap draft measured so far for this target (BENCHMARKS.md).

    - packaged target in bf16/fp16: the shipped distilled draft (2 layers, c ~ 0.09; 1.15-1.33x
      at B = 1 on chat prompts, n-grams 1.26x);
    - a target in float32: its own weights in bfloat16 (acceptance ~0.97 at about half the cost);
    - otherwise prompt-lookup n-grams.
    """
    if parts := hybrid_parts(draft):  # the hybrid: its model part resolved so
        return resolve_draft_spec(parts[0], target) + draft[len(parts[0]):]
    if draft != "default":
        return draft
    if target.dtype == torch.float32:
        return "default@bf16"
    if target.spec == "default" and (DEFAULT_DRAFT_DIR / "model.safetensors").is_file():
        return str(DEFAULT_DRAFT_DIR)
    return "ngram"


def forward_options(cfg: RunConfig) -> ForwardOptions:
    """How this run's forwards execute (its CUDA-graph and compile switches over the environment's defaults)."""
    return ForwardOptions.from_env(cuda_graphs=cfg.cuda_graphs, compile=cfg.compile)


def make_proposer(draft: str, target, stop_below: float = 0.0, options: ForwardOptions | None = None):
    spec = resolve_draft_spec(draft, target)
    if spec == "none":
        return None
    if spec == "ngram" or spec.startswith("ngram:"):
        n = int(spec.partition(":")[2] or 3)
        return NgramDraft(max_ngram=n, device=target.device)
    if spec == "suffix":
        return SuffixDraft(device=target.device)
    if parts := hybrid_parts(spec):
        model = make_proposer(parts[0], target, stop_below, options)
        if getattr(model, "kind", None) != "model":
            raise SpecvizError(f"--draft {spec}: the part before '+suffix' resolves to {model.name if model else 'none'} "
                               f"for {target.name} in {str(target.dtype).removeprefix('torch.')}; MODEL+suffix wants a "
                               "model draft there (a token draft: a model SPEC or a distilled draft folder)")
        return HybridDraft(model, SuffixDraft(device=target.device, factor=SUFFIX_FACTOR), suffix_depth=parts[1])
    if spec == "default@bf16":
        loaded = get_model("default", str(target.device), "bfloat16")
    elif is_distilled_draft(spec):  # shares the target's input embedding, runs in the target's dtype
        loaded = get_distilled_draft(spec, target)
    else:
        loaded = get_model(spec, str(target.device), str(target.dtype).removeprefix("torch."))
    check_tokenizers_agree(target.tokenizer, loaded.tokenizer)
    check_vocab_fits(target, loaded)
    if getattr(loaded, "kind", "token") == "feature":
        return FeatureDraft(loaded, vocab_size=target.model.config.vocab_size, stop_below=stop_below, options=options)
    return ModelDraft(loaded, vocab_size=target.model.config.vocab_size, stop_below=stop_below, options=options)


def load_pair(cfg: RunConfig):
    target = get_model(cfg.target, cfg.device, cfg.dtype, cfg.device_map)
    proposer = None if cfg.mode == "regular" else make_proposer(cfg.draft, target, cfg.draft_confidence,
                                                                forward_options(cfg))
    corpus = Path(cfg.suffix_corpus).expanduser() if cfg.suffix_corpus else None
    if corpus is not None and corpus.is_file() and hasattr(proposer, "load_corpus"):  # a suffix draft or a hybrid
        proposer.load_corpus(corpus, target.name, target.model.config.vocab_size)
    return target, proposer


def save_suffix_corpus(cfg: RunConfig, target, proposer) -> Path | None:
    """--suffix-corpus: the suffix draft's global structure after the run, written whole; None without one."""
    if not cfg.suffix_corpus or not hasattr(proposer, "save_corpus"):
        return None
    try:
        return proposer.save_corpus(Path(cfg.suffix_corpus).expanduser(), target.name)
    except OSError as e:
        raise SpecvizError(f"cannot write the suffix corpus {cfg.suffix_corpus}: {e.strerror or e}") from None


def hardware_info(device: torch.device, dtype: torch.dtype) -> dict:
    info = {"device": str(device), "dtype": str(dtype).removeprefix("torch."), "torch": str(torch.__version__),
            "cpu_count": os.cpu_count(), "platform": platform.platform()}
    if device.type == "cuda":
        info["device_name"] = torch.cuda.get_device_name(device)
    else:
        name = platform.processor()
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
        info["device_name"] = name or "cpu"
    try:
        from specviz.telemetry import cached_peaks  # optional: peak figures measured once per device

        info.update(cached_peaks(device, dtype) or {})
    except Exception:
        pass
    return info


# ---- running ---------------------------------------------------------------------------------

def make_decoder(cfg: RunConfig, target, proposer, accept_fn=None) -> SpecDecoder:
    prompts = cfg.request_prompts()
    ids = encode_prompts(target.tokenizer, prompts, cfg.raw_prompt)
    k = cfg.draft_length if proposer is not None else 0
    # the CLI checks this before loading (specviz.checks); here for the app, a hub id, a .gguf
    context = context_length(getattr(target.model, "config", None))
    check_fits([len(x) for x in ids], cfg.max_new_tokens, reach(proposer, k), context, target.name)
    cargs = dict(cfg.policy_args)
    policy_name = cfg.policy if proposer is not None else "fixed"
    if getattr(proposer, "kind", None) == "suffix":
        proposer.costs = None  # a draft kept across runs (the app's) sizes by goodput only when this run asks
        if cfg.policy in COST_AWARE:
            from specviz.analysis.costs import target_cost

            # a model-free draft: drafting costs nothing, so k is the cap and the batch's node count is chosen
            # each step by goodput from the target's cost (specviz.engine.suffix)
            proposer.costs, policy_name = target_cost(target), "fixed"
            if proposer.costs is None:
                import warnings

                warnings.warn(f"policy {cfg.policy!r}: no calibration of {target.name} on {target.device} "
                              f"({target.dtype}); the suffix draft drafts to k until `python -m specviz calibrate` "
                              "runs for a pair with this target", stacklevel=2)
    elif cfg.policy in COST_AWARE and proposer is not None and "costs" not in cargs:
        from specviz.analysis.costs import load_calibration, partial_note

        cal = load_calibration(target, proposer)
        if cal is not None:
            cargs["costs"] = cal.costs(cfg.batch_size)
        else:
            import warnings

            partial = partial_note(target, proposer)  # an interrupted calibration's points are no cost model
            how = UNCALIBRATED.get(cfg.policy, UNCALIBRATED["k"])
            warnings.warn(f"policy {cfg.policy!r}: no calibration for {target.name} + {proposer.name} on "
                          f"{target.device} ({target.dtype}); it picks {how} "
                          f"until `python -m specviz calibrate` runs for this pair" + (f" ({partial})" if partial else ""),
                          stacklevel=2)
    shapes = cfg.policy == "tree"  # (k, W, N) per step, bounded by --draft-length and the tree flags
    if shapes:
        cargs = {"w_max": cfg.tree_width, "n_max": cfg.tree_nodes, **cargs}
    policy = make_policy(policy_name, k, **cargs)
    tree = None
    if (cfg.tree_width > 1 or shapes) and proposer is not None:
        if not hasattr(proposer, "propose_tree"):
            flag = "--policy tree" if shapes else f"--tree-width {cfg.tree_width}"
            raise SpecvizError(f"{flag} needs a draft that grows trees (a model draft or ngram); "
                               f"{proposer.name} drafts chains only: use " + ("another --policy" if shapes else "--tree-width 1"))
        from specviz.engine.step import TreeShape

        tree = TreeShape(cfg.tree_width, cfg.tree_nodes)
    return decoder_for_ids(target, proposer, ids, k, cfg.max_new_tokens,
                           SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p), cfg.seed, prompts=prompts,
                           policy=policy, accept_fn=accept_fn, lanes=cfg.batch_size,
                           arrivals=cfg.arrivals(), refill=not cfg.static, tree=tree, options=forward_options(cfg),
                           synthetic=cfg.synthetic_acceptance if proposer is not None else None)


def decoder_for_ids(target, proposer, prompt_ids: list[list[int]], k: int, max_new_tokens: int,
                    params: SamplingParams | None = None, seed: int = 0, prompts: list[str] | None = None,
                    policy=None, accept_fn=None, keep_hidden: bool = False, lanes: int | None = None,
                    arrivals: list[float] | None = None, refill: bool = True, tree=None,
                    options: ForwardOptions | None = None, synthetic: float | None = None,
                    walk_lines: bool = False) -> SpecDecoder:
    """The one place a SpecDecoder is built: over already-encoded prompts (measurements, data
    generation, exactness checks), with a fixed draft length k unless a policy is given; regular
    decoding when there is no proposer or k = 0. ``lanes`` concurrent rows serve the prompts as
    a request queue (None: one row per prompt, a static batch); ``refill=False`` runs them as
    consecutive static batches; ``arrivals`` are seconds after the start (None: all at 0); ``tree``
    (engine.step.TreeShape) makes every row draft a token tree; ``options`` say how the target's
    forwards run (None: the environment's defaults); ``synthetic`` (an alpha) replaces the acceptance
    rule by a seeded Bernoulli(alpha) per drafted position: the output is then not the target's text;
    ``walk_lines`` sends chains through the tree's verify and walk, not their fast forms (engine.step)."""
    if policy is None:
        k = k if proposer is not None else 0
        proposer = proposer if k else None
        policy = make_policy("fixed", k)
    kwargs = {"accept_fn": accept_fn} if accept_fn is not None else {}
    return SpecDecoder(target, proposer, policy, prompts if prompts is not None else [""] * len(prompt_ids),
                       prompt_ids, params or SamplingParams(), max_new_tokens, seed, keep_hidden=keep_hidden,
                       lanes=lanes, arrivals=arrivals, refill=refill, tree=tree, options=options,
                       synthetic=synthetic if proposer is not None else None, walk_lines=walk_lines, **kwargs)


@dataclasses.dataclass
class RunSession:
    """One run of :func:`iter_run`: what it owns besides the decoder (its trace so far, telemetry and
    clock), so nothing is attached to the decoder from outside."""

    cfg: RunConfig
    target: object  # specviz.models.loading.LoadedModel
    proposer: object  # a specviz.engine.proposers proposer, or None
    decoder: SpecDecoder
    builder: TraceBuilder  # the steps so far
    sampler: object | None  # specviz.telemetry.Sampler, or None without telemetry
    t_started: float  # perf_counter when the run started
    trace: dict | None = None  # the finished trace, once the run has ended (or was interrupted)

    def stop(self) -> None:
        """End after the current step; rows left are "stopped"."""
        self.decoder.stop()

    @property
    def samples(self) -> list:
        return self.sampler.samples if self.sampler is not None else []

    def trace_so_far(self, wall: float | None = None) -> dict:
        """The trace of the finished steps: at the end of a run, or after an interruption that left
        before iter_run could build it."""
        wall = wall if wall is not None else time.perf_counter() - self.t_started
        return self.builder.final([sequence_record(r, self.target.tokenizer) for r in self.decoder.rows], self.samples,
                                  wall, self.decoder.prefill_s)


def iter_run(cfg: RunConfig, target, proposer, telemetry: bool = True,
             accept_fn=None) -> Iterator[tuple[RunSession, Step | None]]:
    """Yield (session, step record) per step, then (session, None) with session.trace set.
    ``cfg`` was validated where it was made (RunConfig.validate: the CLI, a page, a script)."""
    dec = make_decoder(cfg, target, proposer, accept_fn)
    sampler = _start_telemetry(target.device) if telemetry else None  # pages read its samples while the run goes
    session = RunSession(cfg, target, proposer, dec, TraceBuilder(trace_config(cfg, target, proposer),
                                                                   hardware_info(target.device, target.dtype)),
                         sampler, time.perf_counter())
    try:
        for rec in dec.steps():
            if sampler is not None and not session.builder.steps:
                sampler.rebase(dec.t0)  # sample times on the engine's clock (step t_start), also mid-run
            session.builder.add(rec)
            yield session, rec
    finally:
        if sampler is not None:
            sampler.stop()
        session.trace = session.trace_so_far(time.perf_counter() - session.t_started)
        save_suffix_corpus(cfg, target, proposer)  # what the finished requests taught it, stopped runs too
    yield session, None


def run(cfg: RunConfig, target=None, proposer=None, on_step: Callable | None = None, telemetry: bool = True,
        accept_fn=None) -> dict:
    """Run to completion and return the trace. Loads the pair if not given. ``on_step(session, step)``
    is called after every step. ``cfg`` was validated where it was made."""
    if target is None:
        target, proposer = load_pair(cfg)
    session, steps = None, iter_run(cfg, target, proposer, telemetry, accept_fn)
    try:
        for session, rec in steps:
            if rec is not None and on_step is not None:
                on_step(session, rec)
    finally:  # interrupted (a second Ctrl-C): iter_run's own finally builds session.trace of the finished steps now
        steps.close()
    return session.trace


def _start_telemetry(device):
    try:
        from specviz.telemetry import Sampler
    except ImportError:
        return None
    try:
        s = Sampler(device=device)
        s.start()
        return s
    except Exception:
        return None
