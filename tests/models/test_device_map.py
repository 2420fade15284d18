"""--device-map auto: a target spread over devices by accelerate decodes exactly as on one device.

On this CPU the split is real but its devices are the CPU and the disk: a memory budget below the
model's size makes accelerate keep some layers in memory and offload the rest to a folder, moving
each layer's weights in for its forward. The placement over several GPUs is checked as placement
(accelerate's planner with a given device list), since there are none here."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from fakes import decode, perturbed_copy, ragged_prompts

from specviz.common import SpecvizError
from specviz.engine.proposers import ModelDraft
from specviz.models import fastllama
from specviz.models.devicemap import is_split, main_device, placement, plan_device_map
from specviz.models.loading import load_model

VOCAB, LAYERS = 64, 6


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    """A 6-layer random llama with a 64-token word-level tokenizer, saved in Hugging Face layout."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    d = tmp_path_factory.mktemp("tiny-llama")
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=LAYERS,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      tie_word_embeddings=False)
    LlamaForCausalLM(cfg).save_pretrained(d)
    tk = Tokenizer(models.WordLevel({f"t{i}": i for i in range(VOCAB)}, unk_token="t0"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="t0", eos_token="t1").save_pretrained(d)
    return d


def layer_bytes(loaded) -> int:
    return sum(p.numel() * p.element_size() for p in loaded.model.model.layers[0].parameters())


def test_a_memory_budget_below_the_model_offloads_layers_and_greedy_output_is_unchanged(tiny_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))  # the offload folder goes under the cache
    whole = load_model(str(tiny_dir), "cpu", "float32")
    split = load_model(str(tiny_dir), "auto", "float32", device_map="auto", max_memory={"cpu": 3 * layer_bytes(whole)})
    places = set(split.device_map.values())
    assert is_split(split.device_map) and {"cpu", "disk"} <= places, split.device_map
    assert split.device == torch.device("cpu") and whole.device_map is None
    assert any((tmp_path / "offload").rglob("*")), "the offloaded layers were not written under the cache"
    assert not fastllama.supports(split.model) and fastllama.supports(whole.model)  # the lean forward stays off

    prompts = ragged_prompts(2, VOCAB)
    ref = [r.output for r in decode(whole, prompts, None, 0, 8)[0].rows]
    regular = [r.output for r in decode(split, prompts, None, 0, 8)[0].rows]
    draft = ModelDraft(perturbed_copy(whole, noise=0.3), vocab_size=VOCAB)
    spec = [r.output for r in decode(split, prompts, draft, 3, 8)[0].rows]
    assert regular == ref and spec == ref
    assert all(len(o) == 8 for o in ref)


def test_the_planner_keeps_layers_whole_and_in_order_over_two_gpus(tiny_dir):
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(tiny_dir)
    whole = load_model(str(tiny_dir), "cpu", "float32")
    lb = layer_bytes(whole)
    plan = plan_device_map(cfg, {0: 3 * lb, 1: 4 * lb, "cpu": 100 * lb})
    layer_dev = [plan.get(f"model.layers.{i}", plan.get("model")) for i in range(LAYERS)]
    assert set(layer_dev) >= {0, 1}, plan  # the model does not fit GPU 0: it goes on to GPU 1
    assert layer_dev == sorted(layer_dev, key=lambda d: {0: 0, 1: 1, "cpu": 2, "disk": 3}[d])  # in layer order
    assert plan["model.embed_tokens"] == 0 and main_device(plan) == torch.device("cuda:0")
    assert placement(plan).startswith("cuda:0 ") and "cuda:1 " in placement(plan)
    roomy = plan_device_map(cfg, {0: 1000 * lb, 1: 1000 * lb, "cpu": 100 * lb})
    assert set(roomy.values()) == {0} and not is_split(roomy)  # a model that fits one GPU stays on it


def test_an_unknown_device_map_is_one_line(tiny_dir):
    with pytest.raises(SpecvizError, match="unknown device map 'balanced'"):
        load_model(str(tiny_dir), "cpu", "float32", device_map="balanced")


def test_a_run_with_device_map_auto_records_where_the_target_went_and_decodes_as_without(tiny_dir, tmp_path, monkeypatch):
    from specviz.runconfig import RunConfig
    from specviz.run import run

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    cfg = RunConfig(target=str(tiny_dir), draft="ngram", prompts=["t3 t4 t5 t3 t4", "t9 t8"], batch_size=2,
                    draft_length=2, max_new_tokens=5, device="auto", dtype="float32")
    plain = run(cfg, telemetry=False)
    spread = run(dataclasses.replace(cfg, device_map="auto"), telemetry=False)
    assert "device_map" not in plain["config"] and spread["config"]["device_map"] == "cpu: the whole model"
    assert [s["output_token_ids"] for s in spread["sequences"]] == [s["output_token_ids"] for s in plain["sequences"]]
    with pytest.raises(SpecvizError, match="device map must be none or auto"):
        dataclasses.replace(cfg, device_map="sequential").validate()
