"""Stand-ins the decode worker process can import (specviz.app.worker runs the loader and the step
iterator it is given in a child process, so they travel by module and name: plain functions
here, not lambdas or test-local closures). Tests swap them in with
``monkeypatch.setattr(liverun, "load_pair", workerfakes.tiny_pair)`` and the like."""

from __future__ import annotations

import time

from specviz.run import iter_run

STEP_S = 0.02  # a pause per step, so a run lasts long enough to watch (about 1-3 tokens per step)
_tiny = None


class CharTokenizer:
    """A picklable tokenizer for the tiny model: one id per character, ids shown as numbers."""

    eos_token_id = None

    def encode(self, text, **kw):
        return [1 + ord(c) % 63 for c in text]

    def decode(self, ids, **kw):
        return " ".join(map(str, ids))


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
    for session, rec in iter_run(cfg, target, proposer, telemetry=False):
        if rec is not None:
            time.sleep(STEP_S)
        yield session, rec


def endless_iter_run(cfg, target, proposer, **kwargs):
    """specviz.run.iter_run with no EOS and a small pause per step: still running when a test looks."""
    for session, rec in iter_run(cfg, target, proposer, **kwargs):
        session.decoder.eos = set()
        time.sleep(STEP_S)
        yield session, rec


def oom_pair(cfg):
    """A loader that fails as a GPU out of memory does."""
    import torch

    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
