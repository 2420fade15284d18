"""A model folder that cannot work is refused in one line that says what is wrong with it, before
or instead of a traceback from deep inside transformers or the engine."""

from __future__ import annotations

import shutil

import pytest
import torch

from specviz.common import SpecvizError, cache_dir
from specviz.models.loading import DEFAULT_NAME, load_model
from specviz.run import get_model, make_proposer

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


@pytest.fixture(scope="module")
def target():
    return get_model("default", "cpu", "float32")


def _model_dir(tmp_path, vocab: int, weights: bool = True, tokenizer: bool = True):
    from transformers import LlamaConfig, LlamaForCausalLM

    d = tmp_path / f"m{vocab}"
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, eos_token_id=2, bos_token_id=1)
    LlamaForCausalLM(cfg).save_pretrained(d)
    if not weights:
        for f in d.glob("*.safetensors"):
            f.unlink()
    if tokenizer:
        for f in TOKENIZER_FILES:
            if (cache_dir() / DEFAULT_NAME / f).is_file():
                shutil.copy(cache_dir() / DEFAULT_NAME / f, d / f)
    return d


def test_a_draft_whose_vocabulary_is_smaller_than_the_targets_tokenizer_is_refused(target, tmp_path):
    d = _model_dir(tmp_path, vocab=1000)  # the same tokenizer files, an output layer of 1000 tokens
    with pytest.raises(SpecvizError, match="vocab_size 1000, the tokenizer makes ids up to 49151"):
        make_proposer(str(d), target)


def test_damaged_weights_missing_weights_and_a_missing_tokenizer_each_say_so(tmp_path):
    bad = _model_dir(tmp_path, vocab=49152)
    next(bad.glob("*.safetensors")).write_bytes(b"\xff" * 64)
    with pytest.raises(SpecvizError, match="its files could not be read"):
        load_model(str(bad), "cpu", "float32")
    with pytest.raises(SpecvizError, match="has no weights"):
        load_model(str(_model_dir(tmp_path / "a", vocab=64, weights=False)), "cpu", "float32")
    with pytest.raises(SpecvizError, match="has no tokenizer"):
        load_model(str(_model_dir(tmp_path / "b", vocab=64, tokenizer=False)), "cpu", "float32")


def test_a_distilled_draft_given_as_a_target_is_pointed_at_draft():
    from specviz.run import DEFAULT_DRAFT_DIR

    with pytest.raises(SpecvizError, match="is a distilled draft .*as --draft"):
        load_model(str(DEFAULT_DRAFT_DIR), "cpu", "float32")
