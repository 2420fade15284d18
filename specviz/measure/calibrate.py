"""Cost-model calibration: time real forwards of the target and the draft over a grid of batch
size x tokens per row (with a cached prefix of realistic length), fit a roofline per model
(specviz.analysis.analytic.fit_cost_model), and measure the engine's per-step overhead from short real
runs. Results are cached per (model, dtype, device) so the app and the sweeps reuse them.

calibrate_synthetic does the same for random-weight models of a named shape (``synthetic:llama-7b``,
specviz.models.synthetic): their costs are real measurements, their acceptance means nothing, so
the record is cost-side only and its target name says synthetic.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from specviz.analysis.analytic import CostModel, fit_cost_model
from specviz.analysis.costs import FORMAT, Calibration, calibration_path, load_calibration  # noqa: F401
from specviz.measure.hostload import OtherLoad, load_warning
from specviz.common import SpecvizError, write_atomic
from specviz.engine.decoder import _sync
from specviz.engine.proposers import ModelDraft, NgramDraft
from specviz.models import synthetic
from specviz.models.loading import encode_prompts, resolve_device, resolve_dtype
from specviz.run import decoder_for_ids, load_pair
from specviz.engine.ragged import RaggedCache
from specviz.measure.calpartial import Points


def time_forward(loaded, b: int, n: int, prefix_len: int, repeats: int = 3) -> float:
    """Median seconds of one forward of n new tokens per row for b rows over a cached prefix."""
    V = loaded.model.config.vocab_size
    g = torch.Generator().manual_seed(b * 1000 + n)
    feature = getattr(loaded, "kind", "token") == "feature"  # a feature draft: its input projection is timed too
    kv = RaggedCache(loaded.model, keep_hidden=feature)

    @torch.inference_mode()
    def forward(ids, valid, last_only=False):
        if not feature:
            return kv.forward(ids, valid, last_only=last_only)
        from specviz.models.distilled import fused_input

        feats = torch.zeros(*ids.shape, loaded.model.config.hidden_size, device=loaded.device, dtype=loaded.dtype)
        return kv.forward(None, valid, last_only=last_only, inputs_embeds=fused_input(loaded.model, ids, feats))

    ids = torch.randint(0, V, (b, prefix_len), generator=g).to(loaded.device)
    forward(ids, torch.ones_like(ids, dtype=torch.bool), last_only=True)
    times = []
    new = torch.randint(0, V, (b, n), generator=g).to(loaded.device)
    valid = torch.ones_like(new, dtype=torch.bool)
    for _ in range(repeats + 1):  # the first one warms up this shape
        _sync(loaded.device)
        t = time.perf_counter()
        forward(new, valid)
        _sync(loaded.device)
        times.append(time.perf_counter() - t)
        kv.reject_tail(torch.zeros_like(valid))  # drop them again: the prefix stays the same length
    return statistics.median(times[1:])


def measure_grid(loaded, batch_sizes, tokens, prefix_len: int, repeats: int = 3, progress=None,
                 points=None, kind: str = "target") -> list[tuple]:
    """[(b, n, seconds)] over batch_sizes x tokens; with ``points`` (calpartial.Points) each is kept
    from an interrupted run or written as soon as it is measured."""
    samples = []
    for b in batch_sizes:
        for n in tokens:
            timer = lambda b=b, n=n: time_forward(loaded, b, n, prefix_len, repeats)  # noqa: E731
            samples.append((b, n, points.measure(kind, (b, n), timer) if points else timer()))
            if progress:
                progress()
    return samples


def _relative(samples, model: CostModel) -> list[float]:
    return [float((t - model(b, n)) / t) for b, n, t in samples]


OVERHEAD_TOKENS = 32  # tokens per short run that times the engine's overhead (12 gave 5 steps: too noisy a median)
REPEATS = 5  # timed forwards per grid point (their median): with 3, neighbouring points of a CPU grid differed by 10%


def measure_overhead(target, proposer, batch_sizes, draft_cost: CostModel, k: int = 2,
                     prompt: str = "Tell me a long story about a dragon.", points=None) -> dict:
    """The engine's own work per step, from short real runs at each batch size, as
    ``{b: (speculative step, regular step, per draft forward)}`` in seconds (medians over steps):

    - a speculative step's work outside every forward: accepting, rejecting, committing (its accept and
      bookkeeping phases);
    - a regular step's work outside its target forward (regular decoding at the same b);
    - what the draft loop adds to each draft forward: its draft phase over k, less the fitted draft
      forward (picking the token, feeding it back; for a draft without a model, the whole lookup).

    Each part is timed directly, not taken as the step's residual after the fitted forwards: the verify
    forward's run-to-run noise (a few ms on a CPU) swamped that residual. With ``points``
    (calpartial.Points) each batch size is kept or written as it is measured."""
    ids = encode_prompts(target.tokenizer, [prompt])[0]

    def middle(values: list[float]) -> float:
        """The median over steps but the first (it pays for the first shapes), never below 0."""
        return max(0.0, statistics.median(values[1:] or values)) if values else 0.0

    def at(b: int) -> list[float]:
        spec = list(decoder_for_ids(target, proposer, [ids] * b, k, OVERHEAD_TOKENS, prompts=[prompt] * b).steps())
        regular = list(decoder_for_ids(target, None, [ids] * b, 0, OVERHEAD_TOKENS, prompts=[prompt] * b).steps())
        return [middle([s.t_accept + s.t_bookkeeping for s in spec]),
                middle([s.t_draft + s.t_accept + s.t_bookkeeping for s in regular]),
                middle([(s.t_draft - s.k * draft_cost(s.batch_size, 1)) / s.k for s in spec if s.k > 0])]

    return {b: tuple(points.measure("overhead", b, lambda b=b: at(b)) if points else at(b)) for b in batch_sizes}


def calibrate(target, proposer, batch_sizes=(1, 2, 4, 8, 16), k_max: int = 8, prefix_len: int = 128,
              repeats: int = REPEATS, progress=None, note=None) -> Calibration:
    """Time the grid, fit, write the record. Each point is kept as it is measured (calpartial): on
    Ctrl-C / SIGTERM the KeyboardInterrupt leaves with ``.kept``, one line saying what stays where, and
    the next calibration of the same pair measures only the points left."""
    tokens = list(range(1, k_max + 2))
    draft_model, draft_name = getattr(proposer, "loaded", None), getattr(proposer, "name", "none")
    grid = {"target": [(b, n) for b in batch_sizes for n in tokens], "overhead": list(batch_sizes),
            "draft": [(b, n) for b in batch_sizes for n in (1, 2)] if draft_model is not None else []}
    points = Points(target, draft_name, grid, prefix_len, repeats, note)
    with OtherLoad("the calibration") as load:  # how busy other processes kept the machine meanwhile
        try:
            t_samples = measure_grid(target, batch_sizes, tokens, prefix_len, repeats, progress, points, "target")
            target_cost, _ = fit_cost_model(t_samples)
            if draft_model is not None:  # a draft model: it runs one token per row per draft step
                d_samples = measure_grid(draft_model, batch_sizes, [1, 2], prefix_len, repeats, progress, points, "draft")
                draft_cost, _ = fit_cost_model(d_samples)
            else:  # n-gram lookup: no model; its Python time lands in the measured overhead
                d_samples, draft_cost = [], CostModel(0.0, 0.0, 0.0)
            overhead = measure_overhead(target, proposer, batch_sizes, draft_cost, points=points)
        except KeyboardInterrupt as e:  # specviz.interrupts.Interrupted too: the caller says what was kept
            e.kept = points.kept_line()
            raise
    cal = Calibration(
        target=target.name, draft=draft_name, device=str(target.device),
        dtype=str(target.dtype).removeprefix("torch."), target_cost=target_cost, draft_cost=draft_cost,
        overhead={b: v[0] for b, v in overhead.items()}, regular_overhead={b: v[1] for b, v in overhead.items()},
        draft_overhead={b: v[2] for b, v in overhead.items()}, format=FORMAT,
        residuals={"target": _relative(t_samples, target_cost),
                                      "draft": _relative(d_samples, draft_cost) if d_samples else []},
        samples={"target": t_samples, "draft": d_samples},
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), other_load=load.cores, cpus=load.cpus)
    p = calibration_path(target.name, cal.draft, target.device, target.dtype)
    p.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(p, json.dumps(cal.to_json(), indent=1))  # a Ctrl-C here never leaves half a calibration
    points.finished()
    return cal


def summary_lines(cal: Calibration, path) -> list[str]:
    """What ``python -m specviz calibrate`` prints: the fits, their residuals, the overhead, the file."""
    tc, dc = cal.target_cost, cal.draft_cost
    lines = [f"target {cal.target} ({cal.dtype}, {cal.device}): t = {tc.t_fixed*1e3:.2f} ms + max({tc.t_mem*1e3:.2f} ms, "
             f"{tc.t_token*1e6:.1f} us x b x tokens); knee at {tc.knee_tokens:.0f} tokens",
             f"draft  {cal.draft}: t = {dc.t_fixed*1e3:.2f} ms + max({dc.t_mem*1e3:.2f} ms, {dc.t_token*1e6:.1f} us x b x tokens)"]
    for name, res in cal.residuals.items():
        if res:
            lines.append(f"{name} fit residuals: median |rel| {statistics.median(abs(r) for r in res):.3f}, "
                         f"max {max(abs(r) for r in res):.3f}")
    lines.append("engine overhead per speculative step: " + _per_batch(cal.overhead))
    if cal.regular_overhead:
        lines.append("engine overhead per regular step: " + _per_batch(cal.regular_overhead))
    if cal.draft_overhead:
        lines.append("draft loop's work per draft forward: " + _per_batch(cal.draft_overhead))
    warning = calibration_load_warning(cal)
    return lines + ([f"warning: {warning}"] if warning else []) + [f"written to {path}"]


def _per_batch(by_batch: dict) -> str:
    return ", ".join(f"B={b}: {v * 1e3:.2f} ms" for b, v in by_batch.items())


def calibration_load_warning(cal: Calibration) -> str | None:
    """A calibration measured beside other busy processes (older records have no number: None)."""
    return load_warning(cal.other_load, cal.cpus or 1, "the calibration")


def calibration_steps(proposer, batch_sizes, k_max: int) -> int:
    """How many grid points calibrate() times (its progress callback fires once per point)."""
    return len(batch_sizes) * (k_max + 1 + (2 if getattr(proposer, "loaded", None) is not None else 0))


def calibrate_config(cfg, batch_sizes, k_max: int = 8, prefix_len: int = 128, progress=None):
    """``python -m specviz calibrate``: load the pair of ``cfg`` and calibrate it. ``progress``:
    called once with the number of grid points, it returns the callback to tick per point.
    Returns (calibration, the file it was written to)."""
    cfg = dataclasses.replace(cfg, prompts=["calibration"])
    cfg.validate()
    target, proposer = load_pair(cfg)
    tick = progress(calibration_steps(proposer, batch_sizes, k_max)) if progress else None
    cal = calibrate(target, proposer, batch_sizes, k_max, prefix_len, progress=tick)
    return cal, calibration_path(target.name, cal.draft, target.device, target.dtype)


def calibrate_synthetic(target: str = "synthetic:llama-7b", draft: str = "synthetic:llama-160m", device: str = "auto",
                        dtype: str = "auto", batch_sizes=(1, 2, 4, 8, 16, 32, 64), k_max: int = 8,
                        prefix_len: int = 128, progress=None):
    """Cost-side calibration of a random-weight target (and a random-weight draft, or ``ngram``) built
    from a config on ``device`` (no weights to download: a bare GPU host can run it). The record is
    the same :class:`Calibration`, written where ``calibration_path`` says, named ``synthetic:...``.
    Returns (calibration, the file it was written to)."""
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    target_model = synthetic.build(target, dev, dt, seed=0)
    V = target_model.model.config.vocab_size
    if draft == "ngram":
        proposer = NgramDraft(max_ngram=3, device=dev)
    else:
        draft_model = synthetic.build(draft, dev, dt, seed=1)
        if draft_model.model.config.vocab_size != V:
            raise SpecvizError(f"{draft} has {draft_model.model.config.vocab_size} tokens, {target} has {V}: "
                               "pick a draft shape of the same vocabulary")
        proposer = ModelDraft(draft_model, vocab_size=V)
    tick = progress(calibration_steps(proposer, batch_sizes, k_max)) if progress else None
    cal = calibrate(target_model, proposer, batch_sizes, k_max, prefix_len, progress=tick)
    return cal, calibration_path(target_model.name, cal.draft, target_model.device, target_model.dtype)
