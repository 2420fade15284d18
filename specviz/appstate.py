"""App-side state without Streamlit: a run worker thread, snapshots of a run in progress,
the shared model lock, and the session keys the pages agree on.

A :class:`LiveRun` drives :func:`specviz.runner.iter_run` in a background thread (it never
touches Streamlit) and publishes what the page needs: the step records so far, the rows'
outputs, telemetry samples, then the finished trace. The page polls it. Holding the model
lock for the whole run means two browser sessions never decode on one model at once: the
second run waits in state "queued".
"""

from __future__ import annotations

import dataclasses
import threading
import time
import traceback
from functools import lru_cache

from .models import SpecvizError
from .runner import RunConfig, iter_run, load_pair
from .trace import summarize

# Session keys shared by app.py and the pages (sidebar widgets write them).
SIDEBAR_DEFAULTS = {"target": "default", "draft_kind": "default", "draft_spec": "", "device": "auto", "dtype": "auto"}
TRACE_KEY = "trace"  # the trace every page shows: the last run, or an uploaded one
TRACE_SOURCE_KEY = "trace_source"
RUN_KEY = "live_run"

RUNNING = ("queued", "loading", "running", "racing")


def draft_spec(state) -> str:
    """The draft SPEC from the sidebar: default, ngram, none, or a model SPEC."""
    kind = state.get("draft_kind", "default")
    if kind == "model":
        return (state.get("draft_spec") or "").strip()
    return kind


def sidebar_values(state) -> dict:
    return {k: state.get(k, v) for k, v in SIDEBAR_DEFAULTS.items()}


def oom_message(b: int, k: int) -> str:
    return (f"out of memory at batch size {b}, draft length {k}: memory was freed; "
            "try a smaller batch size or draft length (or fewer max new tokens)")


def free_device_memory() -> None:
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def error_message(e: BaseException, cfg: RunConfig) -> str:
    """One clear sentence for a failure of a run."""
    import torch

    if isinstance(e, SpecvizError):
        return str(e)
    if isinstance(e, torch.OutOfMemoryError) or "out of memory" in str(e).lower():
        free_device_memory()
        return oom_message(cfg.batch_size, cfg.draft_length)
    return f"{type(e).__name__}: {e}"


# ---- decode: token ids -> text, memoised per tokenizer -------------------------------------------

@lru_cache(maxsize=8)
def _decoder(tokenizer):
    @lru_cache(maxsize=200_000)
    def one(t: int) -> str:
        return tokenizer.decode([t], skip_special_tokens=False)

    def decode(ids: list[int]) -> str:
        return "".join(one(int(t)) for t in ids)

    return decode


def decoder_for(tokenizer):
    """A fast ``decode(ids) -> str`` (token by token, memoised); None without a tokenizer."""
    if tokenizer is None or not hasattr(tokenizer, "decode"):
        return None
    try:
        return _decoder(tokenizer)
    except TypeError:  # unhashable tokenizer
        return lambda ids: tokenizer.decode(list(ids))


# ---- the run worker ------------------------------------------------------------------------------

