"""A steady chain step reads the device once: the accept result (issue 18).

On a GPU every read of a tensor's values on the host (``.tolist()``, ``.item()``, ``bool(t)``,
``int(t)``, ``.nonzero()``...) waits for the stream: the host stops queueing work. These tests
count such reads made by specviz's own code while the engine steps, on the CPU, by wrapping those
Tensor methods. (The copies the other way go through specviz.engine.transfer; on CUDA,
bench/gpu_check.sh's graph-tests step runs the same steps under torch's sync debug mode.)
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pytest
import torch

import specviz
from fakes import perturbed_copy, ragged_prompts, tiny_llama
from specviz.engine import sampling
from specviz.engine.proposers import ModelDraft, NgramDraft
from specviz.engine.ragged import RaggedCache
from specviz.run import decoder_for_ids

SPECVIZ = str(Path(specviz.__file__).resolve().parent)
KERNELS = str(Path(specviz.__file__).resolve().parents[1] / "kernels")
READS = ("item", "tolist", "__bool__", "__int__", "__float__", "__index__", "nonzero", "cpu", "numpy")
V = 64


@contextlib.contextmanager
def device_reads():
    """The reads of tensor values made from files under specviz/ and kernels/: a list of (what, file, line)."""
    calls = []
    originals = {name: getattr(torch.Tensor, name) for name in READS}

    def wrapped(name, orig):
        def read(self, *args, **kwargs):
            caller = sys._getframe(1).f_code.co_filename
            if caller.startswith((SPECVIZ, KERNELS)):
                calls.append((name, Path(caller).name, sys._getframe(1).f_lineno))
            return orig(self, *args, **kwargs)
        return read

    for name, orig in originals.items():
        setattr(torch.Tensor, name, wrapped(name, orig))
    try:
        yield calls
    finally:
        for name, orig in originals.items():
            setattr(torch.Tensor, name, orig)


def reads_per_step(dec) -> list[tuple[dict, list]]:
    """Each step's record with the reads made while it ran (the generator runs one step per next())."""
    out = []
    with device_reads() as calls:
        it = dec.steps()
        while True:
            n = len(calls)
            try:
                rec = next(it)
            except StopIteration:
                break
            out.append((rec, calls[n:]))
    return out


@pytest.fixture(scope="module")
def target():
    return tiny_llama(V, layers=2)


def steady_chain_reads(target, draft: str) -> list[list]:
    """The reads of each steady step (no row left or joined, no compaction) of a ragged chain run."""
    prompts = ragged_prompts(4, V, seed=5)
    proposer = {"ngram": lambda: NgramDraft(), "model": lambda: ModelDraft(perturbed_copy(target, 0.3))}[draft]()
    dec = decoder_for_ids(target, proposer, prompts, 3, 24)
    steady = [calls for rec, calls in reads_per_step(dec) if not rec.left and not rec.joined and not rec.compacted]
    assert len(steady) >= 5, len(steady)
    return steady


@pytest.mark.parametrize("draft", ["ngram", "model"])
def test_a_steady_chain_step_reads_the_device_once(monkeypatch, target, draft):
    """The device path: the greedy verdict's CPU-only host form (sampling._greedy_on_host) is switched off."""
    monkeypatch.setattr(sampling, "HOST_SLOTS", 0)
    for calls in steady_chain_reads(target, draft):
        assert len(calls) == 1 and calls[0][:2] == ("tolist", "step.py"), calls


def test_the_greedy_verdict_on_the_cpu_adds_one_read(target):
    """On the CPU (where a read costs no stall) the greedy verdict reads its inputs once, in sampling.py."""
    for calls in steady_chain_reads(target, "model"):
        assert [c[:2] for c in calls] == [("tolist", "sampling.py"), ("tolist", "step.py")], calls


