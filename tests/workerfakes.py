"""Stand-ins for the decode worker process (specviz.device.worker): the tiny model and slow or endless
step loops, registered as named jobs of the device process beside the real ones. The worker
imports this module because tests/conftest.py names it in $SPECVIZ_WORKER_JOBS; a test picks a
stand-in by its name, e.g. ``monkeypatch.setattr(deviceclient, "RUN_JOB", "tiny-run")``."""

from __future__ import annotations

import functools
import time

from specviz.device import devicejobs

STEP_S = 0.02  # a pause per step, so a run lasts long enough to watch (about 1-3 tokens per step)
_tiny = None


class CharTokenizer:
    """A tokenizer for the tiny model: one id per character, ids shown as numbers."""

    eos_token_id = None

    def encode(self, text, **kw):
        return [1 + ord(c) % 63 for c in text]

    def decode(self, ids, **kw):
        return " ".join(map(str, ids))

    @property
    def backend_tokenizer(self):
        """The same decoding as a `tokenizers` object: what the device process sends the page."""
        from tokenizers import Tokenizer
        from tokenizers.models import WordLevel

        return Tokenizer(WordLevel({str(i): i for i in range(64)}, unk_token="0"))


def tiny_pair(cfg):
    """The tiny random target (loaded once per worker process) with an n-gram draft."""
    global _tiny
    from fakes import tiny_llama

    from specviz.engine.proposers import NgramDraft

    if _tiny is None:
        _tiny = tiny_llama()
        _tiny.tokenizer = CharTokenizer()
    return _tiny, NgramDraft(device=_tiny.device)


def slow_iter_run(cfg, target, proposer):
    """specviz.run.iter_run without telemetry, pausing STEP_S per step."""
    from specviz.run import iter_run

    for session, rec in iter_run(cfg, target, proposer, telemetry=False):
        if rec is not None:
            time.sleep(STEP_S)
        yield session, rec


def endless_iter_run(cfg, target, proposer, **kwargs):
    """specviz.run.iter_run with no EOS and a small pause per step: still running when a test looks."""
    from specviz.run import iter_run

    for session, rec in iter_run(cfg, target, proposer, **kwargs):
        session.decoder.eos = set()
        time.sleep(STEP_S)
        yield session, rec


def oom_pair(cfg):
    """A loader that fails as a GPU out of memory does."""
    import torch

    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


devicejobs.JOBS.update({
    "tiny-run": functools.partial(devicejobs.run, loader=tiny_pair, runner=slow_iter_run),
    "oom-run": functools.partial(devicejobs.run, loader=oom_pair),
    "endless-run": functools.partial(devicejobs.run, runner=endless_iter_run),  # the real pair, never ending
})


# ---- stand-ins for the pages' measuring jobs (tests/device/test_deviceclient.py) -------------------------------

def count(ctx, n: int = 3):
    for i in range(n):
        ctx.report(i)
    ctx.say("done counting")
    return "result"


def mistake(ctx):
    from specviz.common import SpecvizError

    raise SpecvizError("choose a draft")


def bug(ctx):
    raise KeyError("x")


def until_stopped(ctx, step_s: float = 0.01):
    """Works in small units until told to stop, reporting each unit."""
    i = 0
    while not ctx.stopped():
        ctx.report(i)
        i += 1
        time.sleep(step_s)
    return "stopped early"


def torch_here(ctx):
    """Whether torch is loaded in the process that runs jobs."""
    import sys

    return "torch" in sys.modules


def peaks_to_tmp(ctx, device: str) -> dict:
    """The real peaks job with its cache in a folder of its own (not the user's); the result names the file."""
    import tempfile
    from pathlib import Path
    from unittest import mock

    from specviz import telemetry

    path = Path(tempfile.mkdtemp(prefix="specviz-peaks-")) / "peaks.json"
    with mock.patch.object(telemetry, "_peaks_path", lambda: path):
        return {**devicejobs.peaks(ctx, device), "cache_file": str(path)}


def broken_peaks(ctx, device: str):
    """A peak measurement whose copy fails."""
    raise RuntimeError("copy failed")


devicejobs.JOBS.update({"count": count, "mistake": mistake, "bug": bug, "until-stopped": until_stopped,
                        "torch-here": torch_here, "peaks-to-tmp": peaks_to_tmp, "broken-peaks": broken_peaks})