@dataclasses.dataclass
class LiveRun:
    """One run (optionally raced against regular decoding) in a worker thread."""

    cfg: RunConfig
    lock: threading.Lock  # the model lock shared by every session
    race: bool = False
    status: str = "queued"  # queued | loading | running | racing | done | stopped | error
    error: str | None = None
    steps: list = dataclasses.field(default_factory=list)  # step records so far (speculative run)
    trace: dict | None = None  # the finished (or stopped) speculative run
    regular_trace: dict | None = None  # the race partner, mode="regular"
    tokenizer: object = None
    started: float = dataclasses.field(default_factory=time.perf_counter)
    notes: list = dataclasses.field(default_factory=list)
    _dec: object = None
    _sampler: object = None
    _stop: bool = False
    _thread: threading.Thread | None = None

    # -- control (called from the page) --
    def start(self) -> "LiveRun":
        self._thread = threading.Thread(target=self._work, name="specviz-run", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop after the current step; unfinished rows end as "stopped", output is kept."""
        self._stop = True
        if self._dec is not None:
            self._dec.stop()

    @property
    def running(self) -> bool:
        return self.status in RUNNING

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    # -- the worker (never calls Streamlit) --
    def _work(self) -> None:
        acquired = False
        try:
            while not self.lock.acquire(timeout=0.2):
                if self._stop:
                    self.status = "stopped"
                    return
            acquired = True
            self.status = "loading"
            self.cfg.validate()
            target, proposer = load_pair(self.cfg)
            self.tokenizer = target.tokenizer
            if self._stop:
                self.status = "stopped"
                return
            self.status = "running"
            self.trace = self._decode(self.cfg, target, proposer, record=True)
            if self.race and not self._stop:
                self.status = "racing"
                reg = dataclasses.replace(self.cfg, mode="regular")
                self.regular_trace = self._decode(reg, target, None, record=False)
            self.status = "stopped" if self._stop else "done"
        except BaseException as e:  # shown in the page; the app keeps working
            if self.trace is None and self._dec is not None and self.steps:
                self.trace = self.snapshot()  # partial output stays visible
            self._dec = None  # drop the decoder's caches before freeing memory
            if not isinstance(e, SpecvizError):
                self.notes.append(traceback.format_exc(limit=3))
            self.error = error_message(e, self.cfg)
            self.status = "error"
        finally:
            self._dec = None
            if acquired:
                self.lock.release()

    def _decode(self, cfg: RunConfig, target, proposer, record: bool) -> dict:
        trace = None
        for dec, rec in iter_run(cfg, target, proposer):  # its sampler runs on the engine's clock
            if self._dec is not dec:
                self._dec = dec
                if record:
                    self._sampler = dec.sampler
                if self._stop:
                    dec.stop()
            if rec is None:
                trace = dec.trace
            elif record:
                self.steps.append(rec)
        return trace

    # -- what the page reads --
    def snapshot(self) -> dict:
        """A trace-shaped dict of the run so far (the finished trace once there is one)."""
        if self.trace is not None:
            return self.trace
        dec = self._dec
        steps = list(self.steps)
        seqs = []
        if dec is not None:
            for r in dec.rows:
                out = list(r.output)
                seqs.append({"index": r.index, "prompt": r.prompt, "prompt_token_ids": r.prompt_ids,
                             "output_token_ids": out, "text": None, "finish_reason": r.finish_reason})
        wall = time.perf_counter() - dec.t0 if dec is not None and dec.t0 else 0.0
        prefill = dec.prefill_s if dec is not None else 0.0
        return {"version": 1, "config": self.cfg.to_trace_config(), "hardware": {}, "sequences": seqs,
                "steps": steps, "telemetry": self._sampler.samples if self._sampler is not None else [],
                "summary": summarize(steps, seqs, max(wall, prefill), prefill), "partial": True}


def start_run(cfg: RunConfig, lock: threading.Lock, race: bool = False) -> LiveRun:
    return LiveRun(cfg=cfg, lock=lock, race=race).start()


# ---- the analytic model, if present ------------------------------------------------------------

def analytic_module():
    try:
        from . import analytic

        return analytic
    except Exception:
        return None


def load_calibration(batch_size: int = 1):
    """Fitted costs (analytic.Costs) from the newest `python -m specviz calibrate` result for the
    device in use, else None ("not calibrated yet")."""
    import json

    from .calibrate import Calibration, calibration_path

    folder = calibration_path("x", "x", "x", "x").parent
    files = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True) if folder.is_dir() else []
    for f in files:
        try:
            return Calibration.from_json(json.loads(f.read_text())).costs(batch_size)
        except (ValueError, KeyError, TypeError, OSError):
            continue
    return None


def alpha_from_trace(trace: dict) -> float | None:
    """Per-position acceptance alpha (successes / trials, as the analytic model assumes)."""
    succ = trials = 0
    for s in trace.get("steps", []):
        for r in s["rows"]:
            if r["active"] and r["drafted"] > 0:
                succ += r["accepted"]
                trials += r["accepted"] + (1 if r["accepted"] < r["drafted"] else 0)
    return succ / trials if trials else None


def predicted_speedup(trace: dict, costs=None, cost_ratio: float = 0.05) -> float | None:
    """The analytic model's speedup for this trace's (b, k, alpha); None if not computable."""
    an = analytic_module()
    cfg = trace.get("config", {})
    alpha = alpha_from_trace(trace)
    if an is None or alpha is None or cfg.get("mode") == "regular":
        return None
    b, k = int(cfg.get("batch_size", 1)), int(cfg.get("draft_length", 0))
    try:
        if costs is not None:
            return an.speedup_batch(b, k, alpha, costs.target, costs.draft, costs.overhead, costs.regular_overhead)
        return an.speedup_batch1(min(alpha, 1.0), k, cost_ratio)
    except Exception:
        return None


def draft_cost_ratio(trace: dict) -> float | None:
    """Measured c ~ draft time per drafted position / (verify time per step) from a trace."""
    steps = [s for s in trace.get("steps", []) if s["k"] > 0]
    if not steps:
        return None
    draft = sum(s["t_draft"] / s["k"] for s in steps) / len(steps)
    verify = sum(s["t_verify"] for s in steps) / len(steps)
    return draft / verify if verify else None


# ---- Streamlit side: cached resources shared by every session ------------------------------------
# (Only these functions touch Streamlit; the worker above never does.)

import streamlit as st  # noqa: E402


@st.cache_resource(show_spinner=False)
def model_lock() -> threading.Lock:
    """One lock per server process: held for a whole run so sessions queue on the model."""
    return threading.Lock()


@st.cache_resource(show_spinner=False)
def cached_model(spec: str, device: str, dtype: str):
    """specviz.runner.get_model, cached across sessions (a SpecvizError is not cached)."""
    from .runner import get_model

    return get_model(spec, device, dtype)


@st.cache_data(show_spinner=False)
def pair_problem(target: str, draft: str, device: str, dtype: str) -> str | None:
    """Why this target/draft pair cannot run (e.g. incompatible tokenizers), or None."""
    from .runner import make_proposer

    try:
        make_proposer(draft, cached_model(target, device, dtype))
    except SpecvizError as e:
        return str(e)
    return None


def init_state() -> None:
    """Session keys every page relies on (widgets set the sidebar ones).

    Also: with a pages/ folder beside app.py, Streamlit runs a page file on its own (old-style
    multipage mode, no app.py, no sidebar) until some run has called st.navigation — e.g. when
    the first request to a fresh server is /speedup. Then switch to app.py's navigation and rerun.
    """
    try:
        from streamlit.runtime.pages_manager import PagesManager
    except ImportError:
        PagesManager = None
    if PagesManager is not None and PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False
        st.rerun()
    for k, v in SIDEBAR_DEFAULTS.items():
        st.session_state.setdefault(k, v)
    st.session_state.setdefault(TRACE_KEY, None)
    st.session_state.setdefault(TRACE_SOURCE_KEY, None)
    st.session_state.setdefault(RUN_KEY, None)


def current_run() -> LiveRun | None:
    return st.session_state.get(RUN_KEY)


def current_trace() -> dict | None:
    """The trace pages show: a finished run is adopted from the worker once it is done."""
    run = current_run()
    if run is not None and not run.running and run.trace is not None and not getattr(run, "_adopted", False):
        st.session_state[TRACE_KEY] = run.trace
        st.session_state[TRACE_SOURCE_KEY] = "run"
        st.session_state["regular_trace"] = run.regular_trace
        run._adopted = True
    return st.session_state.get(TRACE_KEY)


def loaded_target():
    """The sidebar's target if it is loaded and loads without error, else None."""
    v = sidebar_values(st.session_state)
    try:
        return cached_model(v["target"], v["device"], v["dtype"])
    except Exception:
        return None


def trace_decoder(trace: dict | None):
    """decode(ids) with the tokenizer that made ``trace``, when we have it; else None (ids shown)."""
    run = current_run()
    if run is not None and run.tokenizer is not None and trace is not None and (
            trace is run.trace or trace.get("partial")):
        return decoder_for(run.tokenizer)
    target = loaded_target()
    if target is not None and trace is not None:
        name = trace.get("config", {}).get("target_name")
        if name in (None, target.name):
            return decoder_for(target.tokenizer)
    return None


def run_banner() -> None:
    """On the other pages: what the background run is doing (a page switch does not stop it)."""
    run = current_run()
    if run is not None and run.running:
        st.info(f"A run is {run.status} in the background (b={run.cfg.batch_size}, "
                        f"k={run.cfg.draft_length}); switching pages does not stop it. Stop it on the Live page.")


# ---- correctness checks (used by the Correctness page; no Streamlit) --------------------------------

def divergence_rows(spec: dict, regular: dict, target=None) -> list[dict]:
    """Per row: exact match of speculative vs regular output, the first divergent position and the
    regular run's top-1 minus top-2 logit margin there (a forward of ``target`` over
    prompt + regular output up to that position; None without a target)."""
    import torch

    rows = []
    for s, r in zip(spec["sequences"], regular["sequences"]):
        a, b = s["output_token_ids"], r["output_token_ids"]
        pos = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), None)
        if pos is None and len(a) != len(b):
            pos = min(len(a), len(b))
        margin = None
        if pos is not None and target is not None and pos < len(b):
            ids = torch.tensor([r["prompt_token_ids"] + b[:pos]], device=target.device)
            with torch.inference_mode():
                logits = target.model(input_ids=ids).logits[0, -1].float()
            top = logits.topk(2).values
            margin = float(top[0] - top[1])
        rows.append({"index": s["index"], "match": pos is None, "first_divergence": pos, "margin": margin,
                     "length": len(b), "speculative": a, "regular": b})
    return rows


