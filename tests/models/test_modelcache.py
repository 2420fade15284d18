"""specviz.models.modelcache: one bounded cache of loaded models per process, evicting for real,
and a load refused before it starts when its weights cannot fit in free memory."""

from __future__ import annotations

import gc
import json
import weakref

import pytest
import torch

from specviz.models import modelcache
from specviz.models.loading import get_model, load_model, param_count
from specviz.models.modelcache import ModelCache, NotEnoughMemory


def layer() -> torch.nn.Module:
    return torch.nn.Linear(4, 4)


def test_the_least_recently_used_model_is_evicted_and_its_memory_released():
    cache = ModelCache(capacity=lambda: 2)
    a = cache.get("a", layer)
    gone = weakref.ref(a)
    cache.get("b", layer)
    assert cache.get("a", layer) is a  # a hit makes "a" the most recent
    cache.get("c", layer)  # evicts "b", the least recently used
    assert cache.keys() == ["a", "c"]
    cache.get("d", layer)  # now "a"
    del a
    gc.collect()
    assert cache.keys() == ["c", "d"] and gone() is None  # nothing else held it: really freed


def test_a_draft_is_evicted_with_the_target_it_borrows_from():
    cache = ModelCache(capacity=lambda: 3)
    cache.get("target", layer)
    cache.get("draft", layer, parent="target")
    cache.get("other", layer)
    cache.get("third", layer)  # evicts "target", so "draft" goes with it
    assert cache.keys() == ["other", "third"]


def test_a_load_refused_for_memory_is_retried_after_each_eviction_then_refused():
    cache = ModelCache(capacity=lambda: 4)
    for k in "ab":
        cache.get(k, layer)
    tries = []

    def load():
        tries.append(len(cache))
        raise NotEnoughMemory("too big", need=10, free=1)

    with pytest.raises(NotEnoughMemory):
        cache.get("big", load)
    assert tries == [2, 1, 0] and cache.keys() == []  # it made room before giving up


def test_capacity_is_two_pairs_unless_the_setting_says_otherwise(monkeypatch):
    monkeypatch.delenv(modelcache.PAIRS_ENV, raising=False)
    assert modelcache.capacity() == 4
    monkeypatch.setenv(modelcache.PAIRS_ENV, "1")
    assert modelcache.capacity() == 2
    monkeypatch.setenv(modelcache.PAIRS_ENV, "lots")
    assert modelcache.capacity() == 4


def huge_model_folder(tmp_path):
    """A folder whose config describes a 70B-parameter Llama, with no real weights: the refusal must
    come from the config before transformers reads (or allocates) anything."""
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 8192,
              "intermediate_size": 28672, "num_hidden_layers": 80, "num_attention_heads": 64,
              "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192}
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "pytorch_model.bin").write_bytes(b"")
    (tmp_path / "tokenizer.json").write_text("{}")
    return tmp_path


def test_a_model_larger_than_free_memory_is_refused_in_one_line_naming_the_numbers(tmp_path):
    folder = huge_model_folder(tmp_path)
    assert 69e9 < param_count(str(folder), {}) < 72e9
    with pytest.raises(NotEnoughMemory) as e:
        load_model(str(folder), device="cpu", dtype="float32")
    msg = str(e.value)
    assert "\n" not in msg and "70.55B parameters x 4 bytes, float32" in msg and "282.2 GB" in msg
    assert "GB free" in msg and e.value.need > e.value.free


def test_the_packaged_models_parameters_are_read_from_its_files_without_loading_it():
    from specviz.models.loading import _source, default_gguf_path

    src, kwargs = _source("default")
    gguf = default_gguf_path()
    loaded = get_model("default", "cpu", "float32")
    # the converted safetensors' headers and the GGUF's tensor table (tied embeddings stored once)
    assert param_count(src, kwargs) == param_count(str(gguf.parent), {"gguf_file": gguf.name}) == loaded.num_params
