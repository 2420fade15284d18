"""The compiled forward (specviz.models.compiled): the layers compiled by torch.compile over the static
KV cache compute what the eager lean forward computes (logits to float rounding, greedy chains, trees
and a request queue bit for bit in fp32, target and model draft both compiled); off means eager; a
platform without a compiler, or a failing compile, runs eagerly after one line saying why.

Compiling is slow on a 2-core CPU (a tiny model's shape: 15-20 s cold, seconds from the disk cache),
so the model is a tiny llama and the shapes are few."""

import os

import pytest
import torch

from specviz.engine.proposers import ModelDraft
from specviz.engine.ragged import RaggedCache
from specviz.engine.step import TreeShape
from specviz.models import compiled
from specviz.models.forwardoptions import ForwardOptions
from specviz.run import decoder_for_ids

from fakes import perturbed_copy, ragged_prompts, tiny_llama
from test_fastllama import _steps

V = 64
COMPILED = ForwardOptions(compile=True)
pytestmark = pytest.mark.skipif(compiled.unavailable() is not None, reason="no C++ compiler for inductor")


@pytest.fixture(scope="module")
def target():
    return tiny_llama(V, layers=2)


def _greedy(target, draft, prompts, options, **kw):
    dec = decoder_for_ids(target, ModelDraft(draft, options=options), prompts, 3, 8, options=options, **kw)
    [s.to_json() for s in dec.steps()]
    return [r.output for r in dec.rows], dec


def test_compiled_layers_give_the_eager_logits_over_ragged_steps_rollback_and_compaction(target):
    prompts = ragged_prompts(4, V)
    fast = RaggedCache(target.model, options=COMPILED)
    eager = RaggedCache(target.model, options=ForwardOptions(static_cache=True))
    assert fast.cache.compiler is compiled.compiler() and eager.cache.compiler is None
    for a, b in zip(_steps(fast, prompts, V), _steps(eager, prompts, V)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert compiled.compiler().failed is None and len(fast.cache.runner) > 0


@pytest.mark.parametrize("shape", ["chain", "tree", "queue"])
def test_greedy_with_the_compiled_forward_equals_plain_greedy_per_row(target, shape):
    draft = perturbed_copy(target, 0.3)
    kw = {"chain": {}, "tree": {"tree": TreeShape(2, 6)}, "queue": {"lanes": 3}}[shape]
    prompts = ragged_prompts(6 if shape == "queue" else 3, V, seed=5)
    plain, _ = _greedy(target, draft, prompts, ForwardOptions(), **kw)
    out, dec = _greedy(target, draft, prompts, COMPILED, **kw)
    assert out == plain
    assert dec.kv.cache.compiler is not None and compiled.compiler().failed is None


def test_without_the_option_the_eager_path_runs(target, monkeypatch):
    calls = []
    monkeypatch.setattr(compiled.LayerCompiler, "run", lambda self, *a: calls.append(a))
    for options in (ForwardOptions(), ForwardOptions(static_cache=True)):
        kv = RaggedCache(target.model, options=options)
        assert not isinstance(kv.cache, compiled.LayerCompiler) and getattr(kv.cache, "compiler", None) is None
        list(_steps(kv, ragged_prompts(2, V), V))
    assert calls == [] and ForwardOptions(compile=True).static_cache


@pytest.mark.parametrize("why", ["no compiler", "compile error"])
def test_a_failure_to_compile_says_one_line_and_runs_eagerly(target, monkeypatch, why):
    lines = []
    if why == "no compiler":
        monkeypatch.setattr(compiled, "unavailable", lambda: "no C++ compiler (g++ or clang++) on the PATH")
    else:
        def broken(*a, **k):
            raise RuntimeError("InductorError: CppCompileError: C++ compile error\nmore lines")
        monkeypatch.setattr(compiled.LayerCompiler, "_compiled", lambda self: broken)
    monkeypatch.setattr(compiled, "_COMPILER", compiled.LayerCompiler(say=lines.append))
    prompts = ragged_prompts(3, V)
    fast = RaggedCache(target.model, options=COMPILED)
    eager = RaggedCache(target.model, options=ForwardOptions(static_cache=True))
    for a, b in zip(_steps(fast, prompts, V), _steps(eager, prompts, V)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    said = [line for line in lines if "running eagerly" in line]
    assert len(said) == 1 and "\n" not in said[0]
    assert lines[:1] == ([compiled.NOTICE] if why == "compile error" else said)  # the compile was announced first
    assert compiled.compiler().failed


def test_the_compile_flag_reaches_the_runs_forward_options(monkeypatch):
    from specviz import cli
    from specviz.run import forward_options

    monkeypatch.setenv("SPECVIZ_COMPILE", "0")
    monkeypatch.setenv("SPECVIZ_CUDA_GRAPHS", "0")
    monkeypatch.setenv("SPECVIZ_STATIC_CACHE", "0")
    seen = []
    monkeypatch.setattr(cli, "cmd_run", lambda a: seen.append(forward_options(cli._config(a))) or 0)
    assert cli.main(["run", "--prompt", "hi", "--max-new-tokens", "2"]) == 0
    assert cli.main(["run", "--prompt", "hi", "--max-new-tokens", "2", "--compile"]) == 0
    assert seen == [ForwardOptions(), ForwardOptions(static_cache=True, compile=True)]
    assert os.environ["SPECVIZ_COMPILE"] == "0"


def test_the_cache_folder_is_specvizs_unless_the_user_chose_one(monkeypatch, tmp_path):
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", default_cache_dir())  # what inductor writes by itself
    assert compiled.use_cache_dir() == str(tmp_path / "inductor")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    assert compiled.use_cache_dir() == str(tmp_path / "mine")
