"""An interrupted sweep writes the cells it finished and, run again with the same arguments, measures only the rest."""

import csv
import os
import signal

import pytest

import specviz.measure.sweep as sweep_mod
from specviz.cli import main
from specviz.analysis.analytic import CostModel
from specviz.analysis.costs import Calibration
from specviz.measure import resume
from specviz.runconfig import RunConfig

ARGS = ["sweep", "--prompt", "Repeat: a b c a b c a b c", "--draft", "ngram", "--batch-sizes", "1,2",
        "--draft-lengths", "1", "--max-new-tokens", "4", "--device", "cpu", "--dtype", "float32"]


@pytest.fixture(scope="module")
def calibration():
    """A cost model with round numbers: what is under test is which cells run, not their predictions
    (tests/measure/test_sweep.py measures a real calibration)."""
    return Calibration(target="t", draft="ngram", device="cpu", dtype="float32",
                       target_cost=CostModel(t_fixed=0.01, t_mem=0.02, t_token=1e-4),
                       draft_cost=CostModel(t_fixed=1e-4, t_mem=0.0, t_token=1e-6), overhead={1: 1e-3, 2: 1e-3},
                       residuals={}, samples={})


def _csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_ctrl_c_keeps_finished_cells_and_the_same_command_resumes(calibration, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sweep_mod, "load_calibration", lambda target, proposer: calibration)
    real_cell, measured = sweep_mod.measure_cell, []

    def cell(base, b, k, *rest, **kw):
        if interrupt_at == len(measured):  # a real Ctrl-C, as the second cell starts
            os.kill(os.getpid(), signal.SIGINT)
        measured.append((b, k))
        return real_cell(base, b, k, *rest, **kw)

    monkeypatch.setattr(sweep_mod, "measure_cell", cell)
    out = tmp_path / "sw"
    interrupt_at = 1
    assert main([*ARGS, "--out-dir", str(out)]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (f"specviz: interrupted (SIGINT) after 1 of 2 cells: they are in {out / 'sweep.csv'}; "
                       "the same command again resumes from them")
    first = _csv(out / "sweep.csv")
    assert [(r["batch_size"], r["draft_length"]) for r in first] == [("1", "1")]
    assert not (out / "sweep.json").exists()

    measured.clear()
    interrupt_at = None
    assert main([*ARGS, "--out-dir", str(out)]) == 0
    assert "resuming an interrupted sweep: 1 finished cell(s) kept" in capsys.readouterr().err
    assert measured == [(2, 1)]  # only the cell not done before
    rows = _csv(out / "sweep.csv")
    assert rows[:1] == first and [(r["batch_size"], r["draft_length"]) for r in rows[1:]] == [("2", "1")]
    assert (out / "sweep.json").exists() and not resume.resume_path(out).exists()  # done: the next run starts afresh


def test_cells_of_a_sweep_with_other_arguments_are_not_taken(tmp_path):
    cfg = RunConfig(prompts=["a"], max_new_tokens=4)
    key = resume.sweep_key(cfg, 1, False)
    cell = {"batch_size": 1, "draft_length": 2, "alpha": 0.5}
    resume.save_cells(tmp_path, key, [cell])
    assert resume.load_cells(tmp_path, key) == {(1, 2): cell}
    for other in (resume.sweep_key(RunConfig(prompts=["a"], max_new_tokens=5), 1, False),
                  resume.sweep_key(RunConfig(prompts=["b"], max_new_tokens=4), 1, False),
                  resume.sweep_key(cfg, 2, False)):
        assert resume.load_cells(tmp_path, other) == {}
    # the grid's own axes are not part of the key: a cell is the same measurement in a bigger grid
    assert resume.load_cells(tmp_path, resume.sweep_key(RunConfig(prompts=["a"], max_new_tokens=4, batch_size=8), 1,
                                                        False)) == {(1, 2): cell}
    resume.resume_path(tmp_path).write_text("{half a fi")
    assert resume.load_cells(tmp_path, key) == {}


def test_a_sweep_with_other_settings_says_which_and_that_it_replaces_them(tmp_path):
    cfg = RunConfig(prompts=["a"], max_new_tokens=4)
    resume.save_cells(tmp_path, resume.sweep_key(cfg, 1, False), [{"batch_size": 1, "draft_length": 2}])
    assert resume.other_sweep(tmp_path, resume.sweep_key(cfg, 1, False)) is None  # the same sweep resumes
    n, differ = resume.other_sweep(tmp_path, resume.sweep_key(RunConfig(prompts=["a"], max_new_tokens=5), 1, False))
    assert n == 1 and differ == ["max_new_tokens"]
