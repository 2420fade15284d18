"""The static KV cache and its graph runner (issue 18, item 3) compute what the DynamicCache path
computes: logits to float rounding and greedy outputs bit for bit through the engine (ragged
batches, rollback, compaction, joins, trees), on a tiny llama and on the packaged model. A crop is
a pointer move, growth reallocates and drops the graphs, the runner is bounded and runs the
copy-in / copy-out protocol through its static buffers on the CPU. CUDA capture and replay are
checked where CUDA is (skipped here)."""

import os

import pytest
import torch

from specviz.engine.proposers import ModelDraft, NgramDraft
from specviz.engine.ragged import RaggedCache, left_pad
from specviz.engine.step import TreeShape
from specviz.models import fastllama, statickv
from specviz.models.forwardoptions import ForwardOptions
from specviz.run import decoder_for_ids

from fakes import perturbed_copy, ragged_prompts, tiny_llama
from test_fastllama import _steps

V = 64


def cuda(test):
    """A CUDA-only test: marked gpu (bench/gpu_check.sh runs ``-m gpu``), skipped without CUDA."""
    return pytest.mark.gpu(pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need CUDA")(test))


@pytest.fixture(scope="module")
def target():
    return tiny_llama(V, layers=2)


def _static(monkeypatch, on: bool, graphs: bool = False):
    monkeypatch.setenv("SPECVIZ_STATIC_CACHE", "1" if on else "0")
    monkeypatch.setenv("SPECVIZ_CUDA_GRAPHS", "1" if graphs else "0")


def _outputs(target, proposer_fn, prompts, k, max_new=10, **kw):
    dec = decoder_for_ids(target, proposer_fn(), prompts, k, max_new, **kw)
    [s.to_json() for s in dec.steps()]
    return [r.output for r in dec.rows], dec


@pytest.mark.parametrize("many", [1, 1000], ids=["prefill-path-every-step", "runner-every-step"])
def test_logits_equal_the_dynamic_cache_over_ragged_steps_rollback_and_compaction(monkeypatch, many):
    monkeypatch.setattr(fastllama, "MANY_QUERIES", many)  # 1: eager SDPA path only; 1000: the runner only
    loaded = tiny_llama(V, layers=3)
    prompts = ragged_prompts(4, V)
    _static(monkeypatch, True)
    static = RaggedCache(loaded.model)
    _static(monkeypatch, False)
    dynamic = RaggedCache(loaded.model)
    assert static.static and not dynamic.static
    for a, b in zip(_steps(static, prompts, V), _steps(dynamic, prompts, V)):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert static.slots == static.cache.length == dynamic.slots
    assert static.compactions == dynamic.compactions == 1
    assert (len(static.cache.runner) > 0) == (many > 1)


@pytest.mark.parametrize("draft", ["model", "ngram"])
@pytest.mark.parametrize("lanes", [None, 3], ids=["static-batch", "queue-with-joins"])
def test_greedy_outputs_equal_the_dynamic_cache_through_the_engine(target, monkeypatch, draft, lanes):
    prompts = ragged_prompts(7 if lanes else 4, V, seed=3)
    draft_model = perturbed_copy(target, 0.3)
    make = {"model": lambda: ModelDraft(draft_model), "ngram": NgramDraft}[draft]
    _static(monkeypatch, False)
    ref, _ = _outputs(target, make, prompts, 3, lanes=lanes)
    _static(monkeypatch, True)
    out, dec = _outputs(target, make, prompts, 3, lanes=lanes)
    assert out == ref
    assert dec.kv.static and len(dec.kv.cache.runner) > 0
    if lanes:  # rows left and joined: select_rows and extend ran on the static buffers
        assert dec.kv.cache.rows == dec.kv.valid.shape[0]


def test_tree_steps_equal_the_dynamic_cache(target, monkeypatch):
    prompts = ragged_prompts(3, V, seed=5)
    draft_model = perturbed_copy(target, 0.3)
    _static(monkeypatch, False)
    ref, _ = _outputs(target, lambda: ModelDraft(draft_model), prompts, 3, 8, tree=TreeShape(2, 6))
    _static(monkeypatch, True)
    out, dec = _outputs(target, lambda: ModelDraft(draft_model), prompts, 3, 8, tree=TreeShape(2, 6))
    assert out == ref
    assert any(key[3] is not None for key in dec.kv.cache.runner.keys())  # a verify with a tail mask ran


def test_a_feature_draft_with_a_mapped_vocabulary_equals_the_dynamic_cache(target, monkeypatch):
    """The draft reads fused embeddings and a head wider than its weight; the target keeps hidden states."""
    from specviz.engine.proposers import FeatureDraft
    from test_featdraft import feature_draft

    prompts = ragged_prompts(3, V, seed=7)
    make = lambda: FeatureDraft(feature_draft(target, list(range(0, V, 2))), vocab_size=V)  # noqa: E731
    _static(monkeypatch, False)
    ref, _ = _outputs(target, make, prompts, 3, 10, keep_hidden=True, lanes=2)
    _static(monkeypatch, True)
    out, dec = _outputs(target, make, prompts, 3, 10, keep_hidden=True, lanes=2)
    assert out == ref
    assert any(key[5] for key in dec.proposer.kv.cache.runner.keys())  # the draft ran on embeddings


def test_greedy_outputs_equal_on_the_packaged_model(monkeypatch):
    from specviz.models.loading import encode_prompts, get_model
    from specviz.run import make_proposer

    loaded = get_model("default", "cpu", "float32")
    prompts = encode_prompts(loaded.tokenizer, ["What is the capital of France?", "Write a haiku about autumn leaves.",
                                                "List the first ten even numbers, separated by commas."])
    _static(monkeypatch, False)
    ref, _ = _outputs(loaded, lambda: make_proposer("default", loaded), prompts, 2, 8, lanes=2)
    _static(monkeypatch, True)
    out, dec = _outputs(loaded, lambda: make_proposer("default", loaded), prompts, 2, 8, lanes=2)
    assert out == ref and dec.kv.static


def _prefilled(model, prompts):
    kv = RaggedCache(model)
    ids, valid = left_pad(prompts, 0, torch.device("cpu"))
    kv.forward(ids, valid, last_only=True)
    return kv


def test_a_crop_is_a_pointer_move(target, monkeypatch):
    _static(monkeypatch, True)
    kv = _prefilled(target.model, ragged_prompts(3, V))
    kv.forward(torch.ones(3, 4, dtype=torch.long), torch.ones(3, 4, dtype=torch.bool))
    keys, length, capacity = kv.cache.keys[0], kv.cache.length, kv.cache.capacity
    kv.reject_tail(torch.tensor([[True, False, False, False]] * 3))  # three trailing holes in every row: cropped
    assert kv.cache.length == length - 3 == kv.slots
    assert kv.cache.keys[0] is keys and kv.cache.capacity == capacity  # nothing moved or reallocated


def test_growing_past_the_capacity_doubles_it_and_drops_the_graphs(target, monkeypatch):
    monkeypatch.setattr(statickv, "MIN_SLOTS", 16)
    _static(monkeypatch, True)
    prompts = ragged_prompts(2, V)
    static = _prefilled(target.model, prompts)
    _static(monkeypatch, False)
    dynamic = _prefilled(target.model, prompts)
    assert static.cache.capacity == 16
    g = torch.Generator().manual_seed(0)
    for step in range(6):  # 4 slots a step: past 16 and then 32
        ids = torch.randint(1, V, (2, 4), generator=g)
        valid = torch.ones(2, 4, dtype=torch.bool)
        before = static.cache.capacity
        a, b = static.forward(ids, valid), dynamic.forward(ids, valid)
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
        if static.cache.capacity != before:
            assert static.cache.capacity == 2 * before
            assert [key[2] for key in static.cache.runner.keys()] == [static.cache.capacity]  # old graphs gone
    assert static.cache.capacity == 64 and static.cache.reallocations == 2


def test_the_runner_keeps_at_most_its_bound_least_recently_used_first(target, monkeypatch):
    _static(monkeypatch, True)
    kv = _prefilled(target.model, ragged_prompts(2, V))
    kv.cache.runner.max_graphs = 2
    for T in (1, 2, 1, 3):  # T = 1 used again before T = 3 arrives: T = 2 is the one dropped
        kv.forward(torch.ones(2, T, dtype=torch.long), torch.ones(2, T, dtype=torch.bool))
    assert [key[1] for key in kv.cache.runner.keys()] == [1, 3]
    assert kv.cache.runner.evictions >= 1 and len(kv.cache.runner) == 2


def test_the_runner_copies_in_pads_the_batch_bucket_and_copies_out(target, monkeypatch):
    """Three rows run in the 4-row bucket's static buffers; reused logits are the static output
    itself (overwritten by the next call), others are copies; the padding row sees nothing."""
    _static(monkeypatch, True)
    prompts = ragged_prompts(3, V)
    static = _prefilled(target.model, prompts)
    _static(monkeypatch, False)
    dynamic = _prefilled(target.model, prompts)
    ids, valid = torch.tensor([[5, 6], [7, 8], [9, 10]]), torch.ones(3, 2, dtype=torch.bool)
    reused = static.forward(ids, valid, reuse_logits=True)
    torch.testing.assert_close(reused, dynamic.forward(ids, valid), atol=1e-5, rtol=1e-5)
    (key, entry), = [(k, e) for k, e in static.cache.runner._entries.items() if k[1] == 2]
    assert key[0] == 4 and entry.logits.shape == (4, 2, V)  # bucket 4 for 3 rows
    assert reused.data_ptr() == entry.logits.data_ptr()  # copy-out skipped: the static output
    assert not entry.valid[3].any() and entry.valid[:3, : static.slots].equal(static.valid)
    assert entry.cols.tolist() == [static.slots - 2, static.slots - 1]  # the columns it wrote
    kept = reused.clone()
    copied = static.forward(ids, valid)  # same key again: a copy, and the static output overwritten
    assert copied.data_ptr() != entry.logits.data_ptr()
    assert not torch.equal(entry.logits[:3], kept)  # new step, new logits in the same buffer
    assert torch.equal(copied, entry.logits[:3])


def test_off_by_default_the_cache_is_transformers_dynamic_cache(target, monkeypatch):
    monkeypatch.delenv("SPECVIZ_STATIC_CACHE", raising=False)
    monkeypatch.delenv("SPECVIZ_CUDA_GRAPHS", raising=False)
    kv = RaggedCache(target.model)
    assert not kv.static and type(kv.cache).__name__ == "DynamicCache"
    _static(monkeypatch, True)
    monkeypatch.setenv("SPECVIZ_LEAN_FORWARD", "0")  # the static cache needs the lean forward
    assert not RaggedCache(target.model).static


def test_graphs_are_never_captured_off_cuda(target, monkeypatch):
    _static(monkeypatch, False, graphs=True)
    out, dec = _outputs(target, NgramDraft, ragged_prompts(2, V), 2, 6)
    assert dec.kv.static and not dec.kv.cache.runner.capture and dec.kv.cache.runner.captures == 0


def test_the_cuda_graphs_flag_reaches_the_runs_forward_options_and_writes_no_environment(monkeypatch):
    from specviz import cli
    from specviz.run import forward_options

    _static(monkeypatch, False)
    seen = []
    monkeypatch.setattr(cli, "cmd_run", lambda a: seen.append(forward_options(cli._config(a))) or 0)
    assert cli.main(["run", "--prompt", "hi", "--max-new-tokens", "2"]) == 0
    assert cli.main(["run", "--prompt", "hi", "--max-new-tokens", "2", "--cuda-graphs"]) == 0
    assert seen == [ForwardOptions(), ForwardOptions(static_cache=True, cuda_graphs=True)]
    assert os.environ["SPECVIZ_CUDA_GRAPHS"] == "0"  # as the test set it: the flag did not write it


# ---- CUDA only -------------------------------------------------------------------------------
def _to_cuda(loaded):
    loaded.model.to("cuda")
    loaded.device = torch.device("cuda")
    return loaded


def _cuda_pair(dtype=torch.float32):
    """A tiny target and a perturbed draft (perturbed on the CPU: its noise generator is a CPU one)."""
    loaded = tiny_llama(V, layers=2, dtype=dtype)
    draft = perturbed_copy(loaded, 0.3)
    return _to_cuda(loaded), _to_cuda(draft)


@cuda
def test_captured_graphs_replay_the_eager_static_forward(monkeypatch):
    loaded, _ = _cuda_pair()
    prompts = ragged_prompts(3, V)
    caches = {}
    for graphs in (False, True):
        _static(monkeypatch, True, graphs=graphs)
        caches[graphs] = RaggedCache(loaded.model)
        assert caches[graphs].cache.runner.capture == graphs
    dev = torch.device("cuda")
    ids, valid = left_pad(prompts, 0, dev)
    for kv in caches.values():
        kv.forward(ids, valid, last_only=True)
    g = torch.Generator().manual_seed(0)
    for step in range(6):  # the same key each step after the first: captured on its second use, then replayed
        ids = torch.randint(1, V, (3, 3), generator=g).to(dev)
        valid = torch.ones(3, 3, dtype=torch.bool, device=dev)
        valid[0, 2] = False
        eager, replayed = (caches[x].forward(ids, valid) for x in (False, True))
        torch.testing.assert_close(replayed, eager, atol=1e-5, rtol=1e-5)  # the same kernels, replayed
        assert torch.equal(replayed[valid].argmax(-1), eager[valid].argmax(-1))
        for kv in caches.values():
            kv.reject_tail(torch.tensor([[True, step % 2 == 0, False]] * 3, device=dev) & valid)
    runner = caches[True].cache.runner
    assert runner.captures >= 1 and runner.replays >= 3


@cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_greedy_outputs_with_graphs_equal_without_on_cuda(monkeypatch, dtype):
    loaded, draft = _cuda_pair(dtype)
    prompts = ragged_prompts(5, V, seed=2)
    runs = {}
    for graphs in (False, True):
        _static(monkeypatch, True, graphs=graphs)
        runs[graphs] = _outputs(loaded, lambda: ModelDraft(draft), prompts, 3, 12, lanes=3)
    assert runs[True][0] == runs[False][0]
    assert runs[True][1].kv.cache.runner.replays > 0



def test_a_runs_forward_options_decide_its_caches_and_the_trace_says_so(target, monkeypatch):
    from specviz.run import forward_options
    from specviz.runconfig import RunConfig

    _static(monkeypatch, False)
    options = forward_options(RunConfig(prompts=["hi"], cuda_graphs=True))
    assert RaggedCache(target.model, options=options).static
    assert not RaggedCache(target.model).static  # a cache without options: the environment's default
    _, dec = _outputs(target, NgramDraft, ragged_prompts(2, V), 2, 6, options=options)
    assert dec.kv.static and not forward_options(RunConfig(prompts=["hi"])).static_cache
    assert "cuda_graphs" not in RunConfig(prompts=["hi"]).to_trace_config()
    assert RunConfig(prompts=["hi"], cuda_graphs=True).to_trace_config()["cuda_graphs"] is True
