"""specviz.distill.train: training takes bf16 autocast only where bf16 matmuls are native, says which it took,
and a state saved under one precision is not resumed under the other."""

import pytest
import torch

from specviz.distill.train import autocast_pays, train


def fit(autocast, state_path=None, steps=2, log=None, die_at_step=None):
    """Steps of a linear model; the loss function records the autocast flag every call gets (and stands for a
    kill at the start of training step ``die_at_step``, after the checkpoint before it was written)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    data = [{"ids": torch.ones(3, dtype=torch.long), "x": torch.randn(4)} for _ in range(4)]
    seen, trained = [], []

    def loss_fn(draft, items, ac):
        seen.append(ac)
        if draft.training and die_at_step is not None and len(trained) == die_at_step:
            raise KeyboardInterrupt
        if draft.training:
            trained.append(1)
        x = torch.stack([i["x"] for i in items])  # [B, 4]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=ac):
            y = draft(x)  # [B, 4]
        return (y.float() ** 2).mean(), 0, 1

    hist = train(model, data, data[:1], steps=steps, batch_size=2, lr=1e-2, seed=0, loss_fn=loss_fn,
                 collate=lambda items: items, autocast=autocast, eval_every=1, state_path=state_path, log=log)
    return hist, seen


@pytest.mark.parametrize("native", [False, True], ids=["avx2-cpu", "native-bf16-cpu"])
def test_training_takes_bf16_autocast_only_where_bf16_matmuls_are_native(monkeypatch, native):
    monkeypatch.setattr("specviz.models.packed.cpu_packs_bf16", lambda: native)
    assert autocast_pays(torch.device("cpu")) is native
    assert autocast_pays(torch.device("cuda")) is True  # a device object; no CUDA needed to ask
    hist, seen = fit(None)
    assert hist["autocast"] is native and set(seen) == {native}  # every training and held-out call


def test_an_explicit_precision_overrides_the_machines_choice(monkeypatch):
    monkeypatch.setattr("specviz.models.packed.cpu_packs_bf16", lambda: False)
    hist, seen = fit(True)
    assert hist["autocast"] is True and set(seen) == {True}


def test_a_state_saved_in_one_precision_is_resumed_only_in_that_precision(tmp_path):
    state = tmp_path / "train-state.pt"
    with pytest.raises(KeyboardInterrupt):
        fit(False, state, steps=3, die_at_step=1)  # killed in step 2: the state of step 1 is on disk
    logs = []
    fit(True, state, steps=3, log=logs.append)  # bf16 autocast: another run's state, started from step 0
    assert any("another run's training state" in line for line in logs), logs
    with pytest.raises(KeyboardInterrupt):  # the float32 state of step 1 again (the bf16 run replaced it)
        fit(False, state, steps=3, die_at_step=1)
    logs.clear()
    fit(False, state, steps=3, log=logs.append)
    assert any("resumed training at step 1" in line for line in logs), logs