def acceptance_distribution_check(n: int = 20000, vocab: int = 8, k: int = 2, temperature: float = 1.0,
                                  seed: int = 0, accept_fn=None) -> dict:
    """Sample the first output token of ``n`` rows through the acceptance rule with a random draft q
    and compare its counts with the target's processed p: chi-square statistic, dof and p-value.

    The rule is lossless iff the first emitted token is distributed as p (SPECDEC.md)."""
    import torch

    from .sampling import SamplingParams, accept_reference, process_logits

    accept_fn = accept_fn or accept_reference
    g = torch.Generator().manual_seed(seed)
    params = SamplingParams(temperature=temperature)
    t_logits = torch.randn(1, k + 1, vocab, generator=g).expand(n, k + 1, vocab).contiguous()  # [n, k+1, V]
    q = process_logits(torch.randn(1, k, vocab, generator=g), params).expand(n, k, vocab).contiguous()  # [n, k, V]
    drafts = torch.multinomial(q.reshape(-1, vocab), 1, generator=g).reshape(n, k)  # [n, k] x ~ q
    u = torch.rand(n, k + 1, generator=g)
    verdict = accept_fn(t_logits, drafts, torch.full((n,), k), u, params, q)
    first = verdict.emitted[:, 0]  # [n] the first output token of every row
    counts = torch.bincount(first, minlength=vocab).double()
    p = process_logits(t_logits[0, 0], params).double()
    expected = p * n
    keep = expected > 0
    chi2 = float(((counts[keep] - expected[keep]) ** 2 / expected[keep]).sum())
    dof = int(keep.sum()) - 1
    p_value = float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                            torch.tensor(chi2 / 2, dtype=torch.float64)))
    return {"counts": counts.tolist(), "expected": expected.tolist(), "chi2": chi2, "dof": dof, "p_value": p_value,
            "acceptance_rate": float(verdict.num_accepted.double().mean() / k), "n": n}