@pytest.mark.parametrize("draft", ["ngram", "model"])
def test_a_steady_tree_step_reads_the_device_once(target, draft):
    """With the walk CUDA runs (kernels/tree_verify.py, here in Triton's CPU interpreter): one read
    per step, the verdict and the trees' nodes together (step.read_step)."""
    pytest.importorskip("triton")
    from specviz.engine.kernels.tree_verify import accept_tree_triton
    from specviz.engine.step import TreeShape

    prompts = ragged_prompts(4, V, seed=5)
    proposer = {"ngram": lambda: NgramDraft(), "model": lambda: ModelDraft(perturbed_copy(target, 0.3))}[draft]()
    dec = decoder_for_ids(target, proposer, prompts, 3, 16, tree=TreeShape(2, 6))
    dec.accept_tree_fn = accept_tree_triton
    steps = reads_per_step(dec)
    steady = [(rec, calls) for rec, calls in steps if not rec.left and not rec.joined and not rec.compacted]
    assert len(steady) >= 4, len(steady)
    assert any(rec.rows and rec.rows[0].tree is not None for rec, _ in steady)  # they drafted trees
    for rec, calls in steady:
        assert len(calls) == 1 and calls[0][:2] == ("tolist", "step.py"), (rec.step, calls)


@pytest.mark.parametrize("tree", [None, (2, 6)], ids=["chain", "tree"])
def test_the_host_lengths_mirror_equals_the_device_lengths_through_steps_leaves_and_joins(target, tree):
    """What the crop and the compaction read instead of the device is what the device holds."""
    from specviz.engine.step import TreeShape

    prompts = ragged_prompts(7, V, seed=2)
    proposer = ModelDraft(perturbed_copy(target, 0.3))
    dec = decoder_for_ids(target, proposer, prompts, 3, 12, lanes=3, tree=tree and TreeShape(*tree))
    known = 0
    for rec in dec.steps():
        for kv in (dec.kv, proposer.kv):
            if kv.host_lengths is not None:
                known += 1
                assert kv.host_lengths == kv.lengths.tolist(), rec.step
        assert rec.cache_holes == int((~dec.kv.valid).sum())
    assert known > 0


def test_an_unknown_mirror_is_read_once_and_then_known_again(target):
    kv = RaggedCache(target.model)
    ids = torch.tensor([[1, 2, 3], [4, 5, 6]])
    valid = torch.tensor([[True, True, True], [False, True, True]])
    kv.forward(ids, valid)  # no counts: the mirror is not known
    assert kv.host_lengths is None
    with device_reads() as calls:
        assert kv.holes == 1 and kv.holes == 1
    assert [c[0] for c in calls] == ["tolist"] and kv.host_lengths == [3, 2]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch's sync debug mode needs CUDA")
@pytest.mark.parametrize("draft", ["ngram", "model", "ngram-tree", "model-tree"])
def test_on_cuda_a_steady_step_makes_one_synchronizing_call(draft):
    """The same steps on the GPU under torch.cuda.set_sync_debug_mode("warn"): every implicit sync
    (a read, a pageable copy, a synchronizing kernel) is a warning. The phase timers' explicit
    torch.cuda.synchronize() are not counted by torch. Trees walk with the Triton kernel there."""
    import warnings

    from specviz.engine.step import TreeShape
    from specviz.models.loading import LoadedModel

    def on_cuda(m):
        return LoadedModel(m.spec, m.name, m.model.to("cuda"), m.tokenizer, torch.device("cuda"), m.dtype)

    cpu = tiny_llama(V, layers=2)
    target = on_cuda(cpu)
    proposer = NgramDraft(device="cuda") if draft.startswith("ngram") else ModelDraft(on_cuda(perturbed_copy(cpu, 0.3)))
    tree = TreeShape(2, 6) if draft.endswith("tree") else None
    dec = decoder_for_ids(target, proposer, ragged_prompts(4, V, seed=5), 3, 24, tree=tree)
    it, per_step = dec.steps(), []
    next(it)  # the prefill and first step: allocations, kernels compiled
    torch.cuda.set_sync_debug_mode("warn")
    try:
        while True:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    rec = next(it)
                except StopIteration:
                    break
            syncs = [str(w.message) for w in caught if "synchroniz" in str(w.message)]
            if not rec.left and not rec.joined and not rec.compacted:
                per_step.append((rec.step, len(syncs)))
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert per_step and all(n <= 1 for _, n in per_step), per_step
