"""The first run's calibration (specviz.measure.quickcal): a short grid (batch sizes 1, 2, 4 and the run's
own within a cap, k up to 4 or the run's within a cap), written where `specviz calibrate` writes, kept while
it stands, measured again when stale, and stoppable between timing points with what it measured kept."""

from __future__ import annotations

import json
import os

import pytest

from specviz.analysis.costs import FORMAT, calibration_path, partial_path, read_calibration
from specviz.common import cache_dir
from specviz.measure import calibrate, quickcal
from specviz.runconfig import RunConfig

PAIR = ("SmolLM2-135M-Instruct", "ngram", "cpu", "float32")


def cfg(b: int = 2, k: int = 2) -> RunConfig:
    return RunConfig(target="default", draft="ngram", device="cpu", dtype="float32", prompts=["Hello"],
                     batch_size=b, draft_length=k)


def test_the_short_grid_is_the_fixed_sizes_plus_the_runs_own_within_the_caps():
    assert quickcal.bounds(cfg(b=2, k=2)) == (sorted(quickcal.BATCH_SIZES), quickcal.K_MAX)
    assert quickcal.bounds(cfg(b=quickcal.MAX_RUN_BATCH, k=quickcal.MAX_RUN_K)) == (
        sorted({*quickcal.BATCH_SIZES, quickcal.MAX_RUN_BATCH}), quickcal.MAX_RUN_K)
    big = quickcal.bounds(cfg(b=quickcal.MAX_RUN_BATCH + 1, k=quickcal.MAX_RUN_K + 1))
    assert big == (sorted(quickcal.BATCH_SIZES), quickcal.MAX_RUN_K)  # past the caps: the run's own are left out


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A scratch cache that sees the converted packaged model (no second conversion) and nothing else;
    the engine's overhead is timed over short runs (these tests are about the record, not its numbers)."""
    real = cache_dir() / PAIR[0]
    if real.is_dir():
        (tmp_path / PAIR[0]).symlink_to(real)
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    monkeypatch.setattr(calibrate, "OVERHEAD_TOKENS", SHORT_OVERHEAD_TOKENS)
    return tmp_path


GRID = ([1, 2], 1)  # two batch sizes, one and two tokens per row: seconds on the packaged model
SHORT_OVERHEAD_TOKENS = 4  # tokens per overhead run (the command's 32 made the overhead runs most of the time)


def rewrite(path, **fields) -> None:
    d = json.loads(path.read_text())
    d.update(fields)
    path.write_text(json.dumps(d))


@pytest.mark.slow
def test_it_calibrates_once_into_the_cache_then_keeps_the_record_until_it_is_stale(cache):
    first = quickcal.first_run_calibration(cfg(), grid=GRID)
    path = calibration_path(*PAIR)
    assert first["status"] == "calibrated" and first["path"] == str(path) and str(path).startswith(str(cache))
    assert first["why"] == "no calibration of this pair on this device and dtype yet"
    cal = read_calibration(path)
    assert {(b, n) for b, n, _ in cal.samples["target"]} == {(1, 1), (1, 2), (2, 1), (2, 2)}
    assert sorted(int(b) for b in cal.overhead) == [1, 2]

    written = path.stat().st_mtime_ns
    again = quickcal.first_run_calibration(cfg(), grid=GRID)
    assert again["status"] == "fresh" and again["why"] is None and path.stat().st_mtime_ns == written

    rewrite(path, created="2000-01-01T00:00:00Z")  # measured before the model files were last written
    changed = quickcal.first_run_calibration(cfg(), grid=GRID)
    assert changed["status"] == "calibrated" and "a model file of the pair changed" in changed["why"]
    assert read_calibration(path).created != "2000-01-01T00:00:00Z"

    rewrite(path, format=0)
    old = quickcal.first_run_calibration(cfg(), grid=GRID)
    assert old["status"] == "calibrated" and old["why"].startswith("its record is format 0")
    assert read_calibration(path).format == FORMAT


@pytest.mark.slow
def test_a_stopped_calibration_writes_no_record_and_keeps_the_points_it_measured(cache):
    asked, notes = [], []

    def stop() -> bool:  # asked before the grid, then after each timing point: stop after the first
        asked.append(1)
        return len(asked) > 1

    out = quickcal.first_run_calibration(cfg(), should_stop=stop, note=notes.append, grid=GRID)
    assert out["status"] == "stopped" and out["kept"] and "partial" in out["kept"]
    assert read_calibration(calibration_path(*PAIR)) is None
    kept = json.loads(partial_path(*PAIR).read_text())
    assert kept["partial"] and len(kept["samples"]["target"]) == 1
    assert notes[0].startswith("calibrating: no calibration of this pair") and "timing point 1 of 4" in notes[1]
    assert not os.path.exists(calibration_path(*PAIR))
