"""The device process's named jobs: everything the app does with torch, a model or the device.

The decode worker (specviz.device.worker) runs one job at a time: ``JOBS[name](ctx, **params)``.
A job reports as it goes through ``ctx`` (``ctx.send(kind, ...)`` for a run's records,
``ctx.report(item)`` for a result row, ``ctx.say(note)`` for progress), checks ``ctx.stopped()``
between units of work, and returns its result (plain data: it crosses a pipe to the Streamlit
server, which holds no torch). Only the worker imports this module.

    run           one Live run (optionally raced against regular decoding): its step records
    facts         a model's facts for the pages: name, size, dtype, device, its tokenizer (JSON)
    device        the device's facts: hardware_info, CUDA, cached peaks
    pair_problem  why a target/draft pair cannot run (incompatible tokenizers...), or None
    sweep         the Sweep page's grid (cells reported as they finish)
    exactness     both modes on the fp32 target, compared row by row with logit margins
    divergence    a speculative and a regular trace compared, with the target's margins
    distribution  the acceptance rule's chi-square test
    peaks         the device's peak copy bandwidth and matmul FLOP/s
    calibrate     a Live run's pair, calibrated on a short grid when no calibration of it stands
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import time
from typing import Callable

from specviz.common import SpecvizError

JOBS: dict[str, Callable] = {}


def job(name: str):
    def register(fn):
        JOBS[name] = fn
        return fn
    return register


# ---- a Live run --------------------------------------------------------------------------------------

def tokenizer_json(tok) -> str | None:
    """A fast tokenizer as the `tokenizers` library's JSON (the page decodes ids with it, no
    transformers or torch there); None for a tokenizer without one (the page shows ids)."""
    backend = getattr(tok, "backend_tokenizer", None)
    try:
        return backend.to_str() if backend is not None else None
    except Exception:
        return None


SESSIONS_KEPT = 16  # the suffix draft's global structures kept, one per (page session, target), oldest dropped
_corpora: collections.OrderedDict = collections.OrderedDict()


def session_corpus(session: str, target: str, fresh):
    """The suffix draft's global structure for this page session and target: what the session's earlier
    runs taught it (``fresh``, an empty one, the first time)."""
    key = (session, target)
    corpus = _corpora.pop(key, fresh)
    _corpora[key] = corpus
    while len(_corpora) > SESSIONS_KEPT:
        _corpora.popitem(last=False)
    return corpus


@job("run")
def run(ctx, cfg, race: bool = False, session: str | None = None, loader: Callable | None = None,
        runner: Callable | None = None):
    """The run's records as it goes: "tokenizer", "start", a "step" per step, "trace" (and
    "regular_trace" when raced). A suffix draft keeps learning across the runs of one page ``session``.
    ``loader``/``runner`` default to specviz.run's (fakes in tests: see specviz.device.worker's
    SPECVIZ_WORKER_JOBS)."""
    from specviz.run import iter_run, load_pair

    loader, runner = loader or load_pair, runner or iter_run
    ctx.send("status", "loading")
    target, proposer = loader(cfg)
    if session is not None and hasattr(proposer, "corpus"):  # a suffix draft or a hybrid
        proposer.corpus = session_corpus(session, target.name, proposer.corpus)
    ctx.send("tokenizer", target.name, tokenizer_json(target.tokenizer))
    if ctx.stopped():
        return None
    ctx.send("status", "running")
    if cfg.compile:  # its first step of each shape compiles the layers: the page says so until steps come
        from specviz.models.compiled import NOTICE

        ctx.send("say", NOTICE)
    if race:
        _warm_up(runner, cfg, target, proposer)
    ctx.send("trace", _decode(ctx, runner, cfg, target, proposer, record=True))
    if race and not ctx.stopped():
        ctx.send("status", "racing")
        ctx.send("regular_trace", _decode(ctx, runner, dataclasses.replace(cfg, mode="regular"), target, None,
                                          record=False))
    return None


def _warm_up(runner, cfg, target, proposer) -> None:
    """A few tokens of each side of a race on its first batch, untimed, so neither timed run pays for the first
    forwards of its shapes (buffers, the CPU's kernel choice): without it the speculative run, which goes
    first, paid them alone, and a short winning run read as a loss (1.02x on the page where the same run
    from the CLI, warmed, gives 3x). What a suffix draft learns here is forgotten."""
    from specviz.measure.bench import WARM_TOKENS, forgetting

    short = dataclasses.replace(cfg, prompts=cfg.prompts[: cfg.batch_size], requests=None, arrival_rate=0.0,
                                max_new_tokens=min(WARM_TOKENS, cfg.max_new_tokens), suffix_corpus=None)
    with forgetting(proposer):
        for c, p in ((short, proposer), (dataclasses.replace(short, mode="regular"), None)):
            for _ in runner(c, target, p):
                pass


def _decode(ctx, runner, cfg, target, proposer, record: bool) -> dict:
    """One run, its steps sent as they come; the trace with ``host_load``: how many cores processes other
    than this one and the server that shows it kept busy meanwhile (specviz.measure.hostload)."""
    from specviz.measure.hostload import OtherLoad

    with OtherLoad("this run", also=(os.getppid(),)) as load:
        trace = _steps(ctx, runner, cfg, target, proposer, record)
    if trace is not None:
        trace["host_load"] = {"other_cores": load.cores, "cpus": load.cpus}
    return trace


def _steps(ctx, runner, cfg, target, proposer, record: bool) -> dict:
    trace, started, n_samples = None, False, 0
    for session, rec in runner(cfg, target, proposer):
        if rec is None:
            trace = session.trace
            continue
        if ctx.stopped():
            session.stop()
        if not record:
            continue
        dec = session.decoder
        if not started:
            started = True
            ctx.send("start", [(r.index, r.prompt, list(r.prompt_ids)) for r in dec.rows], dec.prefill_s)
        samples = list(session.samples[n_samples:])
        n_samples += len(samples)
        # the step's record carries each row's new output tokens (its rows' "emitted"): sent once
        ctx.send("step", rec, {r.index: r.finish_reason for r in dec.rows if r.finish_reason},
                 time.perf_counter() - dec.t0, samples)
    return trace


# ---- facts the pages show ----------------------------------------------------------------------------

@job("facts")
def facts(ctx, target: str, device: str, dtype: str) -> dict:
    """What the pages say about a model (loaded in this process's model cache)."""
    from specviz.run import get_model

    m = get_model(target, device, dtype)
    tok = m.tokenizer
    try:
        vocab = len(tok)
    except TypeError:
        vocab = None
    return {"name": m.name, "num_params": m.num_params, "weight_bytes": m.weight_bytes,
            "dtype": str(m.dtype).removeprefix("torch."), "device": str(m.device), "vocab_size": vocab,
            "tokenizer_json": tokenizer_json(tok)}


@job("device")
def device_facts(ctx, device: str, dtype: str) -> dict:
    """The device's facts: hardware_info (with cached peaks), whether CUDA and Triton are here,
    and the resolved device and dtype (or why they do not resolve)."""
    import importlib.util

    import torch

    from specviz.models.loading import resolve_device, resolve_dtype
    from specviz.run import hardware_info
    from specviz.telemetry import cached_peaks

    problem = None
    try:
        dev = resolve_device(device)
        dt = resolve_dtype(dtype, dev)
    except SpecvizError as e:
        problem, dev, dt = str(e), torch.device("cpu"), torch.float32
    return {"info": hardware_info(dev, dt), "device": str(dev), "dtype": str(dt).removeprefix("torch."),
            "problem": problem, "cuda": torch.cuda.is_available(),
            "triton": importlib.util.find_spec("triton") is not None, "peaks": cached_peaks(dev)}


@job("pair_problem")
def pair_problem(ctx, target: str, draft: str, device: str, dtype: str) -> str | None:
    from specviz.run import get_model, make_proposer

    try:
        make_proposer(draft, get_model(target, device, dtype))
    except SpecvizError as e:
        return str(e)
    return None


# ---- the measuring pages' jobs -----------------------------------------------------------------------

@job("sweep")
def sweep(ctx, cfg, sizes: list[int], lengths: list[int], repeats: int) -> dict:
    """``python -m specviz sweep``'s own function: the cached calibration or a new one, then every
    cell interleaved regular / speculative, each cell reported as it finishes."""
    from specviz.measure.sweep import sweep_config

    rows, summary, _, config = sweep_config(cfg, sizes, lengths, repeats, on_cell=ctx.report,
                                            should_stop=ctx.stopped, note=ctx.say)
    return {"rows": rows, "summary": summary, "config": config}


@job("exactness")
def exactness(ctx, cfg) -> list[dict]:
    """Both modes on the fp32 target: the rows of analysis.divergence.divergence_rows, with margins."""
    from specviz.measure.correctness import divergence_rows, refuse_synthetic
    from specviz.run import get_model, make_proposer, run as run_to_end

    refuse_synthetic(cfg.to_trace_config())  # before minutes of decoding that could show nothing
    ctx.say("loading the fp32 target…")
    target = get_model(cfg.target, cfg.device, "float32")
    ctx.say("speculative run…")
    spec = run_to_end(cfg, target, make_proposer(cfg.draft, target), telemetry=False)
    if ctx.stopped():
        return []
    ctx.say("regular run…")
    regular = run_to_end(dataclasses.replace(cfg, mode="regular"), target, None, telemetry=False)
    return divergence_rows(spec, regular, target)


@job("divergence")
def divergence(ctx, spec: dict, regular: dict, target: str, device: str, dtype: str) -> list[dict]:
    from specviz.measure.correctness import divergence_rows
    from specviz.run import get_model

    return divergence_rows(spec, regular, get_model(target, device, dtype))


@job("distribution")
def distribution(ctx, n: int, temperature: float, seed: int) -> dict:
    from specviz.measure.correctness import acceptance_distribution_check

    return acceptance_distribution_check(n=n, temperature=temperature, seed=seed)


@job("peaks")
def peaks(ctx, device: str) -> dict:
    from specviz import telemetry
    from specviz.models.loading import resolve_device

    ctx.say("measuring a large copy and a matmul…")
    return telemetry.measure_peaks(resolve_device(device))


@job("calibrate")
def calibrate(ctx, cfg, cache: str | None = None, force: bool = False, grid: tuple | None = None) -> dict:
    """specviz.measure.quickcal.first_run_calibration: the short calibration of a Live run's pair (the
    calibrate command's own function on a small grid), kept or refreshed in the calibration cache.
    ``cache``: the folder the Streamlit server reads calibrations from (its specviz.common.cache_dir()):
    the record is written there even when this process was started with another $SPECVIZ_CACHE."""
    from specviz.measure.quickcal import first_run_calibration
    from specviz.run import load_pair

    ctx.say("loading the model pair…")
    load_pair(cfg)  # from this process's own cache (its models stay where they are), before the record's folder is set
    with _cache_at(cache):
        return first_run_calibration(cfg, should_stop=ctx.stopped, note=ctx.say, force=force,
                                     grid=(list(grid[0]), int(grid[1])) if grid else None)


@contextlib.contextmanager
def _cache_at(root: str | None):
    """$SPECVIZ_CACHE set to ``root`` for the block (unchanged for None): specviz.common.cache_dir() reads it."""
    if root is None:
        yield
        return
    before = os.environ.get("SPECVIZ_CACHE")
    os.environ["SPECVIZ_CACHE"] = root
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("SPECVIZ_CACHE", None)
        else:
            os.environ["SPECVIZ_CACHE"] = before
