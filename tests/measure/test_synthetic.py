"""Random-weight models of named shapes (specviz.models.synthetic) and their cost-side calibration
(specviz.measure.calibrate.calibrate_synthetic). Only tiny shapes are ever allocated here: the 7B
shape is checked on PyTorch's meta device, which holds no memory."""

import pytest
import torch

from specviz.analysis.costs import read_calibration
from specviz.common import SpecvizError
from specviz.measure.calibrate import calibrate_synthetic
from specviz.models import synthetic


def test_llama_7b_shape_has_llama_2_7b_parameter_count_without_allocating_it():
    m = synthetic.build("synthetic:llama-7b", "meta", torch.bfloat16)
    assert all(p.is_meta for p in m.model.parameters())
    assert 6.73e9 < m.num_params < 6.75e9  # Llama-2-7B: 6,738,415,616 parameters
    assert m.name == "synthetic:llama-7b" and len(m.tokenizer) == 32000


def test_smollm2_shape_matches_the_packaged_models_parameter_count():
    m = synthetic.build("smollm2-135m", "meta", torch.bfloat16)
    assert m.num_params == 134_515_008  # SmolLM2-135M-Instruct, tied embedding counted once


def test_synthetic_tokenizer_round_trips_text_and_has_no_end_of_sequence():
    tok = synthetic.tokenizer(512)
    ids = tok.encode("Héllo, wörld!")
    assert tok.decode(ids) == "Héllo, wörld!" and max(ids) < 256
    assert len(tok) == 512 and tok.eos_token_id is None


def test_an_unknown_shape_is_one_clear_line():
    with pytest.raises(SpecvizError, match="unknown synthetic model 'synthetic:gpt-9'.*synthetic:llama-7b"):
        synthetic.build("synthetic:gpt-9")


def test_saved_model_loads_back_as_a_local_spec_with_the_same_weights(tmp_path):
    from specviz.models.loading import load_model

    built = synthetic.build("tiny", "cpu", torch.float32, seed=3)
    synthetic.save("tiny", tmp_path / "m", seed=3, dtype=torch.float32)
    loaded = load_model(str(tmp_path / "m"), "cpu", "float32")
    ids = torch.tensor([[5, 9, 200]])
    assert torch.equal(built.model(ids).logits, loaded.model(ids).logits)
    assert "synthetic:tiny" in (tmp_path / "m" / "SYNTHETIC").read_text()


def test_synthetic_calibration_writes_the_calibration_record_under_its_synthetic_name(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    cal, path = calibrate_synthetic("synthetic:tiny", "synthetic:tiny-draft", "cpu", "float32",
                                    batch_sizes=(1, 2), k_max=2, prefix_len=8)
    back = read_calibration(path)
    assert path.parent == tmp_path / "calibration" and back is not None
    assert (back.target, back.draft, back.device, back.dtype) == ("synthetic:tiny", "synthetic:tiny-draft", "cpu", "float32")
    assert [(b, n) for b, n, _ in back.samples["target"]] == [(b, n) for b in (1, 2) for n in (1, 2, 3)]
    assert [(b, n) for b, n, _ in back.samples["draft"]] == [(b, n) for b in (1, 2) for n in (1, 2)]
    assert set(back.overhead) == {"1", "2"} and back.costs(2).target(2, 3) > 0


def test_synthetic_calibration_refuses_a_draft_of_another_vocabulary(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    monkeypatch.setitem(synthetic.SHAPES, "tiny-other-vocab", {**synthetic.SHAPES["tiny-draft"], "vocab_size": 300})
    with pytest.raises(SpecvizError, match="has 300 tokens, synthetic:tiny has 512"):
        calibrate_synthetic("synthetic:tiny", "synthetic:tiny-other-vocab", "cpu", "float32", batch_sizes=(1,))
